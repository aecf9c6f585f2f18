"""Sparse-GP blocks shared by the dual SVGP (Chang et al. 2023) and the streaming baselines
(Bui et al. 2017, offline SVGP): kernel blocks with a latent dimension, relative jitter,
triangular solves and the log prior of registered hyperparameter priors.

For ``C`` latents the kernel is either shared (``batch_shape ()``: the blocks get a size-1
latent dimension that broadcasts against the C latents, so shared factorisations
are computed once) or one per latent (``batch_shape (C,)``). Layout ``(L', m, n)`` for
matrices and ``(L', n)`` for diagonals.

Example:
    >>> k = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([3]))
    >>> latent_block(k, torch.zeros(4, 1), torch.zeros(2, 1)).shape  # one block per latent
    torch.Size([3, 4, 2])
"""

from __future__ import annotations

import gpytorch
import torch
from torch import Tensor

__all__ = ["jittered", "latent_block", "log_prior", "tri_solve"]


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


def tri_solve(L: Tensor, B: Tensor) -> Tensor:
    """``L^{-1} B`` for lower-triangular ``L`` (broadcast over batch dimensions).

    Example:
        >>> tri_solve(2 * torch.eye(2), torch.ones(2, 1)).squeeze(-1)
        tensor([0.5000, 0.5000])
    """
    return torch.linalg.solve_triangular(L, B, upper=False)


def log_prior(*modules: torch.nn.Module, like: Tensor) -> Tensor:
    """Sum of ``log p(theta)`` over the priors registered on ``modules`` (GPyTorch
    ``register_prior``), the term added to the hyperparameter objectives (a scalar of
    ``like``'s dtype and device; zero without priors).

    Example:
        >>> from gpytorch.priors import GammaPrior
        >>> k = gpytorch.kernels.RBFKernel(lengthscale_prior=GammaPrior(3.0, 6.0))
        >>> bool(log_prior(k, like=torch.zeros(())) != 0)
        True
    """
    total = like.new_zeros(())
    for module in modules:
        for _, mod, prior, closure, _ in module.named_priors():
            total = total + prior.log_prob(closure(mod)).sum()
    return total
