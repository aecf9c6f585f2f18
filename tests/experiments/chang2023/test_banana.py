"""The streaming-banana experiment of Chang et al. (2023) runs in its tiny configuration and
writes well-formed outputs (the measured numbers: experiments/chang2023/RESULTS.md)."""

from __future__ import annotations

import json
import math

from experiments.chang2023 import banana


def test_banana_experiment_quick(data_root, tmp_path):
    res = banana.run(banana.QUICK, root=data_root, out=tmp_path, progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "banana.png").stat().st_size > 0
    assert set(saved["summary"]) == {"memory_bls", "memory_random", "no_memory"}
    nb = banana.QUICK["num_batches"]
    for variant in saved["summary"].values():
        assert len(variant["accuracy"]) == nb and len(variant["nlpd"]) == nb
        assert all(0 <= r["mean"] <= 1 for r in variant["accuracy"])
        assert all(math.isfinite(r["mean"]) and r["mean"] > 0 for r in variant["nlpd"])
    assert 0 <= saved["offline"]["accuracy"] <= 1 and math.isfinite(saved["offline"]["nlpd"])
    assert "| memory_bls |" in banana.table(res)
