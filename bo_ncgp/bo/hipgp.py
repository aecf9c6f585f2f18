"""BoTorch adapter of HIP-GP (Wu et al. 2022) for low-dimensional BO and spatial active
learning.

:class:`HIPGPModel` is a :class:`bo_ncgp.bo.base.LatentGPModel`: BoTorch's shapes,
transforms, ``observation_noise`` and ``posterior_transform`` are handled by the base class;
this module only asks the wrapped :class:`~bo_ncgp.models.HIPGP` for the joint posterior of
``L rho`` at ``X`` (``predict_f(X, op, full_cov=True)``), where ``op`` is the latent value
(default) or any inter-domain operator (a derivative, a line integral).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import Module

from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.likelihoods import Gaussian

__all__ = ["HIPGPModel"]


class HIPGPModel(LatentGPModel):
    """BoTorch ``Model`` around a fitted :class:`~bo_ncgp.models.HIPGP`.

    Args:
        model: the HIP-GP (inputs in the transformed space, if ``input_transform`` is given).
        op: observation operator of the posterior (``"value"``, ``"integral"``,
            ``("derivative", d)``); acquisition functions then see ``L rho``.
        input_transform, outcome_transform: optional BoTorch transforms.

    Conditioning on new observations (``fantasize``) is not supported: the variational
    state has no batch dimension for fantasies.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.models import HIPGP
        >>> from bo_ncgp.models.hipgp import Grid
        >>> k = gpytorch.kernels.MaternKernel(nu=2.5)
        >>> k.lengthscale = 0.2  # well inside the grid's domain: no circulant clamping
        >>> hip = HIPGP(k, Grid([0.0], [1.0], (32,)))
        >>> _ = hip.fit(torch.rand(20, 1), torch.rand(20))
        >>> post = HIPGPModel(hip).posterior(torch.rand(5, 2, 1))
        >>> post.mean.shape
        torch.Size([5, 2, 1])
    """

    def __init__(
        self,
        model: Module,
        op: str | tuple | None = None,
        input_transform: Module | None = None,
        outcome_transform: Module | None = None,
    ) -> None:
        super().__init__(model, 1, input_transform, outcome_transform)
        self.op = op

    def _latent_mean_cov(self, X: Tensor) -> tuple[Tensor, Tensor]:
        mean, cov = self.model.predict_f(X, op=self.op, full_cov=True)
        return mean.unsqueeze(-1), cov

    def _observation_noise(self, X: Tensor) -> Tensor | None:
        lik = self.model.likelihood
        if isinstance(lik, Gaussian):
            return lik.noise.detach().to(X)
        return None

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size()
