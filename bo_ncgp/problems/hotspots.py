"""Schistosomiasis hotspot mapping as a pool-based active-learning problem.

The protocol of Andrade-Pacheco et al. (2020) as used by Maddox et al. (2021) and Chang et al.
(2023), Sec. 4.1 / Fig. 4: every village of a country is a candidate survey site; surveying
village ``i`` tests ``num_trials = 100`` people and returns the number of positives,
``y_i ~ Binomial(100, theta_i)`` with the village's true prevalence ``theta_i``. A village is a
hotspot when ``theta_i > threshold``.

Per campaign seed ``s``:

* the initial design is the first ``n`` villages of a random permutation of the villages drawn
  from ``default_rng([s, PERMUTATION_SALT])`` (the same for every strategy);
* the survey of village ``i`` draws its count from ``default_rng([s, i, OBSERVATION_SALT])``,
  so an observation depends only on ``(seed, village)``: it is reproducible, independent of
  the order of the surveys, and a resumed campaign sees the same counts;
* :meth:`HotspotPool.metrics` scores predicted prevalences on the villages not yet surveyed:
  hotspot accuracy (``prediction > threshold`` against ``theta > threshold``) and prevalence
  MSE (Fig. 4 of Chang et al. 2023). The same two scores over *every* village, surveyed ones
  included (``accuracy_all``, ``mse_all``), are logged beside them. Maddox et al.'s hotspot
  script offers that scoring as an option (its comment attributes it to Andrade-Pacheco et
  al. 2020), so a published number may be either; Chang et al. do not say which Fig. 4 uses.

Example:
    >>> problem = HotspotPool.from_country("civ", seed=0)  # doctest: +SKIP
    >>> problem.evaluate_index(3).value  # doctest: +SKIP
    14.0
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.problems.base import Evaluation, Problem

__all__ = [
    "FULL_SET_METRICS",
    "METRICS",
    "METRIC_LABELS",
    "OBSERVATION_SALT",
    "PERMUTATION_SALT",
    "HotspotPool",
    "add_hotspots_found",
]

PERMUTATION_SALT = 7_001
OBSERVATION_SALT = 7_002
#: the scores :meth:`HotspotPool.metrics` gives on the villages not yet surveyed
METRICS = ("accuracy", "mse", "sensitivity")
#: the same scores over every village, surveyed ones included (Andrade-Pacheco et al. 2020)
FULL_SET_METRICS = ("accuracy_all", "mse_all")
#: axis labels of the hotspot metrics
METRIC_LABELS = {
    "accuracy": "hotspot accuracy",
    "mse": "prevalence MSE",
    "step_seconds": "seconds per step",
    "hotspots_found": "true hotspots surveyed",
    "accuracy_all": "hotspot accuracy, all villages",
    "mse_all": "prevalence MSE, all villages",
}


@dataclass(eq=False)
class HotspotPool(Problem):
    """Villages with known prevalence; evaluations simulate a survey of ``num_trials`` people.

    Args:
        features: ``(P, d)`` village features (raw units; strategies scale them).
        theta: ``(P,)`` true prevalences in ``[0, 1]`` (used to simulate surveys and score
            predictions, never shown to strategies).
        threshold: hotspot threshold on the prevalence, in ``(0, 1)``.
        seed: the campaign seed (permutation and survey randomness).
        num_trials: people tested per survey.
        country: label stored in the campaign configuration.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> pool = HotspotPool(rng.random((50, 2)), 0.3 * rng.random(50), threshold=0.1, seed=1)
        >>> start = pool.initial_design(5, rng)  # the seed's permutation, same for all strategies
        >>> pool.observe(3) == pool.observe(3), 0 <= pool.observe(3) <= pool.num_trials
        (True, True)
        >>> m = pool.metrics(pool.theta, observed=start)  # the true prevalences score perfectly
        >>> m["accuracy"], m["mse"], m["num_remaining"], m["mse_all"]
        (1.0, 0.0, 45.0, 0.0)
    """

    features: np.ndarray
    theta: np.ndarray
    threshold: float
    seed: int = 0
    num_trials: int = 100
    country: str = "custom"
    name: str = field(default="hotspots", init=False)

    def __post_init__(self) -> None:
        X = np.asarray(self.features, dtype=float)
        theta = np.asarray(self.theta, dtype=float).reshape(-1)
        if X.ndim != 2 or X.shape[0] == 0:
            raise InputDataError(f"HotspotPool: features must be (P, d) with P >= 1, got {X.shape}")
        if theta.shape[0] != X.shape[0]:
            raise InputDataError(
                f"HotspotPool: {X.shape[0]} villages but {theta.shape[0]} prevalences"
            )
        if not np.isfinite(X).all():
            raise InputDataError("HotspotPool: features contain NaN or inf")
        if not (np.isfinite(theta).all() and (theta >= 0).all() and (theta <= 1).all()):
            raise InputDataError("HotspotPool: theta must be finite and lie in [0, 1]")
        if not 0.0 < float(self.threshold) < 1.0:
            raise InputDataError(f"HotspotPool: threshold must lie in (0, 1), got {self.threshold}")
        if int(self.num_trials) != self.num_trials or self.num_trials < 1:
            raise InputDataError(
                f"HotspotPool: num_trials must be a positive int, got {self.num_trials}"
            )
        self.features, self.theta = X, theta
        self.threshold, self.seed, self.num_trials = (
            float(self.threshold),
            int(self.seed),
            int(self.num_trials),
        )
        self.pool = X
        self.dim = X.shape[1]
        self.name = f"hotspots-{self.country}"
        rng = np.random.default_rng([self.seed, PERMUTATION_SALT])
        self.permutation = rng.permutation(X.shape[0])

    @classmethod
    def from_country(
        cls,
        country: str = "civ",
        seed: int = 0,
        root: str | os.PathLike | None = None,
        threshold: float | None = None,
        num_trials: int = 100,
        verify: bool = True,
    ) -> HotspotPool:
        """The pool of :func:`bo_ncgp.data.load_hotspots` ``(country, root, threshold,
        verify)``."""
        from bo_ncgp.data.hotspots import load_hotspots

        data = load_hotspots(country, root=root, threshold=threshold, verify=verify)
        return cls(
            data.X.double().numpy(),
            data.theta.double().numpy(),
            data.threshold,
            seed=seed,
            num_trials=num_trials,
            country=country,
        )

    # ---------------------------------------------------------------- campaign
    def initial_design(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The first ``n`` villages of the seed's permutation (``rng`` is not used: the
        permutation already is the strategy-independent random design)."""
        if not 1 <= n <= len(self.permutation):
            raise InputDataError(f"{self.name}: initial design of {n} from {len(self.permutation)}")
        return self.permutation[:n].copy()

    def observe(self, index: int) -> int:
        """The survey count of village ``index`` (deterministic in ``(seed, index)``)."""
        index = int(index)
        if not 0 <= index < self.theta.shape[0]:
            raise IndexError(f"{self.name}: village {index} outside 0..{self.theta.shape[0] - 1}")
        rng = np.random.default_rng([self.seed, index, OBSERVATION_SALT])
        return int(rng.binomial(self.num_trials, self.theta[index]))

    def evaluate_index(self, index: int) -> Evaluation:
        return Evaluation(float(self.observe(index)), extra={"village": int(index)})

    def evaluate(self, x: np.ndarray) -> Evaluation:
        raise UnsupportedError(f"{self.name} is a pool problem: use evaluate_index")

    def remaining(self, observed: np.ndarray | None) -> np.ndarray:
        """Sorted indices of the villages not in ``observed``."""
        mask = np.ones(self.theta.shape[0], dtype=bool)
        if observed is not None and len(observed):
            mask[np.asarray(observed, dtype=int)] = False
        return np.flatnonzero(mask)

    def metrics(self, prevalence: np.ndarray, observed: np.ndarray | None) -> dict[str, float]:
        """Hotspot accuracy and prevalence MSE of predicted prevalences on the villages not
        yet surveyed (Chang et al. 2023, Fig. 4), and the same over all villages.

        Args:
            prevalence: ``(P,)`` predicted prevalence of every village (e.g. ``sigmoid`` of
                the latent posterior mean).
            observed: indices of the surveyed villages.

        Returns:
            ``{"accuracy", "mse", "sensitivity", "num_remaining"}`` on the villages not yet
            surveyed (sensitivity: fraction of true hotspots among them that are predicted
            as hotspots, ``nan`` if there are none), and ``{"accuracy_all", "mse_all"}`` on
            every village, surveyed ones included (Andrade-Pacheco et al. 2020's scoring).
        """
        p = np.asarray(prevalence, dtype=float).reshape(-1)
        if p.shape[0] != self.theta.shape[0]:
            raise InputDataError(
                f"{self.name}: prevalence has {p.shape[0]} entries, the pool {self.theta.shape[0]}"
            )
        rest = self.remaining(observed)
        if rest.size == 0:
            raise InputDataError(f"{self.name}: no village left to score")
        if not np.isfinite(p).all():
            raise InputDataError(f"{self.name}: predicted prevalences contain NaN or inf")
        pred, true = p > self.threshold, self.theta > self.threshold
        hit, sq = pred == true, (p - self.theta) ** 2
        found, hot = (pred & true)[rest].sum(), true[rest].sum()
        sens = float(found / hot) if hot else float("nan")
        return {
            "accuracy": float(hit[rest].mean()),
            "mse": float(sq[rest].mean()),
            "sensitivity": sens,
            "num_remaining": float(rest.size),
            "accuracy_all": float(hit.mean()),
            "mse_all": float(sq.mean()),
        }

    def add_hotspots_found(self, states: list[dict[str, Any]]) -> list[str]:
        """Check that the campaign ``states`` ran on this pool's data (the stored data hash)
        and add ``hotspots_found`` to their logged metrics (:func:`add_hotspots_found`);
        returns ``["hotspots_found"]``, the metric added.

        Example:
            >>> pool = HotspotPool(np.zeros((3, 1)), np.array([0.5, 0.0, 0.3]), 0.1)
            >>> st = {"problem": pool.config(), "evaluations": [{"point": 0}],
            ...       "iterations": [{"num_evaluations": 1, "metrics": {}}]}
            >>> pool.add_hotspots_found([st]), st["iterations"][0]["metrics"]
            (['hotspots_found'], {'hotspots_found': 1.0})
        """
        digest = self.config()["data_sha256"]
        for st in states:
            stored = st.get("problem", {}).get("data_sha256")
            if stored != digest:
                raise InputDataError(
                    f"a campaign ran on other data ({st.get('problem', {}).get('name')}, "
                    f"hash {stored}) than {self.name} (hash {digest})"
                )
        for st in states:
            add_hotspots_found(st, self.theta, self.threshold)
        return ["hotspots_found"]

    def config(self) -> dict[str, Any]:
        digest = hashlib.sha256(
            np.ascontiguousarray(self.features).tobytes() + self.theta.tobytes()
        ).hexdigest()[:16]
        return {
            "name": self.name,
            "country": self.country,
            "num_villages": int(self.theta.shape[0]),
            "dim": self.dim,
            "threshold": self.threshold,
            "seed": self.seed,
            "num_trials": self.num_trials,
            "data_sha256": digest,
        }


def add_hotspots_found(state: dict[str, Any], theta: np.ndarray, threshold: float) -> None:
    """Add ``hotspots_found`` (true hotspots among the surveyed villages so far) to the logged
    metrics of every iteration of a campaign state (in memory; no file is changed).

    Args:
        state: a campaign state (``state.json``) of a :class:`HotspotPool` campaign.
        theta: ``(P,)`` true prevalences of the pool the campaign ran on.
        threshold: hotspot threshold (``theta > threshold``).

    Example:
        >>> st = {"evaluations": [{"point": 0}, {"point": 2}],
        ...       "iterations": [{"num_evaluations": 1, "metrics": {}},
        ...                      {"num_evaluations": 2, "metrics": {}}]}
        >>> add_hotspots_found(st, np.array([0.5, 0.0, 0.3]), 0.1)
        >>> [it["metrics"]["hotspots_found"] for it in st["iterations"]]
        [1.0, 2.0]
    """
    points = np.array([int(e["point"]) for e in state["evaluations"]], dtype=int)
    if points.size and (points.min() < 0 or points.max() >= len(theta)):
        raise InputDataError(
            f"add_hotspots_found: village indices outside 0..{len(theta) - 1} (wrong country?)"
        )
    found = np.cumsum(np.asarray(theta)[points] > threshold)
    for it in state["iterations"]:
        n = int(it["num_evaluations"])
        if 1 <= n <= found.size:
            it.setdefault("metrics", {})["hotspots_found"] = float(found[n - 1])
