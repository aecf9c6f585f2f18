"""Tests of the hotspot campaign: strategies (bo_ncgp.campaigns.strategies.hotspots, built
through the registry) run through the generic runner, and the ``bo-ncgp hotspots`` command
(bo_ncgp.cli.hotspots), on a small hand-made pool."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pytest
import torch

from bo_ncgp.bo.acquisition import ThresholdEntropyReduction
from bo_ncgp.campaigns import Campaign
from bo_ncgp.campaigns.storage import read_json
from bo_ncgp.campaigns.strategies.base import History
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.cli.hotspots import add_arguments
from bo_ncgp.problems.base import Evaluation
from bo_ncgp.problems.hotspots import HotspotPool

INIT, STEPS = 12, 3
DUAL = dict(num_inner_steps=3, num_hyper_steps=1, init_rounds=1, init_hyper_steps=3)


def toy_pool(seed=0, P=40):
    rng = np.random.default_rng(5)
    X = rng.random((P, 8)) * [10, 5, 1, 1, 1, 1, 100, 300]
    theta = 1 / (1 + np.exp(-(2 * np.sin(0.6 * X[:, 0]) - 1.5 + 0.4 * X[:, 1])))
    return HotspotPool(X, theta, 0.2, seed=seed)


def hotspot_strategy(name, **options):
    return build_strategy("hotspots", name, **options)


STRATEGIES = {
    "entropy": lambda: hotspot_strategy(
        "entropy", num_fantasies=4, compute_dtype="float64", **DUAL
    ),
    "random": lambda: hotspot_strategy("random", **DUAL),
    "refit-entropy": lambda: hotspot_strategy(
        "refit-entropy", num_candidates=3, num_fantasies=2, num_steps=15, fantasy_steps=2
    ),
    "svgp-entropy": lambda: hotspot_strategy("svgp-entropy", num_steps=15, num_fantasies=4),
    "svgp-random": lambda: hotspot_strategy("svgp-random", num_steps=15),
}


def run(out, name, seed=0, strategy=None):
    strategy = strategy or STRATEGIES[name]()
    camp = Campaign(
        toy_pool(seed), strategy, INIT + STEPS, 1, INIT, seed=seed, out_dir=out
    )  # fmt: skip
    return camp.run(progress=False), strategy


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_loop_protocol_and_metrics_on_a_hand_made_pool(tmp_path, name):
    st, strat = run(tmp_path / name, name, seed=1)
    prob = toy_pool(1)
    chosen = [int(e["point"]) for e in st["evaluations"]]
    assert chosen[:INIT] == prob.permutation[:INIT].tolist()  # strategy-independent design
    assert len(set(chosen)) == INIT + STEPS  # never a village twice
    assert [e["value"] for e in st["evaluations"]] == [float(prob.observe(i)) for i in chosen]
    its = st["iterations"]
    assert [it["num_evaluations"] for it in its] == list(range(INIT, INIT + STEPS + 1))
    # features scaled with the initial villages' min and max
    X0 = prob.pool[chosen[:INIT]]
    U = (prob.pool - X0.min(0)) / (X0.max(0) - X0.min(0))
    assert np.allclose(strat.U.numpy(), U)
    # the logged metrics of the last step, recomputed by hand from the final model
    with torch.no_grad():
        mean = strat.model.predict_f(strat.U)[0].numpy()
    rest = np.setdiff1d(np.arange(40), chosen)
    p = 1 / (1 + np.exp(-mean[rest]))
    logged = its[-1]["metrics"]
    assert logged["accuracy"] == pytest.approx(np.mean((p > 0.2) == (prob.theta[rest] > 0.2)))
    assert logged["mse"] == pytest.approx(np.mean((p - prob.theta[rest]) ** 2))
    assert logged["num_remaining"] == rest.size
    # the same scores over all 40 villages, the surveyed ones included
    p_all = 1 / (1 + np.exp(-mean))
    assert logged["accuracy_all"] == pytest.approx(np.mean((p_all > 0.2) == (prob.theta > 0.2)))
    assert logged["mse_all"] == pytest.approx(np.mean((p_all - prob.theta) ** 2))
    for it in its[1:]:
        m = it["metrics"]
        assert m["step_seconds"] == pytest.approx(m["acquisition_seconds"] + m["update_seconds"])
        assert m["acquisition_seconds"] > 0 and m["update_seconds"] > 0
    assert its[0]["metrics"]["acquisition_seconds"] == 0.0  # the initial fit has no acquisition


def _observe_initial(strategy, prob):
    strategy.setup(prob, 0)
    idx = prob.initial_design(INIT, None)
    evs = [Evaluation(float(prob.observe(i))) for i in idx]
    hist = History(prob.pool[idx], np.array([e.value for e in evs]), np.zeros(INIT), idx, [idx])
    strategy.observe(prob.pool[idx], evs, hist)
    return hist


def test_entropy_picks_the_argmax_of_the_acquisition():
    prob = toy_pool()
    strat = STRATEGIES["entropy"]()
    hist = _observe_initial(strat, prob)
    (choice,) = strat.ask(hist, 1, np.random.default_rng(0))
    rest = prob.remaining(hist.indices)
    acq = ThresholdEntropyReduction(strat.model, strat.U[rest], 0.2, num_fantasies=4)
    scores = acq.score_pool()
    assert choice == rest[int(scores.argmax())]
    assert torch.allclose(strat.acquisition.last_scores, scores)
    with pytest.raises(ValueError, match="batch size 1"):
        strat.ask(hist, 2, np.random.default_rng(0))


def test_criterion_and_gain_reach_the_acquisition_and_the_config():
    from bo_ncgp.bo.acquisition import CRITERIA, GAINS, register_gain
    from bo_ncgp.cli.hotspots import strategy_options

    def doubled(h_now, h_after):  # a toy gain registered by a user
        return 2 * (h_now - h_after)

    prob = toy_pool()
    register_gain("test-doubled", doubled)
    try:
        strat = hotspot_strategy(
            "entropy", num_fantasies=4, compute_dtype="float64", gain="test-doubled", **DUAL
        )
        hist = _observe_initial(strat, prob)
        (choice,) = strat.ask(hist, 1, np.random.default_rng(0))
        rest = prob.remaining(hist.indices)
        acq = ThresholdEntropyReduction(
            strat.model, strat.U[rest], 0.2, num_fantasies=4, gain=doubled
        )
        assert torch.allclose(strat.acquisition.last_scores, acq.score_pool())
        assert choice == rest[int(acq.score_pool().argmax())]
        assert strat.config()["gain"] == "test-doubled"
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(["--strategy", "entropy", "--gain", "test-doubled"])
        config = hotspot_strategy("entropy", **strategy_options(args)).config()
        assert config["gain"] == "test-doubled"
    finally:
        del GAINS["test-doubled"]
    args = parser.parse_args([])
    config = hotspot_strategy(args.strategy, **strategy_options(args)).config()
    assert (config["criterion"], config["gain"]) == ("exceedance", "reduction")
    # the CLI offers exactly the registered criteria and gains, as registered when parsing
    for dest, registry in (("criterion", CRITERIA), ("gain", GAINS)):
        choices = next(x.choices for x in parser._actions if x.dest == dest)
        assert tuple(choices) == tuple(registry)
    with pytest.raises(SystemExit):
        parser.parse_args(["--gain", "test-doubled"])  # no longer registered
    with pytest.raises(ValueError, match="criterion must be one of"):
        hotspot_strategy("entropy", criterion="entropy")
    with pytest.raises(ValueError, match="gain must be one of"):
        hotspot_strategy("entropy", gain="clamp")


def test_the_library_names_no_option_of_a_paper_script():
    from bo_ncgp.bo.acquisition import CRITERIA, GAINS

    if "experiments.chang2023.maddox_acquisition" not in sys.modules:
        assert tuple(CRITERIA) == ("exceedance",) and tuple(GAINS) == ("reduction",)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {o for a in parser._actions for o in a.option_strings}
    assert "--clamp-per-village" not in flags and {"--criterion", "--gain"} <= flags


def _interrupted(strategy):
    """``strategy`` whose second acquisition raises, as a killed run would stop."""
    choose, calls = strategy.acquisition.choose, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return choose(*args)

    strategy.acquisition.choose = interrupted
    return strategy


@pytest.mark.parametrize("name", ["entropy", "svgp-entropy", "refit-entropy"])
def test_resume_after_an_interruption_matches_an_uninterrupted_run(tmp_path, name):
    """Bit for bit, under torch's own default dtype as ``bo-ncgp hotspots`` runs (the
    fixture restores float64 afterwards)."""
    import torch

    torch.set_default_dtype(torch.float32)
    ref, _ = run(tmp_path / "ref", name)
    make = STRATEGIES[name]
    interrupted = _interrupted(make())
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", name, strategy=interrupted)
    saved = json.loads((tmp_path / "cut" / "state.json").read_text())
    assert len(saved["evaluations"]) == INIT + 1 and not saved["finished"]
    st = Campaign.resume(tmp_path / "cut", toy_pool(0), make()).run(progress=False)
    assert [e["point"] for e in st["evaluations"]] == [e["point"] for e in ref["evaluations"]]
    for a, b in zip(st["iterations"], ref["iterations"], strict=True):
        assert a["metrics"]["accuracy"] == b["metrics"]["accuracy"]
        assert a["metrics"]["mse"] == b["metrics"]["mse"]  # bit for bit


def _toy_csv(root):
    prob = toy_pool()
    (root / "hotspots").mkdir(parents=True)
    cols = "lng,lat,bioclim1,bioclim12,bioclim15,bioclim4,dist_to_water_m,elev_m,disease,theta"
    rows = [
        ",".join([*(f"{v:.10g}" for v in x), "SM", f"{t:.10g}"])
        for x, t in zip(prob.pool, prob.theta, strict=True)
    ]
    (root / "hotspots" / "toy_data.csv").write_text("\r".join([cols, *rows]) + "\r")


def test_cli_quick_runs_summarises_and_plots(tmp_path):
    from bo_ncgp.cli import main

    _toy_csv(tmp_path / "data")
    out = tmp_path / "out"
    common = ["--quick", "--country", "toy", "--threshold", "0.2", "--out", str(out)]
    common += ["--data-root", str(tmp_path / "data"), "--no-progress", "--no-plot"]
    assert main(["hotspots", "--strategy", "random", *common]) == 0  # quick: 2 seeds
    assert main(["hotspots", "--strategy", "entropy", "--seeds", "1", *common]) == 0
    summary = read_json(out / "summary.json")  # strict JSON: NaN is written as "NaN"
    assert set(summary) == {"entropy", "random"}
    for name, seeds in (("entropy", 1), ("random", 2)):
        entry = summary[name]
        assert entry["seeds"] == entry["finished"] == seeds
        last = entry["accuracy"]["24"]  # 20 initial villages + 4 steps
        assert last["n"] == seeds and 0 <= last["mean"] <= 1
        assert np.isfinite(last["se"]) == (seeds > 1)
        assert entry["accuracy"]["150"]["n"] == 0  # not reached in the quick preset
        assert entry["step_seconds"]["mean"] > 0
    states = [json.loads(p.read_text()) for p in sorted((out / "random").rglob("state.json"))]
    assert [s["seed"] for s in states] == [0, 1]
    # hotspots found = true hotspots (theta > 0.2) among the surveyed villages, by hand
    prob = toy_pool()
    found = [sum(prob.theta[e["point"]] > 0.2 for e in s["evaluations"][:24]) for s in states]
    assert summary["random"]["hotspots_found"]["24"]["mean"] == pytest.approx(np.mean(found))
    logged = [s["iterations"][-1]["metrics"]["mse_all"] for s in states]  # step 24
    assert summary["random"]["mse_all"]["24"]["mean"] == pytest.approx(np.mean(logged))
    assert summary["random"]["curves"]["accuracy_all"]["seeds"] == 2
    assert not (out / "hotspots.png").exists()
    # a second call resumes the finished seed (nothing new is evaluated), then plots
    before = (out / "entropy" / "seed_0" / "state.json").read_text()
    assert main(["hotspots", "--strategy", "entropy", "--seeds", "1", *common[:-1]]) == 0
    after = json.loads((out / "entropy" / "seed_0" / "state.json").read_text())
    assert after["evaluations"] == json.loads(before)["evaluations"]
    assert (out / "hotspots.png").stat().st_size > 0


def test_divergence_guard_redoes_the_update_with_more_damping():
    from bo_ncgp.exceptions import NumericalWarning

    prob = toy_pool()
    kw = dict(DUAL, num_inner_steps=2)
    strat = hotspot_strategy("random", max_abs_logit=1e-3, **kw)  # every update diverges
    hist = _observe_initial(strat, prob)
    i = int(prob.remaining(hist.indices)[0])
    idx = np.append(hist.indices, i)
    h2 = History(prob.pool[idx], np.zeros(INIT + 1), np.zeros(INIT + 1), idx, [])
    with pytest.warns(NumericalWarning, match="diverged"):
        strat.observe(prob.pool[[i]], [Evaluation(float(prob.observe(i)))], h2)
    assert strat.surrogate.retries == 6  # rho 0.5 -> 0.25 -> ... -> 0.0078 < 1e-2
    assert strat.model.num_data == INIT + 1 and strat.model.rho == 0.5
    assert torch.isfinite(strat.model.predict_f(strat.U)[0]).all()
    normal = hotspot_strategy("random", **kw)
    _observe_initial(normal, prob)
    normal.observe(prob.pool[[i]], [Evaluation(float(prob.observe(i)))], h2)
    assert normal.surrogate.retries == 0


def test_refit_fantasies_warm_start_at_the_fitted_posterior():
    from bo_ncgp.bo.acquisition import exceedance_entropy
    from bo_ncgp.campaigns.strategies.hotspot_models import RefitGPConfig, RefitVariationalGP
    from bo_ncgp.likelihoods import Binomial

    prob = toy_pool()
    X = torch.as_tensor((prob.pool - prob.pool.min(0)) / np.ptp(prob.pool, 0))
    idx = prob.permutation[:15]
    y = torch.tensor([float(prob.observe(i)) for i in idx])
    config = RefitGPConfig(num_steps=30, fantasy_steps=0)
    gp = RefitVariationalGP(Binomial(100), config).fit(X[idx], y)
    pool = X[prob.remaining(idx)]
    mean, var = gp.predict_f(pool)
    H0 = exceedance_entropy(mean, var, -1.0).sum()
    Y = torch.tensor([[0.0, 50.0], [10.0, 90.0]])
    cand = pool[:2]
    H = gp.fantasy_entropies(cand, Y, pool, -1.0)  # no refit steps: the fitted model itself
    assert torch.allclose(H, H0.expand(2, 2), atol=1e-8)
    gp.fantasy_steps = 4
    H4 = gp.fantasy_entropies(cand, Y, pool, -1.0)
    assert (H4 - H0).abs().min() > 1e-3  # the fantasy observation moves the posterior
    gp.fantasy_steps = 20
    assert torch.allclose(gp.fantasy_entropies(cand, Y, pool, -1.0), H4, rtol=0, atol=0.05)


def test_cli_reports_bad_input_before_running(tmp_path, capsys):
    from bo_ncgp.cli import main

    _toy_csv(tmp_path / "data")
    common = ["--quick", "--country", "toy", "--threshold", "0.2", "--out", str(tmp_path / "o")]
    common += ["--data-root", str(tmp_path / "data"), "--no-progress", "--no-plot"]
    for bad in (["--seeds", "0"], ["--steps", "-1"], ["--threshold", "1.5"], ["--rho", "2"]):
        with pytest.raises(SystemExit) as err:
            main(["hotspots", *common, *bad])
        assert err.value.code == 2
        assert bad[0] in capsys.readouterr().err
    # 30 + 20 villages > the 40 of the toy file
    assert main(["hotspots", *common[1:], "--initial", "30", "--steps", "20"]) == 2
    assert "exceed the 40 villages" in capsys.readouterr().err
    missing = ["--country", "toy", "--threshold", "0.2", "--out", str(tmp_path / "o"), "--quick"]
    assert main(["hotspots", *missing, "--data-root", str(tmp_path / "nowhere")]) == 2
    assert "toy_data.csv" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing ran


def test_summary_counts_hotspots_found_and_refuses_other_data(tmp_path):
    from bo_ncgp.cli.hotspots import summarise_hotspots

    run(tmp_path / "random", "random")
    prob = toy_pool()
    summary = summarise_hotspots(tmp_path, at=(12, 15), plot=False, pool=prob)
    st = json.loads((tmp_path / "random" / "state.json").read_text())
    for step in (12, 15):
        pts = [e["point"] for e in st["evaluations"][:step]]
        want = float(np.sum(prob.theta[pts] > 0.2))
        assert summary["random"]["hotspots_found"][str(step)]["mean"] == want
    curve = summary["random"]["curves"]["accuracy"]  # every step, mean over the one seed
    assert curve["steps"] == list(range(INIT, INIT + STEPS + 1)) and curve["seeds"] == 1
    assert curve["mean"] == [round(it["metrics"]["accuracy"], 6) for it in st["iterations"]]
    assert "hotspots_found" not in summarise_hotspots(tmp_path, at=(15,), plot=False)["random"]
    other = HotspotPool(prob.pool, np.clip(prob.theta + 0.01, 0, 1), 0.2)
    with pytest.raises(ValueError, match="other data"):
        summarise_hotspots(tmp_path, at=(15,), plot=False, pool=other)


def test_constant_mean_kernel_adds_the_learned_constant_and_drops_the_outputscale_prior():
    from bo_ncgp.campaigns.strategies.hotspot_models import CONSTANT_INIT, hotspot_kernel

    X = torch.rand(5, 8)
    plain = hotspot_kernel(8)
    biased = hotspot_kernel(8, constant_mean=True, outputscale_prior=False)
    biased.kernels[0].load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        diff = biased(X).to_dense() - plain(X).to_dense()
    torch.testing.assert_close(diff, torch.full((5, 5), CONSTANT_INIT, dtype=diff.dtype))
    priors = {name for name, *_ in biased.named_priors()}
    assert priors == {"kernels.0.base_kernel.lengthscale_prior"}
    assert {name for name, *_ in plain.named_priors()} == {
        "base_kernel.lengthscale_prior",
        "outputscale_prior",
    }


def test_constant_mean_option_reaches_the_models_and_learns_the_offset():
    # all villages at prevalence ~0.03: far from the data a zero-mean model reverts to
    # sigmoid(0) = 0.5, a constant-mean model to the learned offset
    rng = np.random.default_rng(0)
    X = rng.random((60, 8))
    pool = HotspotPool(X, np.full(60, 0.03), 0.1, seed=0)
    far = torch.full((1, 8), 3.0)  # outside the min-max box of the villages
    preds = {}
    for mean in ("zero", "constant"):
        from bo_ncgp.cli.hotspots import add_arguments, strategy_options

        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(
            "--strategy random --inner-steps 5 --hyper-steps 1 --lr 0.01 --init-rounds 2 "
            f"--init-hyper-steps 20 --hyper-objective dual --mean {mean} "
            "--outputscale-prior none".split()
        )
        strat = hotspot_strategy("random", **strategy_options(args))
        assert strat.config()["constant_mean"] is (mean == "constant")
        assert strat.config()["outputscale_prior"] is False
        strat.setup(pool, 0)
        idx = np.arange(30)
        evs = [Evaluation(float(pool.observe(i))) for i in idx]
        hist = History(X[idx], np.array([e.value for e in evs]), np.zeros(30), idx, [idx])
        strat.observe(X[idx], evs, hist)
        with torch.no_grad():
            preds[mean] = float(torch.sigmoid(strat.model.predict_f(far)[0]))
    assert preds["constant"] < 0.2 < preds["zero"]


def test_model_check_script_quick(data_root, tmp_path):
    from experiments.chang2023 import hotspots_model_check as mod

    out = tmp_path / "check.json"
    names = "const-prevalence;default;const-mean,no-os-prior;ref-svgp;maddox"
    argv = ["--quick", "--data-root", str(data_root), "--out", str(out), "--variants", names]
    assert mod.main(argv) == 0
    res = json.loads(out.read_text())
    assert list(res["variants"]) == names.split(";")
    # the constant predictor, recomputed by hand from the first 20 surveys of seed 0
    pool = HotspotPool.from_country("civ", seed=0, root=data_root)
    idx = pool.permutation[:20]
    p0 = np.mean([pool.observe(i) for i in idx]) / 100
    rest = np.setdiff1d(np.arange(pool.theta.size), idx)
    want = np.mean((p0 - pool.theta[rest]) ** 2)
    got = res["variants"]["const-prevalence"]["summary"]["mse"]
    assert got == pytest.approx(want, rel=1e-12)
    for name in names.split(";")[1:]:
        s = res["variants"][name]["summary"]
        assert 0 <= s["mse"] < 1 and 0 <= s["accuracy"] <= 1 and s["outputscale"] > 0
    assert "constant" in res["variants"]["const-mean,no-os-prior"]["summary"]
    assert "constant" in res["variants"]["maddox"]["summary"]  # its learned ConstantMean


def test_candidate_prescreen_rescores_the_best_exceedance_reductions():
    from bo_ncgp.bo.acquisition import CRITERIA, register_criterion
    from bo_ncgp.cli.hotspots import strategy_options

    def variance(mean, var, level):  # a toy criterion whose best village is another one
        return var

    prob = toy_pool()
    register_criterion("test-variance", variance)
    try:
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args(
            "--strategy entropy --criterion test-variance --candidates 5 --fantasies 4 "
            "--compute-dtype float64".split()
        )
        strat = hotspot_strategy("entropy", **strategy_options(args), **DUAL)
        assert strat.config()["num_candidates"] == 5
        hist = _observe_initial(strat, prob)
        (choice,) = strat.ask(hist, 1, np.random.default_rng(0))
        rest = prob.remaining(hist.indices)
        pool = strat.U[rest]
        screen = ThresholdEntropyReduction(strat.model, pool, 0.2, num_fantasies=4).score_pool()
        full = ThresholdEntropyReduction(
            strat.model, pool, 0.2, num_fantasies=4, criterion="test-variance"
        ).score_pool()
        top = torch.topk(screen, 5).indices
        scores = strat.acquisition.last_scores
        assert set(torch.nonzero(torch.isfinite(scores)).flatten().tolist()) == set(top.tolist())
        torch.testing.assert_close(scores[top], full[top])
        assert choice == rest[int(top[int(full[top].argmax())])]
        assert choice != rest[int(full.argmax())]  # the prescreen changed the choice here
        # as many candidates as villages: every village scored by the criterion
        many = hotspot_strategy(
            "entropy", num_fantasies=4, compute_dtype="float64", criterion="test-variance",
            num_candidates=len(rest), **DUAL,
        )  # fmt: skip
        hist = _observe_initial(many, prob)
        many.ask(hist, 1, np.random.default_rng(0))
        torch.testing.assert_close(many.acquisition.last_scores, full)
    finally:
        del CRITERIA["test-variance"]
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=r"num_candidates \(or None\) must be an integer >= 1"):
            hotspot_strategy("entropy", num_candidates=bad)


def test_learned_mean_constant_reaches_the_streaming_model_and_moves():
    from bo_ncgp.cli.hotspots import strategy_options

    prob = toy_pool()
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args("--strategy random --mean-constant learned".split())
    strat = hotspot_strategy("random", **{**DUAL, "init_hyper_steps": 20, **strategy_options(args)})
    assert strat.config()["learn_mean_constant"] is True
    hist = _observe_initial(strat, prob)
    model = strat.model
    y = torch.tensor([prob.observe(i) for i in hist.indices], dtype=torch.float64)
    p = float(y.sum()) / (100 * len(y))
    start = np.log(p) - np.log1p(-p)  # the initial value: logit of the pooled prevalence
    assert model.learn_mean_constant
    assert model.mean_constant != 0.0 and abs(model.mean_constant - start) < 1.0
    assert model.mean_constant != pytest.approx(start, abs=1e-6)  # trained
    zero = hotspot_strategy("random", **DUAL)
    _observe_initial(zero, prob)
    assert not zero.model.learn_mean_constant and zero.model.mean_constant == 0.0
