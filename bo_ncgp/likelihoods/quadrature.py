"""Gauss–Hermite quadrature for expectations under a univariate Gaussian.

``E_{N(f | m, v)}[g(f)] ≈ sum_k w_k / sqrt(pi) * g(m + sqrt(2 v) x_k)`` with the physicists'
Hermite nodes ``x_k`` and weights ``w_k`` (exact for polynomials of degree < 2K).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.linalg._args import check_count

__all__ = ["gauss_hermite", "gh_points"]


@functools.lru_cache(maxsize=32)
def _nodes(num_points: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite.hermgauss(num_points)
    return x, w / math.sqrt(math.pi)


def gauss_hermite(
    num_points: int, dtype: torch.dtype, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Nodes ``x_k`` and normalised weights ``w_k / sqrt(pi)`` (summing to one).

    Example:
        >>> x, w = gauss_hermite(20, torch.float64, torch.device("cpu"))
        >>> round(float(w.sum()), 12), round(float((w * 2 * x**2).sum()), 12)  # E[z^2] = 1
        (1.0, 1.0)
    """
    x, w = _nodes(check_count(num_points, "num_points", "gauss_hermite", minimum=1))
    return (
        torch.as_tensor(x, dtype=dtype, device=device),
        torch.as_tensor(w, dtype=dtype, device=device),
    )


def gh_points(mean: Tensor, var: Tensor, num_points: int) -> tuple[Tensor, Tensor]:
    """Quadrature locations ``(..., K)`` for ``N(mean, var)`` and the weights ``(K,)``.

    Example:
        >>> f, w = gh_points(torch.tensor([1.0]), torch.tensor([4.0]), 20)
        >>> round(float((w * f).sum()), 10), round(float((w * f**2).sum()), 10)  # mean, m^2 + v
        (1.0, 5.0)
    """
    x, w = gauss_hermite(num_points, mean.dtype, mean.device)
    f = mean.unsqueeze(-1) + torch.sqrt(2.0 * var.clamp_min(0)).unsqueeze(-1) * x
    return f, w
