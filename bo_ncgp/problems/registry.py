"""The registry of benchmark problems: ``name -> factory(seed, **options) -> Problem``.

Every factory takes the campaign seed (pool problems draw their initial design and
observations from it; the others ignore it) and the problem's own options.
"""

from __future__ import annotations

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
    episodes: int,
    heldout_episodes: int,
    success_fraction: float = 1.0,
) -> Problem:
    """:class:`LunarLander` with episode seeds ``0..episodes-1`` and held-out seeds
    ``10000..10000+heldout_episodes-1``."""
    from bo_ncgp.problems.lunar_lander import LunarLander

    return LunarLander(
        episode_seeds=list(range(episodes)),
        heldout_seeds=list(range(10_000, 10_000 + heldout_episodes)),
        success_fraction=success_fraction,
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


#: problem name -> factory(seed, **options)
PROBLEMS: dict[str, Callable[..., Problem]] = {
    "hotspots": _hotspots,
    "lunar-lander": _lunar_lander,
    "survey": _survey,
    "synthetic": _synthetic,
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
