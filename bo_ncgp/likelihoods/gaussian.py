"""Gaussian likelihood ``y ~ N(f, sigma^2)`` with a learnable noise variance."""

from __future__ import annotations

import math

import torch
from gpytorch.constraints import GreaterThan, Interval
from gpytorch.priors import Prior
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods.base import Likelihood, _check_real
from bo_ncgp.linalg._args import check_positive

__all__ = ["Gaussian"]


class Gaussian(Likelihood):
    """``p(y | f) = N(y | f, noise)``; ``W = 1 / noise``; all expectations in closed form.

    Args:
        noise: initial noise variance ``sigma^2``.
        noise_constraint: GPyTorch constraint on the noise (default ``GreaterThan(1e-6)``).
        noise_prior: optional GPyTorch prior on the noise.

    Example:
        >>> lik = Gaussian(noise=0.1)
        >>> lik.log_prob(torch.tensor([0.0]), torch.tensor([0.0]))
        tensor([0.2324], grad_fn=<...>)
    """

    def __init__(
        self,
        noise: float = 0.1,
        noise_constraint: Interval | None = None,
        noise_prior: Prior | None = None,
    ) -> None:
        super().__init__()
        check_positive(noise, "noise", "Gaussian")
        self.register_parameter("raw_noise", torch.nn.Parameter(torch.zeros(())))
        self.register_constraint("raw_noise", noise_constraint or GreaterThan(1e-6))
        if noise_prior is not None:
            self.register_prior(
                "noise_prior", noise_prior, lambda m: m.noise, lambda m, v: m._set_noise(v)
            )
        self._set_noise(noise)

    @property
    def noise(self) -> Tensor:
        return self.raw_noise_constraint.transform(self.raw_noise)

    @noise.setter
    def noise(self, value: float | Tensor) -> None:
        self._set_noise(value)

    def _set_noise(self, value: float | Tensor) -> None:
        value = torch.as_tensor(value, dtype=self.raw_noise.dtype, device=self.raw_noise.device)
        self.initialize(raw_noise=self.raw_noise_constraint.inverse_transform(value))

    def _check(self, y: Tensor) -> Tensor:
        y = y if y.is_floating_point() else y.to(torch.get_default_dtype())
        if not torch.isfinite(y).all():
            raise InputDataError(f"{self.name}: targets contain inf")
        return y

    def _noise(self, like: Tensor) -> Tensor:
        return self.noise.to(dtype=like.dtype, device=like.device)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        s2 = self._noise(f)
        return -0.5 * (math.log(2 * math.pi) + torch.log(s2) + (y - f) ** 2 / s2)

    def _grad(self, y: Tensor, f: Tensor) -> Tensor:
        return (y - f) / self._noise(f)

    def _neg_hessian(self, y: Tensor, f: Tensor) -> Tensor:
        return (1.0 / self._noise(f)).expand(torch.broadcast_shapes(y.shape, f.shape))

    def neg_hessian_inv_matvec(self, y: Tensor, f: Tensor, v: Tensor) -> Tensor:
        self._prepare(y, f)
        return self._noise(f) * v

    def expected(self, y, mean, var, num_points=None):
        """Closed form: ``E log p = log N(y|m, s2) - v/(2 s2)``, ``alpha = (y-m)/s2``,
        ``beta = 1/s2``."""
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        s2 = self._noise(mean)
        elp = -0.5 * (math.log(2 * math.pi) + torch.log(s2) + ((y - mean) ** 2 + var) / s2)
        alpha = (y - mean) / s2
        beta = (1.0 / s2).expand(alpha.shape)
        return elp, alpha, beta

    def predictive_log_prob(self, y, mean, var, num_points=None):
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        v = var + self._noise(mean)
        return -0.5 * (math.log(2 * math.pi) + torch.log(v) + (y - mean) ** 2 / v)

    def sample(self, f: Tensor, generator: torch.Generator | None = None) -> Tensor:
        _check_real(self.name, f, "f")
        dev = f.device if generator is None else generator.device  # draws on the generator's device
        eps = torch.randn(f.shape, generator=generator, dtype=f.dtype, device=dev).to(f.device)
        return f + self._noise(f).sqrt() * eps

    def predictive_mean(self, mean, var, num_points=None):
        return mean

    def _mean_of_y(self, f: Tensor) -> Tensor:
        return f
