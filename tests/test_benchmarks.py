"""Smoke tests of the benchmark scripts' quick configurations (outputs well formed)."""

import json
from pathlib import Path

from tests._helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    mod = load_script(f"benchmarks/{name}.py")
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
