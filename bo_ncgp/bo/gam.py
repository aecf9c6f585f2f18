"""BoTorch adapter of the sparse variational GAM (Adam, Durrande & John).

:class:`SparseGAMModel` is a :class:`bo_ncgp.bo.base.LatentGPModel`: BoTorch's shapes
(``d``, ``q x d``, ``batch x q x d``), input/outcome transforms, ``observation_noise`` and
``posterior_transform`` are handled by the base class; this module only asks the wrapped
:class:`~bo_ncgp.models.SparseGAM` for the joint posterior of the additive predictor
``rho = sum_c f_c`` (or of a partial sum of its components) at ``X``:
``predict_f(X, full_cov=True, components=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn import Module

from bo_ncgp.bo.base import LatentGPModel

__all__ = ["SparseGAMModel"]


class SparseGAMModel(LatentGPModel):
    """BoTorch ``Model`` around a fitted :class:`~bo_ncgp.models.SparseGAM`.

    Args:
        model: the sparse GAM (inputs in the transformed space, if ``input_transform`` is
            given; outcomes in the transformed space, if ``outcome_transform`` is given).
        components: indices of the components whose sum the posterior describes (default:
            all, i.e. the full predictor). ``[c]`` exposes one ANOVA term ``f_c`` to an
            acquisition function, e.g. to explore one input group of an additive model.
        input_transform, outcome_transform: optional BoTorch transforms.

    ``observation_noise=True`` adds the Gaussian noise variance for a Gaussian likelihood (the
    latent posterior is returned for other likelihoods). Conditioning on new observations
    (``condition_on_observations`` / ``fantasize``) is not supported: a sparse GAM has no
    cheap update of ``q(U)``; refit instead.

    Example:
        >>> from gpytorch.kernels import RBFKernel, ScaleKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models import SparseGAM
        >>> Z = torch.linspace(0, 1, 6)
        >>> gam = SparseGAM([(ScaleKernel(RBFKernel()), [i], Z) for i in range(2)], Gaussian(0.1))
        >>> X = torch.rand(30, 2)
        >>> _ = gam.fit(X, X.sin().sum(-1), num_steps=10)
        >>> post = SparseGAMModel(gam).posterior(torch.rand(4, 3, 2))
        >>> post.mean.shape
        torch.Size([4, 3, 1])
    """

    def __init__(
        self,
        model: Module,
        components: Sequence[int] | None = None,
        input_transform: Module | None = None,
        outcome_transform: Module | None = None,
    ) -> None:
        super().__init__(model, 1, input_transform, outcome_transform)
        self.components = None if components is None else model._check_subset(components)

    def _latent_mean_cov(self, X: Tensor) -> tuple[Tensor, Tensor]:
        mean, cov = self.model.predict_f(X, full_cov=True, components=self.components)
        return mean.unsqueeze(-1), cov

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size()
