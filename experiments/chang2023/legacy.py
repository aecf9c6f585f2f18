"""Settings of the hotspot strategies added after earlier campaigns of this reproduction were
saved, with the value those campaigns ran with.

* ``clamp`` (``entropy``, ``svgp-entropy``): counting only per-village entropy decreases, as
  Maddox et al.'s hotspot script does; earlier campaigns did not clamp;
* ``rel_tol`` (``svgp-entropy``, ``svgp-random``): stopping each SVGP refit early by BoTorch's
  moving-average rule, as Maddox et al.'s fit loop does; earlier campaigns always ran
  ``num_steps`` steps (``None``).

:func:`legacy_strategy` builds a registered hotspot strategy that resumes such campaigns
(:meth:`bo_ncgp.campaigns.Campaign.resume` reads a missing key as its legacy value);
:func:`legacy_config` gives the values for pooling old summaries
(:mod:`experiments.chang2023.pool_summaries`).
"""

from __future__ import annotations

from typing import Any

#: hotspot strategy -> {config key: the value of campaigns saved before the key existed}
LEGACY_CONFIG: dict[str, dict[str, Any]] = {
    "entropy": {"clamp": False},
    "svgp-entropy": {"clamp": False, "rel_tol": None},
    "svgp-random": {"rel_tol": None},
}


def legacy_config(strategy: str) -> dict[str, Any]:
    """The legacy values of the hotspot strategy ``strategy`` (``{}`` for other names).

    Example:
        >>> legacy_config("svgp-entropy"), legacy_config("x")
        ({'clamp': False, 'rel_tol': None}, {})
    """
    return dict(LEGACY_CONFIG.get(strategy, {}))


def legacy_strategy(name: str, **options: Any):
    """The registered hotspot strategy ``name`` with ``options``, able to resume campaigns
    saved before the keys of :data:`LEGACY_CONFIG` existed.

    Example:
        >>> legacy_strategy("svgp-random", num_steps=5).legacy_config
        {'rel_tol': None}
    """
    from bo_ncgp.campaigns.strategies.registry import build_strategy

    strategy = build_strategy("hotspots", name, **options)
    strategy.legacy_config = legacy_config(name)
    return strategy
