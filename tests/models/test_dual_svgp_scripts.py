"""The DualSVGP experiment and benchmark scripts run in their tiny configurations and write
well-formed outputs (the measured numbers come from the full runs, see RESULTS.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests._helpers import load_script

ROOT = Path(__file__).resolve().parents[2]


def _load(relpath: str):
    mod = load_script(relpath)
    return mod


def test_banana_experiment_quick(data_root, tmp_path):
    exp = _load("experiments/dual_svgp_banana.py")
    res = exp.run(exp.QUICK, root=data_root, out=tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "banana.png").stat().st_size > 0
    assert set(saved["summary"]) == {"memory_bls", "memory_random", "no_memory"}
    nb = exp.QUICK["num_batches"]
    for variant in saved["summary"].values():
        assert len(variant["accuracy"]) == nb and len(variant["nlpd"]) == nb
        assert all(0 <= r["mean"] <= 1 for r in variant["accuracy"])
        assert all(math.isfinite(r["mean"]) and r["mean"] > 0 for r in variant["nlpd"])
    assert 0 <= saved["offline"]["accuracy"] <= 1 and math.isfinite(saved["offline"]["nlpd"])
    assert "| memory_bls |" in exp.table(res)


def test_timing_benchmark_quick(data_root):
    bench = _load("benchmarks/dual_svgp_timing.py")
    out = bench.run(dict(bench.QUICK, candidates=10), root=data_root)
    secs, ratios = out["seconds_median"], out["ratio_to_offline_refit"]
    for key in ("update", "offline refit", "condition q=1", "condition q=100"):
        assert secs[key] > 0 and math.isfinite(ratios[key])
    assert ratios["offline refit"] == 1.0
    assert all(out["seconds_min"][k] <= secs[k] for k in secs)
    assert "| update |" in bench.table(out)
    json.dumps(out)  # serialisable
