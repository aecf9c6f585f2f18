"""Sparse variational generalised additive models (Adam, Durrande & John).

* :class:`SparseGAM` -- the model (Eq. 5 ELBO, predictions of the sum and of each component);
* :class:`AdditiveComponent` -- one term ``f_c``: GPyTorch kernel, active dims, inducing inputs;
* :class:`MeanFieldPosterior`, :class:`CoupledPrecisionPosterior` (Eq. 7, Appendix C),
  :class:`FullCovariancePosterior` -- the variational families, one class hierarchy
  (:class:`VariationalFamily`).

The zero-mean ANOVA kernel of section 7 (Eq. 8) is :class:`bo_ncgp.models.anova_kernel.ANOVAKernel`.

Example:
    >>> from bo_ncgp.models.gam import SparseGAM
"""

from bo_ncgp.models.gam.components import AdditiveComponent
from bo_ncgp.models.gam.model import SparseGAM
from bo_ncgp.models.gam.variational import (
    CoupledPrecisionPosterior,
    FullCovariancePosterior,
    MeanFieldPosterior,
    Projection,
    VariationalFamily,
    VariationalState,
)

__all__ = [
    "AdditiveComponent",
    "CoupledPrecisionPosterior",
    "FullCovariancePosterior",
    "MeanFieldPosterior",
    "Projection",
    "SparseGAM",
    "VariationalFamily",
    "VariationalState",
]
