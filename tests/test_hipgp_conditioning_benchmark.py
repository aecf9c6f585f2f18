"""Smoke test of benchmarks/hipgp_conditioning.py."""

import json
import math

import pytest

from benchmarks import hipgp_conditioning


def test_quick_run_is_well_formed_and_cached_rows_change_nothing(tmp_path, data_root, capsys):
    out_file = tmp_path / "res.json"
    assert (
        hipgp_conditioning.main(["--quick", "--root", str(data_root), "--out", str(out_file)]) == 0
    )
    out = json.loads(out_file.read_text())
    rows = {(r["q"], r["variant"]): r for r in out["rows"]}
    assert len(rows) == 4 * len(hipgp_conditioning.QUICK["qs"])
    for q in hipgp_conditioning.QUICK["qs"]:
        fast, ref = rows[(q, "condition (rows cached)")], rows[(q, "condition")]
        assert fast["test_rmse"] == pytest.approx(ref["test_rmse"], rel=1e-9)  # same rows
        for r in (fast, ref, rows[(q, "HIP-GP refit")], rows[(q, "SVGP refit")]):
            assert math.isfinite(r["test_rmse"]) and 0 < r["min_s"] <= r["median_s"]
    assert "| condition (rows cached) |" in capsys.readouterr().out
