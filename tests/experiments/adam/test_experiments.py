"""The SparseGAM experiments (Adam, Durrande & John) run in their --quick configuration and
write well-formed results (the full runs: experiments/adam/RESULTS.md)."""

from __future__ import annotations

import json
import math

import torch

from experiments.adam import friedman, timing


def test_analytic_anova_terms_of_the_test_function():
    exp = friedman
    X = torch.rand(5000, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    terms = exp.analytic_components(X)
    # the terms add up to f, and every non-constant term has zero mean (Monte Carlo)
    torch.testing.assert_close(terms.sum(-1), exp.friedman(X))
    assert terms[:, 1:].mean(0).abs().max() < 0.1
    # f_12 integrates to zero in x2 for fixed x1 (quadrature)
    t = torch.linspace(0, 1, 2001, dtype=torch.float64)
    grid = torch.zeros(2001, 6, dtype=torch.float64)
    grid[:, 0], grid[:, 1] = 0.37, t
    assert abs(float(torch.trapezoid(exp.analytic_components(grid)[:, 7], t))) < 1e-6


def test_friedman_quick(tmp_path):
    exp = friedman
    # two variants keep the test short; every family is exercised in tests/models/test_gam*.py
    argv = ["--quick", "--out", str(tmp_path), "--families", "mean_field", "--extra-ranks", "8"]
    assert exp.main(argv) == 0
    saved = json.loads((tmp_path / "friedman_quick.json").read_text())
    assert set(saved["families"]) == {"mean_field", "coupled_precision_R8"}
    for r in saved["families"].values():
        assert math.isfinite(r["test_nlpd"]) and math.isfinite(r["elbo_per_datum"])
        assert set(r["components"]) == set(exp.NAMES)
        assert 0.0 <= r["max_abs_component_correlation"] <= 1.0 + 1e-9
        for name in exp.NAMES[1:]:
            assert 0.0 <= r["components"][name]["coverage95"] <= 1.0
            assert r["components"][name]["rmse"] >= 0.0
    # --quick draws the first family's figure only
    assert (tmp_path / "friedman_quick_mean_field.png").stat().st_size > 0
    assert not (tmp_path / "friedman_quick_coupled_precision_R8.png").exists()


def test_timing_quick(tmp_path):
    exp = timing
    assert exp.main(["--quick", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "timing_quick.json").read_text())
    cs = saved["config"]["components"]
    for label, t in saved["timings_seconds"].items():
        for w in ("kl", "expect", "elbo"):
            assert len(t[w]) == len(cs) and all(v >= 0 for v in t[w])
        assert math.isfinite(saved["summary"][label]["slope_storage"])
    # storage column of Table 1: C M^2 (mean field, coupled) vs C^2 M^2 (full), exactly
    M = saved["config"]["M"]
    counts = saved["num_variational_parameters"]
    assert counts["mean_field"] == [c * (M * M + M) for c in cs]
    assert counts["coupled_precision"] == [c * (M * M + M) + M for c in cs]  # + column scales
    assert counts["full"] == [(c * M) ** 2 + c * M for c in cs]
