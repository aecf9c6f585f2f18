"""Building blocks shared by the sparse GP models: latent kernel blocks, jitter, whitened KL,
triangular solves and the log density of registered hyperparameter priors.

* :func:`latent_block` -- the dense prior covariance ``K(X1, X2)`` of ``C`` latent functions,
  as ``(C|1, n1, n2)`` blocks: one block for a kernel shared by all latents (batch shape
  ``()``), one per latent for a kernel of batch shape ``(C,)``.
* :func:`jittered` -- ``K + jitter * mean(diag K) I`` (relative jitter).
* :func:`solve_lower` -- ``L^{-1} B`` for a lower-triangular ``L``.
* :func:`tri_logdet` -- ``log|L L^T|`` for a triangular ``L``.
* :func:`whitened_kl` -- ``KL[N(m, R R^T) || N(0, I)]`` (the KL term of a whitened sparse
  variational posterior, e.g. Hensman et al. 2015, Eq. 10 with ``u = L v``).
* :func:`log_prior` -- ``sum log p(theta)`` over the GPyTorch priors registered on a module
  (the hyperparameter term of a MAP-II / ELBO-plus-prior objective).

Example:
    >>> import torch, gpytorch
    >>> k = gpytorch.kernels.RBFKernel()
    >>> K = jittered(latent_block(k, torch.rand(5, 2)), 1e-6)
    >>> L = torch.linalg.cholesky(K)
    >>> K.shape, float(whitened_kl(torch.zeros(1, 5), torch.eye(5).expand(1, 5, 5)))
    (torch.Size([1, 5, 5]), 0.0)
"""

from __future__ import annotations

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError

__all__ = ["jittered", "latent_block", "log_prior", "solve_lower", "tri_logdet", "whitened_kl"]


def latent_block(
    kernel: gpytorch.kernels.Kernel, X1: Tensor, X2: Tensor | None = None, diag: bool = False
) -> Tensor:
    """``K(X1, X2)`` ``(C|1, n1, n2)`` or its diagonal ``(C|1, n1)`` (``X2 = X1``), dense.

    A kernel with batch shape ``(C,)`` gives one block per latent function; a kernel without
    batch shape gives one block shared by all of them.

    Example:
        >>> k, X = gpytorch.kernels.RBFKernel(), torch.zeros(3, 1)
        >>> latent_block(k, X).shape, latent_block(k, X, diag=True).shape
        (torch.Size([1, 3, 3]), torch.Size([1, 3]))
        >>> latent_block(gpytorch.kernels.RBFKernel(batch_shape=torch.Size([4])), X).shape
        torch.Size([4, 3, 3])
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
    """``K + jitter * mean(diag K) * I`` (relative jitter; a no-op for ``jitter <= 0``).

    Example:
        >>> jittered(2 * torch.eye(2), 0.5)
        tensor([[3., 0.],
                [0., 3.]])
    """
    if not jitter > 0:
        if jitter != jitter:
            raise InputDataError(f"jittered: jitter must be a number >= 0, got {jitter}")
        return K
    diag = K.diagonal(dim1=-2, dim2=-1)
    scale = diag.detach().mean(-1, keepdim=True).clamp_min(torch.finfo(K.dtype).tiny)
    return K + torch.diag_embed((jitter * scale).expand_as(diag))


def solve_lower(L: Tensor, B: Tensor) -> Tensor:
    """``L^{-1} B`` for lower-triangular ``L`` (broadcast over batch dimensions).

    Batch dimensions in which ``L`` is shared (size 1, or absent) but ``B`` is not are folded
    into the columns of the right-hand side: one solve against ``(m, prod(shared) * k)``
    instead of a copy of ``L`` per batch element (e.g. one factor of ``K_zz`` against
    fantasies x candidates). Batch dimensions in which the factors differ are broadcast.

    Example:
        >>> L = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
        >>> solve_lower(L, torch.tensor([[2.0], [3.0]]))
        tensor([[1.],
                [2.]])
        >>> solve_lower(L, torch.ones(5, 3, 2, 1)).shape  # one L for 5 x 3 right-hand sides
        torch.Size([5, 3, 2, 1])
    """
    lb, bb = L.shape[:-2], B.shape[:-2]
    batch = lb if lb == bb else torch.broadcast_shapes(lb, bb)  # (a Python loop in torch)
    nd = len(batch)
    L_batch = (1,) * (nd - L.dim() + 2) + tuple(L.shape[:-2])
    fold = [i for i in range(nd) if L_batch[i] == 1 and batch[i] > 1]
    if not fold or B.numel() == 0:
        return torch.linalg.solve_triangular(L, B, upper=False)
    keep = [i for i in range(nd) if i not in fold]
    m, k = L.shape[-1], B.shape[-1]
    B = B.expand(*batch, m, k)
    # (*keep, m, *fold, k) -> (*keep, m, prod(fold) * k): one right-hand side per column
    order = [*keep, nd, *fold, nd + 1]
    cols = B.permute(order).reshape(*(batch[i] for i in keep), m, -1)
    L_kept = L.reshape(*L_batch, m, m).reshape(*(L_batch[i] for i in keep), m, m)
    X = torch.linalg.solve_triangular(L_kept, cols, upper=False)
    X = X.reshape(*(batch[i] for i in keep), m, *(batch[i] for i in fold), k)
    return X.permute([order.index(i) for i in range(nd + 2)])


def tri_logdet(L: Tensor) -> Tensor:
    """``log|L L^T| = 2 sum_i log|L_ii|`` for a triangular ``L`` ``(..., M, M)`` (the
    log-determinant of a matrix from its Cholesky factor; the diagonal may be negative).

    Example:
        >>> round(float(tri_logdet(torch.tensor([[2.0, 0.0], [5.0, -1.0]]))), 4)  # log 4
        1.3863
    """
    return 2.0 * L.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)


def whitened_kl(mean: Tensor, chol: Tensor) -> Tensor:
    """``KL[N(m, R R^T) || N(0, I)]`` for a triangular ``R``, one value per leading batch.

    ``KL = (||R||_F^2 + ||m||^2 - M - log|R R^T|) / 2``; the diagonal of ``R`` may be
    negative (an unconstrained triangular parameter).

    Args:
        mean: ``(..., M)``; chol: ``(..., M, M)``.

    Example:
        >>> R = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
        >>> round(float(whitened_kl(torch.zeros(2), R)), 4)  # (4 + 1 - 2 - log 4) / 2
        0.8069
    """
    return 0.5 * (
        chol.square().sum((-2, -1)) + mean.square().sum(-1) - chol.shape[-1] - tri_logdet(chol)
    )


def log_prior(
    *modules: torch.nn.Module,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> Tensor:
    """Sum of ``prior.log_prob(value)`` over the GPyTorch priors registered on ``modules``.

    Args:
        modules: GPyTorch modules (``named_priors``), summed in this order (e.g. a kernel and
            a likelihood).
        dtype, device: of the result when no prior is registered (default: those of the
            first module's first parameter).

    Example:
        >>> k = gpytorch.kernels.RBFKernel(lengthscale_prior=gpytorch.priors.GammaPrior(3.0, 6.0))
        >>> lp = log_prior(k)
        >>> bool(torch.isclose(lp, gpytorch.priors.GammaPrior(3.0, 6.0).log_prob(k.lengthscale)))
        True
        >>> lik = gpytorch.likelihoods.GaussianLikelihood()
        >>> float(log_prior(gpytorch.kernels.RBFKernel(), lik))  # no prior registered
        0.0
    """
    if dtype is None or device is None:
        ref = next((p for m in modules for p in m.parameters()), None)
        dtype = dtype or (ref.dtype if ref is not None else torch.get_default_dtype())
        device = device or (ref.device if ref is not None else None)
    total = torch.zeros((), dtype=dtype, device=device)
    for module in modules:
        for _, mod, prior, closure, _ in module.named_priors():
            total = total + prior.log_prob(closure(mod)).sum()
    return total
