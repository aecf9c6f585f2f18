"""The strategy registry: one table, configs derived from the dataclasses, defaults that
reproduce the configurations saved by earlier campaigns (so that those campaigns resume)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from bo_ncgp.campaigns.strategies.registry import (
    STRATEGIES,
    build_strategy,
    get_strategy_spec,
    strategy_names,
)
from bo_ncgp.exceptions import InputDataError

#: the saved options of the streaming DualSVGP, the refitted constant-mean SVGP, the dual
#: entropy acquisition and the lunar-lander strategies, at their defaults
_DUAL = {
    "model": "DualSVGP",
    "num_inner_steps": 20,
    "num_hyper_steps": 5,
    "lr": 0.01,
    "init_rounds": 8,
    "init_hyper_steps": 50,
    "init_lr": 0.05,
    "hyper_objective": "elbo",
    "rho": 0.5,
    "max_abs_logit": 25.0,
    "constant_mean": False,
    "outputscale_prior": True,
}
_REFITTED = {
    "num_steps": 1000,
    "lr": 0.01,
    "beta": 1.0,
    "rel_tol": 1e-05,
    "recycle": True,
    "outputscale_prior": False,
}
_ENTROPY = {
    "num_fantasies": 16,
    "compute_dtype": "float32",
    "chunk_size": 16,
    "criterion": "exceedance",
    "gain": "reduction",
}
_LUNAR = {"num_inducing": 48, "hyper_steps": 50, "lr": 0.05, "num_restarts": 8, "raw_samples": 512}
_SVGP = "GPyTorch SVGP with constant mean, refitted"
#: the configurations campaigns saved with every option at its default
SAVED_DEFAULTS = {
    ("hotspots", "entropy"): {"name": "entropy", **_DUAL, **_ENTROPY},
    ("hotspots", "random"): {"name": "random", **_DUAL},
    ("hotspots", "refit-entropy"): {
        "name": "refit-entropy",
        "model": "GPyTorch SVGP, refitted",
        "num_candidates": 16,
        "num_fantasies": 8,
        "num_steps": 200,
        "lr": 0.05,
        "ngd_lr": 0.1,
        "polish_steps": 10,
        "polish_lr": 0.5,
        "fantasy_steps": 4,
        "fantasy_lr": 1.0,
        "batch_limit": 64,
        "constant_mean": False,
        "outputscale_prior": True,
    },
    ("hotspots", "svgp-entropy"): {
        "name": "svgp-entropy",
        "model": f"{_SVGP}; DualSVGP fantasies",
        **_REFITTED,
        **_ENTROPY,
    },
    ("hotspots", "svgp-random"): {
        "name": "svgp-random",
        "model": f"{_SVGP}; random villages",
        **_REFITTED,
    },
    ("lunar-lander", "fantasy-batch"): {"name": "fantasy-batch", **_LUNAR},
    ("lunar-lander", "fantasy-batch-sampled"): {
        "name": "fantasy-batch-sampled",
        **_LUNAR,
        "fantasy": "sample",
    },
    ("lunar-lander", "kriging-believer"): {"name": "kriging-believer", **_LUNAR},
    ("lunar-lander", "random"): {"name": "random"},
    ("lunar-lander", "sequential"): {"name": "sequential", **_LUNAR},
}


@pytest.mark.parametrize("key", sorted(SAVED_DEFAULTS))
def test_default_configs_equal_the_saved_ones(key):
    assert build_strategy(*key).config() == SAVED_DEFAULTS[key]


@pytest.mark.parametrize("key", sorted(STRATEGIES))
def test_config_is_the_name_and_the_config_dataclasses(key):
    spec = STRATEGIES[key]
    strategy = spec.make()
    config = strategy.config()
    fields = {f.name for cls in spec.configs for f in dataclasses.fields(cls)}
    omitted = {k for cls in spec.configs for k in getattr(cls, "OMITTED_AT_DEFAULT", ())}
    # beyond its dataclasses' fields: the name, a description of the models, the batch rule's
    # fantasies where they are not posterior means, the label model's options where set
    label = {f"label_{k}" for k, v in getattr(strategy, "label_options", {}).items() if v}
    assert set(config) - {"name", "model", "fantasy"} - label == fields - omitted
    assert config["name"] == key[1]
    defaults = spec.defaults()
    assert {k: v for k, v in defaults.items() if k not in omitted} == {
        k: v for k, v in config.items() if k in fields
    }


def test_options_at_their_default_are_left_out_of_saved_configs_and_others_kept():
    """A campaign saved before an option existed resumes while the option is at its
    default; set to another value, the option is saved (and a saved campaign is refused)."""
    plain = build_strategy("continuous", "dual").config()
    assert plain["learn_mean"] is True and "standardize" not in plain
    fixed = build_strategy("continuous", "dual", learn_mean=False).config()
    assert fixed["learn_mean"] is False and "standardize" not in fixed
    assert build_strategy("continuous", "dual-matched").config()["standardize"] is True
    matched_fantasy = build_strategy("continuous", "dual-matched-fantasy")
    assert matched_fantasy.config()["standardize"] is True
    assert matched_fantasy.rule.rule == "fantasy"
    std_rules = {"dual-std": "joint", "dual-std-fantasy": "fantasy"}
    std_rules["dual-std-fantasy-mean"] = "fantasy-mean"
    for name, rule in std_rules.items():
        std = build_strategy("continuous", name)  # standardised, fitted from both starts
        assert std.config()["standardize"] is True and std.config()["warm_start"] is True
        assert std.rule.rule == rule
        assert std.read_saved_config(std.config()) == std.config()
    hot = build_strategy("hotspots", "entropy", num_candidates=64).config()
    assert hot["num_candidates"] == 64 and "learn_mean_constant" not in hot


def test_a_campaign_saved_before_the_learned_mean_default_reads_as_the_fixed_mean():
    """``learn_mean`` became the default: a saved configuration without it ran with the fixed
    mean, so it reads as ``learn_mean=False`` (resumable with that setting) and differs from
    the new default's (a resume with the default is refused)."""
    old = build_strategy("continuous", "dual", learn_mean=False).config()
    del old["learn_mean"]  # as campaigns saved it while the option was left out at False
    for family, name in (("continuous", "dual"), ("continuous", "dual-fantasy"),
                         ("constrained", "dual")):  # fmt: skip
        default = build_strategy(family, name)
        saved = {**default.config(), **{k: v for k, v in old.items() if k != "name"}}
        del saved["learn_mean"]
        assert default.read_saved_config(saved)["learn_mean"] is False
        assert default.read_saved_config(saved) != default.config()
        fixed = build_strategy(family, name, learn_mean=False)
        assert fixed.read_saved_config(saved) == fixed.config()
    matched = build_strategy("continuous", "dual-matched")
    assert matched.read_saved_config(matched.config()) == matched.config()
    botorch = build_strategy("continuous", "botorch")
    assert botorch.read_saved_config(botorch.config()) == botorch.config()


def test_options_reach_their_config_and_unknown_ones_are_refused():
    assert (
        build_strategy("hotspots", "refit-entropy", num_fantasies=3).config()["num_fantasies"] == 3
    )
    with pytest.raises(InputDataError, match="no option"):
        build_strategy("hotspots", "random", num_fantasies=3)  # random has no acquisition
    with pytest.raises(InputDataError, match="choose from"):
        get_strategy_spec("hotspots", "nope")
    assert strategy_names("hotspots") == (
        "entropy", "random", "refit-entropy", "svgp-entropy", "svgp-random"
    )  # fmt: skip


def test_registry_content_does_not_depend_on_what_was_imported_before():
    code = "import bo_ncgp.campaigns.strategies.registry as r; print(sorted(r.STRATEGIES))"
    first = "import bo_ncgp.campaigns.strategies.lunar; import bo_ncgp.cli.hotspots; "
    outs = [
        subprocess.run(
            [sys.executable, "-c", pre + code], capture_output=True, text=True, check=True
        ).stdout
        for pre in ("", first)
    ]
    last = [out.strip().splitlines()[-1] for out in outs]  # after any library banner
    assert last[0] == last[1] == str(sorted(STRATEGIES))
