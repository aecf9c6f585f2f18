"""Poisson likelihood with the log link: ``y ~ Poisson(exp(f))``."""

from __future__ import annotations

import torch
from torch import Tensor

from bo_ncgp.likelihoods._checks import check_integer, check_range
from bo_ncgp.likelihoods.base import Likelihood, _check_real

__all__ = ["Poisson"]


class Poisson(Likelihood):
    """``log p(y|f) = y f - exp(f) - log y!``; ``grad = y - e^f``; ``W = e^f``
    (Tatzel et al. Sec. A.5). ``expected`` is closed form: ``E[e^f] = exp(m + v/2)``.

    Example:
        >>> Poisson().neg_hessian(torch.tensor([2.0]), torch.tensor([0.0]))
        tensor([1.])
    """

    def _check(self, y: Tensor) -> Tensor:
        y = check_integer(self.name, y)
        check_range(self.name, y, 0, None, "counts")
        return y

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        return y * f - torch.exp(f) - torch.lgamma(y + 1)

    def _grad(self, y: Tensor, f: Tensor) -> Tensor:
        return y - torch.exp(f)

    def _neg_hessian(self, y: Tensor, f: Tensor) -> Tensor:
        return torch.exp(f).expand(torch.broadcast_shapes(y.shape, f.shape))

    def expected(self, y, mean, var, num_points=None):
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        rate = torch.exp(mean + 0.5 * var)
        elp = y * mean - rate - torch.lgamma(y + 1)
        return elp, y - rate, rate.expand(torch.broadcast_shapes(y.shape, rate.shape))

    def predictive_mean(self, mean, var, num_points=None):
        self._check_var(var)
        return torch.exp(mean + 0.5 * var)

    def sample(self, f: Tensor, generator: torch.Generator | None = None) -> Tensor:
        _check_real(self.name, f, "f")
        dev = f.device if generator is None else generator.device  # draws on the generator's device
        return torch.poisson(torch.exp(f).to(dev), generator=generator).to(f.device)

    def _mean_of_y(self, f: Tensor) -> Tensor:
        return torch.exp(f)
