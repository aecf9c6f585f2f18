"""Batched, preconditioned conjugate gradients.

The one CG of bo_ncgp: HIP-GP's whitening solves (Wu et al., Eqs. 21-22), IterNCGP baselines
and benchmark comparisons all call :func:`cg`. It solves ``A X = B`` for a symmetric positive
definite ``A`` given only as a product ``matmul(V) -> A V``, column by column in lock-step,
freezing each column once its relative residual ``||r_k|| / ||b_k||`` falls below ``tol``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg._args import (
    cast_with_warning,
    check_count,
    check_positive,
    check_real_tensor,
)

__all__ = ["CGResult", "cg"]

MatMul = Callable[[Tensor], Tensor]


@dataclass
class CGResult:
    """Output of :func:`cg`.

    Attributes:
        solution: ``(..., n, k)`` approximate solution (same shape as the right-hand side).
        iterations: number of CG iterations run (the maximum over columns).
        column_iterations: ``(..., k)`` iterations each column needed to converge.
        residual_norms: ``(..., k)`` final residual norms ``||B - A X||`` per column.
        converged: ``(..., k)`` boolean, whether each column reached ``tol``.
        history: list of ``(..., k)`` relative residual norms, one per iteration (only if
            ``record_history=True``).

    Example:
        >>> A = torch.tensor([[4.0, 1.0], [1.0, 3.0]])
        >>> res = cg(lambda V: A @ V, torch.ones(2, 1), tol=1e-10)
        >>> torch.allclose(A @ res.solution, torch.ones(2, 1)), bool(res.converged.all())
        (True, True)
    """

    solution: Tensor
    iterations: int
    column_iterations: Tensor
    residual_norms: Tensor
    converged: Tensor
    history: list[Tensor] | None = None


def cg(
    matmul: MatMul | Tensor,
    B: Tensor,
    precond: MatMul | None = None,
    x0: Tensor | None = None,
    tol: float = 1e-6,
    max_iters: int | None = None,
    record_history: bool = False,
) -> CGResult:
    """Solve ``A X = B`` by (preconditioned) conjugate gradients, batched over columns.

    Args:
        matmul: callable ``V -> A V`` for ``V`` of shape ``(..., n, k)``, or a dense ``A``.
        B: right-hand sides, ``(..., n)`` or ``(..., n, k)``.
        precond: callable ``R -> P^{-1} R`` applying the inverse preconditioner.
        x0: initial guess, same shape as ``B`` (zeros by default).
        tol: relative residual tolerance per column, ``||b - A x|| <= tol * ||b||``.
        max_iters: iteration cap (default ``10 n``, which absorbs loss of conjugacy in
            finite precision).
        record_history: keep the relative residual norms of every iteration.

    Returns:
        :class:`CGResult`; ``solution`` has the shape of ``B``.

    Example:
        >>> A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
        >>> res = cg(A, torch.tensor([1.0, 2.0], dtype=torch.float64), tol=1e-12)
        >>> torch.allclose(A @ res.solution, torch.tensor([1.0, 2.0], dtype=torch.float64))
        True
    """
    who = "cg"
    B = check_real_tensor(B, "B", who, floating=True)
    tol = check_positive(tol, "tol", who, allow_zero=True)
    if B.dim() == 0:
        raise InputDataError(
            "cg: B (the right-hand side) must have shape (n,) or (..., n, k), got ()"
        )
    vector = B.dim() == 1
    n = B.shape[-1] if vector else B.shape[-2]
    if isinstance(matmul, Tensor):
        A = check_real_tensor(matmul, "A", who)
        if A.dim() < 2 or A.shape[-1] != A.shape[-2] or A.shape[-1] != n:
            raise InputDataError(
                f"cg: A must be a square (..., {n}, {n}) matrix matching B {tuple(B.shape)}, "
                f"got {tuple(A.shape)}"
            )
        matmul = lambda V: A @ V  # noqa: E731
        B = cast_with_warning(B, A.dtype, "B", who)
        x0 = None if x0 is None else cast_with_warning(x0, A.dtype, "x0", who)
    if x0 is not None:
        check_real_tensor(x0, "x0", who)
        if x0.shape != B.shape:
            raise InputDataError(f"cg: x0 has shape {tuple(x0.shape)}, expected {tuple(B.shape)}")
    if vector:
        B = B.unsqueeze(-1)
        x0 = None if x0 is None else x0.unsqueeze(-1)
    max_iters = 10 * n if max_iters is None else check_count(max_iters, "max_iters", who)
    raw_matmul = matmul

    def matmul(V: Tensor) -> Tensor:
        AV = raw_matmul(V)
        if not isinstance(AV, Tensor) or AV.shape[-2:] != V.shape[-2:]:
            got = tuple(AV.shape) if isinstance(AV, Tensor) else type(AV).__name__
            raise InputDataError(
                f"cg: matmul(V) must return a tensor of the shape of V, {tuple(V.shape)}, got {got}"
            )
        return AV

    b_norm = torch.linalg.vector_norm(B, dim=-2)
    b_norm_safe = torch.where(b_norm > 0, b_norm, torch.ones_like(b_norm))
    if x0 is None:
        X = torch.zeros_like(B)
        R = B.clone()
    else:
        X = x0.clone()
        R = B - matmul(X)
    Z = precond(R) if precond is not None else R
    P = Z.clone()
    rz = (R * Z).sum(-2)
    rel = torch.linalg.vector_norm(R, dim=-2) / b_norm_safe
    done = rel <= tol
    column_iterations = torch.zeros_like(rel, dtype=torch.long)
    history = [rel.clone()] if record_history else None
    iterations = 0
    while iterations < max_iters and not bool(done.all()):
        AP = matmul(P)
        pAp = (P * AP).sum(-2)
        active = (~done) & (pAp > 0)
        safe_pAp = torch.where(active, pAp, torch.ones_like(pAp))
        alpha = torch.where(active, rz / safe_pAp, torch.zeros_like(rz))
        X = X + alpha.unsqueeze(-2) * P
        R = R - alpha.unsqueeze(-2) * AP
        Z = precond(R) if precond is not None else R
        rz_new = (R * Z).sum(-2)
        safe_rz = torch.where(rz != 0, rz, torch.ones_like(rz))
        beta = torch.where(active, rz_new / safe_rz, torch.zeros_like(rz))
        P = torch.where(active.unsqueeze(-2), Z + beta.unsqueeze(-2) * P, P)
        rz = torch.where(active, rz_new, rz)
        iterations += 1
        column_iterations = column_iterations + active.long()
        rel = torch.linalg.vector_norm(R, dim=-2) / b_norm_safe
        # a column whose search direction has no curvature left is numerically converged; one
        # with a NaN or inf (from the operator or the preconditioner) stops and is reported
        done = done | (rel <= tol) | (pAp <= 0) | ~torch.isfinite(pAp + rel)
        if record_history:
            history.append(rel.clone())
    # with no iteration run, R = B - A X is exact: no second product needed
    residual_norms = torch.linalg.vector_norm(R if iterations == 0 else B - matmul(X), dim=-2)
    if not bool(torch.isfinite(residual_norms).all()):
        raise InputDataError(
            "cg: the solve met NaN or inf (matmul(V) or precond(R) returned non-finite values)"
        )
    converged = (residual_norms <= tol * b_norm_safe * (1 + 1e-8)) | (b_norm == 0)
    if vector:
        X = X.squeeze(-1)
    return CGResult(
        solution=X,
        iterations=iterations,
        column_iterations=column_iterations,
        residual_norms=residual_norms,
        converged=converged,
        history=history,
    )
