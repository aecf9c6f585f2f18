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

__all__ = ["gauss_hermite", "gh_points"]


@functools.lru_cache(maxsize=32)
def _nodes(num_points: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite.hermgauss(num_points)
    return x, w / math.sqrt(math.pi)


def gauss_hermite(
    num_points: int, dtype: torch.dtype, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Nodes ``x_k`` and normalised weights ``w_k / sqrt(pi)`` (summing to one)."""
    if num_points < 1:
        raise ValueError(f"gauss_hermite: num_points must be >= 1, got {num_points}")
    x, w = _nodes(int(num_points))
    return (
        torch.as_tensor(x, dtype=dtype, device=device),
        torch.as_tensor(w, dtype=dtype, device=device),
    )


def gh_points(mean: Tensor, var: Tensor, num_points: int) -> tuple[Tensor, Tensor]:
    """Quadrature locations ``(..., K)`` for ``N(mean, var)`` and the weights ``(K,)``."""
    x, w = gauss_hermite(num_points, mean.dtype, mean.device)
    f = mean.unsqueeze(-1) + torch.sqrt(2.0 * var.clamp_min(0)).unsqueeze(-1) * x
    return f, w
