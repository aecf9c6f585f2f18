"""IterGP with a virtual solver run: the inner loop of IterNCGP.

Tatzel et al., Algorithm 2 (after Wenger et al. 2022, Algorithm 1). For the regression problem
``K_hat(f_i) v = y_hat(f_i) - m`` of one Newton step:

    line 2      C_0, S, T <- VirtualSolverRun(S, T, W^{-1})          (recycling.py, Alg. 3)
    line 3      v_0 <- C_0 (y_hat - m)                                (belief.py)
    line 4      while not InnerStoppingCriterion()                    (stopping.py)
    line 5        r_{j-1} <- (y_hat - m) - K v_{j-1} - W^{-1} v_{j-1}  (problem.py)
    line 6        s_j <- Policy()                                     (policies.py)
    lines 7, 10   S <- (S, s_j), T <- (T, t_j)
    line 9        t_j <- K s_j                                        (the only product with K)
    lines 8, 11-16  belief update: Q_j, v_j                           (belief.py)

All tensors may carry batch dimensions ``*b`` (e.g. fantasies): the loop runs in lock-step
and a batch element that has stopped receives zero actions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from bo_ncgp.models.iterncgp.belief import Belief, ColumnBuffer
from bo_ncgp.models.iterncgp.policies import Policy
from bo_ncgp.models.iterncgp.problem import PseudoRegressionProblem, _norm
from bo_ncgp.models.iterncgp.recycling import ActionBuffers, virtual_solver_run
from bo_ncgp.models.iterncgp.stopping import SolverState, StoppingCriterion

__all__ = ["IterGPResult", "itergp"]

#: hook called after the initial belief (j = 0) and after every solver iteration; returning
#: True interrupts the solver
IterationHook = Callable[[int, Belief], bool | None]


@dataclass
class IterGPResult:
    """Output of :func:`itergp`.

    Attributes:
        belief: final belief (``v_j``, ``K v_j``, root ``Q_j`` of ``C_j``).
        S: action buffer after this step ``(*b, C, n, B)``.
        T: ``K S``.
        iterations: solver iterations run (products with ``K``).
        residual_norm: ``||r_j||`` per batch element.
        initial_residual: ``r_0`` after the virtual solver run (Prop. A.4).
        recycled_rank: columns of ``Q_0`` from the virtual solver run.
        interrupted: the iteration hook asked to stop.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.iterncgp import CGPolicy, LatentKernelOperator, MaxIterations
        >>> X, y = torch.rand(6, 1), torch.randn(6)
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> problem = PseudoRegressionProblem(K, Gaussian(0.1), y, torch.zeros(1, 6, 1), 0.0)
        >>> res = itergp(problem, CGPolicy(), MaxIterations(3))  # 3 CG steps on K + 0.1 I
        >>> res.iterations, res.S.shape, res.belief.rank, res.recycled_rank, res.interrupted
        (3, torch.Size([1, 6, 3]), 3, 0, False)
        >>> bool(res.residual_norm < problem.rhs_norm[..., 0])  # ||r_3|| < ||r_0|| = ||y||
        True
    """

    belief: Belief
    S: Tensor
    T: Tensor
    iterations: int
    residual_norm: Tensor
    initial_residual: Tensor
    recycled_rank: int
    interrupted: bool


def itergp(
    problem: PseudoRegressionProblem,
    policy: Policy,
    stopping: StoppingCriterion,
    buffers: ActionBuffers | None = None,
    compression_rank: int | None = None,
    capacity: int = 16,
    on_iteration: IterationHook | None = None,
) -> IterGPResult:
    """Run Algorithm 2 on ``problem``.

    Args:
        problem: the Newton step's pseudo regression problem.
        policy: action policy (``reset`` must have been called for this step).
        stopping: inner stopping criterion.
        buffers: recycled actions ``S`` ``(*b, C, n, B)`` and ``T = K S`` (None: no recycling).
        compression_rank: ``R`` of the virtual solver run (None: no compression).
        capacity: expected number of iterations (pre-allocates the buffers).
        on_iteration: hook ``(j, belief) -> stop?``.

    Returns:
        :class:`IterGPResult`.

    Example (unit-vector actions on all n points solve ``K_hat v = y_hat - m`` exactly):
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.iterncgp import (
        ...     LatentKernelOperator, MaxIterations, UnitVectorPolicy)
        >>> X, y = torch.rand(6, 1), torch.randn(6)
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> problem = PseudoRegressionProblem(K, Gaussian(0.1), y, torch.zeros(1, 6, 1), 0.0)
        >>> policy = UnitVectorPolicy(); policy.reset(problem, recycled=False)
        >>> res = itergp(problem, policy, MaxIterations(6))
        >>> v = torch.linalg.solve(problem.matmul(torch.eye(6)[None]), problem.rhs)  # dense solve
        >>> res.iterations, bool(torch.allclose(res.belief.v, v, rtol=1e-3, atol=1e-3))
        (6, True)
    """
    rhs = problem.rhs
    batch, (C, n) = rhs.shape[:-3], rhs.shape[-3:-1]
    if buffers is not None and buffers.size > 0:
        rec = virtual_solver_run(buffers, problem, compression_rank)  # line 2
        Q0, KQ0, S0, T0 = rec.Q, rec.KQ, rec.S, rec.T
    else:
        Q0 = KQ0 = S0 = T0 = rhs.new_zeros(*batch, C, n, 0)

    def full(A: Tensor) -> Tensor:
        return A.expand(*batch, C, n, A.shape[-1])

    belief = Belief(full(Q0), full(KQ0), rhs, capacity)  # line 3
    S_buf, T_buf = ColumnBuffer(full(S0), capacity), ColumnBuffer(full(T0), capacity)
    r = problem.residual(belief.v, belief.Kv)  # line 5
    r0 = r
    j = 0
    done = stopping(SolverState(j, _norm(r)[..., 0], problem.rhs_norm[..., 0]))
    interrupted = bool(on_iteration(j, belief)) if on_iteration is not None else False
    while not interrupted and not bool(done.all()):  # line 4
        s = policy(r, problem, j)  # line 6
        if s is None:
            break
        # project again: a residual P(x) with ||P x|| << ||x|| keeps a null-space part of
        # size eps ||x||, which a second projection removes relative to ||P x||
        s = problem.project(s)
        active = (~done)[..., None, None, None]
        s = torch.where(active, s, torch.zeros_like(s))
        t = problem.kernel_matmul(s)  # line 9
        upd = belief.update(s, t, r, problem)  # lines 8, 11-16
        if bool(upd.accepted.any()):  # lines 7, 10
            keep = upd.accepted[..., None, None, None].to(s.dtype)
            S_buf.append(s * keep)
            T_buf.append(t * keep)
        j += 1
        r = problem.residual(belief.v, belief.Kv)  # line 5
        state = SolverState(j, _norm(r)[..., 0], problem.rhs_norm[..., 0])
        done = done | stopping(state)
        if policy.stop_on_dependent_action:
            done = done | ~upd.accepted
        if on_iteration is not None:
            interrupted = bool(on_iteration(j, belief))
    return IterGPResult(
        belief=belief,
        S=S_buf.data,
        T=T_buf.data,
        iterations=j,
        residual_norm=_norm(r)[..., 0],
        initial_residual=r0,
        recycled_rank=Q0.shape[-1],
        interrupted=interrupted,
    )
