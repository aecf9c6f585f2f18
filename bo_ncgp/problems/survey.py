"""Where a magnetometer survey measures next: a pool-based spatial active-learning problem on
the indoor magnetometer data (Solin et al. 2018; :func:`bo_ncgp.data.load_magnetometer`).

The robot's readings are the ground truth. A fixed, seed-independent draw (salt
:data:`SPLIT_SALT`) splits ``num_pool + num_test`` readings of the chosen paths into

* the *pool*: candidate locations whose field value (the norm of the 3-axis field) is hidden
  until the location is surveyed; surveying pool entry ``i`` returns its recorded value
  (deterministic, so resumed campaigns and every strategy see the same values);
* the *test set*: held-out readings that score the field map.

Per campaign seed ``s`` the initial design is the first ``n`` pool entries of a random
permutation drawn from ``default_rng([s, PERMUTATION_SALT])`` (the same for every strategy).
:meth:`MagnetometerSurvey.metrics` gives the RMSE (and MAE) of a predicted field on the test
readings, the metric logged after every step.

Example:
    >>> survey = MagnetometerSurvey.from_data(num_pool=200, num_test=100)  # doctest: +SKIP
    >>> survey.evaluate_index(3).value  # doctest: +SKIP
    44.7...
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.problems.base import Evaluation, Problem

__all__ = ["METRICS", "METRIC_LABELS", "PERMUTATION_SALT", "SPLIT_SALT", "MagnetometerSurvey"]

SPLIT_SALT = 9_001
PERMUTATION_SALT = 9_002
#: the scores :meth:`MagnetometerSurvey.metrics` gives on the held-out readings
METRICS = ("rmse", "mae")
#: axis labels of the survey metrics
METRIC_LABELS = {
    "rmse": "test RMSE of the field map",
    "mae": "test MAE of the field map",
    "step_seconds": "seconds per step",
}


@dataclass(eq=False)
class MagnetometerSurvey(Problem):
    """Candidate survey locations with hidden field values and held-out test readings.

    Args:
        pool_X: ``(P, 2)`` candidate locations (m).
        pool_y: ``(P,)`` their field values (hidden from strategies until surveyed).
        test_X: ``(T, 2)`` held-out locations (shown to strategies: the map is scored there).
        test_y: ``(T,)`` held-out field values (never shown).
        seed: the campaign seed (initial design).
        paths: the robot paths the readings come from (stored in the configuration).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> X = rng.random((40, 2))
        >>> s = MagnetometerSurvey(X[:30], X[:30, 0], X[30:], X[30:, 0], seed=1)
        >>> start = s.initial_design(5, rng)  # the seed's permutation, same for all strategies
        >>> s.evaluate_index(int(start[0])).value == float(X[start[0], 0])
        True
        >>> s.metrics(X[30:, 0])  # the true field scores perfectly
        {'rmse': 0.0, 'mae': 0.0}
    """

    pool_X: np.ndarray
    pool_y: np.ndarray
    test_X: np.ndarray
    test_y: np.ndarray
    seed: int = 0
    paths: tuple[int, ...] = ()
    name: str = field(default="survey", init=False)

    def __post_init__(self) -> None:
        arrays = {}
        for label, X, y in (
            ("pool", self.pool_X, self.pool_y),
            ("test", self.test_X, self.test_y),
        ):
            X = np.asarray(X, dtype=float)
            y = np.asarray(y, dtype=float).reshape(-1)
            if X.ndim != 2 or X.shape[0] == 0:
                raise InputDataError(
                    f"MagnetometerSurvey: {label} locations must be (n, d) with n >= 1, got "
                    f"shape {X.shape}"
                )
            if y.shape[0] != X.shape[0]:
                raise InputDataError(
                    f"MagnetometerSurvey: {X.shape[0]} {label} locations but {y.shape[0]} values"
                )
            if not (np.isfinite(X).all() and np.isfinite(y).all()):
                raise InputDataError(f"MagnetometerSurvey: the {label} data contain NaN or inf")
            arrays[label] = (X, y)
        (self.pool_X, self.pool_y), (self.test_X, self.test_y) = arrays["pool"], arrays["test"]
        if self.test_X.shape[1] != self.pool_X.shape[1]:
            raise InputDataError(
                f"MagnetometerSurvey: pool locations have {self.pool_X.shape[1]} coordinates, "
                f"test locations {self.test_X.shape[1]}"
            )
        self.seed = int(self.seed)
        self.paths = tuple(int(p) for p in self.paths)
        self.pool = self.pool_X
        self.dim = self.pool_X.shape[1]
        rng = np.random.default_rng([self.seed, PERMUTATION_SALT])
        self.permutation = rng.permutation(self.pool_X.shape[0])

    @classmethod
    def from_data(
        cls,
        num_pool: int = 800,
        num_test: int = 400,
        paths: Iterable[int] = range(1, 10),
        seed: int = 0,
        root: str | os.PathLike | None = None,
        verify: bool = True,
    ) -> MagnetometerSurvey:
        """The survey on :func:`~bo_ncgp.data.load_magnetometer` ``(paths, root, verify)``:
        ``num_pool`` candidate and ``num_test`` held-out readings drawn without replacement
        (a fixed draw, salt :data:`SPLIT_SALT`, independent of ``seed``)."""
        from bo_ncgp.data.magnetometer import load_magnetometer

        paths = tuple(int(p) for p in paths)
        for label, n in (("num_pool", num_pool), ("num_test", num_test)):
            if int(n) != n or n < 1:
                raise InputDataError(f"MagnetometerSurvey: {label} must be a positive int, got {n}")
        data = load_magnetometer(paths=paths, root=root, verify=verify)
        X, y = data["X"].double().numpy(), data["y"].double().numpy()
        if num_pool + num_test > X.shape[0]:
            raise InputDataError(
                f"MagnetometerSurvey: num_pool + num_test = {num_pool + num_test} exceeds the "
                f"{X.shape[0]} readings of paths {list(paths)}"
            )
        pick = np.random.default_rng(SPLIT_SALT).choice(
            X.shape[0], size=num_pool + num_test, replace=False
        )
        pool, test = pick[:num_pool], pick[num_pool:]
        return cls(X[pool], y[pool], X[test], y[test], seed=seed, paths=paths)

    # ---------------------------------------------------------------- campaign
    def initial_design(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The first ``n`` pool entries of the seed's permutation (``rng`` is not used)."""
        if not 1 <= n <= len(self.permutation):
            raise InputDataError(
                f"{self.name}: initial design of {n} from a pool of {len(self.permutation)}"
            )
        return self.permutation[:n].copy()

    def evaluate_index(self, index: int) -> Evaluation:
        """The recorded field value at pool location ``index``."""
        index = int(index)
        if not 0 <= index < self.pool_y.shape[0]:
            raise IndexError(f"{self.name}: pool entry {index} outside 0..{len(self.pool_y) - 1}")
        return Evaluation(float(self.pool_y[index]), extra={"location": index})

    def evaluate(self, x: np.ndarray) -> Evaluation:
        raise UnsupportedError(f"{self.name} is a pool problem: use evaluate_index")

    def remaining(self, observed: np.ndarray | None) -> np.ndarray:
        """Sorted pool indices not in ``observed``."""
        mask = np.ones(self.pool_y.shape[0], dtype=bool)
        if observed is not None and len(observed):
            mask[np.asarray(observed, dtype=int)] = False
        return np.flatnonzero(mask)

    def metrics(self, prediction: np.ndarray) -> dict[str, float]:
        """RMSE and MAE of a predicted field ``(T,)`` on the held-out readings."""
        p = np.asarray(prediction, dtype=float).reshape(-1)
        if p.shape[0] != self.test_y.shape[0]:
            raise InputDataError(
                f"{self.name}: the prediction has {p.shape[0]} entries, the test set "
                f"{self.test_y.shape[0]}"
            )
        if not np.isfinite(p).all():
            raise InputDataError(f"{self.name}: the predicted field contains NaN or inf")
        err = p - self.test_y
        return {"rmse": float(np.sqrt(np.mean(err**2))), "mae": float(np.mean(np.abs(err)))}

    def config(self) -> dict[str, Any]:
        digest = hashlib.sha256(
            np.ascontiguousarray(self.pool_X).tobytes()
            + self.pool_y.tobytes()
            + np.ascontiguousarray(self.test_X).tobytes()
            + self.test_y.tobytes()
        ).hexdigest()[:16]
        return {
            "name": self.name,
            "num_pool": int(self.pool_y.shape[0]),
            "num_test": int(self.test_y.shape[0]),
            "paths": list(self.paths),
            "dim": self.dim,
            "seed": self.seed,
            "data_sha256": digest,
        }
