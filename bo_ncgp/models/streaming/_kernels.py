"""Kernel blocks with a latent dimension, shared by the streaming baselines.

For ``C`` latents the kernel is either shared (``batch_shape ()``: the blocks get a size-1
latent dimension that broadcasts against the C variational factors, so shared factorisations
are computed once) or one per latent (``batch_shape (C,)``). Layout ``(L', m, n)`` for
matrices and ``(L', n)`` for diagonals.
"""

from __future__ import annotations

import gpytorch
import torch
from torch import Tensor

__all__ = ["jittered", "latent_block"]


def latent_block(
    kernel: gpytorch.kernels.Kernel, X1: Tensor, X2: Tensor | None = None, diag: bool = False
) -> Tensor:
    """``K(X1, X2)`` ``(L', n1, n2)`` or its diagonal ``(L', n1)`` (``X2 = X1``).

    Example:
        >>> k, X = gpytorch.kernels.RBFKernel(), torch.zeros(3, 1)
        >>> latent_block(k, X).shape, latent_block(k, X, diag=True).shape
        (torch.Size([1, 3, 3]), torch.Size([1, 3]))
    """
    batched = len(kernel.batch_shape) > 0
    if batched:
        X1 = X1.unsqueeze(-3)
        X2 = None if X2 is None else X2.unsqueeze(-3)
    with gpytorch.settings.lazily_evaluate_kernels(False):
        if diag:
            K = kernel(X1, X1, diag=True)
        else:
            K = kernel(X1, X1 if X2 is None else X2).to_dense()
    if batched:
        return K
    return K.unsqueeze(-2 if diag else -3)


def jittered(K: Tensor, jitter: float) -> Tensor:
    """``K + jitter * mean(diag K) * I`` (relative jitter; a no-op for ``jitter = 0``)."""
    if jitter <= 0:
        return K
    diag = K.diagonal(dim1=-2, dim2=-1)
    scale = diag.detach().mean(-1, keepdim=True).clamp_min(torch.finfo(K.dtype).tiny)
    return K + torch.diag_embed((jitter * scale).expand_as(diag))
