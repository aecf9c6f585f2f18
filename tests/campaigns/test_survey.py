"""Tests of the magnetometer survey campaign: the problem, the strategies and ``bo-ncgp
survey``."""

import json
import tempfile

import numpy as np
import pytest
import torch

from bo_ncgp.campaigns import Campaign
from bo_ncgp.campaigns.strategies.registry import build_strategy, strategy_names
from bo_ncgp.campaigns.strategies.survey import (
    FieldModelConfig,
    HIPGPField,
    MaxVariance,
    RandomLocation,
    SurveyStrategy,
    SVGPField,
)
from bo_ncgp.cli import main
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.survey import MagnetometerSurvey

SMALL = FieldModelConfig(grid_size=8, natgrad_epochs=3)


def _toy(seed=0):
    rng = np.random.default_rng(5)
    X = 3 * rng.random((140, 2))
    y = 40 + 5 * np.sin(2 * X[:, 0]) * np.cos(1.5 * X[:, 1]) + 0.05 * rng.standard_normal(140)
    return MagnetometerSurvey(X[:100], y[:100], X[100:], y[100:], seed=seed)


def _run(strategy, seed=0, budget=16, out=None):
    survey = _toy(seed)
    return Campaign(
        survey,
        strategy,
        budget=budget,
        batch_size=1,
        num_initial=10,
        seed=seed,
        out_dir=out or tempfile.mkdtemp(),
    ).run(progress=False)


def test_problem_split_metrics_and_bad_input():
    s = _toy()
    assert s.pool.shape == (100, 2) and s.test_X.shape == (40, 2)
    np.testing.assert_array_equal(s.initial_design(5, None), _toy().initial_design(5, None))
    assert not np.array_equal(s.initial_design(5, None), _toy(seed=1).initial_design(5, None))
    m = s.metrics(s.test_y + 1.0)
    assert m == {"rmse": pytest.approx(1.0), "mae": pytest.approx(1.0)}
    with pytest.raises(InputDataError, match="40"):
        s.metrics(np.zeros(3))
    with pytest.raises(InputDataError, match="NaN or inf"):
        MagnetometerSurvey(np.full((2, 2), np.nan), np.zeros(2), np.zeros((1, 2)), np.zeros(1))
    with pytest.raises(InputDataError, match="3 pool locations but 2 values"):
        MagnetometerSurvey(np.zeros((3, 2)), np.zeros(2), np.zeros((1, 2)), np.zeros(1))
    assert s.remaining(np.array([0, 5])).size == 98


def test_max_variance_beats_random_on_the_toy_field_and_logs_rmse():
    hip = _run(SurveyStrategy("hip-variance", HIPGPField(SMALL), MaxVariance()), budget=25)
    rnd = _run(SurveyStrategy("random", HIPGPField(SMALL), RandomLocation()), budget=25)
    curve = [it["metrics"]["rmse"] for it in hip["iterations"]]
    assert len(curve) == 16 and all(np.isfinite(curve))
    assert curve[-1] < curve[0]
    # space-filling surveys map a smooth field better than random ones on this seed
    assert hip["iterations"][-1]["metrics"]["rmse"] < rnd["iterations"][-1]["metrics"]["rmse"]


def test_conditioned_hipgp_and_refitted_svgp_agree_on_a_fine_grid():
    """Both models use the same hyperparameters; the conditioned HIP-GP's map is the refitted
    SVGP's up to the block q and the whitening."""
    fine = FieldModelConfig(grid_size=12, natgrad_epochs=10)
    a = SurveyStrategy("hip-random", HIPGPField(fine), RandomLocation())
    b = SurveyStrategy("svgp-random", SVGPField(fine), RandomLocation())
    ra, rb = _run(a), _run(b)
    assert [e["point"] for e in ra["evaluations"]] == [e["point"] for e in rb["evaluations"]]
    ma, mb = ra["iterations"][-1]["metrics"], rb["iterations"][-1]["metrics"]
    # (HIP-GP's block q differs from the SVGP's full-rank q: close, not equal)
    assert ma["rmse"] == pytest.approx(mb["rmse"], rel=0.15)
    assert a.field.model.num_conditioned == 6


def test_resumed_campaign_repeats_the_uninterrupted_one(tmp_path):
    full = _run(
        SurveyStrategy("hip-variance", HIPGPField(SMALL), MaxVariance()), out=tmp_path / "a"
    )
    part = _run(
        SurveyStrategy("hip-variance", HIPGPField(SMALL), MaxVariance()),
        budget=13,
        out=tmp_path / "b",
    )
    assert len(part["evaluations"]) == 13
    again = Campaign.resume(
        tmp_path / "b",
        _toy(),
        SurveyStrategy("hip-variance", HIPGPField(SMALL), MaxVariance()),
        budget=16,
        extend=True,
    ).run(progress=False)
    assert [e["point"] for e in again["evaluations"]] == [e["point"] for e in full["evaluations"]]
    assert again["iterations"][-1]["metrics"]["rmse"] == pytest.approx(
        full["iterations"][-1]["metrics"]["rmse"], rel=1e-9
    )


def test_registry_and_config_checks():
    assert strategy_names("survey") == ("hip-variance", "random", "svgp-variance")
    s = build_strategy("survey", "svgp-variance", grid_size=8)
    assert s.config()["grid_size"] == 8 and "SVGP" in s.config()["model"]
    with pytest.raises(InputDataError, match="grid_size must be a positive int, got 0"):
        FieldModelConfig(grid_size=0)
    with pytest.raises(InputDataError, match="one location per step"):
        s.ask(None, 2, np.random.default_rng(0))


def test_cli_quick_run_summary_and_paired_table(tmp_path, data_root, capsys):
    out = tmp_path / "survey"
    argv = ["survey", "--quick", "--seeds", "1", "--steps", "2", "--out", str(out)]
    argv += ["--strategy", "hip-variance", "--strategy", "random", "--paths", "1"]
    argv += ["--data-root", str(data_root), "--no-progress", "--no-plot"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| hip-variance | 1 |" in text and "| random | 1 |" in text
    paired = json.loads((out / "paired.json").read_text())
    assert set(paired) == {"hip-variance", "random"}
    assert paired["random"]["final_rmse_minus_random"]["mean"] == 0.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hip-variance"]["seeds"] == 1
    # bad sizes are refused before any seed starts
    bad = ["survey", "--quick", "--pool", "12", "--paths", "1", "--data-root", str(data_root)]
    assert main([*bad, "--out", str(tmp_path / "x")]) == 2
    assert "exceed the pool" in capsys.readouterr().err


def test_cli_help_lists_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["survey", "--help"])
    text = capsys.readouterr().out
    for piece in ("--quick", "--seeds", "--steps", "(80; quick: 3)", "(results/survey)"):
        assert piece in text


def test_hipgp_field_doubles_the_embedding_factor_for_a_long_lengthscale():
    import gpytorch

    from bo_ncgp.models.hipgp import Grid

    grid = Grid([0.0, 0.0], [1.0, 1.0], (8, 8), dtype=torch.float64)
    X, y = torch.rand(6, 2, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)
    factors = []
    for ls in (0.1, 0.6):
        k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5)).double()
        k.base_kernel.lengthscale = ls
        field = HIPGPField(FieldModelConfig(grid_size=8, natgrad_epochs=1))
        field.start(X, y, k, 0.01, grid, X)
        factors.append(field.embedding_factor)
        assert field.base.embedding_factor == field.embedding_factor
    assert factors == [2, 4]
