"""Smoke test of the quick configuration of benchmarks/keops_formula.py."""

import json

import pytest

from benchmarks import keops_formula
from bo_ncgp.linalg import _keops


@pytest.mark.skipif(not _keops.keops_available(), reason="pykeops not installed")
def test_keops_formula_quick_products_equal_gpytorchs(tmp_path, capsys):
    out = tmp_path / "kf.json"
    argv = ["--quick", "--kernels", "m52", "--dtypes", "float64", "--n", "600", "--reps", "1"]
    assert keops_formula.main([*argv, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    (row,) = res["rows"]
    assert (row["kernel"], row["n"], row["k"], row["dtype"]) == ("m52", 600, 1, "float64")
    # the new formula, the old one and GPyTorch's give the same product
    assert row["new_vs_gpytorch_rel_diff"] < 1e-12
    assert row["old_vs_gpytorch_rel_diff"] < 1e-12
    assert set(row["seconds_median"]) == {"old", "new", "gpytorch"}
    assert all(t > 0 for t in row["seconds_median"].values())
    assert row["ratio_to_gpytorch"]["gpytorch"] == 1.0
    assert all(v > 0 for v in res["peak_matmul_flops"].values())
    assert "| m52 | 600 | 1 | float64 |" in capsys.readouterr().out
