"""Differentiable linear solves ``X = A(theta)^{-1} B`` by CG with an adjoint backward pass.

Wu et al. (2022), Sec. 3.4 ("Optimization"): differentiating through the iterations of CG
is numerically unstable, so the gradient of a CG solve is computed analytically. For a
symmetric positive-definite ``A``, ``X = A^{-1} B`` and a loss ``L``,

    dL/dB = G,    dL/dtheta = -<G, (dA/dtheta) X>,    where  G = A^{-1} dL/dX

(one more (preconditioned) CG solve, the *adjoint* solve). The second term is obtained by
back-propagating ``-G`` through one product ``A(theta) X`` with ``X`` held fixed, so any
operator whose product is written in differentiable torch works (FFT-based Toeplitz
products, kernel operators, ...). Both solves call the shared :func:`bo_ncgp.linalg.cg`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg._args import check_count, check_positive, check_real_tensor
from bo_ncgp.linalg.cg import CGResult, cg

__all__ = ["cg_solve"]


class _CGSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, matmul, precond, opts, x0, B, *operands):
        ops = tuple(o.detach() for o in operands)
        with torch.no_grad():
            res = cg(lambda V: matmul(V, *ops), B.detach(), precond=precond, x0=x0, **opts)
        ctx.matmul, ctx.precond = matmul, precond
        ctx.opts = {**opts, "record_history": False}
        ctx.save_for_backward(res.solution, *ops)
        ctx.result = res
        return res.solution

    @staticmethod
    def backward(ctx, grad_X):
        X, *ops = ctx.saved_tensors
        matmul, precond, opts = ctx.matmul, ctx.precond, ctx.opts
        with torch.no_grad():
            G = cg(lambda V: matmul(V, *ops), grad_X, precond=precond, **opts).solution
        grads_ops: list[Tensor | None] = [None] * len(ops)
        need = [i for i, o in enumerate(ops) if ctx.needs_input_grad[5 + i]]
        if need:
            with torch.enable_grad():
                leaves = [o.detach().requires_grad_(i in need) for i, o in enumerate(ops)]
                AX = matmul(X, *leaves)
                got = torch.autograd.grad(
                    AX, [leaves[i] for i in need], grad_outputs=-G, allow_unused=True
                )
            for i, g in zip(need, got, strict=True):
                grads_ops[i] = g
        grad_B = G if ctx.needs_input_grad[4] else None
        return None, None, None, None, grad_B, *grads_ops


def cg_solve(
    matmul: Callable[..., Tensor],
    B: Tensor,
    operands: Sequence[Tensor] = (),
    precond: Callable[[Tensor], Tensor] | None = None,
    tol: float = 1e-6,
    max_iters: int | None = None,
    record_history: bool = False,
    x0: Tensor | None = None,
) -> tuple[Tensor, CGResult]:
    """Solve ``A X = B`` by (P)CG, differentiable in ``B`` and in ``operands``.

    Args:
        matmul: ``matmul(V, *operands) -> A V`` for ``V`` of shape ``(..., n, k)``; must be
            written in differentiable torch operations of ``operands`` and be symmetric
            positive definite in ``V``.
        B: right-hand sides ``(..., n, k)``.
        operands: the tensors ``A`` depends on (e.g. the Toeplitz eigenvalues); gradients
            flow to them through the adjoint solve.
        precond: ``R -> P^{-1} R`` (treated as a constant).
        tol, max_iters, record_history: passed to :func:`bo_ncgp.linalg.cg` for the forward
            and the adjoint solve.
        x0: initial guess of the forward solve (a warm start, e.g. the solution for nearby
            operands; treated as a constant, it changes only the number of iterations).

    Returns:
        ``(X, result)``: the solution (with autograd history) and the forward
        :class:`~bo_ncgp.linalg.CGResult`.

    Example:
        >>> a = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
        >>> B = torch.ones(2, 1, dtype=torch.float64)
        >>> X, _ = cg_solve(lambda V, a_: a_.unsqueeze(-1) * V, B, (a,), tol=1e-12)
        >>> X.sum().backward()
        >>> [round(g, 4) for g in a.grad.tolist()]  # d/da (1/a) = -1/a^2
        [-0.25, -0.1111]
    """
    check_real_tensor(B, "B", "cg_solve", floating=True)
    if B.dim() < 2:
        raise InputDataError(f"cg_solve: B must have shape (..., n, k), got {tuple(B.shape)}")
    tol = check_positive(tol, "tol", "cg_solve", allow_zero=True)
    if max_iters is not None:
        max_iters = check_count(max_iters, "max_iters", "cg_solve")
    opts = {"tol": tol, "max_iters": max_iters, "record_history": record_history}
    needs_grad = torch.is_grad_enabled() and (
        B.requires_grad or any(o.requires_grad for o in operands)
    )
    if not needs_grad:
        ops = tuple(o.detach() for o in operands)
        res = cg(lambda V: matmul(V, *ops), B.detach(), precond=precond, x0=x0, **opts)
        return res.solution, res
    x0 = None if x0 is None else x0.detach()
    X = _CGSolve.apply(matmul, precond, opts, x0, B, *operands)
    return X, X.grad_fn.result  # the autograd node is the Function's ctx
