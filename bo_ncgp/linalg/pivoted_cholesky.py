"""Greedy pivoted Cholesky from a diagonal and row access.

Used to pick inducing points among ``[Z_old, X_new]`` in the memory-based dual SVGP
(Chang et al. 2023, Sec. 3.4, following Burt et al.'s greedy variance selection) and to build
low-rank preconditioners. Only ``diag(K)`` and rows of ``K`` are ever evaluated: cost
O(n r^2) time and O(n r) memory for rank r, never O(n^2). The rows are requested in blocks:
with the pivot's row come the rows of the other candidates of largest residual diagonal, the
likely next pivots, so that a kernel pays its per-call overhead (GPyTorch's, ~0.2-1 ms) once
per block rather than once per pivot; a row fetched but never used costs only its entries.

Algorithm (Harbrecht, Peters & Schneider 2012): keep the diagonal ``d`` of the residual
``K - L L^T``; at step k pick ``i = argmax d``, set
``L[:, k] = (K[:, i] - L[:, :k] L[i, :k]) / sqrt(d_i)`` and ``d -= L[:, k]**2``;
stop at ``max_rank`` or when ``trace(K - L L^T) = sum(d) <= tol``.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg._args import check_count, check_positive, check_real_tensor

__all__ = ["PivotedCholeskyResult", "RowAccess", "pivoted_cholesky"]


class RowAccess(Protocol):
    """What :func:`pivoted_cholesky` needs of a symmetric PSD matrix.

    Example:
        >>> class Diagonal:  # a RowAccess known only through its diagonal and rows
        ...     def __init__(self, d): self.d = d
        ...     def diagonal(self): return self.d
        ...     def rows(self, idx): return torch.diag(self.d)[idx]
        >>> res = pivoted_cholesky(Diagonal(torch.tensor([1.0, 4.0, 2.0])), max_rank=2)
        >>> res.pivots, round(float(res.error), 6)  # largest entries first; 1.0 is left over
        (tensor([1, 2]), 1.0)
    """

    def diagonal(self) -> Tensor: ...

    def rows(self, idx: Tensor) -> Tensor: ...


class _DenseRows:
    def __init__(self, K: Tensor) -> None:
        self.K = K

    def diagonal(self) -> Tensor:
        return self.K.diagonal()

    def rows(self, idx: Tensor) -> Tensor:
        return self.K[idx]


class _RowBlocks:
    """Pivot rows of ``op``, fetched in blocks of the likeliest next pivots.

    A request for a row that is not held fetches it together with the rows of the other
    candidates of largest residual diagonal that are not held yet (the pivots already taken
    have residual zero and come last); each row is handed out once. The block size adapts to
    how many rows of a block serve as pivots: the first block has ``cap`` rows (about
    ``block_entries`` entries), each later one twice as many as the pivots served since the
    previous request, so that rows fetched in vain cost about as much as the rows used; but
    never fewer than ``cap / 16`` rows (at least one), whose entries cost less than a call.
    At most ``2 cap`` rows are held.
    """

    def __init__(self, op: RowAccess, n: int, r_max: int, block_entries: int) -> None:
        self.op = op
        self.n = n
        self.cap = max(1, min(r_max, int(block_entries) // max(n, 1)))
        self.floor = max(1, min(self.cap, int(block_entries) // (16 * max(n, 1))))
        self.block = self.cap
        self.served = 0
        self.held: dict[int, Tensor] = {}

    def get(self, i: int, resid: Tensor, remaining: int) -> Tensor:
        row = self.held.pop(i, None)
        self.served += 1
        if row is not None:
            return row
        if self.served > 1:  # not the first request: size the block by the last one's use
            self.block = max(self.floor, min(self.cap, 2 * (self.served - 1)))
        self.served = 1
        b = min(self.block, remaining, self.n)
        if len(self.held) >= self.cap:
            self.held.clear()
        if b > 1:
            score = resid.clone()
            if self.held:
                held = torch.tensor(list(self.held), dtype=torch.long, device=resid.device)
                score[held] = -1.0
            score[i] = float("inf")
            idx = torch.topk(score, b).indices
        else:
            idx = torch.tensor([i], device=resid.device)
        block = self.op.rows(idx).reshape(b, self.n)
        if not bool(torch.isfinite(block).all()):
            raise InputDataError(f"pivoted_cholesky: row {i} or its block of K contains NaN or inf")
        for j, r in zip(idx.tolist(), block.unbind(0), strict=True):
            self.held[j] = r
        return self.held.pop(i)


class PivotedCholeskyResult(NamedTuple):
    """``pivots``: ``(r,)`` chosen indices in greedy order; ``L``: ``(n, r)`` factor with
    ``K ≈ L L^T``; ``error``: trace of the residual ``K - L L^T``.

    Example:
        >>> A = torch.randn(6, 2, dtype=torch.float64)
        >>> K = A @ A.T + torch.eye(6, dtype=A.dtype)
        >>> pivots, L, error = pivoted_cholesky(K, max_rank=3)
        >>> pivots.shape, L.shape, bool(torch.isclose(error, torch.trace(K - L @ L.T)))
        (torch.Size([3]), torch.Size([6, 3]), True)
    """

    pivots: Tensor
    L: Tensor
    error: Tensor


def pivoted_cholesky(
    K_or_operator: Tensor | RowAccess,
    max_rank: int,
    tol: float = 0.0,
    block_entries: int = 2**18,
) -> PivotedCholeskyResult:
    """Greedy pivoted Cholesky factorisation ``K ≈ L L^T`` of rank at most ``max_rank``.

    Args:
        K_or_operator: a dense ``(n, n)`` symmetric PSD tensor, or any object with
            ``diagonal() -> (n,)`` and ``rows(idx) -> (len(idx), n)`` (e.g. a square
            :class:`~bo_ncgp.linalg.KernelOperator`), so that ``K`` is never formed.
        max_rank: maximal number of pivots r.
        tol: stop once the residual trace ``sum(diag(K - L L^T))`` is ``<= tol``. The
            factorisation also stops early when the largest residual diagonal entry falls
            below ``n * eps * max(diag K)`` (the matrix is numerically of lower rank).
        block_entries: rows are requested in blocks of at most ``block_entries / n`` rows
            (at least one): a request for the pivot's row also fetches the rows of the other
            candidates of largest residual diagonal, the likely next pivots, so that a kernel
            operator pays its per-call overhead once per block instead of once per pivot; the
            block shrinks when few of its rows become pivots. ``1`` requests one row per
            pivot. The pivots and ``L`` do not depend on it up to the rounding of the rows
            (GPyTorch centres the inputs of each call by their mean), which can only reorder
            pivots whose residual variances tie to rounding (a numerically rank-deficient
            tail).

    Returns:
        :class:`PivotedCholeskyResult` ``(pivots, L, error)``.

    Example:
        >>> A = torch.randn(50, 3, dtype=torch.float64)
        >>> res = pivoted_cholesky(A @ A.T, max_rank=10)
        >>> len(res.pivots), torch.allclose(res.L @ res.L.T, A @ A.T)
        (3, True)
    """
    who = "pivoted_cholesky"
    max_rank = check_count(max_rank, "max_rank", who)
    tol = check_positive(tol, "tol", who, allow_zero=True)
    if isinstance(K_or_operator, Tensor):
        check_real_tensor(K_or_operator, "K", who, floating=True)
        if K_or_operator.dim() != 2 or K_or_operator.shape[0] != K_or_operator.shape[1]:
            raise InputDataError(
                f"pivoted_cholesky: expected a square (n, n) matrix, got "
                f"{tuple(K_or_operator.shape)}"
            )
    op = _DenseRows(K_or_operator) if isinstance(K_or_operator, Tensor) else K_or_operator
    d = op.diagonal().clone()
    if d.dim() != 1:
        raise InputDataError(
            f"pivoted_cholesky: needs an unbatched operator; diagonal has shape {tuple(d.shape)}"
        )
    if not bool(torch.isfinite(d).all()):
        raise InputDataError("pivoted_cholesky: the diagonal of K contains NaN or inf")
    block_entries = check_count(block_entries, "block_entries", who, minimum=1)
    n = d.shape[0]
    r_max = min(int(max_rank), n)
    L = torch.zeros(n, r_max, dtype=d.dtype, device=d.device)
    chosen = torch.zeros(n, dtype=torch.bool, device=d.device)
    pivots: list[int] = []
    if n == 0:
        return PivotedCholeskyResult(torch.zeros(0, dtype=torch.long, device=d.device), L, d.sum())
    floor = n * torch.finfo(d.dtype).eps * float(d.max().clamp_min(0))
    rows = _RowBlocks(op, n, r_max, block_entries)
    zeros = torch.zeros_like(d)
    for k in range(r_max):
        resid = torch.where(chosen, zeros, d.clamp_min(0))
        if float(resid.detach().sum()) <= tol:
            break
        i = int(torch.argmax(resid.detach()))
        piv = float(resid[i].detach())
        if piv <= floor:
            break
        row = rows.get(i, resid.detach(), r_max - k)
        l = (row - L[:, :k] @ L[i, :k]) / piv**0.5
        l = torch.where(chosen, zeros, l)
        L[:, k] = l
        d = d - l * l
        chosen[i] = True
        pivots.append(i)
    r = len(pivots)
    error = torch.where(chosen, torch.zeros_like(d), d.clamp_min(0)).sum()
    return PivotedCholeskyResult(
        torch.tensor(pivots, dtype=torch.long, device=d.device), L[:, :r], error
    )
