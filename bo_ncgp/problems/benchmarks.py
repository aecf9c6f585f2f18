"""Benchmark problems on the unit cube for ``bo-ncgp bench``: BoTorch's test functions,
versions of them with unknown binary feasibility, and a count-valued problem.

Every problem searches ``[0, 1]^d``; a point ``u`` is mapped affinely to the test function's
own box, ``x = lo + u (hi - lo)``. BoTorch's test functions are *minimised*; the campaigns
maximise, so a problem's value is ``-f(x)`` and :attr:`optimal_value` is ``-f*``. The simple
regret after ``n`` evaluations is ``optimal_value - best value so far`` (``>= 0``; it equals
``min f - f*`` on the function's own scale).

* :class:`UnitCubeFunction`: ``branin`` (2-D), ``hartmann`` (6-D), ``ackley`` (5-D),
  ``levy`` (4-D), or any other function of ``botorch.test_functions.synthetic``; optional
  Gaussian observation noise, seeded by the point (evaluations stay deterministic); the
  noise-free value is logged as ``extra["true_value"]``.
* :class:`FeasibleFunction`: the same with an unknown feasible region (:data:`REGIONS`). An
  evaluation outside the region returns no value (``nan``) and ``success=False``, as a
  simulation that fails does; inside it returns ``-f(x)`` and ``success=True``. The regions:

  ============ ===================================================== =========================
  name         feasible iff                                          share of the cube
  ============ ===================================================== =========================
  halfplane    ``u1 + u2 > 1``                                        50 %
  disc         ``(u1 - 0.5)^2 + (u2 - 0.5)^2 < 0.35^2``               38 %
  ring         ``0.3 < |u - 0.5| < 0.56`` (Euclidean, all coords.)    15 % in 6-D
  corner       ``sum(u) < 0.425 d``                                   31 % in 4-D
  ============ ===================================================== =========================

  The optimum inside the region (:data:`CONSTRAINED_OPTIMA`) was found by dense sampling
  and local refinement (SLSQP from the 30 best of 400,000 uniform points); with ``disc`` on
  Branin, ``ring`` on Hartmann6 and ``corner`` on Levy-4 the global minimiser lies outside the
  region, so the constrained optimum is on its boundary.
* :class:`PoissonRate`: counts ``y ~ Poisson(rate(u))`` of a positive rate
  ``rate(u) = peak * exp(-(f(x) - f*) / scale)`` of a test function ``f``; the campaign
  maximises the count, the regret is measured on the rate (``extra["true_value"]``).

Example:
    >>> p = UnitCubeFunction("branin")
    >>> u = np.array([(np.pi + 5) / 15, 2.275 / 15])  # a minimiser of Branin
    >>> round(p.optimal_value - p.evaluate(u).value, 6)  # no regret there
    0.0
    >>> FeasibleFunction("branin", region="halfplane").evaluate(np.array([0.1, 0.2])).success
    False
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.base import Evaluation, Problem

__all__ = [
    "CONSTRAINED_OPTIMA",
    "REGIONS",
    "FeasibleFunction",
    "PoissonRate",
    "UnitCubeFunction",
    "point_rng",
]


def point_rng(x: np.ndarray, salt: int = 0) -> np.random.Generator:
    """A generator seeded by the bytes of ``x`` (and ``salt``): the randomness of a noisy
    evaluation depends on the point only, so a resumed campaign sees the same values.

    Example:
        >>> x = np.array([0.1, 0.2])
        >>> point_rng(x).random() == point_rng(x).random()
        True
    """
    digest = hashlib.sha256(np.ascontiguousarray(x, dtype=float).tobytes()).digest()
    return np.random.default_rng([int.from_bytes(digest[:8], "little"), salt])


def _test_function(function: str, dim: int | None):
    from botorch.test_functions import synthetic

    names = {n.lower(): n for n in dir(synthetic)}
    if function.lower() not in names:
        raise InputDataError(
            f"unknown BoTorch test function {function!r} (e.g. 'branin', 'hartmann', "
            "'ackley', 'levy')"
        )
    cls = getattr(synthetic, names[function.lower()])
    if dim is not None and "dim" in cls.__init__.__code__.co_varnames:
        return cls(dim=int(dim))
    return cls()


@dataclass(eq=False)
class UnitCubeFunction(Problem):
    """A BoTorch test function on the unit cube, negated (campaigns maximise ``-f``).

    Args:
        function: class name in ``botorch.test_functions.synthetic`` (case-insensitive).
        dim: the dimension of functions that take one (Ackley, Levy, ...).
        noise_std: standard deviation of Gaussian observation noise on ``-f``.

    Attributes:
        optimal_value: ``-f*`` (``None`` where BoTorch does not know ``f*``).

    Example:
        >>> p = UnitCubeFunction("ackley", dim=5)
        >>> p.name, p.dim, p.optimal_value, abs(p.evaluate(np.full(5, 0.5)).value) < 1e-12
        ('ackley5', 5, 0.0, True)
    """

    function: str = "branin"
    dim: int | None = None
    noise_std: float = 0.0
    strategy_family: str = field(default="continuous", init=False)

    def __post_init__(self) -> None:
        if self.dim is not None and (isinstance(self.dim, bool) or not isinstance(self.dim, int)):
            raise InputDataError(f"dim must be an int or None, got {self.dim!r}")
        if not (np.isfinite(self.noise_std) and self.noise_std >= 0):
            raise InputDataError(f"noise_std must be finite and >= 0, got {self.noise_std}")
        f = _test_function(self.function, self.dim)
        self._f = f
        self.dim = int(f.dim)
        self.lo = f.bounds[0].double().numpy()
        self.hi = f.bounds[1].double().numpy()
        self.bounds = np.stack([np.zeros(self.dim), np.ones(self.dim)])
        opt = getattr(f, "_optimal_value", None)
        self.optimal_value = None if opt is None else 0.0 - float(opt)  # no -0.0
        self.name = f"{self.function.lower()}{self.dim}" + ("-noisy" * bool(self.noise_std))

    def __getstate__(self) -> dict[str, Any]:  # the BoTorch module is rebuilt, not pickled
        state = dict(self.__dict__)
        state.pop("_f", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._f = _test_function(self.function, self.dim)

    def _point(self, x: np.ndarray) -> np.ndarray:
        u = np.asarray(x, dtype=float).reshape(-1)
        if u.shape != (self.dim,):
            raise InputDataError(f"{self.name}: x must have {self.dim} entries, got {u.shape}")
        if not np.isfinite(u).all():
            raise InputDataError(f"{self.name}: x contains NaN or inf")
        return u

    def objective(self, u: np.ndarray) -> float:
        """``-f`` at the unit-cube point ``u``, noise-free."""
        import torch

        x = torch.as_tensor(self.lo + u * (self.hi - self.lo), dtype=torch.float64)
        return -float(self._f.evaluate_true(x.unsqueeze(0)))

    def evaluate(self, x: np.ndarray) -> Evaluation:
        u = self._point(x)
        true = self.objective(u)
        if not self.noise_std:
            return Evaluation(true)
        noisy = true + self.noise_std * float(point_rng(u).standard_normal())
        return Evaluation(noisy, extra={"true_value": true})

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "function": self.function.lower(),
            "dim": self.dim,
            "noise_std": self.noise_std,
        }


def _halfplane(u: np.ndarray) -> bool:
    return bool(u[0] + u[1] > 1.0)


def _disc(u: np.ndarray) -> bool:
    return bool((u[0] - 0.5) ** 2 + (u[1] - 0.5) ** 2 < 0.35**2)


def _ring(u: np.ndarray) -> bool:
    r = float(np.linalg.norm(u - 0.5))
    return 0.3 < r < 0.56


def _corner(u: np.ndarray) -> bool:
    return bool(u.sum() < 0.425 * u.size)


#: feasible regions of :class:`FeasibleFunction`: name -> ``feasible(u) -> bool``
REGIONS: dict[str, Callable[[np.ndarray], bool]] = {
    "halfplane": _halfplane,
    "disc": _disc,
    "ring": _ring,
    "corner": _corner,
}
#: ``-f`` at the best feasible point, by (function name, region); see the module docstring
CONSTRAINED_OPTIMA: dict[tuple[str, str], float] = {
    ("branin2", "halfplane"): -0.397887,
    ("branin2", "disc"): -0.398063,
    ("hartmann6", "ring"): 3.321373,
    ("levy4", "corner"): -2.790987,
}


@dataclass(eq=False)
class FeasibleFunction(UnitCubeFunction):
    """:class:`UnitCubeFunction` with an unknown feasible region (:data:`REGIONS`): outside
    it an evaluation fails (``nan``, ``success=False``).

    Args:
        function, dim, noise_std: as :class:`UnitCubeFunction`.
        region: a name in :data:`REGIONS`.

    Example:
        >>> p = FeasibleFunction("branin", region="disc")
        >>> p.name, p.evaluate(np.array([0.5, 0.5])).success
        ('branin2-disc', True)
    """

    function: str = "branin"
    dim: int | None = None
    noise_std: float = 0.0
    region: str = "halfplane"

    def __post_init__(self) -> None:
        if self.region not in REGIONS:
            raise InputDataError(f"unknown region {self.region!r} (choose from {sorted(REGIONS)})")
        super().__post_init__()
        self.strategy_family = "constrained"
        self.optimal_value = CONSTRAINED_OPTIMA.get((self.name, self.region))
        self.name = f"{self.name}-{self.region}"

    def feasible(self, u: np.ndarray) -> bool:
        """Whether the unit-cube point ``u`` lies in the region."""
        return REGIONS[self.region](np.asarray(u, dtype=float))

    def evaluate(self, x: np.ndarray) -> Evaluation:
        u = self._point(x)
        if not self.feasible(u):
            return Evaluation(float("nan"), success=False)
        ev = super().evaluate(u)
        return Evaluation(ev.value, success=True, extra=ev.extra)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "region": self.region}


@dataclass(eq=False)
class PoissonRate(UnitCubeFunction):
    """Counts ``y ~ Poisson(rate(u))``, ``rate(u) = peak exp(-(f(x) - f*) / scale)``.

    Args:
        function, dim: the test function ``f`` (as :class:`UnitCubeFunction`).
        peak: the rate at the optimum.
        scale: how fast the rate falls off, in units of ``f``.

    Example:
        >>> p = PoissonRate("branin", peak=20.0, scale=10.0)
        >>> ev = p.evaluate(np.array([0.9617, 0.165]))
        >>> p.optimal_value, ev.value == float(int(ev.value)), ev.extra["true_value"] > 19.9
        (20.0, True, True)
    """

    function: str = "branin"
    dim: int | None = None
    peak: float = 20.0
    scale: float = 10.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.peak) and self.peak > 0 and np.isfinite(self.scale)):
            raise InputDataError(
                f"peak must be > 0 and scale finite, got {self.peak}, {self.scale}"
            )
        if not self.scale > 0:
            raise InputDataError(f"scale must be > 0, got {self.scale}")
        super().__post_init__()
        if self.optimal_value is None:
            raise InputDataError(f"PoissonRate: {self.function} has no known optimum")
        self.strategy_family = "counts"
        self._f_star = -self.optimal_value
        self.optimal_value = float(self.peak)
        self.name = f"{self.name}-poisson"

    def rate(self, u: np.ndarray) -> float:
        """The expected count at the unit-cube point ``u``."""
        return float(self.peak * np.exp(-(-self.objective(u) - self._f_star) / self.scale))

    def evaluate(self, x: np.ndarray) -> Evaluation:
        u = self._point(x)
        lam = self.rate(u)
        return Evaluation(float(point_rng(u).poisson(lam)), extra={"true_value": lam})

    def config(self) -> dict[str, Any]:
        return {**super().config(), "peak": self.peak, "scale": self.scale}
