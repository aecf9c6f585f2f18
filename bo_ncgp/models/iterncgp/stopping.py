"""Stopping criteria of IterNCGP's inner (IterGP) and outer (Newton) loops.

Tatzel et al., Sec. B.2:

* inner loop (Algorithm 2, line 4): stop when ``||r_j|| <= max(delta_abs, delta_rel ||y_hat - m||)``
  (Wenger et al. 2022, Sec. S3.2; both tolerances 1e-5 by default), after a maximum number of
  iterations, or when the policy's action adds no new direction (``eta_j <= 0``);
* outer loop (Algorithm 1, line 5): stop when the relative change of ``g_i = f_i - m`` is
  small, ``||g_i - g_{i-1}|| / ||g_i|| <= delta`` (default 1%), or after ``max_newton_steps``.

Criteria are small callables on :class:`SolverState` returning one boolean per batch element;
combine them with ``|``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch
from torch import Tensor

from bo_ncgp.linalg._args import check_count, check_positive

__all__ = [
    "AnyOf",
    "MaxIterations",
    "RelativeChange",
    "ResidualNorm",
    "SolverState",
    "StoppingCriterion",
]


@dataclass
class SolverState:
    """What an inner-loop stopping criterion may look at.

    Attributes:
        iteration: solver iterations ``j`` run in this Newton step.
        residual_norm: ``||r_j||`` per batch element ``(*b,)``.
        rhs_norm: ``||y_hat - m||`` per batch element ``(*b,)``.

    :func:`~bo_ncgp.models.iterncgp.itergp` builds one after every solver iteration and asks
    its stopping criterion; here two batch elements, one already solved to ``1e-7``:

    Example:
        >>> state = SolverState(2, residual_norm=torch.tensor([1e-7, 0.5]), rhs_norm=torch.ones(2))
        >>> ResidualNorm(atol=1e-5, rtol=1e-5)(state), MaxIterations(10)(state)
        (tensor([ True, False]), tensor([False, False]))
    """

    iteration: int
    residual_norm: Tensor
    rhs_norm: Tensor


class StoppingCriterion(abc.ABC):
    """``criterion(state) -> (*b,)`` bool tensor, True where the solver may stop.

    A new criterion implements ``__call__``; ``|`` combines criteria (:class:`AnyOf`).

    Example:
        >>> class RelativeResidual(StoppingCriterion):  # ||r_j|| <= 1e-3 ||y_hat - m||
        ...     def __call__(self, state):
        ...         return state.residual_norm <= 1e-3 * state.rhs_norm
        >>> stop = RelativeResidual() | MaxIterations(50)
        >>> state = SolverState(3, torch.tensor([1e-4, 1.0]), torch.tensor([1.0, 1.0]))
        >>> type(stop).__name__, stop(state)
        ('AnyOf', tensor([ True, False]))
    """

    @abc.abstractmethod
    def __call__(self, state: SolverState) -> Tensor: ...

    def __or__(self, other: StoppingCriterion) -> StoppingCriterion:
        return AnyOf(self, other)


class AnyOf(StoppingCriterion):
    """Stop as soon as any of the given criteria says so (also written ``a | b``).

    Example:
        >>> stop = AnyOf(MaxIterations(5), ResidualNorm(atol=1e-6, rtol=0.0))
        >>> small_residual = SolverState(1, torch.tensor([1e-8]), torch.ones(1))
        >>> budget_spent = SolverState(5, torch.tensor([1.0]), torch.ones(1))
        >>> neither = SolverState(1, torch.tensor([1.0]), torch.ones(1))
        >>> stop(small_residual), stop(budget_spent), stop(neither)
        (tensor([True]), tensor([True]), tensor([False]))
    """

    def __init__(self, *criteria: StoppingCriterion) -> None:
        self.criteria = criteria

    def __call__(self, state: SolverState) -> Tensor:
        out = torch.zeros_like(state.residual_norm, dtype=torch.bool)
        for c in self.criteria:
            out = out | c(state)
        return out


class MaxIterations(StoppingCriterion):
    """Stop after ``max_iters`` solver iterations (``None``: never).

    Example:
        >>> s = SolverState(3, torch.ones(2), torch.ones(2))
        >>> MaxIterations(3)(s)
        tensor([True, True])
    """

    def __init__(self, max_iters: int | None) -> None:
        self.max_iters = (
            None if max_iters is None else check_count(max_iters, "max_iters", "MaxIterations")
        )

    def __call__(self, state: SolverState) -> Tensor:
        hit = self.max_iters is not None and state.iteration >= self.max_iters
        return torch.full_like(state.residual_norm, hit, dtype=torch.bool)


class ResidualNorm(StoppingCriterion):
    """``||r_j|| <= max(atol, rtol ||y_hat - m||)`` (Sec. B.2).

    Example:
        >>> s = SolverState(1, torch.tensor([1e-7, 1.0]), torch.tensor([1.0, 1.0]))
        >>> ResidualNorm(atol=1e-5, rtol=1e-5)(s)
        tensor([ True, False])
    """

    def __init__(self, atol: float = 1e-5, rtol: float = 1e-5) -> None:
        self.atol = check_positive(atol, "atol", "ResidualNorm", allow_zero=True)
        self.rtol = check_positive(rtol, "rtol", "ResidualNorm", allow_zero=True)

    def __call__(self, state: SolverState) -> Tensor:
        bound = torch.clamp_min(self.rtol * state.rhs_norm, self.atol)
        return state.residual_norm <= bound


class RelativeChange:
    """Outer (Newton) criterion: ``||g_i - g_{i-1}|| <= tol ||g_i||`` for every batch element.

    ``g`` are latent vectors in the layout ``(*b, C, n, 1)``.

    Example:
        >>> g_old, g_new = torch.tensor([[[1.0], [0.0]]]), torch.tensor([[[1.001], [0.0]]])
        >>> RelativeChange(0.01)(g_old, g_new)
        True
    """

    def __init__(self, tol: float = 1e-2) -> None:
        self.tol = check_positive(tol, "tol", "RelativeChange", allow_zero=True)

    @staticmethod
    def change(g_old: Tensor, g_new: Tensor) -> Tensor:
        """Relative change ``(*b,)``."""
        num = torch.linalg.vector_norm(g_new - g_old, dim=(-3, -2, -1))
        den = torch.linalg.vector_norm(g_new, dim=(-3, -2, -1))
        tiny = torch.finfo(g_new.dtype).tiny
        return torch.where(den > tiny, num / den.clamp_min(tiny), num)

    def __call__(self, g_old: Tensor, g_new: Tensor) -> bool:
        return bool((self.change(g_old, g_new) <= self.tol).all())
