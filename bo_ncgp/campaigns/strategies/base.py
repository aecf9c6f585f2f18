"""The :class:`Strategy` interface of campaigns, plus random search.

A strategy proposes points (``ask``) and learns from evaluated batches (``observe``). The
runner calls ``observe`` once per evaluated batch, in order -- also when a campaign is
resumed, to rebuild a streaming model's state by replaying the history -- and seeds numpy
and torch from ``(seed, iteration)`` before every call, so resumed and uninterrupted runs
make the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from bo_ncgp.problems.base import Evaluation, Problem

__all__ = ["History", "RandomSearch", "Strategy", "saved_options"]


def saved_options(config: Any) -> dict[str, Any]:
    """The fields of the dataclass ``config`` (plain values: numbers, strings, flags) as a
    campaign saves them in its state: every field, except those named in the class
    attribute ``OMITTED_AT_DEFAULT`` while they hold their default -- options whose default
    is the model without them, so that a campaign saved without them still resumes (the
    runner refuses a configuration that differs).

    Example:
        >>> from bo_ncgp.campaigns.strategies.blackbox import ObjectiveModelConfig
        >>> ObjectiveModelConfig.OMITTED_AT_DEFAULT
        ('standardize',)
        >>> "standardize" in saved_options(ObjectiveModelConfig())
        False
        >>> saved_options(ObjectiveModelConfig(standardize=True))["standardize"]
        True
    """
    omitted = getattr(type(config), "OMITTED_AT_DEFAULT", ())
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name in omitted and value == f.default:
            continue
        out[f.name] = value
    return out


@dataclass
class History:
    """Everything evaluated so far (read-only view handed to strategies).

    Attributes:
        X: ``(n, d)`` evaluated points.
        values: ``(n,)`` objective values (``nan`` for failed evaluations).
        success: ``(n,)`` success labels (``nan`` when the problem has none or failed).
        indices: ``(n,)`` pool indices for pool-based problems, else ``None``.
        batches: one array per evaluated batch (the initial design first) of positions in
            this history (rows of ``X`` / ``values``), not of pool or village indices.

    Example:
        >>> h = History(X=np.zeros((3, 1)), values=np.array([1.0, np.nan, 2.0]),
        ...             success=np.full(3, np.nan), indices=None, batches=[np.arange(3)])
        >>> h.n, h.ok.tolist(), h.best_value()  # the failed evaluation is skipped
        (3, [True, False, True], 2.0)
    """

    X: np.ndarray
    values: np.ndarray
    success: np.ndarray
    indices: np.ndarray | None
    batches: list[np.ndarray]

    @property
    def ok(self) -> np.ndarray:
        return np.isfinite(self.values)

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    def best_value(self) -> float:
        v = self.values[self.ok]
        return float(v.max()) if v.size else float("nan")


class Strategy:
    """Base class of campaign strategies.

    Subclasses implement :meth:`ask`; streaming strategies also :meth:`observe`.
    ``ask`` returns a ``(q, d)`` array of points for continuous problems, or a ``(q,)``
    integer array of pool indices for pool problems (``problem.pool is not None``).

    Example:
        A strategy that always proposes the centre of the box, jittered:

        >>> class Centre(Strategy):
        ...     name = "centre"
        ...     def ask(self, history, q, rng):
        ...         lo, hi = self.problem.bounds
        ...         return (lo + hi) / 2 + 0.01 * rng.standard_normal((q, self.problem.dim))
        >>> from bo_ncgp.problems.synthetic import TestFunction
        >>> s = Centre()
        >>> s.setup(TestFunction("branin"), seed=0)
        >>> s.ask(None, 2, np.random.default_rng(0)).shape
        (2, 2)
    """

    name: str = "strategy"

    def setup(self, problem: Problem, seed: int) -> None:
        """Called once before the first ``observe`` (fresh or resumed run)."""
        self.problem = problem
        self.seed = seed

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def observe(self, X: np.ndarray, evaluations: list[Evaluation], history: History) -> None:
        """Learn from one evaluated batch; ``history`` already includes it."""

    def report(self, history: History) -> dict[str, float]:
        """Metrics logged after every batch (e.g. active-learning accuracy on the pool)."""
        return {}

    def recommend(self, history: History) -> np.ndarray | None:
        """Final recommendation: the best successful point observed (any point if none)."""
        ok = history.ok
        if not ok.any():
            return None
        succ = ok & (history.success == 1)
        mask = succ if succ.any() else ok
        idx = np.flatnonzero(mask)[np.argmax(history.values[mask])]
        return history.X[idx]

    def config(self) -> dict[str, Any]:
        return {"name": self.name}

    def read_saved_config(self, saved: dict[str, Any]) -> dict[str, Any]:
        """A configuration saved by an earlier campaign, in the terms of :meth:`config`.

        :meth:`Campaign.resume <bo_ncgp.campaigns.Campaign.resume>` compares the result with
        :meth:`config`. The default reads it as stored; whoever resumes campaigns saved under
        other settings names (keys added since, with the value those campaigns ran with;
        renamed settings) overrides it, on a subclass or on the instance.

        The default reads the keys that the strategy's ``model_config`` lists in its
        ``LEGACY_DEFAULTS`` (options whose default changed) and that the saved configuration
        lacks as the value those campaigns ran with; everything else as stored.

        Example:
            >>> RandomSearch().read_saved_config({"name": "random"})
            {'name': 'random'}
        """
        out = dict(saved)
        legacy = getattr(type(getattr(self, "model_config", None)), "LEGACY_DEFAULTS", {})
        if legacy:
            current = self.config()
            for key, value in legacy.items():
                if key in current and key not in out:
                    out[key] = value
        return out


class RandomSearch(Strategy):
    """Uniform random points in the bounds, or uniformly random unobserved pool entries.

    Example:
        >>> from bo_ncgp.problems.synthetic import TestFunction
        >>> s = RandomSearch()
        >>> s.setup(TestFunction("branin"), seed=0)
        >>> X = s.ask(None, 4, np.random.default_rng(0))
        >>> X.shape, bool(((X >= s.problem.bounds[0]) & (X <= s.problem.bounds[1])).all())
        ((4, 2), True)
    """

    name = "random"

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        pool = getattr(self.problem, "pool", None)
        if pool is not None:
            seen = set() if history.indices is None else set(history.indices.tolist())
            remaining = np.array([i for i in range(len(pool)) if i not in seen])
            return rng.choice(remaining, size=min(q, remaining.size), replace=False)
        lo, hi = np.asarray(self.problem.bounds[0]), np.asarray(self.problem.bounds[1])
        return lo + (hi - lo) * rng.random((q, self.problem.dim))
