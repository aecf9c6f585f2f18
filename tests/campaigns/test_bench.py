"""``bo-ncgp bench``: the summary and its schema, paired differences, resume, strategies and
problems of the user's own, the command."""

from __future__ import annotations

import json
import math
from typing import ClassVar

import numpy as np
import pytest

from bo_ncgp.campaigns import bench as B
from bo_ncgp.campaigns import bench_summary as S
from bo_ncgp.campaigns.strategies.base import Strategy
from bo_ncgp.campaigns.strategies.registry import STRATEGIES, StrategySpec
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.base import Evaluation, Problem
from bo_ncgp.problems.registry import PROBLEMS


def _run(out, problems=("branin", "hartmann6"), strategies=("random", "sobol"), **kw):
    kw = {"evaluations": 8, "batch_size": 2, "initial": 4, "progress": None, "plot": False, **kw}
    return B.run_bench(list(problems), list(strategies), [0, 1], out, baseline="random", **kw)


def test_tiny_bench_writes_a_summary_of_the_documented_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    _run(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    jsonschema.validate(summary, S.SUMMARY_SCHEMA)
    assert set(summary["problems"]) == {"branin", "hartmann6"}
    entry = summary["problems"]["branin"]
    assert entry["metric"] == "regret" and entry["optimal_value"] == pytest.approx(-0.397887)
    sobol = entry["strategies"]["sobol"]
    assert sobol["seeds"] == [0, 1] and sobol["finished"] == 2
    for seed, curve in sobol["per_seed"].items():  # regret after every evaluation
        assert len(curve) == 8 and min(curve) >= 0 and np.all(np.diff(curve) <= 0), seed
    per = np.array(list(sobol["per_seed"].values()))
    assert sobol["curve"]["mean"] == pytest.approx(per.mean(0).tolist())
    assert sobol["final"]["mean"] == pytest.approx(per[:, -1].mean())
    base = np.array(list(entry["strategies"]["random"]["per_seed"].values()))
    lead = base[:, -1] - per[:, -1]
    assert sobol["paired"]["final"]["mean"] == pytest.approx(lead.mean())
    assert sobol["paired"]["final"]["se"] == pytest.approx(lead.std(ddof=1) / math.sqrt(2))
    assert str(entry["budgets"][0]) in sobol["paired"]
    assert (tmp_path / "summary.md").read_text().startswith("| problem (metric) | strategy |")
    one = B.run_bench(["branin"], ["random"], [0], tmp_path / "one", evaluations=5, progress=None)
    assert math.isnan(one["problems"]["branin"]["strategies"]["random"]["final"]["se"])
    jsonschema.validate(
        json.loads((tmp_path / "one" / "summary.json").read_text()), S.SUMMARY_SCHEMA
    )


def test_paired_lead_on_a_hand_made_example():
    strategy = {0: 0.1, 1: 0.2, 2: 0.6, 5: float("nan")}  # seed 5 failed: left out
    baseline = {0: 0.5, 1: 0.4, 2: 0.9, 3: 1.0, 5: 0.3}  # seed 3 only in the baseline
    lead = S.paired_lead(strategy, baseline)  # leads 0.4, 0.2, 0.3
    assert lead["n"] == 3
    assert lead["mean"] == pytest.approx(0.3)
    assert lead["se"] == pytest.approx(0.1 / math.sqrt(3))
    best = S.paired_lead(strategy, baseline, regret=False)  # larger best values are better
    assert best["mean"] == pytest.approx(-0.3)


def test_metric_is_the_truth_at_the_best_observed_point_and_its_regret():
    evs = [
        {"value": float("nan"), "extra": {}},
        {"value": 2.0, "extra": {"true_value": 1.0}},
        {"value": 1.0, "extra": {"true_value": 3.0}},  # truly better, observed worse
        {"value": 2.5, "extra": {"true_value": 2.0}},
    ]
    curve = S.metric_curve({"evaluations": evs}, optimal_value=3.0)
    assert np.isnan(curve[0]) and curve[1:].tolist() == [2.0, 2.0, 1.0]


def test_timings_split_a_refit_inside_the_acquisition_into_fit():
    its = [
        {"acquisition_seconds": 0, "update_seconds": 9, "evaluation_seconds": 9, "metrics": {}},
        {"acquisition_seconds": 3, "update_seconds": 1, "evaluation_seconds": 2, "metrics": {}},
        {
            "acquisition_seconds": 5,
            "update_seconds": 1,
            "evaluation_seconds": 2,
            "metrics": {"fit_seconds": 4},
        },
    ]
    t = S.timings({"iterations": its})  # the initial design (first row) is left out
    assert t == {"fit": 3.0, "acquisition": 2.0, "evaluation": 2.0, "iteration": 7.0}


class _Interrupt(BaseException):
    """Stands for the process being killed in the middle of a run."""


class _Counted(Problem):
    """-(sum of squares) on the unit square; counts evaluations, may stop after ``stop``."""

    name, dim = "counted", 2
    bounds = np.array([[0.0, 0.0], [1.0, 1.0]])
    calls: ClassVar[list[float]] = []
    stop: ClassVar[int | None] = None

    def evaluate(self, x):
        if self.stop is not None and len(_Counted.calls) >= self.stop:
            raise _Interrupt
        _Counted.calls.append(float(x[0]))
        return Evaluation(-float(np.sum(np.asarray(x) ** 2)))


def test_a_second_run_skips_finished_runs_and_resumes_the_interrupted_one(tmp_path, monkeypatch):
    monkeypatch.setitem(PROBLEMS, "counted", lambda seed=0: _Counted())
    monkeypatch.setattr(_Counted, "calls", [])
    # seed 0 finishes (8 evaluations and one of its recommendation), seed 1 stops after 5
    monkeypatch.setattr(_Counted, "stop", 8 + 1 + 5)
    with pytest.raises(_Interrupt):
        _run(tmp_path / "a", problems=["counted"], strategies=["random"])
    monkeypatch.setattr(_Counted, "stop", None)
    _Counted.calls.clear()
    _run(tmp_path / "a", problems=["counted"], strategies=["random"])
    assert len(_Counted.calls) == 8 - 5 + 1  # seed 0 not run again, seed 1 only the rest
    _Counted.calls.clear()
    _run(tmp_path / "a", problems=["counted"], strategies=["random"])
    assert _Counted.calls == []  # everything finished: nothing runs
    _run(tmp_path / "b", problems=["counted"], strategies=["random"])  # never interrupted
    a, b = (json.loads((tmp_path / x / "summary.json").read_text()) for x in ("a", "b"))
    runs = [s["problems"]["counted"]["strategies"]["random"]["per_seed"] for s in (a, b)]
    assert runs[0] == runs[1]


class _Centre(Strategy):
    """Always the centre of the box."""

    name = "centre"

    def ask(self, history, q, rng):
        lo, hi = self.problem.bounds
        return np.tile((lo + hi) / 2, (q, 1))


class _Bowl(Problem):
    name, dim, optimal_value = "bowl", 2, 0.0
    bounds = np.array([[-1.0, -1.0], [1.0, 1.0]])

    def evaluate(self, x):
        return Evaluation(-float(np.sum(np.asarray(x) ** 2)))


def test_a_user_registered_problem_and_strategy_run_in_the_bench(tmp_path, monkeypatch):
    monkeypatch.setitem(PROBLEMS, "bowl", lambda seed=0: _Bowl())
    spec = StrategySpec("bowl", "centre", "the centre", (), _Centre)
    monkeypatch.setitem(STRATEGIES, ("bowl", "centre"), spec)
    monkeypatch.setitem(STRATEGIES, ("bowl", "random"), STRATEGIES[("continuous", "random")])
    s = _run(tmp_path, problems=["bowl"], strategies=["random", "centre"], evaluations=6)
    centre = s["problems"]["bowl"]["strategies"]["centre"]
    assert centre["final"]["mean"] == 0.0  # regret 0 once the centre is evaluated
    assert centre["paired"]["final"]["mean"] > 0  # ahead of random search on both seeds


def test_unknown_names_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(InputDataError, match="unknown continuous strategy 'nope'"):
        _run(tmp_path, strategies=["random", "nope"])
    with pytest.raises(InputDataError, match="baseline 'sobol' is not among"):
        B.run_bench(["branin"], ["random"], [0], tmp_path, evaluations=4, baseline="sobol")
    with pytest.raises(InputDataError, match="unknown problem"):
        _run(tmp_path, problems=["nope"])
    assert not any(tmp_path.iterdir())


def test_the_command_runs_the_bench_and_prints_the_table(tmp_path, capsys):
    from bo_ncgp.cli import main

    argv = ["bench", "--problems", "branin", "--strategies", "random,sobol", "--seeds", "2"]
    argv += ["--evaluations", "7", "--initial", "5", "--baseline", "sobol", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[4/4] branin / sobol seed 1: final" in out
    assert "| branin (regret) | random |" in out and "lead over sobol" in out
    assert (tmp_path / "branin.png").is_file() and (tmp_path / "summary.md").is_file()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["baseline"] == "sobol" and summary["settings"]["initial"] == 5
    assert main([*argv[:-2], "--strategies", "random,nope", "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_ours_takes_a_step_and_logs_its_fit_time(tmp_path):
    r = B.bench_job("branin", "dual", 0, tmp_path, evaluations=7, batch_size=1, initial=6)
    state = json.loads((tmp_path / "branin" / "dual" / "seed_0" / "state.json").read_text())
    assert r["final"] >= 0 and [len(b) for b in state["batches"]] == [6, 1]
    assert S.timings(state)["fit"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("problem", "strategy"),
    [
        ("branin", s)
        for s in (
            "botorch",
            "dual",
            "dual-fantasy",
            "dual-matched-fantasy",
            "dual-fantasy-mean",
            "botorch-believer",
        )
    ]
    + [("branin-disc", s) for s in ("dual", "botorch-labels")]
    + [("branin-poisson", s) for s in ("dual", "dual-poisson")],
)
def test_every_model_strategy_takes_a_batch_step(tmp_path, problem, strategy):
    r = B.bench_job(problem, strategy, 0, tmp_path, evaluations=8, batch_size=2, initial=6)
    state = json.loads((tmp_path / problem / strategy / "seed_0" / "state.json").read_text())
    assert "error" not in r and [len(b) for b in state["batches"]] == [6, 2]


@pytest.mark.slow
def test_the_demo_writes_best_png_and_says_what_it_showed(tmp_path, capsys):
    from bo_ncgp.cli import main

    argv = ["demo", "--out", str(tmp_path), "--seeds", "2", "--evaluations", "15"]
    assert main([*argv, "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "best.png").is_file() and (tmp_path / "summary.json").is_file()
    assert "On hartmann6, streaming DualSVGP ended with regret" in out and "(paired, " in out
