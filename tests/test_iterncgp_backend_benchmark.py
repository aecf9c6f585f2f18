"""Smoke test of ``benchmarks/iterncgp_backend.py --quick``: well-formed output, the auto
backend resolves by memory, and every backend's fit predicts what the dense fit predicts."""

import json

from benchmarks import iterncgp_backend


def test_quick_backends_agree_and_output_is_well_formed(tmp_path, capsys):
    out = tmp_path / "ib.json"
    assert iterncgp_backend.main(["--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["threads"] == 1 and res["available_memory_bytes"] > 0
    for block in res["backends"]:
        rows = {r["backend"]: r for r in block["rows"]}
        assert set(rows) == {"auto", "dense", "chunked", "keops"}
        assert rows["auto"]["resolved"] == "dense"  # 300 points fit in memory
        assert min(r["ratio_to_fastest"] for r in rows.values()) == 1.0
        for r in rows.values():
            assert r["median_s"] > 0 and r["solver_iters"] == rows["dense"]["solver_iters"]
            assert r["max_pred_diff_vs_dense"] < 1e-10
        assert rows["auto"]["max_pred_diff_vs_dense"] == 0.0
    for t in res["time_to_target"]:
        assert t["target_nll"] == t["exact_nll"] + 0.002
        assert res["config"]["race_policy"] == "cov-40"
        for method in ("iterncgp", "iterncgp_before", "svgp"):
            hit = t[method]["seconds_to_target"]
            assert hit is None or hit > 0
            assert t[method]["best_nll"] > 0 and len(t[method]["runs"]) == 1
    table = capsys.readouterr().out
    from benchmarks import speed

    ratios = speed.rows_of("iterncgp_backend", res)
    assert [r.case for r in ratios[:2]] == ["binary fit, N = 300", "softmax fit, N = 300"]
    assert all(r.target == 1.2 and r.ratio >= 1.0 for r in ratios[:2])
    assert all(r.target == 1.0 and r.ratio > 0 for r in ratios[2:])
    assert "| binary | 300 | auto | dense |" in table and "| softmax | 150 |" in table


def test_quick_subset_of_backends_keeps_the_dense_reference(tmp_path):
    out = tmp_path / "ib.json"
    args = ["--quick", "--no-race", "--backends", "auto", "--tasks", "binary", "--out", str(out)]
    assert iterncgp_backend.main(args) == 0
    res = json.loads(out.read_text())
    (block,) = res["backends"]
    assert [r["backend"] for r in block["rows"]] == ["auto", "dense"]
    assert res["time_to_target"] == []
