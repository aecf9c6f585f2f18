"""The one registry of named campaign strategies: ``(problem, name) -> StrategySpec``.

A :class:`StrategySpec` lists the frozen config dataclasses of the strategy's parts (surrogate,
acquisition, batch rule), whose field defaults are the only place a default is written, and a
builder that composes the strategy from instances of them. :func:`build_strategy` routes
keyword options to the config that has a field of that name. The table :data:`STRATEGIES` is
written out below, so its content does not depend on what was imported before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bo_ncgp.campaigns.strategies import hotspot_models as hm
from bo_ncgp.campaigns.strategies import hotspots as hs
from bo_ncgp.campaigns.strategies import lunar as ll
from bo_ncgp.campaigns.strategies.base import RandomSearch, Strategy
from bo_ncgp.exceptions import InputDataError

__all__ = ["STRATEGIES", "StrategySpec", "build_strategy", "get_strategy_spec", "strategy_names"]


@dataclass(frozen=True)
class StrategySpec:
    """A named strategy: its parts' config dataclasses and the builder composing it.

    Attributes:
        problem: the problem family it runs on (``"hotspots"``, ``"lunar-lander"``).
        name: the strategy's name.
        help: one line for command-line listings.
        configs: the config dataclasses, in the order the builder takes their instances.
        build: ``build(*config instances) -> Strategy``.

    Example:
        >>> spec = get_strategy_spec("hotspots", "refit-entropy")
        >>> spec.defaults()["num_candidates"], sorted(spec.options())[:2]
        (16, ['batch_limit', 'constant_mean'])
    """

    problem: str
    name: str
    help: str
    configs: tuple[type, ...]
    build: Callable[..., Strategy]

    def options(self) -> dict[str, type]:
        """``{field name: config dataclass}`` of every option of the strategy."""
        out: dict[str, type] = {}
        for cls in self.configs:
            for f in dataclasses.fields(cls):
                if f.name in out:
                    raise InputDataError(f"{self.name}: option {f.name!r} in two configs")
                out[f.name] = cls
        return out

    def defaults(self) -> dict[str, Any]:
        """``{option: default}`` read from the config dataclasses."""
        return {k: v for cls in self.configs for k, v in dataclasses.asdict(cls()).items()}

    def make(self, **options: Any) -> Strategy:
        """The strategy with ``options`` (field names of its configs; others are refused)."""
        known = self.options()
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise InputDataError(
                f"strategy {self.name!r} has no option(s) {unknown} (has {sorted(known)})"
            )
        configs = [
            cls(**{k: v for k, v in options.items() if known[k] is cls}) for cls in self.configs
        ]
        return self.build(*configs)


def _hotspots(
    name: str, help: str, configs: tuple[type, ...], surrogate, acquisition, label=None
) -> StrategySpec:
    """The spec of the hotspot strategy ``name``: ``surrogate`` x ``acquisition``, built from
    instances of ``configs`` (an acquisition without a config is built with no arguments)."""

    def build(*instances):
        parts = [cls(c) for cls, c in zip((surrogate, acquisition), instances, strict=False)]
        if len(parts) == 1:
            parts.append(acquisition())
        return hs.HotspotStrategy(name, *parts, model_label=label)

    return StrategySpec("hotspots", name, help, configs, build)


def _lunar(name: str, help: str, reward, batch) -> StrategySpec:
    """The spec of the lunar-lander strategy ``name``: ``reward`` model x ``batch`` rule."""

    def build(model: ll.DualModelConfig, batch_config: ll.BatchConfig) -> Strategy:
        r = reward(model) if reward is ll.StreamingDualReward else reward()
        return ll.ConstrainedBO(name, model, r, batch(batch_config))

    return StrategySpec("lunar-lander", name, help, (ll.DualModelConfig, ll.BatchConfig), build)


_SVGP = "GPyTorch SVGP with constant mean, refitted"
_STREAMING = (hs.StreamingDualConfig, hs.EntropyConfig)
_REFITTED = (hs.RefittedSVGPConfig, hs.EntropyConfig)
#: every named strategy, by (problem, name)
STRATEGIES: dict[tuple[str, str], StrategySpec] = {
    (s.problem, s.name): s
    for s in (
        _hotspots(
            "entropy",
            "streaming DualSVGP x dual-conditioning entropy reduction (ours)",
            _STREAMING,
            hs.StreamingDual,
            hs.DualEntropy,
        ),
        _hotspots(
            "random",
            "streaming DualSVGP x uniformly random village",
            _STREAMING[:1],
            hs.StreamingDual,
            hs.RandomVillage,
        ),
        _hotspots(
            "refit-entropy",
            "refitted GPyTorch SVGP x entropy reduction with refitted fantasies",
            (hm.RefitGPConfig, hs.RefitEntropyConfig),
            hs.RefitGP,
            hs.RefitEntropy,
        ),
        _hotspots(
            "svgp-entropy",
            "refitted constant-mean SVGP x dual-conditioning entropy (Chang et al.'s Fig. 4 loop)",
            _REFITTED,
            hs.RefittedSVGP,
            hs.DualEntropy,
            f"{_SVGP}; DualSVGP fantasies",
        ),
        _hotspots(
            "svgp-random",
            "refitted constant-mean SVGP x uniformly random village",
            _REFITTED[:1],
            hs.RefittedSVGP,
            hs.RandomVillage,
            f"{_SVGP}; random villages",
        ),
        _lunar(
            "fantasy-batch",
            "streaming DualSVGP reward x dual-conditioned fantasy batches (ours)",
            ll.StreamingDualReward,
            ll.DualFantasyBatch,
        ),
        _lunar(
            "sequential",
            "fantasy-batch meant for batches of one (--batch-size 1)",
            ll.StreamingDualReward,
            ll.DualFantasyBatch,
        ),
        _lunar(
            "kriging-believer",
            "exact SingleTaskGP reward x Kriging-believer batches",
            ll.ExactGPReward,
            ll.KrigingBelieverBatch,
        ),
        StrategySpec("lunar-lander", "random", "uniformly random points", (), RandomSearch),
        StrategySpec("synthetic", "random", "uniformly random points", (), RandomSearch),
    )
}


def strategy_names(problem: str) -> tuple[str, ...]:
    """The registered strategy names of ``problem``, sorted.

    Example:
        >>> strategy_names("lunar-lander")
        ('fantasy-batch', 'kriging-believer', 'random', 'sequential')
    """
    return tuple(sorted(n for p, n in STRATEGIES if p == problem))


def get_strategy_spec(problem: str, name: str) -> StrategySpec:
    """The spec of ``problem``'s strategy ``name`` (an error naming the choices otherwise).

    Example:
        >>> get_strategy_spec("hotspots", "svgp-random").configs[0].__name__
        'RefittedSVGPConfig'
    """
    try:
        return STRATEGIES[(problem, name)]
    except KeyError:
        raise InputDataError(
            f"unknown {problem} strategy {name!r} (choose from {strategy_names(problem)})"
        ) from None


def build_strategy(problem: str, name: str, **options: Any) -> Strategy:
    """``problem``'s strategy ``name`` with ``options`` (config field names; the rest take
    the config dataclasses' defaults).

    Example:
        >>> s = build_strategy("hotspots", "random", rho=0.25)
        >>> type(s).__name__, s.config()["rho"], s.config()["hyper_objective"]
        ('HotspotStrategy', 0.25, 'elbo')
        >>> build_strategy("hotspots", "refit-entropy").config()["num_candidates"]
        16
    """
    return get_strategy_spec(problem, name).make(**options)
