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
    table = L.report_markdown(rep)
    assert "| random | 20 |" in table and "| sobol | 20 |" in table
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
