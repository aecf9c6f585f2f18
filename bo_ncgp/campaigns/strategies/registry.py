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

from bo_ncgp.campaigns.strategies import bernoulli_constrained as bc
from bo_ncgp.campaigns.strategies import blackbox as bb
from bo_ncgp.campaigns.strategies import hotspot_models as hm
from bo_ncgp.campaigns.strategies import hotspots as hs
from bo_ncgp.campaigns.strategies import iterncgp_constrained as ic
from bo_ncgp.campaigns.strategies import lunar as ll
from bo_ncgp.campaigns.strategies import survey as sv
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


#: hotspot strategy parts: (part, its config dataclass or ``None``, what it is)
_DUAL = (hs.StreamingDual, hs.StreamingDualConfig, "streaming DualSVGP")
_REFIT = (hs.RefitGP, hm.RefitGPConfig, "refitted GPyTorch SVGP")
_SVGP = (hs.RefittedSVGP, hs.RefittedSVGPConfig, "refitted constant-mean SVGP")
_ENTROPY = (hs.DualEntropy, hs.EntropyConfig, "dual-conditioning entropy reduction")
_REFITS = (hs.RefitEntropy, hs.RefitEntropyConfig, "entropy reduction with refitted fantasies")
_RANDOM = (hs.RandomVillage, None, "uniformly random village")
#: lunar-lander strategy parts: (part, what it is)
_DUAL_REWARD = (ll.StreamingDualReward, "streaming DualSVGP reward")
_EXACT_REWARD = (ll.ExactGPReward, "exact SingleTaskGP reward")
_DUAL_BATCH = (ll.DualFantasyBatch, "dual-conditioned fantasy batches")
_SAMPLED_BATCH = (ll.SampledFantasyBatch, "dual-conditioned fantasy batches, sampled fantasies")
_BELIEVER_BATCH = (ll.KrigingBelieverBatch, "Kriging-believer batches")


def _hotspots(
    name: str,
    surrogate: tuple[type, type, str],
    acquisition: tuple[type, type | None, str],
    note: str = "",
    label: str | None = None,
) -> StrategySpec:
    """``surrogate x acquisition`` on the hotspot pools (``label``: the surrogate's label)."""
    (model, model_config, model_help), (acq, acq_config, acq_help) = surrogate, acquisition
    configs = (model_config,) if acq_config is None else (model_config, acq_config)

    def build(*instances) -> Strategy:
        a = acq() if acq_config is None else acq(instances[1])
        return hs.HotspotStrategy(name, model(instances[0]), a, model_label=label)

    return StrategySpec("hotspots", name, f"{model_help} x {acq_help}{note}", configs, build)


def _lunar(
    name: str,
    reward: tuple[type, str],
    batch: tuple[type, str],
    note: str = "",
    family: str = "lunar-lander",
) -> StrategySpec:
    """``reward surrogate x batch rule`` on the lunar lander, with the DualSVGP classifier."""
    (reward_cls, reward_help), (batch_cls, batch_help) = reward, batch

    def build(model: ll.DualModelConfig, batch_config: ll.BatchConfig) -> Strategy:
        r = reward_cls(model) if reward_cls is ll.StreamingDualReward else reward_cls()
        return ll.ConstrainedBO(name, model, r, batch_cls(batch_config))

    text = f"{reward_help} x {batch_help}{note}"
    return StrategySpec(family, name, text, (ll.DualModelConfig, ll.BatchConfig), build)


def _objective(
    family: str,
    name: str,
    streaming: bool,
    rule: str,
    text: str,
    config: type = bb.ObjectiveModelConfig,
) -> StrategySpec:
    """Objective surrogate x batch rule (:mod:`~bo_ncgp.campaigns.strategies.blackbox`):
    ours streaming DualSVGP (its model settings ``config``) or BoTorch's refitted
    ``SingleTaskGP``."""
    if streaming:

        def build(model: bb.ObjectiveModelConfig, batch: ll.BatchConfig) -> Strategy:
            r = bb.StreamingDualObjective(model)
            return bb.ObjectiveBO(name, model, r, bb.BatchRule(rule, batch))

        return StrategySpec(family, name, text, (config, ll.BatchConfig), build)

    def build_exact(batch: ll.BatchConfig) -> Strategy:
        r = ll.ExactGPReward()
        return bb.ObjectiveBO(name, ll.DualModelConfig(), r, bb.BatchRule(rule, batch))

    return StrategySpec(family, name, text, (ll.BatchConfig,), build_exact)


def _blackbox(family: str) -> tuple[StrategySpec, ...]:
    """The strategies of box-bounded objectives (``continuous`` and ``counts`` problems)."""
    joint = "LogEI (q = 1) / qLogNEI joint batches"
    return (
        StrategySpec(family, "random", "uniformly random points", (), RandomSearch),
        StrategySpec(family, "sobol", "a scrambled Sobol sequence", (), bb.SobolSearch),
        _objective(family, "botorch", False, "joint", f"refitted SingleTaskGP x {joint}"),
        _objective(family, "dual", True, "joint", f"streaming DualSVGP x {joint} (ours)"),
        _objective(
            family,
            "dual-matched",
            True,
            "joint",
            f"streaming DualSVGP, SingleTaskGP's model (learned mean, standardised) x {joint}",
            bb.MatchedObjectiveConfig,
        ),
        _objective(
            family,
            "dual-std",
            True,
            "joint",
            f"streaming DualSVGP, standardised (SingleTaskGP's outputscale), fits from both "
            f"starts x {joint}",
            bb.StandardizedObjectiveConfig,
        ),
        _objective(
            family,
            "dual-fantasy",
            True,
            "fantasy",
            "streaming DualSVGP x fantasy batches, sampled fantasies (Alg. 2, ours)",
        ),
        _objective(
            family,
            "dual-fantasy-plugin",
            True,
            "fantasy-plugin",
            "streaming DualSVGP x fantasy batches, sampled fantasies, the plug-in incumbent "
            "(largest posterior mean observed) of noisy problems (ours)",
        ),
        _objective(
            family,
            "dual-fantasy-m128",
            True,
            "fantasy",
            "streaming DualSVGP with up to 128 inducing points x fantasy batches, sampled "
            "fantasies (Alg. 2, ours; for long budgets)",
            bb.MediumObjectiveConfig,
        ),
        _objective(
            family,
            "dual-fantasy-m256",
            True,
            "fantasy",
            "streaming DualSVGP with up to 256 inducing points x fantasy batches, sampled "
            "fantasies (Alg. 2, ours; for long budgets)",
            bb.WideObjectiveConfig,
        ),
        _objective(
            family,
            "dual-std-fantasy",
            True,
            "fantasy",
            "streaming DualSVGP, standardised, fits from both starts x fantasy batches, "
            "sampled fantasies (Alg. 2, ours)",
            bb.StandardizedObjectiveConfig,
        ),
        _objective(
            family,
            "dual-matched-fantasy",
            True,
            "fantasy",
            "streaming DualSVGP, SingleTaskGP's model (learned mean, standardised) x fantasy "
            "batches, sampled fantasies (Alg. 2, ours)",
            bb.MatchedObjectiveConfig,
        ),
        _objective(
            family,
            "dual-fantasy-mean",
            True,
            "fantasy-mean",
            "streaming DualSVGP x fantasy batches, posterior-mean fantasies (ours)",
        ),
        _objective(
            family,
            "dual-std-fantasy-mean",
            True,
            "fantasy-mean",
            "streaming DualSVGP, standardised, fits from both starts x fantasy batches, "
            "posterior-mean fantasies (ours)",
            bb.StandardizedObjectiveConfig,
        ),
        _objective(
            family,
            "botorch-believer",
            False,
            "believer",
            "refitted SingleTaskGP x Kriging believer (LogEI)",
        ),
    )


def _label_gp(batch: ll.BatchConfig) -> Strategy:
    rule = bb.BatchRule("believer", batch)
    return bb.LabelGPConstrainedBO("botorch-labels", ll.DualModelConfig(), ll.ExactGPReward(), rule)


def _bernoulli_gp(batch: ll.BatchConfig) -> Strategy:
    rule = bb.BatchRule("joint", batch)
    return bc.BernoulliGPConstrainedBO(
        "botorch-bernoulli", ll.DualModelConfig(), ll.ExactGPReward(), rule
    )


def _iterncgp(name: str, classifier: type, text: str) -> StrategySpec:
    """Streaming DualSVGP value model x IterNCGP classifier x constrained log EI."""

    def build(model: ll.DualModelConfig, clf, batch: ll.BatchConfig) -> Strategy:
        return ic.IterNCGPConstrainedBO(name, model, clf, batch)

    return StrategySpec(
        "constrained", name, text, (ll.DualModelConfig, classifier, ll.BatchConfig), build
    )


def _dual_constrained(problem: str, name: str, text: str, **label) -> StrategySpec:
    """Ours with unknown feasibility on ``problem``: streaming DualSVGPs of the value and of
    the labels x LogConstrainedEI, dual-conditioned fantasy batches; ``label``: the label
    model's kernel options (keyword arguments of
    :class:`~bo_ncgp.campaigns.strategies.blackbox.DualConstrainedBO`)."""

    def build(model: bb.ObjectiveModelConfig, batch: ll.BatchConfig) -> Strategy:
        return bb.DualConstrainedBO(name, model, ll.DualFantasyBatch(batch), **label)

    return StrategySpec(problem, name, text, (bb.ObjectiveModelConfig, ll.BatchConfig), build)


_LONG_LABELS = "dual with its label model's lengthscales bounded below by half the prior's mode"


def _survey(name: str, field: type, acquisition: type, text: str) -> StrategySpec:
    """``field model x acquisition`` on the magnetometer survey."""

    def build(config: sv.FieldModelConfig) -> Strategy:
        return sv.SurveyStrategy(name, field(config), acquisition())

    return StrategySpec("survey", name, text, (sv.FieldModelConfig,), build)


_CHANG = " (Chang et al.'s Fig. 4 loop)"
_ONE = ", meant for batches of one (--batch-size 1)"
_SVGP_LABEL = hs.RefittedSVGP.label
#: every named strategy, by (problem, name)
STRATEGIES: dict[tuple[str, str], StrategySpec] = {
    (s.problem, s.name): s
    for s in (
        _hotspots("entropy", _DUAL, _ENTROPY, " (ours)"),
        _hotspots("random", _DUAL, _RANDOM),
        _hotspots("refit-entropy", _REFIT, _REFITS),
        _hotspots("svgp-entropy", _SVGP, _ENTROPY, _CHANG, f"{_SVGP_LABEL}; DualSVGP fantasies"),
        _hotspots("svgp-random", _SVGP, _RANDOM, label=f"{_SVGP_LABEL}; random villages"),
        _lunar("fantasy-batch", _DUAL_REWARD, _DUAL_BATCH, " (ours)"),
        _lunar("fantasy-batch-sampled", _DUAL_REWARD, _SAMPLED_BATCH, " (ours)"),
        _lunar("sequential", _DUAL_REWARD, _DUAL_BATCH, _ONE),
        _lunar("kriging-believer", _EXACT_REWARD, _BELIEVER_BATCH),
        _dual_constrained(
            "lunar-lander",
            "dual",
            "the constrained suite's dual: streaming DualSVGPs of the reward and of the 0/1 "
            "success labels (converged fits) x BoTorch's LogConstrainedEI (label > 1/2), "
            "dual-conditioned fantasy batches (ours)",
        ),
        _dual_constrained(
            "lunar-lander", "dual-long-labels", _LONG_LABELS, label_lengthscale_floor_fraction=0.5
        ),
        StrategySpec("lunar-lander", "random", "uniformly random points", (), RandomSearch),
        _survey("hip-variance", sv.HIPGPField, sv.MaxVariance, "conditioned HIP-GP x max variance"),
        _survey(
            "random", sv.HIPGPField, sv.RandomLocation, "conditioned HIP-GP x random locations"
        ),
        _survey("svgp-variance", sv.SVGPField, sv.MaxVariance, "refitted SVGP x max variance"),
        StrategySpec("synthetic", "random", "uniformly random points", (), RandomSearch),
        *_blackbox("continuous"),
        *_blackbox("counts"),
        StrategySpec(
            "counts",
            "dual-poisson",
            "streaming Poisson DualSVGP of the log rate x LogEI (q = 1) / qLogNEI (ours)",
            (ll.DualModelConfig, ll.BatchConfig),
            lambda model, batch: bb.CountDualBO(
                "dual-poisson", model, bb.BatchRule("joint", batch)
            ),
        ),
        StrategySpec("constrained", "random", "uniformly random points", (), RandomSearch),
        StrategySpec("constrained", "sobol", "a scrambled Sobol sequence", (), bb.SobolSearch),
        _dual_constrained(
            "constrained",
            "dual",
            "streaming DualSVGPs of the value and of the 0/1 labels (converged fits) x "
            "BoTorch's LogConstrainedEI (label > 1/2), dual-conditioned fantasy batches (ours)",
        ),
        _dual_constrained(
            "constrained",
            "dual-iso-labels",
            "dual with one lengthscale shared by the inputs of its label model",
            label_isotropic=True,
        ),
        _dual_constrained(
            "constrained", "dual-long-labels", _LONG_LABELS, label_lengthscale_floor_fraction=0.5
        ),
        StrategySpec(
            "constrained",
            "botorch-labels",
            "refitted SingleTaskGPs of the value and of the 0/1 labels x BoTorch's "
            "LogConstrainedEI (label > 1/2), Kriging-believer batches",
            (ll.BatchConfig,),
            _label_gp,
        ),
        StrategySpec(
            "constrained",
            "botorch-bernoulli",
            "refitted SingleTaskGP of the value and variational Bernoulli GP of the 0/1 labels "
            "(VariationalELBO) x log EI + log P(feasible)" + _ONE,
            (ll.BatchConfig,),
            _bernoulli_gp,
        ),
        _iterncgp(
            "dual-iterncgp",
            ic.IterNCGPClassifierConfig,
            "streaming DualSVGP value x IterNCGP classifier (recycled warm starts; P(feasible) "
            "with mathematical + computational variance) x constrained log EI (ours)",
        ),
        _iterncgp(
            "dual-iterncgp-math",
            ic.MathematicalClassifierConfig,
            "dual-iterncgp with P(feasible) from the mathematical variance alone (ablation)",
        ),
    )
}


def strategy_names(problem: str) -> tuple[str, ...]:
    """The registered strategy names of ``problem``, sorted.

    Example:
        >>> strategy_names("lunar-lander")[:3]
        ('dual', 'dual-long-labels', 'fantasy-batch')
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
