"""Sparse variational generalised additive models (Adam, Durrande & John).

* :class:`SparseGAM` -- the model (Eq. 5 ELBO, predictions of the sum and of each component);
* :class:`AdditiveComponent` -- one term ``f_c``: GPyTorch kernel, active dims, inducing inputs;
* :class:`MeanFieldPosterior`, :class:`CoupledPrecisionPosterior` (Eq. 7, Appendix C),
  :class:`FullCovariancePosterior` -- the variational families, one class hierarchy
  (:class:`VariationalFamily`);
* :class:`ANOVAKernel` -- the zero-mean kernel of section 7, Eq. 8 (:mod:`.anova_kernel`).

Example:
    >>> import torch
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Gaussian
    >>> from bo_ncgp.models.gam import SparseGAM
    >>> Z = torch.linspace(0, 1, 6)
    >>> gam = SparseGAM([(RBFKernel(), [0], Z), (RBFKernel(), [1], Z)], Gaussian(0.1))
    >>> X = torch.rand(30, 2); y = torch.sin(6 * X[:, 0]) + X[:, 1] ** 2
    >>> gam.initialize_variational(X, y)
    >>> mean, var = gam.predict_f(torch.rand(4, 2))  # the sum f_1(x_1) + f_2(x_2)
    >>> mean.shape, bool((var > 0).all())
    (torch.Size([4]), True)
"""

from bo_ncgp.models.gam.anova_kernel import ANOVAKernel
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
    "ANOVAKernel",
    "AdditiveComponent",
    "CoupledPrecisionPosterior",
    "FullCovariancePosterior",
    "MeanFieldPosterior",
    "Projection",
    "SparseGAM",
    "VariationalFamily",
    "VariationalState",
]
