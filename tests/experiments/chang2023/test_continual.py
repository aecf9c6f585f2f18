"""Smoke tests of the continual / streaming experiments of Chang et al. (2023): each runs in
its tiny configuration and writes well-formed outputs; the metric helpers and the harness are
checked on cases whose answer is known by hand. The measured numbers come from the full runs
(experiments/chang2023/RESULTS.md)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Gaussian, Softmax
from experiments import harness
from experiments.chang2023 import (
    banana_streaming,
    continual,
    magnetometer,
    split_mnist,
    streaming_timing,
    uci,
)

ROOT = Path(__file__).resolve().parents[3]


class _Fixed:
    """A 'model' with fixed marginals, to check the metrics by hand."""

    def __init__(self, likelihood, mean, var):
        self.likelihood, self.mean, self.var = likelihood, mean, var

    def predict_f(self, X):
        idx = X[:, 0].long()
        return self.mean[idx], self.var[idx]


# ------------------------------------------------------------------ metrics by hand
def test_classification_metrics_by_hand():
    common = continual
    X = torch.arange(3.0)[:, None]
    model = _Fixed(Bernoulli(), torch.tensor([3.0, -3.0, 3.0]), torch.zeros(3))
    out = common.evaluate(model, X, torch.tensor([1.0, 0.0, 0.0]), chunk=2)
    s = torch.sigmoid(torch.tensor(3.0))
    assert out["accuracy"] == pytest.approx(2 / 3)
    assert out["nlpd"] == pytest.approx(float(-(2 * s.log() + (1 - s).log()) / 3), rel=1e-6)
    mean = torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    soft = _Fixed(Softmax(3, num_samples=8), mean, torch.zeros(2, 3))
    out = common.evaluate(soft, torch.arange(2.0)[:, None], torch.tensor([0.0, 1.0]))
    lp = torch.log_softmax(mean, -1)
    assert out["accuracy"] == 0.5
    assert out["nlpd"] == pytest.approx(float(-(lp[0, 0] + lp[1, 1]) / 2), rel=1e-6)


def test_regression_metrics_by_hand():
    common = continual
    model = _Fixed(Gaussian(1.0), torch.tensor([0.0, 1.0]), torch.ones(2))
    out = common.evaluate(model, torch.arange(2.0)[:, None], torch.tensor([0.0, 3.0]))
    assert out["rmse"] == pytest.approx(math.sqrt(2.0))
    nlpd = 0.5 * math.log(2 * math.pi * 2) + (0 + 4 / 4) / 2
    assert out["nlpd"] == pytest.approx(nlpd)
    assert harness.summary([1.0, 3.0]) == {"mean": 2.0, "std": math.sqrt(2.0), "n": 2}


def test_store_resumes_only_the_same_configuration(tmp_path):
    store = harness.Store(tmp_path)
    store.put("a", {"x": 1}, config={"m": 1})
    assert store.get("a", {"m": 1})["x"] == 1
    assert store.get("a", {"m": 2}) is None and store.get("b") is None
    # a run with another configuration never destroys the stored one
    store.put("a", {"x": 2}, config={"m": 2})
    assert store.get("a", {"m": 2})["x"] == 2
    (kept,) = (tmp_path / "superseded").glob("a.*.json")
    assert json.loads(kept.read_text()) == {"x": 1, "config": {"m": 1}}
    assert set(store.all()) == {"a"}  # superseded units are not results
    store.put("a", {"x": 3}, config={"m": 2})  # same configuration: plain overwrite
    assert len(list((tmp_path / "superseded").glob("*.json"))) == 1


def test_move_to_test_moves_the_highest_scores_and_folds_partition():
    sm = split_mnist
    train = [(torch.arange(4.0)[:, None], torch.zeros(4)), (torch.arange(4.0, 8)[:, None],
             torch.ones(4))]  # fmt: skip
    test = [(torch.full((1, 1), -1.0), torch.zeros(1)), (torch.full((1, 1), -2.0), torch.ones(1))]
    scores = [0.1, 0.9, 0.2, 0.3, 0.8, 0.0, 0.5, 0.4]
    tr, te = sm._move(train, test, scores, 0.25, "bls", seed=0)
    assert tr[0][0].flatten().tolist() == [0, 2, 3] and tr[1][0].flatten().tolist() == [5, 6, 7]
    assert te[0][0].flatten().tolist() == [-1, 1] and te[1][0].flatten().tolist() == [-2, 4]
    tr, te = sm._move(train, test, scores, 0.25, "random", seed=0)
    assert sum(x.shape[0] for x, _ in tr) == 6 and sum(x.shape[0] for x, _ in te) == 4
    parts = uci.folds(23, 5)
    assert sorted(torch.cat(parts).tolist()) == list(range(23)) and len(parts) == 5


# --------------------------------------------------------------- scripts, tiny runs
def _finite_class_metrics(d: dict) -> None:
    assert 0.0 <= d["accuracy"] <= 1.0
    assert math.isfinite(d["nlpd"]) and d["nlpd"] > 0


def test_split_mnist_cli_overrides_reach_the_stored_config(data_root, tmp_path):
    sm = split_mnist
    argv = ["--quick", "--methods", "ours", "--seeds", "1", "--lr", "0.05", "--hyper-steps", "2",
            "--root", str(data_root), "--out", str(tmp_path)]  # fmt: skip
    assert sm.main(argv) == 0
    run = json.loads((tmp_path / "mnist" / "runs" / "main_ours_seed0.json").read_text())
    assert run["config"]["lr"] == 0.05 and run["config"]["hyper_steps"] == 2
    saved = json.loads((tmp_path / "mnist" / "results.json").read_text())
    assert saved["config"]["lr"] == 0.05


def test_split_mnist_quick(data_root, tmp_path):
    sm = split_mnist
    cfg = dict(sm.QUICK, max_train_per_task=12, max_test_per_task=8, batch_size=6,
               inner_steps=1, hyper_steps=1, m=8, memory_fracs=[0.1], move_fracs=[0.1])  # fmt: skip
    res = sm.run(cfg, ("main", "memory-sweep", "move-to-test"), root=data_root, out=tmp_path,
                 progress=False)  # fmt: skip
    folder = tmp_path / "mnist"
    saved = json.loads((folder / "results_main_memory-sweep_move-to-test.json").read_text())
    assert (folder / "split_mnist.png").stat().st_size > 0
    assert (folder / "split_mnist_studies.png").stat().st_size > 0
    assert set(saved["main"]["table3"]) == set(sm.METHODS)
    for row in saved["main"]["table3"].values():
        _finite_class_metrics({k: row[k]["mean"] for k in ("accuracy", "nlpd")})
    assert [len(r) for r in saved["main"]["table2"]] == [1, 2, 3, 4, 5]
    assert set(saved["memory_sweep"]) == {"0.1"}
    assert set(saved["move_to_test"]) == {"0", "0.1"}
    run = json.loads((folder / "runs" / "main_ours_seed0.json").read_text())
    assert len(run["curve"]) == run["num_updates"] == 10  # 5 tasks x 12 points / 6
    assert run["memory_size"] == 10  # 10% of 6 = 1 per minibatch
    assert sum(run["memory_classes"]) == 10 and len(run["memory_classes"]) == 10
    # the kernel's hyperparameters after every update, as the model holds them
    model = sm.run_stream("ours", *sm.load_tasks(cfg, 0, data_root), cfg, 0, progress=False,
                          keep_model=True)["model"]  # fmt: skip
    last = run["curve"][-1]
    assert last["outputscale"] == pytest.approx(float(model.kernel.outputscale), rel=1e-9)
    assert last["lengthscale_min"] == pytest.approx(
        float(model.kernel.base_kernel.lengthscale.min()), rel=1e-9
    )
    assert all(c["outputscale"] > 0 for c in run["curve"])
    held = torch.bincount(model.memory_targets.reshape(-1).long(), minlength=10).tolist()
    assert run["memory_classes"] == held
    ref = json.loads((folder / "runs" / "move_ref_seed0.json").read_text())
    assert len(ref["bls"]) == 5 * 12 and min(ref["bls"]) >= 0
    # Fig. 2b: the lowest / highest BLS training images, in score order
    digits = sm.bls_extremes(cfg, harness.Store(folder / "runs"), data_root, k=3)
    X = torch.cat([x for x, _ in sm.load_tasks(cfg, 0, data_root)[0]])
    bls = torch.tensor(ref["bls"])
    assert digits.shape == (2, 3, 28, 28)
    assert torch.equal(digits[0, 0].reshape(-1), X[bls.argmin()])
    assert torch.equal(digits[1, 0].reshape(-1), X[bls.argmax()])
    # summaries of stored studies need no data: same numbers from a root without MNIST
    nodata = tmp_path / "no-data"
    again = sm.run(cfg, ("memory-sweep", "move-to-test"), root=nodata, out=tmp_path,
                   progress=False, compute=False)  # fmt: skip
    assert again["move_to_test"] == saved["move_to_test"]
    assert again["memory_sweep"] == saved["memory_sweep"]
    assert sm.bls_extremes(cfg, harness.Store(folder / "runs"), nodata) is None
    assert "| ours |" in sm.table3_md(res["main"]) and "| #5 |" in sm.table2_md(res["main"])
    # resume: a second call reads every unit from disk
    before = (folder / "runs" / "main_bui_seed0.json").stat().st_mtime_ns
    sm.run(cfg, ("main",), methods=("bui",), root=data_root, out=tmp_path, progress=False)
    assert (folder / "runs" / "main_bui_seed0.json").stat().st_mtime_ns == before
    # summary only: a missing unit is skipped, not computed
    (folder / "runs" / "main_bui_seed0.json").unlink()
    res = sm.run(cfg, ("main",), root=data_root, out=tmp_path, progress=False, compute=False)
    assert "bui" not in res["main"]["table3"] and res["main"]["table3"]["ours"]["seeds"] == [0]
    assert not (folder / "runs" / "main_bui_seed0.json").exists()


def test_banana_streaming_quick(data_root, tmp_path):
    bs = banana_streaming
    res = bs.run(bs.QUICK, root=data_root, out=tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "banana_streaming.png").stat().st_size > 0
    nb = bs.QUICK["num_batches"]
    for method in ("ours", "bui"):
        run = saved["runs"][method][0]
        assert len(run["per_batch"]) == nb
        for row, full in zip(run["per_batch"], res["runs"][method][0]["per_batch"], strict=True):
            _finite_class_metrics(row)
            assert "grid_prob" not in row and row["accuracy"] == full["accuracy"]  # compact file
            p = torch.tensor(full["grid_prob"])
            assert p.shape == (bs.GRID**2,) and bool(((p >= 0) & (p <= 1)).all())
    _finite_class_metrics(saved["offline"])
    assert "| bui |" in bs.table(res)


def test_streaming_uci_quick(data_root, tmp_path):
    su = uci
    res = su.run(su.QUICK, root=data_root, out=tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    rows = saved["table"]["mammographic"]
    assert set(rows) == set(su.METHODS)
    for row in rows.values():
        assert row["nlpd"]["n"] == su.QUICK["folds"]
        _finite_class_metrics({k: row[k]["mean"] for k in ("accuracy", "nlpd")})
    assert len(list((tmp_path / "runs").glob("*.json"))) == su.QUICK["folds"] * len(su.METHODS)
    assert "0.40 (0.04)" in su.table_md(res)  # the paper's offline value is quoted
    assert (tmp_path / "streaming_uci.png").stat().st_size > 0
    (tmp_path / "runs" / "mammographic_fold1_bui.json").unlink()
    res = su.run(su.QUICK, root=data_root, out=tmp_path, progress=False, compute=False)
    assert res["table"]["mammographic"]["bui"]["nlpd"]["n"] == 1  # skipped, not recomputed
    assert res["table"]["mammographic"]["ours"]["nlpd"]["n"] == 2


def test_streaming_uci_prior_and_memory_seed_reach_the_model(monkeypatch):
    su = uci
    k = su.kernel(su.DEFAULT, 6, prior=True)
    assert [n for n, *_ in k.named_priors()] == ["base_kernel.lengthscale_prior"]
    assert not list(su.kernel(su.DEFAULT, 6).named_priors())
    seen = []

    def spy(kernel, lik, Z0, cfg, memory_size, selection, seed, m):
        seen.append((bool(list(kernel.named_priors())), seed))
        raise StopIteration

    monkeypatch.setattr(su, "make_dual", spy)
    X, y = torch.rand(40, 6), (torch.rand(40) > 0.5).float()
    cfg = dict(su.QUICK, memory_seed=1000)
    with pytest.raises(StopIteration):
        su.run_unit("ours_stratified", X, y, torch.arange(5), cfg, fold=3)
    assert seen == [(True, 1003)]
    cfg2 = dict(cfg, memory_seed=0)  # another draw is another stored unit
    assert su.method_config(cfg, "ours") != su.method_config(cfg2, "ours")
    assert su.method_config(cfg, "bui") == su.method_config(cfg2, "bui")


def test_magnetic_anomalies_quick(data_root, tmp_path):
    ma = magnetometer
    res = ma.run(ma.QUICK, root=data_root, out=tmp_path, progress=False)
    assert (tmp_path / "fig5a.png").stat().st_size > 0 and (tmp_path / "fig5b.png").exists()
    e1 = json.loads((tmp_path / "exp1.json").read_text())
    e2 = json.loads((tmp_path / "exp2.json").read_text())
    for method in ("ours", "bui"):
        assert [r["path"] for r in e1["methods"][method]] == ma.QUICK["train_paths"]
        assert [r["step"] for r in e2["methods"][method]] == list(range(1, 5))
        for r in e1["methods"][method] + e2["methods"][method]:
            assert math.isfinite(r["rmse"]) and r["rmse"] >= 0 and math.isfinite(r["nlpd"])
            assert r["hypers"]["noise"] > 0 and r["hypers"]["lengthscale"] > 0
    assert len(res["exp1"]["methods"]["ours"][0]["Z"]) <= ma.QUICK["m_a"]
    assert "grid" not in e1["methods"]["ours"][0] and "grid" in res["exp1"]["methods"]["ours"][0]
    assert "| 1 |" in ma.tables(res)


def test_streaming_timing_quick(data_root, tmp_path):
    st = streaming_timing
    res = st.run(st.QUICK, root=data_root, out=tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "fig7.png").stat().st_size > 0
    budgets = [(r["method"], r["budget"]) for r in saved["runs"]]
    assert budgets == [("ours", 1), ("ours", 2), ("bui", 1), ("bui", 3)]
    for r in saved["runs"]:
        assert r["seconds"] > 0 and len(r["cumulative"]) == st.QUICK["num_sets"]
        assert r["cumulative"] == sorted(r["cumulative"])
        _finite_class_metrics(r)
    assert "| offline SVGP |" in st.table(res)


def test_runs_as_a_module(data_root, tmp_path):
    """``python -m experiments.chang2023.<name>`` runs the experiment (no path set-up)."""
    cmd = [sys.executable, "-m", "experiments.chang2023.banana_streaming", "--quick",
           "--root", str(data_root), "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| bui |" in done.stdout and (tmp_path / "results.json").is_file()


def test_split_mnist_kernel_priors_are_centred_on_the_initial_values():
    from experiments.chang2023 import split_mnist

    assert not list(split_mnist.kernel(split_mnist.DEFAULT).named_priors())
    k = split_mnist.kernel(dict(split_mnist.DEFAULT, kernel_prior_cv=0.25))
    priors = {name: prior for name, _, prior, _, _ in k.named_priors()}
    ls, os_ = priors["base_kernel.lengthscale_prior"], priors["outputscale_prior"]
    assert float(ls.mean) == pytest.approx(split_mnist.DEFAULT["init_lengthscale"])
    assert float(os_.mean) == pytest.approx(split_mnist.DEFAULT["init_outputscale"])
    assert float(os_.stddev / os_.mean) == pytest.approx(0.25)
