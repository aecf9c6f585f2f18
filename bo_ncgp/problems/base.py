"""What a campaign optimises or explores: the :class:`Problem` interface.

A problem is a picklable description (it is shipped to worker processes or dask workers)
with

* a search space: continuous ``bounds`` (``2 x d``) or a finite ``pool`` of candidates;
* ``evaluate(x) -> Evaluation`` for one point (run in a worker);
* optionally ``evaluate_heldout(x)`` scoring a recommendation on held-out randomness, and
  ``metrics(...)`` for pool-based active learning.

Evaluations must be deterministic functions of ``x`` (and the problem's own fixed seeds),
so that a resumed campaign reproduces an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bo_ncgp.exceptions import UnsupportedError

__all__ = ["Evaluation", "Problem"]


@dataclass
class Evaluation:
    """Outcome of one evaluation.

    Attributes:
        value: the objective (maximised); ``nan`` marks a failed evaluation.
        success: optional binary outcome (e.g. the lander came to rest), for constraint or
            classifier models.
        extra: JSON-serialisable details (per-episode rewards, ...).

    Example:
        >>> Evaluation(1.5, success=True).ok, Evaluation(float("nan")).ok
        (True, False)
    """

    value: float
    success: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return math.isfinite(self.value)


class Problem:
    """Base class: subclasses set ``name``, ``dim`` and ``bounds`` and implement
    :meth:`evaluate`. Objectives are maximised.

    Example:
        >>> class Sphere(Problem):
        ...     name, dim = "sphere", 2
        ...     bounds = np.array([[-1.0, -1.0], [1.0, 1.0]])
        ...     def evaluate(self, x):
        ...         return Evaluation(-float(np.sum(np.asarray(x) ** 2)))
        >>> Sphere().evaluate(np.array([0.5, 0.5])).value
        -0.5
    """

    name: str = "problem"
    dim: int = 0
    #: ``(2, d)`` lower/upper bounds of a continuous search space
    bounds: np.ndarray | None = None
    #: ``(P, d)`` candidates of a pool-based problem (strategies then return pool indices)
    pool: np.ndarray | None = None

    def evaluate(self, x: np.ndarray) -> Evaluation:
        raise NotImplementedError

    def evaluate_index(self, index: int) -> Evaluation:
        """Evaluate pool entry ``index`` (pool problems; default: ``evaluate(pool[index])``)."""
        if self.pool is None:
            raise UnsupportedError(f"{self.name} has no pool")
        return self.evaluate(self.pool[index])

    def evaluate_heldout(self, x: np.ndarray) -> Evaluation:
        """Score a recommendation on held-out randomness (defaults to :meth:`evaluate`)."""
        return self.evaluate(x)

    def initial_design(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` initial points, uniformly at random in the bounds (pool problems: ``n``
        distinct random pool indices)."""
        if self.pool is not None:
            return rng.choice(len(self.pool), size=n, replace=False)
        if self.bounds is None:
            raise NotImplementedError(f"{self.name}: no bounds; override initial_design")
        lo, hi = np.asarray(self.bounds[0], float), np.asarray(self.bounds[1], float)
        return lo + (hi - lo) * rng.random((n, self.dim))

    def config(self) -> dict[str, Any]:
        """JSON-serialisable description stored with the campaign state."""
        return {"name": self.name, "dim": self.dim}
