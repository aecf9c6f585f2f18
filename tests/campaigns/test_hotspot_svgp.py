"""Tests of the svgp-entropy / svgp-random strategies: Chang et al.'s Fig. 4 loop (a GPyTorch
SVGP refitted after every survey, converted to a DualSVGP for the fantasies)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from bo_ncgp.bo.acquisition import ThresholdEntropyReduction
from bo_ncgp.campaigns import Campaign
from bo_ncgp.campaigns.strategies.hotspot_models import ConstantMeanSVGP
from bo_ncgp.campaigns.strategies.hotspots import RandomVillage, RefittedSVGP
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.cli.hotspots import add_arguments, strategy_options
from tests.campaigns.test_hotspots import INIT, _observe_initial, run, toy_pool


def svgp_entropy(**options):
    return build_strategy("hotspots", "svgp-entropy", **options)


def _parser():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def _config(parser, argv):
    args = parser.parse_args(argv)
    return build_strategy("hotspots", args.strategy, **strategy_options(args)).config()


def test_the_converted_model_predicts_as_the_refitted_svgp_and_drives_the_choice():
    prob = toy_pool()
    strat = svgp_entropy(num_steps=20, num_fantasies=4)
    hist = _observe_initial(strat, prob)
    assert strat.model.num_data == INIT and strat.model.mean_constant != 0.0
    with torch.no_grad():
        ref = strat.surrogate.gp(strat.U)
    mean, var = strat.model.predict_f(strat.U)
    assert torch.allclose(mean, ref.mean, atol=1e-5)
    assert torch.allclose(var, ref.variance, atol=1e-5)
    (choice,) = strat.ask(hist, 1, np.random.default_rng(0))
    rest = prob.remaining(hist.indices)
    scores = ThresholdEntropyReduction(
        strat.model,
        strat.U[rest],
        0.2,
        num_fantasies=4,
        compute_dtype=torch.float32,  # the strategy's default
    ).score_pool()
    assert torch.allclose(strat.acquisition.last_scores, scores)
    assert choice == rest[int(scores.argmax())]


def test_refits_are_reproducible_whatever_the_global_rng_state(tmp_path):
    torch.manual_seed(0)
    a, _ = run(tmp_path / "a", "svgp-entropy", seed=2)
    torch.manual_seed(123)  # a different global state must not change the campaign
    b, _ = run(tmp_path / "b", "svgp-entropy", seed=2)
    assert [e["point"] for e in a["evaluations"]] == [e["point"] for e in b["evaluations"]]
    assert [it["metrics"]["mse"] for it in a["iterations"]] == [
        it["metrics"]["mse"] for it in b["iterations"]
    ]


@pytest.mark.parametrize("recycle", [True, False])
def test_each_refit_starts_from_the_previous_hyperparameters_when_recycling(
    tmp_path, monkeypatch, recycle
):
    starts, ends = [], []
    fit = ConstantMeanSVGP.fit

    def recording_fit(self, *args, **kwargs):
        starts.append(float(self.kernel.outputscale))
        out = fit(self, *args, **kwargs)
        ends.append(float(self.kernel.outputscale))
        return out

    monkeypatch.setattr(ConstantMeanSVGP, "fit", recording_fit)
    run(tmp_path, "svgp-entropy", strategy=svgp_entropy(num_steps=10, recycle=recycle))
    assert len(starts) == 4  # initial fit + one refit per survey (3 steps)
    default = starts[0]
    if recycle:
        assert starts[1:] == pytest.approx(ends[:-1], rel=1e-12)
        assert ends[0] != pytest.approx(default)  # so the check above can fail
    else:
        assert starts[1:] == pytest.approx([default] * 3)


def test_cli_builds_it_with_maddox_defaults_and_checks_its_options():
    parser = _parser()
    conf = _config(parser, ["--strategy", "svgp-entropy"])
    assert conf["num_steps"] == 1000 and conf["beta"] == 1.0 and conf["lr"] == 0.01
    assert conf["rel_tol"] == 1e-5  # BoTorch's fit_gpytorch_torch default, as in their loop
    assert conf["outputscale_prior"] is False  # as in Maddox et al.'s script
    conf = _config(parser, ["--strategy", "svgp-entropy", "--outputscale-prior", "gamma",
                            "--svgp-beta", "0.1", "--svgp-steps", "7"])  # fmt: skip
    assert conf["outputscale_prior"] is True and conf["beta"] == 0.1 and conf["num_steps"] == 7
    conf = _config(parser, ["--strategy", "svgp-entropy", "--svgp-rel-tol", "0"])
    assert conf["rel_tol"] is None  # 0 switches early stopping off
    assert conf["criterion"] == "exceedance" and conf["gain"] == "reduction"
    with pytest.raises(SystemExit):
        parser.parse_args(["--strategy", "svgp-entropy", "--clamp-per-village"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--strategy", "svgp-entropy", "--svgp-rel-tol", "-1"])
    # the other strategies keep the outputscale prior by default
    assert _config(parser, ["--strategy", "entropy"])["outputscale_prior"] is True
    with pytest.raises(ValueError, match="num_steps"):
        svgp_entropy(num_steps=0)
    with pytest.raises(ValueError, match="beta"):
        svgp_entropy(beta=0.0)
    with pytest.raises(ValueError, match="rel_tol"):
        svgp_entropy(rel_tol=0.0)


def test_svgp_random_surveys_the_random_villages_with_the_refitted_model(tmp_path):
    rnd, _ = run(tmp_path / "random", "random", seed=3)
    st, strat = run(tmp_path / "svgp", "svgp-random", seed=3)
    points = [e["point"] for e in st["evaluations"]]
    assert points == [e["point"] for e in rnd["evaluations"]]  # same villages as `random`
    # its metrics are those of the SVGP refitted on every surveyed village
    assert strat.model.num_data == len(points) and strat.surrogate.gp is not None
    with torch.no_grad():
        prevalence = torch.sigmoid(strat.surrogate.gp(strat.U).mean).numpy()
    expected = toy_pool(3).metrics(prevalence, points)
    last = st["iterations"][-1]["metrics"]
    assert last["mse"] == pytest.approx(expected["mse"], rel=1e-6)
    assert last["mse"] != pytest.approx(rnd["iterations"][-1]["metrics"]["mse"], rel=1e-3)


def test_cli_builds_svgp_random_without_acquisition_settings():
    args = _parser().parse_args(["--strategy", "svgp-random", "--svgp-steps", "9"])
    strat = build_strategy("hotspots", args.strategy, **strategy_options(args))
    conf = strat.config()
    assert isinstance(strat.surrogate, RefittedSVGP)
    assert isinstance(strat.acquisition, RandomVillage) and conf["name"] == "svgp-random"
    assert conf["num_steps"] == 9 and conf["rel_tol"] == 1e-5
    assert conf["outputscale_prior"] is False  # as svgp-entropy
    assert "criterion" not in conf and "num_fantasies" not in conf


def test_fit_rejects_empty_or_mismatched_data():
    from bo_ncgp.likelihoods import Binomial

    X = torch.rand(5, 2, dtype=torch.float64)
    gp = ConstantMeanSVGP(X)
    with pytest.raises(ValueError, match="matching non-empty"):
        gp.fit(X, torch.zeros(4, dtype=torch.float64), Binomial(10).double(), steps=1)


def test_fit_stops_early_by_botorchs_moving_average_rule_as_a_truncated_fit():
    from bo_ncgp.likelihoods import Binomial

    g = torch.Generator().manual_seed(0)
    X = torch.rand(15, 2, dtype=torch.float64, generator=g)
    y = torch.randint(0, 40, (15,), generator=g).double()
    lik = Binomial(100).double()

    def fitted(steps, rel_tol):
        torch.manual_seed(1)  # q(u)'s random initial mean
        gp = ConstantMeanSVGP(X)
        loss = gp.fit(X, y, lik, steps=steps, rel_tol=rel_tol)
        return gp, loss

    full, _ = fitted(300, None)
    assert full.steps_taken == 300
    # a huge tolerance stops at the first step the 10-wide window can be judged
    assert fitted(300, 1.0)[0].steps_taken == 11
    early, loss = fitted(3000, 1e-3)
    k = early.steps_taken
    assert 11 < k < 3000
    # stopping early is exactly a fit of k steps
    trunc, loss_k = fitted(k, None)
    assert loss == loss_k
    for (n, a), (_, b) in zip(early.named_parameters(), trunc.named_parameters(), strict=True):
        assert torch.equal(a, b), n
    assert fitted(3000, 1e-4)[0].steps_taken > k  # a tighter tolerance runs longer
    with pytest.raises(ValueError, match="rel_tol"):
        ConstantMeanSVGP(X).fit(X, y, lik, steps=1, rel_tol=-1.0)


def test_a_finished_svgp_random_campaign_saved_before_rel_tol_existed_resumes(tmp_path):
    old = build_strategy("hotspots", "svgp-random", num_steps=5, rel_tol=None)
    st, _ = run(tmp_path / "old", "svgp-random", strategy=old)
    state_file = tmp_path / "old" / "state.json"
    state = json.loads(state_file.read_text())
    del state["strategy"]["rel_tol"]
    state_file.write_text(json.dumps(_as_format_1(state)))
    from experiments.chang2023.legacy import legacy_strategy

    new = legacy_strategy("svgp-random", num_steps=5, rel_tol=None)
    again = Campaign.resume(tmp_path / "old", toy_pool(0), new).run(progress=False)
    assert again["evaluations"] == st["evaluations"]


def _as_format_1(state):
    """``state`` in format 1 (no ``_checksum``), which ``Campaign.resume`` also reads."""
    return {**{k: v for k, v in state.items() if k != "_checksum"}, "format": 1}


def test_refit_every_k_surveys_streams_the_surveys_in_between():
    prob = toy_pool()
    argv = "--strategy svgp-random --svgp-steps 20 --svgp-refit-every 3".split()
    assert _config(_parser(), argv)["refit_every"] == 3
    strat = build_strategy("hotspots", "svgp-random", num_steps=20, refit_every=3)
    hist = _observe_initial(strat, prob)
    fits, gp = [], strat.surrogate.gp
    rng = np.random.default_rng(0)
    for _ in range(4):
        before = strat.model
        (i,) = strat.ask(hist, 1, rng)
        hist = _surveyed(strat, prob, hist, int(i))
        refit = strat.surrogate.gp is not gp
        fits.append(refit)
        gp = strat.surrogate.gp
        if not refit:  # the same hyperparameters and mean; the village joins Z
            assert strat.model is before and strat.model.num_hyper_steps == 0
            assert torch.equal(strat.model.Z[-1], strat.U[int(i)])
            assert strat.model.mean_constant == float(gp.mean_module.constant)
            torch.testing.assert_close(
                strat.model.kernel.outputscale, gp.kernel.outputscale, check_dtype=False
            )
    assert fits == [False, False, True, False]  # refits after surveys 3, 6, ... of the loop
    with pytest.raises(ValueError, match="refit_every must be an integer >= 1"):
        build_strategy("hotspots", "svgp-random", refit_every=0)


def _surveyed(strat, prob, hist, i):
    from bo_ncgp.campaigns.strategies.base import History
    from bo_ncgp.problems.base import Evaluation

    idx = np.append(hist.indices, i)
    ev = Evaluation(float(prob.observe(i)))
    new = History(prob.pool[idx], np.append(hist.values, ev.value), np.zeros(len(idx)), idx, [])
    strat.observe(prob.pool[[i]], [ev], new)
    return new
