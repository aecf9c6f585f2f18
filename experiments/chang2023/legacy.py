"""Settings of the hotspot strategies named differently, or added, after earlier campaigns of
this reproduction were saved, and how those campaigns' stored configurations read today.

* ``gain`` (``entropy``, ``svgp-entropy``): how each village's entropy change counts. Campaigns
  saved it as ``clamp``: ``true`` (count only per-village entropy decreases, as Maddox et al.'s
  hotspot script does) is the gain ``"clamped"`` of
  :mod:`experiments.chang2023.maddox_acquisition`, ``false`` the library's ``"reduction"``;
  the earliest campaigns saved neither and did not clamp (``"reduction"``);
* ``rel_tol`` (``svgp-entropy``, ``svgp-random``): stopping each SVGP refit early by BoTorch's
  moving-average rule, as Maddox et al.'s fit loop does; earlier campaigns always ran
  ``num_steps`` steps (``None``).

:func:`upgrade_config` reads a stored configuration in today's terms;
:func:`legacy_strategy` builds a registered hotspot strategy that resumes such campaigns
(:meth:`bo_ncgp.campaigns.Campaign.resume` reads the saved configuration through the
strategy's ``read_saved_config``); :mod:`experiments.chang2023.pool_summaries` pools old and
new summaries through :func:`upgrade_config`.
"""

from __future__ import annotations

import functools
from typing import Any

# the gain "clamped" that stored ``clamp: true`` configurations read as (registered on import,
# also in a worker process that unpickles upgrade_config)
from experiments.chang2023 import maddox_acquisition  # noqa: F401

__all__ = ["LEGACY_CONFIG", "RENAMED", "legacy_config", "legacy_strategy", "upgrade_config"]

#: hotspot strategy -> {config key: the value of campaigns saved before the key existed}
LEGACY_CONFIG: dict[str, dict[str, Any]] = {
    "entropy": {"gain": "reduction"},
    "svgp-entropy": {"gain": "reduction", "rel_tol": None},
    "svgp-random": {"rel_tol": None},
}

#: stored config key -> (today's key, {stored value: today's value})
RENAMED: dict[str, tuple[str, dict[Any, Any]]] = {
    "clamp": ("gain", {True: "clamped", False: "reduction"}),
}


def legacy_config(strategy: str) -> dict[str, Any]:
    """The legacy values of the hotspot strategy ``strategy`` (``{}`` for other names).

    Example:
        >>> legacy_config("svgp-entropy"), legacy_config("x")
        ({'gain': 'reduction', 'rel_tol': None}, {})
    """
    return dict(LEGACY_CONFIG.get(strategy, {}))


def upgrade_config(saved: dict[str, Any], strategy: str | None = None) -> dict[str, Any]:
    """The stored configuration ``saved`` of a hotspot strategy in today's terms: renamed
    settings (:data:`RENAMED`) under their names and values of today, in place, and keys it
    predates (:data:`LEGACY_CONFIG`) with the values it ran with.

    Args:
        saved: a strategy configuration as a campaign stored it.
        strategy: the strategy's name (default: ``saved["name"]``).

    Raises:
        ValueError: a renamed setting holds a value that has no counterpart, or is stored
            under both names.

    Example:
        >>> upgrade_config({"name": "entropy", "criterion": "spiked", "clamp": True})
        {'name': 'entropy', 'criterion': 'spiked', 'gain': 'clamped'}
        >>> upgrade_config({"num_steps": 9}, "svgp-entropy")
        {'num_steps': 9, 'gain': 'reduction', 'rel_tol': None}
        >>> upgrade_config({"name": "entropy", "gain": "clamped"})  # today's terms: unchanged
        {'name': 'entropy', 'gain': 'clamped'}
    """
    strategy = str(saved.get("name", "")) if strategy is None else strategy
    out: dict[str, Any] = {}
    for key, val in saved.items():
        if key not in RENAMED:
            out[key] = val
            continue
        new, values = RENAMED[key]
        if new in saved:
            raise ValueError(f"{strategy}: the stored config holds both {key!r} and {new!r}")
        if not isinstance(val, bool) or val not in values:
            raise ValueError(f"{strategy}: stored {key}={val!r} has no {new!r} counterpart")
        out[new] = values[val]
    for key, val in legacy_config(strategy).items():
        out.setdefault(key, val)
    return out


def legacy_strategy(name: str, **options: Any):
    """The registered hotspot strategy ``name`` with ``options``, able to resume campaigns
    saved under the older settings names or before the keys of :data:`LEGACY_CONFIG`
    existed (their configurations are read by :func:`upgrade_config`).

    Example:
        >>> s = legacy_strategy("svgp-random", num_steps=5, rel_tol=None)
        >>> s.read_saved_config({"name": "svgp-random", "num_steps": 5})
        {'name': 'svgp-random', 'num_steps': 5, 'rel_tol': None}
    """
    from bo_ncgp.campaigns.strategies.registry import build_strategy

    strategy = build_strategy("hotspots", name, **options)
    strategy.read_saved_config = functools.partial(upgrade_config, strategy=name)
    return strategy
