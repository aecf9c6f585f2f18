import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bo_ncgp.campaigns import Campaign, RandomSearch, make_executor, plot_campaigns, summarise
from bo_ncgp.campaigns.plotting import best_so_far, collect
from bo_ncgp.campaigns.storage import read_json, write_json
from bo_ncgp.problems.synthetic import TestFunction
from tests.campaigns.toy import CountingStrategy, LoggedQuadratic, ToyPool

ROOT = Path(__file__).resolve().parents[2]


def campaign(out, problem=None, strategy=None, **kw):
    """A small campaign (random search on Branin unless told otherwise) stored in ``out``."""
    problem = problem or TestFunction("branin")
    strategy = strategy or RandomSearch()
    args = dict(budget=10, batch_size=3, num_initial=4, seed=7)
    args.update(kw)
    return Campaign(problem, strategy, out_dir=out, **args)


def run(out, problem=None, strategy=None, workers=1, **kw):
    with make_executor(workers) as ex:
        return campaign(out, problem, strategy, **kw).run(executor=ex, progress=False)


def points_values(state):
    return [(tuple(np.round(e["point"], 12)), e["value"]) for e in state["evaluations"]]


def test_basic_run_files_and_batches(tmp_path):
    st = run(tmp_path / "a")
    assert [len(b) for b in st["batches"]] == [4, 3, 3]
    assert len(st["evaluations"]) == 10 and st["finished"]
    csv = (tmp_path / "a" / "evaluations.csv").read_text().strip().splitlines()
    assert len(csv) == 11 and csv[0].startswith("index,batch,point,value")
    on_disk = json.loads((tmp_path / "a" / "state.json").read_text())
    assert on_disk["evaluations"] == json.loads(json.dumps(st["evaluations"]))
    vals = [e["value"] for e in st["evaluations"]]
    it = st["iterations"]
    assert [i["best_value"] for i in it] == [max(vals[:4]), max(vals[:7]), max(vals)]
    for i in it:
        assert {"acquisition_seconds", "evaluation_seconds", "update_seconds"} <= set(i)
    rec = st["recommendation"]
    best = int(np.argmax(vals))
    assert np.allclose(rec["point"], st["evaluations"][best]["point"])
    assert rec["heldout_value"] == pytest.approx(vals[best])  # noiseless: same value
    with pytest.raises(FileExistsError, match="resume"):
        run(tmp_path / "a")


def test_initial_design_is_strategy_independent(tmp_path):
    a = run(tmp_path / "a")
    b = run(tmp_path / "b", strategy=CountingStrategy())
    assert points_values(a)[:4] == points_values(b)[:4]
    assert points_values(a)[4:] != points_values(b)[4:]


def test_failures_are_recorded_not_fatal(tmp_path):
    prob = TestFunction("branin", fail_above=5.0, nan_below=-2.0)
    st = run(tmp_path / "f", problem=prob, budget=12)
    errs = [e for e in st["evaluations"] if e["error"]]
    assert errs, "the bounds [-5, 10] make both failure kinds likely"
    for e in st["evaluations"]:
        x0 = e["point"][0]
        if x0 > 5.0:
            assert "simulated failure" in e["error"] and np.isnan(e["value"])
        elif x0 < -2.0:
            assert "non-finite" in e["error"] and np.isnan(e["value"])
        else:
            assert e["error"] is None and np.isfinite(e["value"])
    assert st["finished"]


def test_process_pool_and_dask_match_inline(tmp_path):
    ref = run(tmp_path / "inline")
    pool = run(tmp_path / "pool", workers=2)
    assert points_values(pool) == points_values(ref)
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1")
        with make_executor(dask_scheduler=cluster.scheduler_address) as ex:
            st = campaign(tmp_path / "dask").run(executor=ex, progress=False)
    assert points_values(st) == points_values(ref)


def test_replay_on_resume_and_metrics(tmp_path):
    strat = CountingStrategy()
    st = run(tmp_path / "c", strategy=strat)
    assert strat.observed == [4, 3, 3]
    assert [i["metrics"]["n_seen"] for i in st["iterations"]] == [4, 7, 10]
    # resume a finished campaign: replays observe, evaluates nothing new
    strat2 = CountingStrategy()
    camp = Campaign.resume(tmp_path / "c", TestFunction("branin"), strat2)
    st2 = camp.run(progress=False)
    assert strat2.observed == [4, 3, 3]
    assert points_values(st2) == points_values(st)
    with pytest.raises(ValueError, match="strategy differs"):
        Campaign.resume(tmp_path / "c", TestFunction("branin"), RandomSearch())


class Tolerant(CountingStrategy):
    """A strategy that gained a config key (``tol``) after campaigns were saved without it."""

    def read_saved_config(self, saved):
        return {"tol": None, **saved}  # campaigns saved without it did not use a tolerance

    def __init__(self, tol=None):
        super().__init__()
        self.tol = tol

    def config(self):
        return {**super().config(), "tol": self.tol}


def test_resume_reads_a_saved_config_through_the_strategy(tmp_path):
    ref = run(tmp_path / "old", strategy=Tolerant())
    state_file = tmp_path / "old" / "state.json"
    state = read_json(state_file)
    del state["strategy"]["tol"]  # as written before the key existed
    write_json(state_file, state, checksum=True)
    with pytest.raises(ValueError, match="strategy differs"):  # the new default is not the old run
        Campaign.resume(tmp_path / "old", TestFunction("branin"), Tolerant(tol=0.5))
    strat = Tolerant(tol=None)
    st = Campaign.resume(tmp_path / "old", TestFunction("branin"), strat).run(progress=False)
    assert strat.observed == [4, 3, 3] and st["strategy"]["tol"] is None
    assert points_values(st) == points_values(ref)


SCRIPT = """
from bo_ncgp.campaigns import Campaign, RandomSearch
from tests.campaigns.toy import LoggedQuadratic
Campaign(LoggedQuadratic(delay={delay}, log={log!r}), RandomSearch(), budget=12, batch_size=4,
         num_initial=4, seed=3, out_dir={out!r}).run(progress=False)
"""


def test_sigkill_mid_batch_then_resume_matches_uninterrupted(tmp_path):
    log = tmp_path / "evals.log"
    out = tmp_path / "killed"
    script = SCRIPT.format(delay=0.25, log=str(log), out=str(out))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    state_file = out / "state.json"
    deadline = time.time() + 60
    while time.time() < deadline:  # kill once the second batch is half done
        time.sleep(0.05)
        try:
            st = json.loads(state_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        if st["pending"] and st["pending"]["iteration"] == 1 and len(st["pending"]["done"]) >= 2:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    st = json.loads(state_file.read_text())
    assert not st["finished"] and st["pending"] is not None
    saved = [e["point"] for e in st["evaluations"]] + [
        d["point"] for d in st["pending"]["done"].values()
    ]
    assert len(saved) >= 6
    n_log_at_kill = len(log.read_text().splitlines())
    resumed = Campaign.resume(out, LoggedQuadratic(log=str(log)), RandomSearch()).run(
        progress=False
    )
    ref = run(tmp_path / "ref", problem=LoggedQuadratic(), budget=12, batch_size=4, seed=3)
    assert points_values(resumed) == points_values(ref)
    fmt = lambda p: " ".join(f"{v:.12f}" for v in p)  # noqa: E731
    after = [
        line.split(" ", 2)[2]
        for line in log.read_text().splitlines()[n_log_at_kill:]
        if line.startswith("finish")
    ]
    assert not set(after) & {fmt(p) for p in saved}  # no saved evaluation is repeated
    assert len(after) == 12 - len(saved)  # and exactly the missing ones are evaluated


def test_pool_problem_random_search_distinct(tmp_path):
    st = run(tmp_path / "p", problem=ToyPool(size=20), budget=15, batch_size=2, num_initial=5)
    idx = [e["point"] for e in st["evaluations"]]
    assert len(set(idx)) == 15 and all(0 <= i < 20 for i in idx)
    assert st["recommendation"] is None


def test_plot_and_summary(tmp_path):
    for s in range(3):
        run(tmp_path / "res" / "random" / f"seed{s}", seed=s)
        run(tmp_path / "res" / "counting" / f"seed{s}", seed=s, strategy=CountingStrategy())
    groups = collect([tmp_path / "res"])
    assert sorted(groups) == ["counting", "random"] and len(groups["random"]) == 3
    summ = summarise(groups, [4, 10])
    vals = np.array([best_so_far(s)[9] for s in groups["random"]])
    assert summ["random"][10][0] == pytest.approx(vals.mean())
    assert summ["random"][10][1] == pytest.approx(vals.std(ddof=1) / np.sqrt(3))
    png = plot_campaigns([tmp_path / "res"], tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png2 = plot_campaigns([tmp_path / "res"], tmp_path / "m.png", metric="n_seen")
    assert png2.stat().st_size > 1000


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="num_initial"):
        campaign(tmp_path, budget=3, batch_size=1, num_initial=5, seed=0)
    with pytest.raises(ValueError, match="unknown BoTorch test function"):
        TestFunction("nope")


def test_atomic_writes_keep_a_files_mode_and_otherwise_follow_the_umask(tmp_path):
    import os
    import stat

    from bo_ncgp.campaigns.storage import _default_mode, atomic_write_text

    p = tmp_path / "state.json"
    atomic_write_text(p, "a")
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask == _default_mode()  # not 0600
    p.chmod(0o640)
    atomic_write_text(p, "b")
    assert p.read_text() == "b" and stat.S_IMODE(p.stat().st_mode) == 0o640
