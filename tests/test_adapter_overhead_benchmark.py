"""Smoke test of benchmarks/adapter_overhead.py's quick configuration: well-formed output, the
adapter's posterior equals the bare model's, qKG values finite."""

import copy
import json
import math

import pytest

from benchmarks import adapter_overhead


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("adapter") / "adapter.json"
    assert adapter_overhead.main(["--quick", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_adapter_overhead_quick(quick):
    res = quick
    assert res["config"]["n"] == 120 and res["threads"] == 1
    rows = res["posterior"]
    assert len(rows) == 10 and rows[0]["shape"] == [64, 1, 6]
    for r in rows:
        assert r["max_abs_diff_adapter_vs_bare"] < 1e-10  # the adapter changes no number
        assert all(s > 0 for s in r["seconds_median"].values())
        a = r["adapter_over_bare"]
        assert 0 < a["min"] <= a["median"] <= a["max"] and math.isfinite(a["max"])
    with_samples = [r["adapter_over_bare_factor"] is not None for r in rows]
    assert with_samples == [False, False, True, True, True, True] + [False] * 4
    conditioning = [r["case"] for r in rows[7:]]
    assert all(c.startswith("condition_on_observations only") for c in conditioning)
    assert conditioning[-1].endswith("Normalize + Standardize")
    small, large = res["qkg"]
    assert (small["m"], large["m"]) == (20, 40) and small["finite"] and large["finite"]
    assert set(res["qkg_large_over_small"]) == {"forward", "forward + backward"}
    text = adapter_overhead.table(res)
    assert "| LogEI raw samples, q=1 | 64x1x6 |" in text and "| m = 40 / m = 20 |" in text


def test_adapter_overhead_table_with_a_run_on_other_code(quick):
    res = quick
    before = copy.deepcopy(res)
    before["qkg_large_over_small"] = {"forward": 9.0, "forward + backward": 8.0}
    text = adapter_overhead.table(res, before)
    assert "before: adapter / bare" in text and "| 9.00x | 8.00x |" in text
