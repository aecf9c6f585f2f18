"""HIP-GP (Wu et al. 2022): inter-domain SVGP with grid inducing points, FFT whitening and a
circulant preconditioner.

* :class:`HIPGP` -- the model (:mod:`.model`);
* :class:`ConditionedHIPGP` -- a fitted HIP-GP conditioned on new observations
  (:mod:`.conditioned`);
* :class:`BlockGaussian` -- the block-independent variational family, Eq. 23
  (:mod:`.variational`);
* :class:`FFTWhitener`, :class:`CholeskyWhitener` -- Eq. 20 and the Cholesky baseline
  (:mod:`.whitening`).
"""

from bo_ncgp.linalg.toeplitz import Grid
from bo_ncgp.models.hipgp.conditioned import ConditionedHIPGP
from bo_ncgp.models.hipgp.model import HIPGP
from bo_ncgp.models.hipgp.variational import BlockGaussian
from bo_ncgp.models.hipgp.whitening import CholeskyWhitener, FFTWhitener

__all__ = [
    "HIPGP",
    "BlockGaussian",
    "CholeskyWhitener",
    "ConditionedHIPGP",
    "FFTWhitener",
    "Grid",
]
