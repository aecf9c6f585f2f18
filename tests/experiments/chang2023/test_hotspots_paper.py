"""Tests of the paper's hotspot command (experiments.chang2023.hotspots) and the hotspot scripts
that use Maddox et al.'s acquisition (criterion "spiked", gain "clamped")."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from bo_ncgp.campaigns import Campaign
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.cli.hotspots import add_arguments
from bo_ncgp.problems.hotspots import HotspotPool
from experiments.chang2023.hotspots import build_parser, main
from experiments.chang2023.maddox_acquisition import maddox_acquisition
from tests.campaigns.test_hotspots import DUAL, _observe_initial, _toy_csv, run, toy_pool


def _config(parser, argv):
    from bo_ncgp.cli.hotspots import strategy_options

    args = parser.parse_args(argv)
    return build_strategy("hotspots", args.strategy, **strategy_options(args)).config()


@pytest.mark.parametrize("name", ["entropy", "svgp-entropy"])
def test_clamp_per_village_is_the_clamped_gain_and_only_the_paper_command_has_it(name):
    parser = build_parser()
    conf = _config(parser, ["--strategy", name, "--criterion", "spiked", "--clamp-per-village"])
    assert (conf["criterion"], conf["gain"]) == ("spiked", "clamped")
    assert conf == _config(parser, ["--strategy", name, "--criterion", "spiked", "--gain",
                                    "clamped"])  # fmt: skip
    assert _config(parser, ["--strategy", name])["gain"] == "reduction"
    library = argparse.ArgumentParser()
    add_arguments(library)
    with pytest.raises(SystemExit):
        library.parse_args(["--strategy", name, "--clamp-per-village"])


@pytest.mark.parametrize("gain", ["reduction", "clamped"])
def test_maddox_acquisition_drives_the_svgp_entropy_choice(gain):
    prob = toy_pool()
    strat = build_strategy(
        "hotspots", "svgp-entropy", num_steps=20, num_fantasies=4, criterion="spiked", gain=gain
    )
    hist = _observe_initial(strat, prob)
    (choice,) = strat.ask(hist, 1, np.random.default_rng(0))
    rest = prob.remaining(hist.indices)
    kw = dict(num_fantasies=4, compute_dtype=torch.float32)  # the strategy's default dtype
    if gain == "clamped":
        acq = maddox_acquisition(strat.model, strat.U[rest], 0.2, **kw)
    else:
        from bo_ncgp.bo.acquisition import ThresholdEntropyReduction

        acq = ThresholdEntropyReduction(strat.model, strat.U[rest], 0.2, criterion="spiked", **kw)
    scores = acq.score_pool()
    assert torch.allclose(strat.acquisition.last_scores, scores)
    assert choice == rest[int(scores.argmax())]


def test_spiked_criterion_reaches_the_streaming_strategy():
    from bo_ncgp.bo.acquisition import ThresholdEntropyReduction

    prob = toy_pool()
    strat = build_strategy(
        "hotspots", "entropy", num_fantasies=4, compute_dtype="float64", criterion="spiked", **DUAL
    )
    hist = _observe_initial(strat, prob)
    (choice,) = strat.ask(hist, 1, np.random.default_rng(0))
    rest = prob.remaining(hist.indices)
    acq = ThresholdEntropyReduction(
        strat.model, strat.U[rest], 0.2, num_fantasies=4, criterion="spiked"
    )
    assert torch.allclose(strat.acquisition.last_scores, acq.score_pool())
    assert choice == rest[int(acq.score_pool().argmax())]
    assert strat.config()["criterion"] == "spiked" and strat.config()["gain"] == "reduction"


def test_the_command_runs_the_library_campaign_and_resumes_campaigns_stored_with_clamp(tmp_path):
    from bo_ncgp.cli import main as bo_ncgp

    _toy_csv(tmp_path / "data")
    out = tmp_path / "out"
    common = ["--quick", "--country", "toy", "--threshold", "0.2", "--seeds", "1", "--out",
              str(out), "--data-root", str(tmp_path / "data"), "--no-progress",
              "--no-plot"]  # fmt: skip
    maddox = ["--strategy", "entropy", "--criterion", "spiked"]
    assert main([*maddox, "--clamp-per-village", *common]) == 0
    state_file = out / "entropy" / "seed_0" / "state.json"
    state = json.loads(state_file.read_text())
    assert state["finished"] and state["strategy"]["gain"] == "clamped"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["entropy"]["seeds"] == 1 and summary["entropy"]["config"]["gain"] == "clamped"
    # the library command with the same settings (registered here by the import) runs the same
    assert bo_ncgp(["hotspots", *maddox, "--gain", "clamped", *common]) == 0
    # a campaign stored with ``clamp`` instead of ``gain`` resumes through the paper command only
    state["strategy"] = {
        ("clamp" if k == "gain" else k): (v == "clamped" if k == "gain" else v)
        for k, v in state["strategy"].items()
    }
    state_file.write_text(json.dumps(_as_format_1(state)))
    assert bo_ncgp(["hotspots", *maddox, "--gain", "clamped", *common]) == 1  # seed failed
    assert main([*maddox, "--clamp-per-village", *common]) == 0  # finished: nothing new
    assert json.loads(state_file.read_text())["evaluations"] == state["evaluations"]
    assert main([*maddox, *common]) == 1  # a stored clamped campaign is not an unclamped one


def test_a_campaign_saved_before_rel_tol_existed_resumes_only_without_early_stopping(tmp_path):
    from experiments.chang2023.legacy import legacy_strategy

    kw = dict(num_steps=15, num_fantasies=4)
    old = build_strategy("hotspots", "svgp-entropy", **kw, rel_tol=None)
    st, _ = run(tmp_path / "old", "svgp-entropy", strategy=old)
    state_file = tmp_path / "old" / "state.json"
    state = json.loads(state_file.read_text())
    del state["strategy"]["rel_tol"], state["strategy"]["gain"]  # saved before both existed
    state_file.write_text(json.dumps(_as_format_1(state)))
    with pytest.raises(ValueError, match="strategy differs"):
        Campaign.resume(tmp_path / "old", toy_pool(0), legacy_strategy("svgp-entropy", **kw))
    with pytest.raises(ValueError, match="strategy differs"):  # it did not clamp either
        Campaign.resume(
            tmp_path / "old", toy_pool(0),
            legacy_strategy("svgp-entropy", **kw, rel_tol=None, gain="clamped"),
        )  # fmt: skip
    with pytest.raises(ValueError, match="strategy differs"):  # without the legacy values
        Campaign.resume(
            tmp_path / "old", toy_pool(0), build_strategy("hotspots", "svgp-entropy", **kw,
                                                          rel_tol=None)
        )  # fmt: skip
    again = Campaign.resume(
        tmp_path / "old", toy_pool(0), legacy_strategy("svgp-entropy", **kw, rel_tol=None)
    ).run(progress=False)
    assert again["evaluations"] == st["evaluations"]
    # a campaign saved with ``clamp: false`` resumes as the plain reduction
    state["strategy"]["clamp"] = False
    state_file.write_text(json.dumps(_as_format_1(state)))
    again = Campaign.resume(
        tmp_path / "old", toy_pool(0), legacy_strategy("svgp-entropy", **kw, rel_tol=None)
    ).run(progress=False)
    assert again["evaluations"] == st["evaluations"] and again["strategy"]["gain"] == "reduction"


def test_stored_configs_read_in_todays_terms():
    from experiments.chang2023.legacy import legacy_config, upgrade_config

    assert legacy_config("svgp-entropy")["gain"] == "reduction" and legacy_config("x") == {}
    saved = {"name": "entropy", "criterion": "spiked", "clamp": True, "rho": 0.5}
    assert list(upgrade_config(saved)) == ["name", "criterion", "gain", "rho"]  # in place
    assert upgrade_config(saved)["gain"] == "clamped"
    assert upgrade_config({**saved, "clamp": False})["gain"] == "reduction"
    with pytest.raises(ValueError, match="both"):
        upgrade_config({**saved, "gain": "clamped"})
    with pytest.raises(ValueError, match="counterpart"):
        upgrade_config({**saved, "clamp": "yes"})
    # the default configurations campaigns stored read as today's defaults
    for name in ("entropy", "svgp-entropy"):
        today = build_strategy("hotspots", name).config()
        stored = {("clamp" if k == "gain" else k): (False if k == "gain" else v)
                  for k, v in today.items()}  # fmt: skip
        assert upgrade_config(stored) == today


def test_pooling_summaries_stored_with_clamp_and_with_gain(tmp_path):
    from experiments.chang2023 import pool_summaries as mod

    config = {"name": "svgp-entropy", "criterion": "spiked", "rel_tol": 1e-5}
    entry = lambda m, cfg: {"seeds": 1, "finished": 1, "config": cfg,  # noqa: E731
                            "mse": {"200": {"mean": m, "se": float("nan"), "n": 1}}}  # fmt: skip
    old = {"svgp-entropy": entry(0.1, {**config, "clamp": True})}
    new = {"svgp-entropy": entry(0.3, {**config, "gain": "clamped"})}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "summary.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    out = tmp_path / "pooled.json"
    argv = [str(tmp_path / "old"), str(tmp_path / "new.json"), "--strategy", "svgp-entropy"]
    assert mod.main([*argv, "--out", str(out)]) == 0  # a folder stands for its summary.json
    pooled = json.loads(out.read_text())["svgp-entropy"]
    assert pooled["seeds"] == 2 and pooled["mse"]["200"]["mean"] == pytest.approx(0.2)
    assert pooled["config"]["gain"] == "clamped" and "clamp" not in pooled["config"]
    new["svgp-entropy"]["config"]["gain"] = "reduction"
    (tmp_path / "new.json").write_text(json.dumps(new))
    with pytest.raises(ValueError, match=r"keys \['gain'\]"):
        mod.main([*argv, "--out", str(out)])


def test_timing_script_quick(data_root, tmp_path):
    from experiments.chang2023 import hotspots_timing as mod

    out = tmp_path / "timing.json"
    assert mod.main(["--quick", "--data-root", str(data_root), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"entropy", "refit-entropy", "random"}
    for r in res["results"].values():
        assert len(r["step_seconds"]) == 1 and r["mean_step_seconds"] > 0
    assert res["pool_size"] == 1480 and res["speedup_refit_over_entropy_per_step"] > 0
    assert res["settings"]["gain"] == "reduction"
    out2 = tmp_path / "timing_svgp.json"
    argv = ["--quick", "--data-root", str(data_root), "--out", str(out2)]
    spiked = ["--criterion", "spiked", "--clamp-per-village"]
    assert mod.main([*argv, *spiked, "--strategies", "entropy,svgp-entropy,refit-entropy"]) == 0
    res = json.loads(out2.read_text())
    assert set(res["results"]) == {"entropy", "svgp-entropy", "refit-entropy"}
    assert res["settings"]["criterion"] == "spiked" and res["settings"]["gain"] == "clamped"
    step = {k: v["mean_step_seconds"] for k, v in res["results"].items()}
    assert res["ratio_svgp_entropy_over_entropy_per_step"] == pytest.approx(
        step["svgp-entropy"] / step["entropy"]
    )
    assert res["ratio_refit_entropy_over_svgp_entropy_per_step"] == pytest.approx(
        step["refit-entropy"] / step["svgp-entropy"]
    )
    with pytest.raises(SystemExit):  # entropy is the reference of every ratio
        mod.main([*argv, "--strategies", "random,svgp-entropy"])
    fast = ["--candidates", "3", "--hyper-steps", "0", "--mean-constant", "learned"]
    assert mod.main([*argv, *spiked, *fast, "--strategies", "entropy,random"]) == 0
    res = json.loads(out2.read_text())
    assert (res["settings"]["candidates"], res["settings"]["hyper_steps"]) == (3, 0)
    assert res["settings"]["mean_constant"] == "learned"
    args = argparse.Namespace(
        init_rounds=1, init_hyper_steps=3, fantasies=4, criterion="exceedance",
        gain="reduction", candidates=3, hyper_steps=0, mean_constant="learned",
        refit_candidates=2, refit_fantasies=2, refit_steps=5, refit_fantasy_steps=1,
        svgp_steps=5, svgp_rel_tol=0.0, svgp_refit_every=4,
        strategies=["entropy", "svgp-entropy"],
    )  # fmt: skip
    config = {k: v.config() for k, v in mod._strategies(args).items()}
    assert config["entropy"]["num_candidates"] == config["svgp-entropy"]["num_candidates"] == 3
    assert config["entropy"]["num_hyper_steps"] == 0
    assert config["entropy"]["learn_mean_constant"] is True
    assert config["svgp-entropy"]["refit_every"] == 4


def test_acq_noise_script_estimator_converges_to_the_exact_clamped_scores():
    from experiments.chang2023 import hotspots_acq_noise as mod

    rng = np.random.default_rng(0)
    X = rng.random((40, 2))
    pool = HotspotPool(X, 1 / (1 + np.exp(-(4 * X[:, 0] - 3))), 0.1, seed=0)
    surveyed = pool.permutation[:15]
    counts = np.array([pool.observe(int(i)) for i in surveyed])
    strat = mod._fitted_strategy(pool, surveyed, counts, 10, steps=30)
    assert strat.config()["criterion"] == "spiked" and strat.config()["gain"] == "clamped"
    rest = pool.remaining(surveyed)
    acq = maddox_acquisition(strat.model, strat.U[torch.as_tensor(rest)], 0.1, num_fantasies=4)
    exact = acq.score_pool()
    g = torch.Generator().manual_seed(0)
    many = mod.mc_scores(acq, 4, 8192, 8, g)  # the noise vanishes with many samples
    assert torch.allclose(many, exact, atol=0.02 * float(exact.max()))
    few = mod.mc_scores(acq, 4, 4, 8, g)  # and with few, the clamp biases every score upwards
    assert (few - exact).mean() > 0.02 * float(exact.max())
    out = mod.run(["--quick", "--seeds", "1"])
    res = out["results"]["0"]
    assert len(res["reps"]) == 2 and 0 <= res["argmax_equal_fraction"] <= 1
    assert -1 <= res["mean_spearman"] <= 1


def _as_format_1(state):
    """``state`` in format 1 (no ``_checksum``), which ``Campaign.resume`` also reads."""
    return {**{k: v for k, v in state.items() if k != "_checksum"}, "format": 1}
