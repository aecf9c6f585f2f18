"""Products with the prior covariance of C latent GPs, in IterNCGP's latent layout.

Tatzel et al., "Accelerating Non-Conjugate Gaussian Processes By Trading Off Computation For
Uncertainty": the latent vector ``f`` in R^{NC} of C independent latent GPs has a prior
covariance ``K`` that is block diagonal in the paper's "NC ordering" (Sec. B.1): one
``N x N`` block ``K_c`` per latent function. Every product with ``K`` in IterNCGP (Algorithm 2,
line 9; predictions, Eqs. 8-9) goes through :class:`LatentKernelOperator`, which wraps
:class:`bo_ncgp.linalg.KernelOperator` (dense / chunked / KeOps backends).

Layout used throughout :mod:`bo_ncgp.models.iterncgp`: a latent vector is a tensor of shape
``(*b, C, n, 1)`` and a matrix of ``k`` stacked latent vectors (buffers ``S``, ``T``, the root
``Q`` of ``C_j``) is ``(*b, C, n, k)``; ``*b`` are batch dimensions (e.g. fantasies). The
likelihoods use ``(*b, n, C)`` (softmax, the paper's "CN ordering") or ``(*b, n)``;
:func:`to_likelihood_layout` / :func:`from_likelihood_layout` convert.

Kernels: a kernel without batch shape is shared by all C latent functions
(``K = I_C (x) K_x``, one product with ``C k`` columns); a kernel with ``batch_shape == (C,)``
gives each latent function its own hyperparameters.
"""

from __future__ import annotations

import math

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg import KernelOperator, latent_block
from bo_ncgp.linalg.backend import choose_backend

__all__ = [
    "LatentKernelOperator",
    "from_likelihood_layout",
    "inner",
    "to_likelihood_layout",
]


def to_likelihood_layout(V: Tensor, num_latents: int) -> Tensor:
    """``(..., C, n)`` -> the likelihood's ``(..., n, C)`` (or ``(..., n)`` when ``C == 1``).

    Example:
        >>> V = torch.arange(6.0).reshape(2, 3)  # C = 2 latent values at n = 3 points
        >>> to_likelihood_layout(V, 2)  # softmax layout: one row of C logits per point
        tensor([[0., 3.],
                [1., 4.],
                [2., 5.]])
        >>> to_likelihood_layout(torch.zeros(4, 1, 3), 1).shape  # scalar likelihoods drop C
        torch.Size([4, 3])
    """
    return V[..., 0, :] if num_latents == 1 else V.transpose(-1, -2)


def from_likelihood_layout(V: Tensor, num_latents: int) -> Tensor:
    """Inverse of :func:`to_likelihood_layout` (back to ``(..., C, n)``).

    Example:
        >>> F = torch.randn(5, 3)  # softmax latents (n, C)
        >>> from_likelihood_layout(F, 3).shape, from_likelihood_layout(torch.randn(5), 1).shape
        (torch.Size([3, 5]), torch.Size([1, 5]))
        >>> torch.equal(to_likelihood_layout(from_likelihood_layout(F, 3), 3), F)
        True
    """
    return V.unsqueeze(-2) if num_latents == 1 else V.transpose(-1, -2)


def inner(A: Tensor, B: Tensor) -> Tensor:
    """``A^T B`` of stacked latent vectors ``(*b, C, n, k1)``, ``(*b, C, n, k2)``: ``(*b, k1, k2)``

    Example:
        >>> A = torch.randn(2, 5, 3)
        >>> inner(A, A).shape
        torch.Size([3, 3])
    """
    return torch.einsum("...cnk,...cnl->...kl", A, B)


def _check_kernel(kernel: gpytorch.kernels.Kernel, num_latents: int) -> bool:
    """Return True for a kernel shared by all latents; raise for an unusable batch shape."""
    bs = tuple(kernel.batch_shape)
    if bs == ():
        return True
    if bs == (num_latents,):
        return False
    raise InputDataError(
        f"IterNCGP: the kernel's batch_shape must be () (shared by all latent functions) or "
        f"(C,) = ({num_latents},) (one GP per latent function), got {bs}"
    )


class LatentKernelOperator:
    """Block-diagonal prior covariance ``K`` of C latent GPs, applied in the latent layout.

    Args:
        kernel: GPyTorch kernel, batch shape ``()`` (shared) or ``(C,)``.
        X: ``(n, d)`` training inputs, or ``(*bx, n, d)`` for batched models (fantasies at
            batched inputs; dense or chunked backend).
        num_latents: C.
        backend: :class:`~bo_ncgp.linalg.KernelOperator` backend.

    Example:
        >>> k = gpytorch.kernels.RBFKernel()
        >>> op = LatentKernelOperator(k, torch.rand(6, 2), num_latents=3, backend="dense")
        >>> op.matmul(torch.randn(3, 6, 4)).shape
        torch.Size([3, 6, 4])
    """

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        X: Tensor,
        num_latents: int,
        backend: str = "auto",
    ) -> None:
        self.kernel = kernel
        self.X = X
        self.num_latents = int(num_latents)
        self.shared = _check_kernel(kernel, self.num_latents)
        self.backend = backend
        # batched inputs (*bx, n, d) -- conditioned models of fantasy batches -- broadcast a
        # (*bx, C|1, n, n) operator against the latent batch, which needs a torch backend
        self.batched_inputs = X.dim() > 2
        if self.batched_inputs:
            Xb = X.unsqueeze(-3)
            self.op = KernelOperator(kernel, Xb, backend=self._torch_backend(Xb))
        else:
            self.op = KernelOperator(kernel, X, backend=backend)

    @property
    def n(self) -> int:
        return self.X.shape[-2]

    # ------------------------------------------------------------------ K V
    def matmul(self, V: Tensor) -> Tensor:
        """``K V`` for ``V`` of shape ``(*b, C, n, k)`` (one kernel product for all columns)."""
        if self.batched_inputs:
            _check_latent(V, self.n)
            return self.op.matmul(V)
        return _block_matmul(self.op, self.shared, V, self.n)

    __matmul__ = matmul

    # --------------------------------------------------------- cross products
    def cross_matmul(self, X_star: Tensor, V: Tensor) -> Tensor:
        """``K(X_star, X) V`` per latent function.

        Args:
            X_star: ``(..., m, d)`` test inputs (any leading batch dimensions).
            V: ``(*b, C, n, k)``.

        Returns:
            ``(broadcast(..., *b), C, m, k)``. Differentiable with respect to ``X_star``.
        """
        _check_latent(V, self.n)
        if X_star.dim() == 2 and not self.batched_inputs:
            # one operator for all batch elements of V: fold them into columns (KeOps-friendly)
            op = KernelOperator(self.kernel, X_star, self.X, backend=self._cross_backend(V, X_star))
            return _block_matmul(op, self.shared, V, self.n)
        # batched inputs: broadcast K(X_star, X) of shape (..., C|1, m, n) against V
        Xs = X_star.unsqueeze(-3)
        op = KernelOperator(self.kernel, Xs, self.X.unsqueeze(-3), backend=self._torch_backend(Xs))
        return op.matmul(V)

    def _backend(self, X1: Tensor, columns: int | None, allow_keops: bool) -> str:
        """:func:`~bo_ncgp.linalg.backend.choose_backend` for ``K(X1, X)`` in every latent batch
        (``C`` blocks with a per-latent kernel, one shared block otherwise)."""
        batch = torch.broadcast_shapes(X1.shape[:-2], self.X.shape[:-2])
        latents = 1 if self.shared else self.num_latents
        shape = (*batch, latents, X1.shape[-2], self.n)
        # a requested KeOps backend that cannot serve this product: the torch part of the rule
        requested = "auto" if self.backend == "keops" and not allow_keops else self.backend
        return choose_backend(
            requested,
            self.kernel,
            shape,
            X1.dtype,
            X1.device,
            columns=columns,
            allow_keops=allow_keops,
        )

    def _torch_backend(self, X1: Tensor) -> str:
        """The backend of a broadcast product with ``K(X1, X)`` (``keops`` is not one)."""
        return self._backend(X1, None, allow_keops=False)

    def _cross_backend(self, V: Tensor, X_star: Tensor) -> str:
        """The backend of ``K(X_star, X) V`` with every latent and batch column folded in."""
        columns = V.shape[-1] * math.prod(V.shape[:-3]) * (V.shape[-3] if self.shared else 1)
        return self._backend(X_star, columns, allow_keops=True)

    def prior_diag(self, X_star: Tensor) -> Tensor:
        """``k_c(x, x)`` for every latent function: ``(..., C|1, m)``."""
        return latent_block(self.kernel, X_star, diag=True)

    def prior_cov(self, X_star: Tensor) -> Tensor:
        """``K_c(X_star, X_star)``: ``(..., C|1, m, m)``."""
        return latent_block(self.kernel, X_star)


def _check_latent(V: Tensor, n: int) -> None:
    if V.dim() < 3 or V.shape[-2] != n:
        raise InputDataError(
            f"LatentKernelOperator: expected a (*b, C, {n}, k) tensor, got {tuple(V.shape)}"
        )


def _block_matmul(op: KernelOperator, shared: bool, V: Tensor, n: int) -> Tensor:
    """Apply a (possibly class-batched) kernel operator to ``V`` of shape ``(*b, C, n, k)``."""
    _check_latent(V, n)
    *b, C, _, k = V.shape
    nb = len(b)
    if shared:
        # (*b, C, n, k) -> (n, *b, C, k) -> (n, b*C*k): one product for all latents and columns
        perm = (nb + 1, *range(nb), nb, nb + 2)
        W = V.permute(perm).reshape(n, -1)
        out = op.matmul(W)
        m = out.shape[-2]
        out = out.reshape(m, *b, C, k)
        return out.permute(*range(1, nb + 1), nb + 1, 0, nb + 2)
    # class-batched kernel: (*b, C, n, k) -> (C, n, *b, k) -> (C, n, b*k)
    perm = (nb, nb + 1, *range(nb), nb + 2)
    W = V.permute(perm).reshape(C, n, -1)
    out = op.matmul(W)
    m = out.shape[-2]
    out = out.reshape(C, m, *b, k)
    return out.permute(*range(2, nb + 2), 0, 1, nb + 2)
