"""Smoke tests of the benchmark scripts' quick configurations (outputs well formed; the
measured numbers are on the results pages experiments/<paper>/RESULTS.md)."""

import json
import math

import pytest
import torch

from benchmarks import dual_svgp_timing, fantasy_batch, gpu, hipgp_step, hipgp_time_to_rmse


def test_fantasy_batch_quick_dual_conditioning_selects_the_refit_points(tmp_path):
    out = tmp_path / "fb.json"
    assert fantasy_batch.main(["--quick", "--methods", "refit-dual", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {r["method"]: r for r in res["rows"]}
    assert set(rows) == {"dual", "refit-dual"} and res["n"] == 120
    # posterior-mean fantasies: conditioning and a refit with the fantasy inputs in Z give
    # nearly the same posterior (the refit also re-projects the old data), nearly the same points
    assert rows["refit-dual"]["max_point_diff_vs_dual"] < 1e-2
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


def test_gpu_benchmark_quick_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    assert gpu.main(["--quick", "--device", "cpu", "--threads", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert "cpu" not in res  # the device is the CPU: one column
    rows = res["device"]["rows"]
    cases = {r["case"] for r in rows}
    assert cases == {"kernel MVM", "IterNCGP GMM", "HIP-GP whitening", "hotspot step",
                     "dual conditioning"}  # fmt: skip
    assert all(r["seconds"] > 0 for r in rows if "skipped" not in r)
    assert all(v > 0 for v in res["device"]["matmul_peak_flops"].values())
    md = out.with_suffix(".md").read_text()
    assert "| HIP-GP whitening | 10000 |" in md and "0.0185 s (V100)" in md


def test_gpu_benchmark_interrupted_keeps_its_finished_cases(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu, "case_iterncgp", interrupted)  # the second case
    out = tmp_path / "gpu.json"
    with pytest.raises(KeyboardInterrupt):
        gpu.main(["--quick", "--device", "cpu", "--threads", "1", "--out", str(out)])
    rows = json.loads(out.read_text())["device"]["rows"]
    assert {r["case"] for r in rows} == {"kernel MVM"} and all(r["seconds"] > 0 for r in rows)
    assert "| kernel MVM | N=2000, dense |" in out.with_suffix(".md").read_text()
    assert "device: kernel MVM [N=2000, chunked]" in capsys.readouterr().out  # progress


def test_gpu_benchmark_records_a_failing_case_and_goes_on(tmp_path, monkeypatch, capsys):
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(gpu, "case_whitening", out_of_memory)
    out = tmp_path / "gpu.json"
    assert gpu.main(["--quick", "--device", "cpu", "--threads", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = res["device"]["rows"]
    failed = [r for r in rows if "failed" in r]
    assert [(r["case"], r["size"]) for r in failed] == [
        ("HIP-GP whitening", 1000), ("HIP-GP whitening", 10_000)
    ]  # fmt: skip
    assert all("CUDA out of memory" in r["failed"] for r in failed)
    # the cases after it ran
    assert {r["case"] for r in rows if "seconds" in r} >= {"hotspot step", "dual conditioning"}
    md = out.with_suffix(".md").read_text()
    assert "| HIP-GP whitening | 1000 | failed (RuntimeError: CUDA out of memory." in md
    assert "cpu: HIP-GP whitening ..." in capsys.readouterr().out
    assert res["torch"] == torch.__version__ and "gpytorch" in res and "pykeops" in res


def test_gpu_benchmark_table_puts_the_cpu_beside_the_device():
    def part(name, seconds, n_iter):
        return {
            "device": name, "name": name, "matmul_peak_flops": {"float32": 1e9, "float64": 5e8},
            "rows": [
                {"case": "HIP-GP whitening", "size": 1_000_000, "n": 1_000_000,
                 "seconds": seconds, "note": ""},
                {"case": "IterNCGP GMM", "size": n_iter, "n": n_iter, "seconds": 2.0, "note": ""},
            ],
        }  # fmt: skip

    text = gpu.table({"device": part("cuda:0", 2.0, 100_000), "cpu": part("cpu", 200.0, 10_000)})
    assert "| HIP-GP whitening | 1000000 | 2 | 200 | 100.0x | 1.46 s (V100) |" in text
    assert "| IterNCGP GMM | 100000 | 2 | 2 (N=10000) |  |" in text


def test_speed_suite_runs_a_benchmark_and_tabulates_its_ratios(tmp_path):
    from benchmarks import speed

    assert speed.main(["--quick", "--only", "adapter_overhead", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "speed.json").read_text())
    assert rows and {r["benchmark"] for r in rows} == {"adapter_overhead"}
    assert all(r["ratio"] > 0 and math.isfinite(r["ratio"]) for r in rows)
    qkg = [r for r in rows if r["case"].startswith("qKnowledgeGradient")]
    assert len(qkg) == 2 and all(r["target"] == 3.0 for r in qkg)
    table = (tmp_path / "speed.md").read_text()
    assert table.count("\n") == len(rows) + 2 and "| adapter_overhead |" in table
    # sampled rows: the target is on the reference with the factor and the samples
    sampled = [r for r in rows if r["peer"] == "bare predict_f + factor + samples"]
    assert any("Standardize" in r["case"] for r in sampled) and len(sampled) >= 4
    assert all(r["target"] == 1.2 for r in sampled)
    res = json.loads((tmp_path / "adapter_overhead.json").read_text())
    for case in res["posterior"]:  # the adapter's posteriors are the model's own numbers
        assert case["max_abs_diff_adapter_vs_bare"] < 1e-9, case["case"]


def test_speed_suite_reads_every_benchmark_it_lists():
    from benchmarks import speed

    res = json.loads((speed.RESULTS / "dual_update.json").read_text())
    rows = speed.rows_of("dual_update", res)
    assert len(rows) == len(res["cases"]) and all(r.peer == "SVGP refit" for r in rows)
    assert {r.verdict for r in rows} <= {"met", "missed"}


def test_time_to_rmse_benchmark_quick(tmp_path):
    out = tmp_path / "ttr.json"
    assert hipgp_time_to_rmse.main(["--quick", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["M"] == 144
    for name in ("hipgp", "hipgp cold", "svgp"):
        assert row[name]["seconds_per_step"] > 0
        assert all(0 < r < 1 for r in row[name]["final_rmse"])
    assert row["hipgp"]["pcg_iterations"] and row["hipgp cold"]["pcg_iterations"]


def test_speed_suite_reads_the_committed_results_of_every_benchmark_that_has_them():
    from benchmarks import speed

    for name in speed.BENCHMARKS:
        path = speed.RESULTS / f"{name}.json"
        if not path.exists():  # results that are not committed (gitignored runs)
            continue
        rows = speed.rows_of(name, json.loads(path.read_text()))
        assert rows, name
        assert all(r.ratio > 0 and math.isfinite(r.ratio) for r in rows), name


def test_training_cap_benchmark_quick(tmp_path):
    from benchmarks import hipgp_training_cap

    out = tmp_path / "cap.json"
    assert hipgp_training_cap.main(["--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert len(res["rows"]) == len(hipgp_training_cap.KERNELS)
    for r in res["rows"]:
        med = {c: v[0] for c, v in r["errors"].items()}
        assert all(0 <= v < 1 for v in med.values())
        assert med["20"] <= med["0"]  # iterations from the interpolation start improve k_n
    for r in res["training"]:
        v = r["variants"]
        assert v["converged"]["distance"] == 0
        assert all(0 < x["rmse"] < 1 and x["seconds_per_epoch"] > 0 for x in v.values())
        assert 0 <= v["auto"]["kept"] <= 1 and v["cap 3"]["kept"] == 0
        if v["auto"]["kept"] == 1:  # every start kept: the rows of no solve (from dense and
            # sparse weights, whose products round apart: the mean steps' CG at tolerance
            # 1e-3 may stop an iteration apart)
            assert v["auto"]["rmse"] == pytest.approx(v["no solve"]["rmse"], rel=1e-5)
            assert v["auto"]["rmse"] != pytest.approx(v["cap 3"]["rmse"], rel=1e-5)
