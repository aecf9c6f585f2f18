"""The registry of benchmark problems: ``name -> factory(seed, **options) -> Problem``.

Every factory takes the campaign seed (pool problems draw their initial design and
observations from it; the others ignore it) and the problem's own options.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.base import Problem

__all__ = ["PROBLEMS", "make_problem"]


def _hotspots(seed: int = 0, **options: Any) -> Problem:
    """:meth:`HotspotPool.from_country` (``country``, ``root``, ``threshold``, ...)."""
    from bo_ncgp.problems.hotspots import HotspotPool

    return HotspotPool.from_country(seed=seed, **options)


def _lunar_lander(
    seed: int = 0,
    *,
    episodes: int = 10,
    heldout_episodes: int = 50,
    success_fraction: float = 1.0,
    enable_wind: bool = False,
    wind_power: float = 15.0,
    turbulence_power: float = 1.5,
) -> Problem:
    """:class:`LunarLander` with episode seeds ``0..episodes-1`` and held-out seeds
    ``10000..10000+heldout_episodes-1`` (gymnasium's wind with ``enable_wind``)."""
    from bo_ncgp.problems.lunar_lander import LunarLander

    return LunarLander(
        episode_seeds=list(range(episodes)),
        heldout_seeds=list(range(10_000, 10_000 + heldout_episodes)),
        success_fraction=success_fraction,
        enable_wind=enable_wind,
        wind_power=wind_power,
        turbulence_power=turbulence_power,
    )


def _survey(seed: int = 0, **options: Any) -> Problem:
    """:meth:`MagnetometerSurvey.from_data` (``num_pool``, ``num_test``, ``paths``, ``root``,
    ``verify``)."""
    from bo_ncgp.problems.survey import MagnetometerSurvey

    return MagnetometerSurvey.from_data(seed=seed, **options)


def _synthetic(seed: int = 0, **options: Any) -> Problem:
    """:class:`TestFunction` (``function``, ``dim``, ``noise_std``, ...)."""
    from bo_ncgp.problems.synthetic import TestFunction

    return TestFunction(**options)


def _unit_cube(function: str, dim: int | None = None, **fixed: Any) -> Callable[..., Problem]:
    """The factory of :class:`~bo_ncgp.problems.benchmarks.UnitCubeFunction` ``function``
    (``fixed`` options; ``region`` makes it a ``FeasibleFunction``, ``peak`` a
    ``PoissonRate``); the seed is not used (the functions are deterministic)."""

    def factory(seed: int = 0, **options: Any) -> Problem:
        from bo_ncgp.problems import benchmarks as b

        kwargs = {"function": function, "dim": dim, **fixed, **options}
        cls = (
            b.FeasibleFunction
            if "region" in kwargs
            else b.PoissonRate
            if "peak" in kwargs
            else b.UnitCubeFunction
        )
        return cls(**kwargs)

    factory.__doc__ = f"{function} on the unit cube ({fixed or 'no options'})"
    return factory


#: problem name -> ``factory(seed, **options)``
PROBLEMS: dict[str, Callable[..., Problem]] = {
    "hotspots": _hotspots,
    "lunar-lander": _lunar_lander,
    "lunar-lander-wind": functools.partial(_lunar_lander, enable_wind=True),
    "survey": _survey,
    "synthetic": _synthetic,
    # bo-ncgp bench: BoTorch test functions on the unit cube (bo_ncgp.problems.benchmarks)
    "branin": _unit_cube("branin"),
    "hartmann6": _unit_cube("hartmann"),
    "ackley5": _unit_cube("ackley", 5),
    "levy4": _unit_cube("levy", 4),
    "hartmann6-noisy": _unit_cube("hartmann", noise_std=0.1),
    # unknown binary feasibility, observed as success / failure
    "branin-halfplane": _unit_cube("branin", region="halfplane"),
    "branin-disc": _unit_cube("branin", region="disc"),
    "hartmann6-ring": _unit_cube("hartmann", region="ring"),
    "levy4-corner": _unit_cube("levy", 4, region="corner"),
    # count-valued outcomes
    "branin-poisson": _unit_cube("branin", peak=20.0, scale=10.0),
}


def make_problem(name: str, seed: int = 0, **options: Any) -> Problem:
    """The registered problem ``name`` for campaign seed ``seed``.

    Example:
        >>> make_problem("synthetic", function="branin").name
        'test-branin'
        >>> make_problem("lunar-lander", episodes=2, heldout_episodes=3).heldout_seeds
        [10000, 10001, 10002]
        >>> make_problem("nope")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: unknown problem 'nope' (choose from [...])
    """
    if name not in PROBLEMS:
        raise InputDataError(f"unknown problem {name!r} (choose from {sorted(PROBLEMS)})")
    return PROBLEMS[name](seed, **options)
