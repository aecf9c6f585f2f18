"""Additive components ``f_c`` of a sparse GAM (Adam, Durrande & John, section 3.2).

Each component is a GPyTorch kernel acting on a subset of the input columns (its *active
dimensions*) together with its own inducing inputs ``Z_c``; ``U_c = f_c(Z_c)`` are the
inducing variables of section 3.2. Components are a priori independent, so every prior
quantity the model needs is per component: ``K_{U_c U_c}``, ``K_{U_c f_c}`` and the prior
(co)variance ``k_c(x, x')``.
"""

from __future__ import annotations

from collections.abc import Sequence

import gpytorch
import torch
from torch import Tensor, nn

from bo_ncgp.exceptions import InputDataError

__all__ = ["AdditiveComponent", "as_component"]


class AdditiveComponent(nn.Module):
    """One additive term ``f_c ~ GP(0, k_c)`` of the predictor ``sum_c f_c(x)``.

    Args:
        kernel: GPyTorch kernel (``batch_shape`` must be empty). It sees
            ``X[..., active_dims]``; its own ``active_dims``, if set, index into that slice
            (e.g. ``ANOVAKernel(active_dims=[0]) * ANOVAKernel(active_dims=[1])``).
        active_dims: the input columns ``f_c`` depends on (distinct, non-negative).
        inducing_points: ``Z_c`` of shape ``(M_c, len(active_dims))`` (or ``(M_c,)`` for a
            one-dimensional component).
        learn_inducing: make ``Z_c`` a trainable parameter (default: fixed buffer, as in the
            paper's section 7).
        name: optional label (used in plots and error messages).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> comp = AdditiveComponent(RBFKernel(), [2], torch.linspace(0, 1, 8))
        >>> comp.kux(torch.rand(5, 4)).shape
        torch.Size([8, 5])
    """

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        active_dims: Sequence[int] | Tensor,
        inducing_points: Tensor,
        learn_inducing: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(kernel, gpytorch.kernels.Kernel):
            raise InputDataError(
                f"AdditiveComponent: kernel must be a gpytorch Kernel, got {type(kernel).__name__}"
            )
        if len(kernel.batch_shape) != 0:
            raise InputDataError(
                "AdditiveComponent: kernels with a batch_shape are not supported, got "
                f"batch_shape {tuple(kernel.batch_shape)}"
            )
        dims = torch.as_tensor(active_dims).flatten()
        if dims.numel() == 0:
            raise InputDataError("AdditiveComponent: active_dims is empty")
        if dims.is_floating_point() or dims.is_complex() or dims.dtype == torch.bool:
            raise InputDataError(f"AdditiveComponent: active_dims must be integers, got {dims}")
        dims = dims.long()
        if (dims < 0).any() or torch.unique(dims).numel() != dims.numel():
            raise InputDataError(
                f"AdditiveComponent: active_dims must be distinct and non-negative, got "
                f"{dims.tolist()}"
            )
        Z = torch.as_tensor(inducing_points)
        if Z.is_complex():
            raise InputDataError(f"AdditiveComponent: inducing_points must be real, got {Z.dtype}")
        if not Z.is_floating_point():
            Z = Z.to(torch.get_default_dtype())
        if Z.dim() == 1 and dims.numel() == 1:
            Z = Z.unsqueeze(-1)
        if Z.dim() != 2 or Z.shape[-1] != dims.numel() or Z.shape[0] == 0:
            raise InputDataError(
                f"AdditiveComponent: inducing_points must have shape (M, {dims.numel()}) with "
                f"M >= 1 for active_dims {dims.tolist()}, got {tuple(Z.shape)}"
            )
        if not torch.isfinite(Z).all():
            raise InputDataError("AdditiveComponent: inducing_points contain NaN or inf")
        self.kernel = kernel.to(dtype=Z.dtype, device=Z.device)
        self.register_buffer("active_dims", dims.to(Z.device))
        Z = Z.detach().clone()
        if learn_inducing:
            self.inducing_points = nn.Parameter(Z)
        else:
            self.register_buffer("inducing_points", Z)
        self.name = name or f"f({', '.join(f'x{int(i)}' for i in dims)})"

    # ------------------------------------------------------------------ sizes
    @property
    def num_inducing(self) -> int:
        """``M_c``."""
        return int(self.inducing_points.shape[0])

    @property
    def input_dim(self) -> int:
        """``len(active_dims)``."""
        return int(self.active_dims.numel())

    # ------------------------------------------------------------------ prior
    def select(self, X: Tensor) -> Tensor:
        """``X[..., active_dims]``."""
        return X.index_select(-1, self.active_dims)

    def _dense(self, X1: Tensor, X2: Tensor) -> Tensor:
        with gpytorch.settings.lazily_evaluate_kernels(False):  # densified at once anyway
            return self.kernel(X1, X2).to_dense()

    def kuu(self) -> Tensor:
        """``K_{U_c U_c} = k_c(Z_c, Z_c)``, shape ``(M_c, M_c)``."""
        Z = self.inducing_points
        return self._dense(Z, Z)

    def kux(self, X: Tensor) -> Tensor:
        """``K_{U_c f_c(X)}``, shape ``(..., M_c, n)`` for ``X (..., n, d)``."""
        Xc = self.select(X)
        Z = self.inducing_points.expand(*Xc.shape[:-2], *self.inducing_points.shape)
        return self._dense(Z, Xc)

    def kxx(self, X: Tensor, diag: bool = True) -> Tensor:
        """Prior variance ``k_c(x, x)`` ``(..., n)`` or covariance ``(..., n, n)``."""
        Xc = self.select(X)
        if diag:
            return self.kernel(Xc, Xc, diag=True)
        return self._dense(Xc, Xc)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, active_dims={self.active_dims.tolist()}, M={self.num_inducing}"


def as_component(spec: AdditiveComponent | Sequence, index: int = 0) -> AdditiveComponent:
    """An :class:`AdditiveComponent` from itself or a ``(kernel, active_dims, Z)`` tuple.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> comp = as_component((RBFKernel(), [0, 2], torch.rand(6, 2)))
        >>> comp.name, comp.num_inducing, comp.input_dim
        ('f(x0, x2)', 6, 2)
        >>> as_component(comp) is comp  # an existing component is passed through
        True
    """
    if isinstance(spec, AdditiveComponent):
        return spec
    if isinstance(spec, (tuple, list)) and len(spec) in (3, 4):
        return AdditiveComponent(*spec)
    raise InputDataError(
        f"SparseGAM: component {index} must be an AdditiveComponent or a tuple "
        f"(kernel, active_dims, inducing_points), got {type(spec).__name__}"
    )
