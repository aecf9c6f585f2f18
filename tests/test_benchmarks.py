"""Smoke tests of the benchmark scripts' quick configurations (outputs well formed; the
measured numbers are on the results pages experiments/<paper>/RESULTS.md)."""

import json
import math

from benchmarks import dual_svgp_timing, fantasy_batch, hipgp_step


def test_fantasy_batch_quick_dual_conditioning_selects_the_refit_points(tmp_path):
    out = tmp_path / "fb.json"
    assert fantasy_batch.main(["--quick", "--methods", "refit-dual", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {r["method"]: r for r in res["rows"]}
    assert set(rows) == {"dual", "refit-dual"} and res["n"] == 120
    # posterior-mean fantasies: conditioning and refitting give the same posterior, same points
    assert rows["refit-dual"]["max_point_diff_vs_dual"] < 1e-5
    assert all(r["update_s"] > 0 and r["total_s"] >= r["update_s"] for r in rows.values())


def test_timing_benchmark_quick(data_root):
    bench = dual_svgp_timing
    out = bench.run(dict(bench.QUICK, candidates=10), root=data_root)
    secs, ratios = out["seconds_median"], out["ratio_to_offline_refit"]
    for key in ("update", "offline refit", "condition q=1", "condition q=100"):
        assert secs[key] > 0 and math.isfinite(ratios[key])
    assert ratios["offline refit"] == 1.0
    assert all(out["seconds_min"][k] <= secs[k] for k in secs)
    assert "| update |" in bench.table(out)
    json.dumps(out)  # serialisable


def test_step_benchmark_quick_pruned_and_whole_embedding_products_agree(tmp_path):
    out = tmp_path / "step.json"
    assert hipgp_step.main(["--quick", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["M"] == 144 and row["N_whitened"] == 576
    # the pruned, chunked products reproduce the legacy whitening
    assert row["whitened_rel_diff"] < 1e-10
    assert all(row[k] > 0 for k in ("step_s", "step_legacy_s", "svgp_step_s", "product_s"))
