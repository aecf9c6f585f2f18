"""Bernoulli likelihood with the logit link, ``p(y=1 | f) = sigmoid(f)``."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods._checks import _examples
from bo_ncgp.likelihoods.base import Likelihood, _check_real
from bo_ncgp.likelihoods.settings import soft_targets_enabled

__all__ = ["Bernoulli"]


class Bernoulli(Likelihood):
    """``log p(y|f) = y f - softplus(f)``, ``grad = y - s``, ``W = s (1 - s)``, ``s = sigmoid(f)``.

    Args:
        labels: ``"01"`` (default) accepts labels {0, 1}; ``"pm1"`` accepts {-1, 1} and maps
            -1 to 0. Any other value raises, so {-1, 1} labels are never silently misread.

    Example:
        >>> Bernoulli().grad(torch.tensor([1.0]), torch.tensor([0.0]))
        tensor([0.5000])
    """

    def __init__(self, labels: Literal["01", "pm1"] = "01") -> None:
        super().__init__()
        if labels not in ("01", "pm1"):
            raise InputDataError(f"Bernoulli: labels must be '01' or 'pm1', got {labels!r}")
        self.labels = labels

    def _check(self, y: Tensor) -> Tensor:
        y = y if y.is_floating_point() else y.to(torch.get_default_dtype())
        allowed = (0.0, 1.0) if self.labels == "01" else (-1.0, 1.0)
        if soft_targets_enabled():  # relaxed labels: anything between the two classes
            bad = (y < allowed[0]) | (y > allowed[1]) | ~torch.isfinite(y)
        else:
            bad = (y != allowed[0]) & (y != allowed[1])
        if bad.any():
            hint = (
                " (pass Bernoulli(labels='pm1') for {-1, 1} labels)" if self.labels == "01" else ""
            )
            raise InputDataError(
                f"{self.name}: labels must be in {{{allowed[0]:g}, {allowed[1]:g}}}; found "
                f"value(s) {_examples(y[bad])}{hint}"
            )
        return (y + 1) / 2 if self.labels == "pm1" else y

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        return y * f - F.softplus(f)

    def _grad(self, y: Tensor, f: Tensor) -> Tensor:
        return y - torch.sigmoid(f)

    def _neg_hessian(self, y: Tensor, f: Tensor) -> Tensor:
        s = torch.sigmoid(f)
        return (s * (1 - s)).expand(torch.broadcast_shapes(y.shape, f.shape))

    def sample(self, f: Tensor, generator: torch.Generator | None = None) -> Tensor:
        _check_real(self.name, f, "f")
        dev = f.device if generator is None else generator.device  # draws on the generator's device
        y = torch.bernoulli(torch.sigmoid(f).to(dev), generator=generator).to(f.device)
        return 2 * y - 1 if self.labels == "pm1" else y

    def _mean_of_y(self, f: Tensor) -> Tensor:
        return torch.sigmoid(f)
