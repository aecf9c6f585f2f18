"""Binomial likelihood with the logit link: ``y ~ Binomial(num_trials, sigmoid(f))``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods._checks import check_integer, check_range
from bo_ncgp.likelihoods.base import Likelihood, _check_real

__all__ = ["Binomial"]


class Binomial(Likelihood):
    """``log p(y|f) = log C(N, y) + y f - N softplus(f)``; ``grad = y - N s``, ``W = N s (1-s)``.

    Args:
        num_trials: ``N``, an int or a tensor broadcastable to the targets (per-point trials).

    Example:
        >>> lik = Binomial(100)
        >>> lik.grad(torch.tensor([30.0]), torch.tensor([0.0]))
        tensor([-20.])
    """

    def __init__(self, num_trials: int | Tensor) -> None:
        super().__init__()
        on = num_trials.device if isinstance(num_trials, Tensor) else None  # keep its device
        N = torch.as_tensor(num_trials, device=on)
        if N.is_complex():
            raise InputDataError(f"Binomial: num_trials must be real, got {N.dtype}")
        N = N.to(torch.get_default_dtype())
        if not bool(torch.isfinite(N).all()) or (N < 1).any() or (N != torch.round(N)).any():
            raise InputDataError(
                f"Binomial: num_trials must be positive integers, got {num_trials}"
            )
        self.register_buffer("num_trials", N)

    def _N(self, like: Tensor) -> Tensor:
        return self.num_trials.to(dtype=like.dtype, device=like.device)

    def _check(self, y: Tensor) -> Tensor:
        y = check_integer(self.name, y)
        if self.num_trials.numel() > 1 and y.dim() > 0 and y.shape[-1] != self.num_trials.shape[-1]:
            raise InputDataError(
                f"{self.name}: per-point num_trials has {self.num_trials.shape[-1]} entries but "
                f"targets have {y.shape[-1]}"
            )
        check_range(
            self.name,
            y,
            0,
            self.num_trials if self.num_trials.numel() > 1 else float(self.num_trials),
            "counts",
        )
        return y

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        N = self._quad_N(y, f)
        log_binom = torch.lgamma(N + 1) - torch.lgamma(y + 1) - torch.lgamma(N - y + 1)
        return log_binom + y * f - N * F.softplus(f)

    def _grad(self, y: Tensor, f: Tensor) -> Tensor:
        N = self._quad_N(y, f)
        return y - N * torch.sigmoid(f)

    def _neg_hessian(self, y: Tensor, f: Tensor) -> Tensor:
        N = self._quad_N(y, f)
        s = torch.sigmoid(f)
        return (N * s * (1 - s)).expand(torch.broadcast_shapes(y.shape, f.shape))

    def _quad_N(self, y: Tensor, f: Tensor) -> Tensor:
        """Per-point trials aligned with ``y``; inside quadrature ``y`` is ``(..., n, 1)``."""
        N = self._N(f)
        if N.dim() > 0 and y.dim() > N.dim() and y.shape[-1] == 1:
            N = N.unsqueeze(-1)
        return N

    def sample(self, f: Tensor, generator: torch.Generator | None = None) -> Tensor:
        _check_real(self.name, f, "f")
        N = self._N(f).expand(f.shape)
        dev = f.device if generator is None else generator.device  # draws on the generator's device
        p = torch.sigmoid(f)
        return torch.binomial(N.to(dev), p.to(dev), generator=generator).to(f.device)

    def conditional_mean(self, f: Tensor) -> Tensor:
        return self._N(f) * torch.sigmoid(f)

    def _mean_of_y(self, f: Tensor) -> Tensor:  # f carries a trailing quadrature axis
        N = self._N(f)
        if N.dim() > 0:
            N = N.unsqueeze(-1)
        return N * torch.sigmoid(f)
