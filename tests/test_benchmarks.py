"""Smoke tests of the benchmark scripts' quick configurations (outputs well formed)."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fantasy_batch_quick_dual_conditioning_selects_the_refit_points(tmp_path):
    out = tmp_path / "fb.json"
    mod = _load("fantasy_batch")
    assert mod.main(["--quick", "--methods", "refit-dual", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {r["method"]: r for r in res["rows"]}
    assert set(rows) == {"dual", "refit-dual"} and res["n"] == 120
    # posterior-mean fantasies: conditioning and refitting give the same posterior, same points
    assert rows["refit-dual"]["max_point_diff_vs_dual"] < 1e-5
    assert all(r["update_s"] > 0 and r["total_s"] >= r["update_s"] for r in rows.values())
