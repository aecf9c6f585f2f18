"""The long-budget report reads bench folders (runs of one strategy in several folders, the
longest run kept) and times one iteration of each strategy on a finished run's design."""

from __future__ import annotations

import json
import math

from bo_ncgp.campaigns.bench import SUITES, run_bench
from experiments.chang2023 import long_budget as L


def test_the_long_suite_runs_ours_with_fantasy_batches():
    assert {"botorch", "dual", "dual-fantasy"} <= set(SUITES["long"]["strategies"])
    assert SUITES["long"]["evaluations"] == 1000 and SUITES["long"]["batch_size"] == 25


def test_report_pairs_runs_of_two_folders_by_budget_and_bins_the_iterations(tmp_path, capsys):
    short, long = tmp_path / "short", tmp_path / "long"
    common = {"batch_size": 5, "initial": 10, "progress": None, "plot": False}
    run_bench([L.PROBLEM], ["sobol"], [0, 1], short, evaluations=20, **common)
    run_bench([L.PROBLEM], ["random", "sobol"], [0, 1], long, evaluations=30, **common)
    rep = L.report([short, long], baseline="sobol", budgets=(15, 30), bins=(0, 20))
    rand, sobol = rep["strategies"]["random"], rep["strategies"]["sobol"]
    assert sobol["evaluations"] == {0: 30, 1: 30}  # the longer run of each seed is kept
    assert rand["at"][30]["n"] == 2 and rand["paired"][30]["n"] == 2
    assert 30 not in sobol["paired"]  # no lead over itself
    # iterations from 10, 15 (bin 0) and 20, 25 (bin 20), over two seeds
    assert [b["steps"] for b in rand["seconds_by_evaluations"].values()] == [4, 4]
    t = rand["seconds_by_evaluations"][20]
    assert math.isclose(
        t["iteration"]["mean"],
        t["fit"]["mean"] + t["acquisition"]["mean"] + t["evaluation"]["mean"],
    )
    # the batches' spread, by the same bins: two batches of 5 per bin and seed
    spread = rand["spread_by_evaluations"]
    assert [b["points"] for b in spread.values()] == [20, 20]
    assert all(b["duplicate_share"] == 0.0 for b in spread.values())  # uniform draws in 6-D
    table = L.report_markdown(rep)
    assert "| random | 20 |" in table and "| sobol | 20 |" in table
    assert "| random | 20 | 0.000 |" in table.split("Batch spread")[1]
    assert "sobol's iteration / this one |" in table
    assert table.split("| sobol | 20 |")[1].split("\n")[0].rstrip().endswith("| 1.0 |")
    assert L.main([str(short), str(long), "--baseline", "sobol"]) == 0
    assert "Regret on hartmann6-noisy" in capsys.readouterr().out


def test_step_times_every_strategy_on_the_design_of_a_run(tmp_path, capsys):
    run_bench(
        [L.PROBLEM],
        ["random"],
        [0],
        tmp_path,
        evaluations=20,
        batch_size=5,
        initial=10,
        progress=None,
        plot=False,
    )
    run = tmp_path / L.PROBLEM / "random" / "seed_0"
    out = tmp_path / "step.json"
    argv = ["--step", str(run), "--n", "15", "--strategies", "random,sobol", "--out", str(out)]
    assert L.main([*argv, "--baseline", "random", "--repeats", "2"]) == 0
    saved = json.loads(out.read_text())
    assert saved["n"] == 15 and set(saved["strategies"]) == {"random", "sobol"}
    assert all(t["iteration"]["mean"] >= 0 for t in saved["strategies"].values())
    assert saved["strategies"]["random"]["speedup"] == {"mean": 1.0, "se": 0.0, "n": 2}
    sobol = saved["strategies"]["sobol"]
    assert sobol["speedup"]["n"] == 2 and sobol["speedup"]["mean"] > 0
    assert "| sobol |" in capsys.readouterr().out


def test_batch_spread_counts_repeated_and_boundary_points_in_the_unit_cube():
    import numpy as np

    pts = [[5.0, 5.0], [2.0, 3.0], [2.0, 3.0 + 1e-3], [10.0, 4.0], [6.0, 6.0], [0.0, 0.0]]
    st = {"evaluations": [{"point": p} for p in pts], "batches": [[0], [1, 2, 3], [4, 5]]}
    # box [0, 10]^2: the pair 1e-4 apart in the unit cube is one point repeated
    spread = L.batch_spread(st, np.zeros(2), np.full(2, 10.0))
    assert spread == [
        (1, {"duplicate": 2, "boundary": 1, "points": 3}),
        (4, {"duplicate": 0, "boundary": 1, "points": 2}),
    ]


def test_probe_reports_the_spread_and_the_models_variance_at_one_batch(tmp_path, capsys):
    import pytest

    common = {"batch_size": 5, "initial": 10, "progress": None, "plot": False}
    run_bench([L.PROBLEM], ["random"], [0], tmp_path, evaluations=15, **common)
    run = tmp_path / L.PROBLEM / "random" / "seed_0"
    rep = L.probe(run, 15, "dual-fantasy", q=3)
    assert rep["spread"]["points"] == 3
    # the best posterior mean at the observed points lies within the observed values' range
    assert rep["best_posterior_mean"] <= rep["incumbent_observed"] + 1.0
    assert rep["posterior_variance_median"] > 0 and rep["noise_variance_median"] > 0
    assert rep["log_ei_at_batch"]["median"] <= rep["log_ei_at_batch"]["max"] < 1.0
    removed = rep["removed_by_one_observation"]
    assert 0 < removed["min"] <= removed["median"] <= removed["max"] < 1
    with pytest.raises(ValueError, match="no objective model"):
        L.probe(run, 15, "random", q=3)
    with pytest.raises(ValueError, match="fewer than 16"):
        L.probe(run, 16, "dual-fantasy", q=3)


def test_noise_record_puts_the_streamed_and_the_at_once_fit_in_the_problems_units(tmp_path, capsys):
    import pytest

    common = {"batch_size": 5, "initial": 10, "progress": None, "plot": False}
    run_bench([L.PROBLEM], ["dual-fantasy", "random"], [0], tmp_path, evaluations=20, **common)
    run = tmp_path / L.PROBLEM / "dual-fantasy" / "seed_0"
    first, last = L.noise_record(run, [10, 20])
    # after the first batch the streamed model is the fit on those points at once
    assert first["recorded_at"] == 10
    assert first["streamed_noise"] == pytest.approx(first["at_once_noise"], rel=1e-6)
    assert first["streamed_outputscale"] == pytest.approx(first["at_once_outputscale"], rel=1e-6)
    # later the at-once fit divides by the spread of all 20 values, the campaign by the first
    # 10's: converted, both are variances of the same values' noise, so of the same order
    assert last["recorded_at"] == 20
    assert 0.01 < last["streamed_noise"] / last["at_once_noise"] < 100
    assert L.main(["--noise", str(run), "--budgets", "10,20"]) == 0
    assert f"| {run} | 20 |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="recorded no model fit"):
        L.noise_record(tmp_path / L.PROBLEM / "random" / "seed_0", [20])
