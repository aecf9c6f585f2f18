"""Tests of the committable per-seed campaign archive (bo_ncgp.campaigns.archive): exact round
trip, pooling of archived seeds with new ones, and the readers that use it (summary, compare)."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from bo_ncgp.campaigns.archive import load_states, read_archive, write_archive
from bo_ncgp.campaigns.compare import paired_differences
from bo_ncgp.campaigns.plotting import best_so_far
from bo_ncgp.cli.hotspots import summarise_hotspots
from tests.campaigns.test_hotspots import run, toy_pool


def _drop_states(folder):
    for f in list(folder.rglob("state.json")):
        shutil.rmtree(f.parent)


def test_hotspot_summary_and_paired_comparison_survive_deleting_the_states(tmp_path):
    a = tmp_path / "a"
    for seed in (0, 1, 2):
        run(a / "random" / f"seed_{seed}", "random", seed=seed)
    full = summarise_hotspots(a, at=(12, 15), plot=False, pool=toy_pool())
    states = {st["seed"]: st for st in load_states(a / "random")}
    assert (a / "random" / "archive" / "iterations.csv").exists()
    other = tmp_path / "b" / "random"  # a second "strategy" folder on the same seeds
    shutil.copytree(a / "random", other)
    want = paired_differences(a / "random", other, ("accuracy", "mse"), (12, 15))

    _drop_states(a)  # a fresh clone: only the archive is left
    assert not list(a.rglob("state.json"))
    lean = {st["seed"]: st for st in load_states(a / "random")}
    assert sorted(lean) == [0, 1, 2]
    for seed, st in states.items():  # every value the readers use, bit for bit
        assert [it["metrics"] for it in lean[seed]["iterations"]] == [
            it["metrics"] for it in st["iterations"]
        ]
        assert [e["point"] for e in lean[seed]["evaluations"]] == [
            e["point"] for e in st["evaluations"]
        ]
        assert lean[seed]["problem"] == st["problem"] and lean[seed]["finished"]
    again = summarise_hotspots(a, at=(12, 15), plot=False, pool=toy_pool())
    assert json.dumps(again, sort_keys=True) == json.dumps(full, sort_keys=True)
    got = paired_differences(a / "random", other, ("accuracy", "mse"), (12, 15))
    assert got == want


def test_new_seeds_pool_with_archived_ones_and_a_state_wins_over_its_archived_copy(tmp_path):
    folder = tmp_path / "random"
    for seed in (0, 1):
        run(folder / f"seed_{seed}", "random", seed=seed)
    summarise_hotspots(tmp_path, at=(15,), plot=False)
    _drop_states(tmp_path)
    run(folder / "seed_2", "random", seed=2)  # a new seed on a "new machine"
    run(folder / "seed_1", "random", seed=1)  # seed 1 again: its state.json must be used
    rows = (folder / "archive" / "iterations.csv").read_text().splitlines()
    col = rows[0].split(",").index("mse")

    def corrupt(row):  # the archived seed-1 values, to see which copy is read
        cells = row.split(",")
        if cells[0] == "1":
            cells[col] = "9.0"
        return ",".join(cells)

    patched = [rows[0], *map(corrupt, rows[1:])]
    (folder / "archive" / "iterations.csv").write_text("\n".join(patched) + "\n")

    summary = summarise_hotspots(tmp_path, at=(15,), plot=False)["random"]
    assert summary["seeds"] == 3 and summary["finished"] == 3
    mses = {st["seed"]: st["iterations"][-1]["metrics"]["mse"] for st in load_states(folder)}
    assert sorted(mses) == [0, 1, 2] and mses[1] != 9.0
    mean = sum(mses.values()) / 3
    assert summary["mse"]["15"]["mean"] == pytest.approx(mean, rel=1e-12)
    assert sorted(read_archive(folder)) == [0, 1, 2]  # the archive now holds all three


def test_round_trip_of_vector_points_nan_values_and_errors(tmp_path):
    st = {
        "seed": 4,
        "strategy": {"name": "bo", "q": 2},
        "problem": {"name": "lander", "dim": 2},
        "budget": 3,
        "batch_size": 2,
        "num_initial": 1,
        "finished": False,
        "recommendation": {"point": [0.25, 0.5], "heldout_value": 101.5},
        "evaluations": [
            {"point": [0.1, 0.2], "value": float("nan"), "success": False, "error": "crash, x"},
            {"point": [0.3, 1e-17], "value": -3.0, "success": True, "error": None},
            {"point": [0.5, 0.7], "value": 2.5, "success": None, "error": None},
        ],
        "iterations": [
            {"iteration": 0, "num_evaluations": 1, "metrics": {}},
            {"iteration": 1, "num_evaluations": 3, "metrics": {"gap": 0.1 + 0.2}},
        ],
    }
    write_archive(tmp_path, [st])
    back = read_archive(tmp_path)[4]
    assert [e["point"] for e in back["evaluations"]] == [e["point"] for e in st["evaluations"]]
    assert [e["success"] for e in back["evaluations"]] == [False, True, None]
    assert [e["error"] for e in back["evaluations"]] == ["crash, x", None, None]
    assert math.isnan(back["evaluations"][0]["value"])
    assert best_so_far(back).tolist()[1:] == best_so_far(st).tolist()[1:] == [-3.0, 2.5]
    assert back["iterations"][1]["metrics"]["gap"] == 0.1 + 0.2  # repr: exact
    assert back["iterations"][0]["metrics"] == {}
    assert "update_seconds" not in back["iterations"][0]  # not logged, not invented
    assert back["recommendation"] == st["recommendation"] and back["finished"] is False


def test_the_runner_timings_round_trip_beside_metrics_of_the_same_name(tmp_path):
    its = [
        {"iteration": 0, "num_evaluations": 1, "best_value": 1.0, "update_seconds": 0.5,
         "metrics": {"update_seconds": 0.25}},
    ]  # fmt: skip
    st = {"seed": 0, "strategy": {"name": "s"}, "problem": {"name": "p"}, "budget": 1,
          "batch_size": 1, "num_initial": 1, "finished": True, "iterations": its,
          "evaluations": [{"point": 1, "value": 1.0, "success": None, "error": None}]}  # fmt: skip
    write_archive(tmp_path, [st])
    (it,) = read_archive(tmp_path)[0]["iterations"]
    assert it["update_seconds"] == 0.5 and it["best_value"] == 1.0
    assert it["metrics"] == {"update_seconds": 0.25}


def test_bad_input_is_refused_with_a_message(tmp_path):
    base = {"strategy": {"name": "s"}, "evaluations": [], "iterations": []}
    with pytest.raises(ValueError, match="no campaign states"):
        write_archive(tmp_path, [])
    with pytest.raises(ValueError, match="several strategies"):
        write_archive(
            tmp_path, [{**base, "seed": 0}, {**base, "seed": 1, "strategy": {"name": "t"}}]
        )
    with pytest.raises(ValueError, match="appears twice"):
        write_archive(tmp_path, [{**base, "seed": 0}, {**base, "seed": 0}])
    with pytest.raises(FileNotFoundError):
        read_archive(tmp_path / "nothing")
    write_archive(tmp_path, [{**base, "seed": 0}])
    with open(tmp_path / "archive" / "evaluations.csv", "a") as fh:
        fh.write("7,0,3,1.0,,\n")
    with pytest.raises(ValueError, match=r"seed 7 is not in campaigns\.json"):
        read_archive(tmp_path)


def test_pooling_summaries_of_disjoint_seeds_equals_summarising_all_seeds(tmp_path):
    """experiments.chang2023.pool_summaries: summaries without per-seed data pool exactly."""
    from experiments.chang2023 import pool_summaries as mod

    for seed in (0, 1, 2, 3):
        run(tmp_path / "all" / "random" / f"seed_{seed}", "random", seed=seed)
        part = "p1" if seed == 0 else "p2"
        shutil.copytree(
            tmp_path / "all" / "random" / f"seed_{seed}", tmp_path / part / "random" / f"s{seed}"
        )
    at = (12, 14, 15)
    whole = summarise_hotspots(tmp_path / "all", at=at, plot=False)
    summarise_hotspots(tmp_path / "p1", at=at, plot=False)
    summarise_hotspots(tmp_path / "p2", at=at, plot=False)
    files = [str(tmp_path / p / "summary.json") for p in ("p1", "p2")]
    out = tmp_path / "pooled.json"
    assert mod.main([*files, "--strategy", "random", "--out", str(out)]) == 0
    pooled = json.loads(out.read_text())["random"]
    assert pooled["seeds"] == 4 and pooled["pooled_from"] == [1, 3]
    for metric in ("accuracy", "mse", "step_seconds"):
        want = whole["random"][metric]
        got = pooled[metric]
        if "mean" in want:
            want, got = {"-": want}, {"-": got}
        for step in want:
            assert got[step]["n"] == want[step]["n"] == 4
            assert got[step]["mean"] == pytest.approx(want[step]["mean"], rel=1e-12, abs=1e-15)
            assert got[step]["se"] == pytest.approx(want[step]["se"], rel=1e-9, abs=1e-15)
    with pytest.raises(SystemExit):
        mod.main([*files, "--strategy", "entropy", "--out", str(out)])
    other = json.loads((tmp_path / "p1" / "summary.json").read_text())
    other["random"]["config"]["num_hyper_steps"] = 99
    with pytest.raises(ValueError, match=r"configurations \(keys \['num_hyper_steps'\]\)"):
        mod.pool_entries([other["random"], whole["random"]])
    # a setting added later: entries without it pool with ones that have the legacy value only
    old_cfg, new_cfg = (json.loads(json.dumps(whole["random"])) for _ in range(2))
    new_cfg["config"]["tol"] = 0.1
    with pytest.raises(ValueError, match="tol"):
        mod.pool_entries([old_cfg, new_cfg])

    def read(config):  # entries stored before ``tol`` existed ran with 0.1
        return {"tol": 0.1, **config}

    assert mod.pool_entries([old_cfg, new_cfg], read)["config"]["tol"] == 0.1
    new_cfg["config"]["tol"] = 0.2
    with pytest.raises(ValueError, match="tol"):
        mod.pool_entries([old_cfg, new_cfg], read)
