"""Zero-mean ("ANOVA") squared-exponential kernel of Durrande et al. (2013).

Adam, Durrande & John, *Scalable GAM using sparse variational Gaussian processes*, section 7,
Eq. 8: given a one-dimensional squared-exponential kernel ``g`` on ``[a, b]`` (``[0, 1]`` in
the paper),

    s(x, y) = g(x, y) - (∫ g(x, s) ds ∫ g(y, s) ds) / (∫∫ g(s, t) ds dt),     (Eq. 8)

all integrals over ``[a, b]``. ``s`` is the covariance of ``f - P f`` where ``P`` projects onto
constants, so every sample path (and every posterior mean ``Σ_i s(·, z_i) α_i``) integrates to
zero over ``[a, b]``: the terms of an additive model built from such kernels are the terms of
the functional ANOVA decomposition (Durrande et al. 2013, section 3).

Only the integrals are hand-written; ``g`` itself is GPyTorch's :class:`RBFKernel`
(``g(x, y) = exp(-(x - y)^2 / (2 l^2))``; wrap in a ``ScaleKernel`` for a variance). With
``L = b - a`` and ``r = sqrt(2) l``:

    ∫_a^b g(x, s) ds   = l sqrt(pi/2) [erf((b - x)/r) - erf((a - x)/r)]
    ∫∫_[a,b]^2 g       = 2 [L l sqrt(pi/2) erf(L/r) + l^2 expm1(-L^2/(2 l^2))]

Interactions are products of one-dimensional ANOVA kernels (``s_7(x_1) s_8(x_2)`` in section
7): ``ANOVAKernel(active_dims=[0]) * ANOVAKernel(active_dims=[1])``; such a product is zero-mean
in each of its arguments.

Numerical note: for lengthscales much longer than ``b - a`` the kernel is a small difference of
two numbers close to ``g``; use float64 when ``l > 10 (b - a)``.
"""

from __future__ import annotations

import math

import torch
from gpytorch.kernels import RBFKernel
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError

__all__ = ["ANOVAKernel"]

_SQRT_HALF_PI = math.sqrt(math.pi / 2.0)


class ANOVAKernel(RBFKernel):
    """One-dimensional zero-mean SE kernel on ``[lower, upper]`` (Eq. 8 of Adam et al.).

    Args:
        lower: left end ``a`` of the integration interval (default 0).
        upper: right end ``b`` of the integration interval (default 1).
        **kwargs: passed to :class:`gpytorch.kernels.RBFKernel` (``batch_shape``,
            ``lengthscale_prior``, ``lengthscale_constraint``, ``active_dims``). ARD is not
            supported: the kernel is one-dimensional.

    Example:
        >>> k = ANOVAKernel()
        >>> x = torch.linspace(0, 1, 2001).unsqueeze(-1)
        >>> K = k(x, torch.tensor([[0.3]])).to_dense().detach()
        >>> abs(float(torch.trapezoid(K[:, 0], x[:, 0]))) < 1e-6   # ∫ s(x, 0.3) dx = 0
        True
    """

    def __init__(self, lower: float = 0.0, upper: float = 1.0, **kwargs) -> None:
        if kwargs.get("ard_num_dims") not in (None, 1):
            raise InputDataError(
                "ANOVAKernel: the kernel is one-dimensional; ard_num_dims must be 1"
            )
        if not (math.isfinite(lower) and math.isfinite(upper) and upper > lower):
            raise InputDataError(
                f"ANOVAKernel: need finite lower < upper, got lower={lower}, upper={upper}"
            )
        super().__init__(**kwargs)
        self.lower = float(lower)
        self.upper = float(upper)

    def _single_integral(self, x: Tensor, ell: Tensor) -> Tensor:
        """``∫_a^b g(x, s) ds`` for ``x (..., n)`` and lengthscale ``ell (*batch, 1)``."""
        r = math.sqrt(2.0) * ell
        return (
            ell
            * _SQRT_HALF_PI
            * (torch.erf((self.upper - x) / r) - torch.erf((self.lower - x) / r))
        )

    def _double_integral(self, ell: Tensor) -> Tensor:
        """``∫∫_[a,b]^2 g(s, t) ds dt`` for ``ell (*batch, 1)``."""
        L = self.upper - self.lower
        return 2.0 * (
            L * ell * _SQRT_HALF_PI * torch.erf(L / (math.sqrt(2.0) * ell))
            + ell**2 * torch.expm1(-(L**2) / (2.0 * ell**2))
        )

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params) -> Tensor:
        if params.get("last_dim_is_batch", False):
            raise UnsupportedError("ANOVAKernel: last_dim_is_batch is not supported")
        if x1.shape[-1] != 1 or x2.shape[-1] != 1:
            raise InputDataError(
                "ANOVAKernel: inputs must be one-dimensional (..., n, 1); got shapes "
                f"{tuple(x1.shape)} and {tuple(x2.shape)} (select a column with active_dims)"
            )
        g = super().forward(x1, x2, diag=diag, **params)  # g_i of Eq. 8
        ell = self.lengthscale[..., 0]  # (*batch, 1)
        i1 = self._single_integral(x1[..., 0], ell)  # (..., n1)
        i2 = self._single_integral(x2[..., 0], ell)  # (..., n2)
        ii = self._double_integral(ell)  # (*batch, 1)
        if diag:
            return g - i1 * i2 / ii  # Eq. 8, diagonal
        return g - i1.unsqueeze(-1) * i2.unsqueeze(-2) / ii.unsqueeze(-1)  # Eq. 8
