"""Block-independent Gaussian variational posterior over whitened variables.

Wu et al. (2022), Sec. 3.3, Eq. 23: ``q(eps) = prod_b N(eps_b | m_b, S_b)`` with blocks that
tile the whitened grid (``block_shape`` all ones: mean-field; the whole grid: full rank).
The state is kept in natural parameters, ``theta1 = S^{-1} m`` and the block precisions
``Lambda_b = S_b^{-1}``, which makes the natural-gradient step of Sec. 3.4 a convex
combination for the precisions (Hensman et al. 2013); the mean takes the natural-gradient
step of the minibatch's full precision, see :meth:`BlockGaussian.natgrad_step`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg import solve_lower, stable_cholesky
from bo_ncgp.linalg.cg import cg

__all__ = ["BlockGaussian"]


def csr_from_coo(coo: Tensor) -> Tensor:
    """A sparse COO matrix in (row-major) CSR layout, without PyTorch's warning that CSR
    support is in beta (the products used here, CSR x dense vector, are supported)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return coo.coalesce().to_sparse_csr()


def _dense_rows(X: Tensor, start: int, stop: int) -> Tensor:
    """Rows ``start:stop`` of a dense or sparse CSR matrix ``X``, dense."""
    if X.layout != torch.sparse_csr:
        return X[start:stop]
    stop = min(stop, X.shape[0])
    crow = X.crow_indices()
    lo, hi = int(crow[start]), int(crow[stop])
    counts = crow[start + 1 : stop + 1] - crow[start:stop]
    rows = torch.repeat_interleave(torch.arange(stop - start, device=X.device), counts)
    out = X.values().new_zeros(stop - start, X.shape[1])
    out[rows, X.col_indices()[lo:hi]] = X.values()[lo:hi]
    return out


class BlockGaussian(torch.nn.Module):
    """``q(eps) = prod_b N(m_b, S_b)`` on a grid of shape ``grid_shape`` (C order), blocks of
    shape ``block_shape`` (each axis of the grid must be divisible by the block's).

    Attributes:
        last_cg: ``(iterations, converged)`` of the last natural-gradient step's mean solve
            (CG; ``converged``: every column reached its tolerance), ``None`` before one.

    Example:
        >>> q = BlockGaussian((4, 6), (2, 3))
        >>> q.num_blocks, q.block_size
        (4, 6)
    """

    def __init__(
        self,
        grid_shape: Sequence[int],
        block_shape: Sequence[int],
        dtype: torch.dtype | None = None,
        device=None,
    ) -> None:
        super().__init__()
        self.grid_shape = tuple(int(s) for s in grid_shape)
        self.block_shape = tuple(int(b) for b in block_shape)
        if len(self.block_shape) != len(self.grid_shape):
            raise InputDataError(
                f"block_shape {self.block_shape} must have one entry per grid axis "
                f"{self.grid_shape}"
            )
        for g, b in zip(self.grid_shape, self.block_shape, strict=True):
            if b < 1 or g % b:
                raise InputDataError(
                    f"block_shape {self.block_shape} must tile the whitened grid "
                    f"{self.grid_shape} (each axis divisible)"
                )
        self.N = math.prod(self.grid_shape)
        self.block_size = math.prod(self.block_shape)
        self.num_blocks = self.N // self.block_size
        dtype = dtype or torch.get_default_dtype()
        eye = torch.eye(self.block_size, dtype=dtype, device=device)
        self.register_buffer("theta1", torch.zeros(self.N, dtype=dtype, device=device))
        self.register_buffer("prec", eye.expand(self.num_blocks, -1, -1).clone())
        self.register_buffer("prec_chol", self.prec.clone())
        self.last_cg: tuple[int, bool] | None = None

    # ------------------------------------------------------------ reordering
    def to_blocks(self, v: Tensor) -> Tensor:
        """``(..., N)`` in grid C order -> ``(..., B, Mb)`` block order (a permutation)."""
        lead = v.shape[:-1]
        shp: list[int] = []
        for g, b in zip(self.grid_shape, self.block_shape, strict=True):
            shp += [g // b, b]
        x = v.reshape(*lead, *shp)
        L, D = len(lead), len(self.grid_shape)
        perm = list(range(L)) + [L + 2 * i for i in range(D)] + [L + 2 * i + 1 for i in range(D)]
        return x.permute(perm).reshape(*lead, self.num_blocks, self.block_size)

    def blocks_last(self, K: Tensor) -> Tensor:
        """``(n, N)`` rows in grid C order -> ``(B, Mb, n)``: :meth:`to_blocks` of each row
        with the rows on the last axis, in one copy (the layout of the block products).

        Example:
            >>> q = BlockGaussian((4, 6), (2, 3))
            >>> K = torch.randn(5, 24)
            >>> torch.equal(q.blocks_last(K), q.to_blocks(K).permute(1, 2, 0))
            True
        """
        n = K.shape[0]
        shp: list[int] = []
        for g, b in zip(self.grid_shape, self.block_shape, strict=True):
            shp += [g // b, b]
        D = len(self.grid_shape)
        perm = [1 + 2 * i for i in range(D)] + [2 + 2 * i for i in range(D)] + [0]
        return K.reshape(n, *shp).permute(perm).reshape(self.num_blocks, self.block_size, n)

    def block_gram(self, K: Tensor, weights: Tensor, rows_per_chunk: int = 64) -> Tensor:
        """``(B, Mb, Mb)`` blocks ``sum_n w_n k_nb k_nb^T`` of ``K^T diag(w) K`` for rows
        ``K (n, N)``, accumulated over chunks of ``rows_per_chunk`` rows (each chunk is
        reordered while it is in cache; one reordering of all of ``K`` is memory-bound).

        Example:
            >>> q = BlockGaussian((4,), (2,))
            >>> K, w = torch.randn(3, 4), torch.rand(3)
            >>> G = q.block_gram(K, w, rows_per_chunk=2)
            >>> bool(torch.allclose(G[1], K[:, 2:].mT @ (w[:, None] * K[:, 2:])))
            True
        """
        G = K.new_zeros(self.num_blocks, self.block_size, self.block_size)
        for s in range(0, K.shape[0], rows_per_chunk):
            Kb = self.blocks_last(K[s : s + rows_per_chunk])  # (B, Mb, chunk)
            G.baddbmm_(Kb * weights[s : s + rows_per_chunk], Kb.mT)
        return G

    def from_blocks(self, x: Tensor) -> Tensor:
        """Inverse of :meth:`to_blocks`."""
        lead = x.shape[:-2]
        D = len(self.grid_shape)
        nb = [g // b for g, b in zip(self.grid_shape, self.block_shape, strict=True)]
        y = x.reshape(*lead, *nb, *self.block_shape)
        L = len(lead)
        perm = list(range(L))
        for i in range(D):
            perm += [L + i, L + D + i]
        return y.permute(perm).reshape(*lead, self.N)

    # ------------------------------------------------------------- moments
    @property
    def mean(self) -> Tensor:
        """``m = S theta1`` (block Cholesky solves), ``(N,)``."""
        t = self.to_blocks(self.theta1).unsqueeze(-1)
        return self.from_blocks(torch.cholesky_solve(t, self.prec_chol).squeeze(-1))

    def quad_form(self, K: Tensor) -> Tensor:
        """``diag(K S K^T)`` for ``K`` of shape ``(n, N)``: ``sum_b |L_b^{-1} k_b|^2``."""
        W = self._half_solve(K)
        return (W**2).sum((-3, -2))

    def _half_solve(self, K: Tensor) -> Tensor:
        return solve_lower(self.prec_chol, self.blocks_last(K))  # (B, Mb, n)

    def covariance_form(self, K1: Tensor, K2: Tensor) -> Tensor:
        """``K1 S K2^T`` for ``K1 (n1, N)``, ``K2 (n2, N)``."""
        W1, W2 = self._half_solve(K1), self._half_solve(K2)
        return torch.einsum("bin,bim->nm", W1, W2)

    def kl(self) -> Tensor:
        """``KL(q || N(0, I))`` (Eq. 14, term b')."""
        m = self.mean
        Linv = torch.linalg.solve_triangular(
            self.prec_chol, torch.eye(self.block_size, dtype=m.dtype, device=m.device), upper=False
        )
        trace = (Linv**2).sum()
        logdet_S = -2 * torch.log(torch.diagonal(self.prec_chol, dim1=-2, dim2=-1)).sum()
        return 0.5 * (trace + (m * m).sum() - logdet_S - self.N)

    # ------------------------------------------------------- natural gradient
    def factor_gram(
        self,
        factor: tuple[Tensor, Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]],
        weights: Tensor,
        max_entries: int = 2**22,
    ) -> Tensor:
        """:meth:`block_gram` of the rows ``K = X R`` of ``factor = (X, R_mv, R_t_mv)``
        (see :meth:`natgrad_step`), formed ``max_entries // N`` rows at a time: ``K`` itself
        (``n x N``) is never held.

        Example:
            >>> q = BlockGaussian((4,), (2,))
            >>> R = torch.randn(2, 4); X = torch.randn(3, 2); w = torch.rand(3)
            >>> G = q.factor_gram((X, R.__matmul__, lambda v: v @ R), w, max_entries=4)
            >>> bool(torch.allclose(G, q.block_gram(X @ R, w)))
            True
        """
        X, _, r_t_mv = factor
        rows = max(1, int(max_entries) // self.N)
        G = weights.new_zeros(self.num_blocks, self.block_size, self.block_size)
        for s in range(0, X.shape[0], rows):
            G += self.block_gram(r_t_mv(_dense_rows(X, s, s + rows)), weights[s : s + rows])
        return G

    @torch.no_grad()
    def natgrad_step(
        self,
        K: Tensor | None,
        alpha: Tensor,
        beta: Tensor,
        scale: float,
        lr: float,
        tol: float = 1e-3,
        max_iters: int = 100,
        factor: tuple[Tensor, Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]] | None = None,
    ) -> None:
        """One natural-gradient step (Sec. 3.4) from a minibatch.

        With ``k_n`` the rows of ``K (n, N)``, ``alpha_n = E[d log p/df]``,
        ``beta_n = E[-d^2 log p/df^2]`` under ``q`` and ``scale = N_data / n``, the
        minibatch's precision is ``Lambda_t = I + scale sum_n beta_n k_n k_n^T`` and the
        ELBO gradient in ``m`` is ``g = scale sum_n alpha_n k_n - m``:

        * precision: ``Lambda_b <- (1 - lr) Lambda_b + lr (Lambda_t)_bb`` (the natural-gradient
          step of the block family, Eq. 23);
        * mean: ``m <- m + d`` with ``((1 - lr) Lambda_old + lr Lambda_t) d = lr g``, where
          ``Lambda_old`` is the block precision before the step, solved by CG preconditioned
          with the new block precision (``tol``: relative residual; ``max_iters``: cap).

        For a full-rank ``q`` this is exactly the natural-gradient step in the natural
        parameters (Hensman et al. 2013; the preconditioner is then the system's inverse
        and CG stops after one iteration). For blocks it keeps the minibatch's coupling
        between blocks, which the block precision drops: with the Gaussian likelihood, the
        whole data set and ``lr = 1`` it reaches the optimal mean in one step in any block
        family. Since ``lr Lambda_t <= (1 - lr) Lambda_old + lr Lambda_t``, every CG iterate
        increases the minibatch ELBO of the Gaussian likelihood (deviation from the paper,
        which does not specify the block update of the mean).

        ``factor = (X, R_mv, R_t_mv)`` gives ``K = X R`` with ``X (n, M)`` and ``R`` an
        ``M x N`` operator (``R_mv: (N,) -> (M,)``, ``R_t_mv: (..., M) -> (..., N)``), e.g. HIP-GP's
        rows ``k_n = R^T K_uu^{-1} k*_{u,n}``: the CG products of the mean step then run
        over ``X`` and ``R`` instead of the ``n x N`` matrix ``K`` (the same step). With
        ``K=None`` the block precisions are accumulated from ``factor`` too
        (:meth:`factor_gram`), and ``K`` is never formed; ``X`` may then be a sparse CSR
        matrix (HIP-GP's interpolation weights).

        Example:
            >>> q = BlockGaussian((4,), (2,))
            >>> R = torch.randn(2, 4); X = torch.randn(3, 2)
            >>> K, a, b = X @ R, torch.randn(3), torch.ones(3)
            >>> p = BlockGaussian((4,), (2,))
            >>> q.natgrad_step(K, a, b, 1.0, 0.5, tol=1e-10)
            >>> f = (X, R.__matmul__, lambda v: v @ R)  # K = X R
            >>> p.natgrad_step(K, a, b, 1.0, 0.5, tol=1e-10, factor=f)
            >>> bool(torch.allclose(q.mean, p.mean, atol=1e-5))
            True
            >>> p.natgrad_step(None, a, b, 1.0, 0.5, tol=1e-10, factor=f)  # without K
            >>> q.natgrad_step(K, a, b, 1.0, 0.5, tol=1e-10)
            >>> bool(torch.allclose(q.mean, p.mean, atol=1e-5))
            True
        """
        m = self.mean
        if K is None:
            if factor is None:
                raise InputDataError("BlockGaussian.natgrad_step: give the rows K or a factor")
            G = scale * self.factor_gram(factor, beta)
        else:
            G = scale * self.block_gram(K, beta)
        eye = torch.eye(self.block_size, dtype=m.dtype, device=m.device)
        prec_old = self.prec.clone() if lr < 1 else None
        self.prec.mul_(1 - lr).add_(lr * (eye + G))
        self.prec_chol.copy_(stable_cholesky(self.prec, name="variational precision"))
        sbeta = scale * beta

        if factor is None:
            k_mv, k_t_mv = K.__matmul__, K.mT.__matmul__
        else:
            X, r_mv, r_t_mv = factor
            # a sparse X^T in CSR (row-major) layout: 30-40x faster products than X.mT (CSC)
            Xt = X.mT if X.layout != torch.sparse_csr else csr_from_coo(X.to_sparse_coo().t())
            k_mv = lambda v: X @ r_mv(v)  # noqa: E731
            k_t_mv = lambda u: r_t_mv(Xt @ u)  # noqa: E731

        g = scale * k_t_mv(alpha) - m

        def matmul(V: Tensor) -> Tensor:  # (N, 1)
            v = V[:, 0]
            out = lr * (v + k_t_mv(sbeta * k_mv(v)))
            if prec_old is not None:
                blk = (prec_old @ self.to_blocks(v).unsqueeze(-1)).squeeze(-1)
                out = out + (1 - lr) * self.from_blocks(blk)
            return out.unsqueeze(-1)

        def precond(R: Tensor) -> Tensor:
            r = self.to_blocks(R[:, 0]).unsqueeze(-1)
            return self.from_blocks(torch.cholesky_solve(r, self.prec_chol).squeeze(-1))[:, None]

        d = cg(matmul, (lr * g).unsqueeze(-1), precond=precond, tol=tol, max_iters=max_iters)
        self.last_cg = (int(d.iterations), bool(d.converged.all()))
        m = m + d.solution[:, 0]
        self.theta1.copy_(
            self.from_blocks((self.prec @ self.to_blocks(m).unsqueeze(-1)).squeeze(-1))
        )

    @torch.no_grad()
    def reset(self) -> None:
        """Back to the prior ``N(0, I)``."""
        self.theta1.zero_()
        eye = torch.eye(self.block_size, dtype=self.prec.dtype, device=self.prec.device)
        self.prec.copy_(eye.expand_as(self.prec))
        self.prec_chol.copy_(self.prec)
