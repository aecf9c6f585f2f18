"""Smoke test of ``benchmarks/dual_update.py --quick`` (well-formed output; the blocked and the
one-row-per-pivot inducing selections agree)."""

import json
import math

from benchmarks import dual_update


def test_dual_update_quick(tmp_path, capsys):
    out = tmp_path / "dual_update.json"
    assert dual_update.main(["--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [(c["model"], c["n0"]) for c in res["cases"]] == [("bernoulli", 200), ("softmax", 200)]
    for c in res["cases"]:
        assert c["selection_pivots_equal"] and c["selection_max_abs_L_diff"] < 1e-12
        assert c["pivots"] == 20 and c["candidates"] == 120
        secs = c["seconds_median"]
        assert set(secs) == {
            "update (default)",
            "update, fixed Z",
            "inducing selection, blocked rows",
            "inducing selection, one row per pivot",
            "SVGP refit",
        }
        assert all(v > 0 and c["seconds_min"][k] <= v for k, v in secs.items())
        assert c["ratio_to_refit"]["SVGP refit"] == 1.0
        assert all(math.isfinite(r) for r in c["ratio_to_refit"].values())
    assert "| softmax | 200 | 20 | 100 | update (default) |" in capsys.readouterr().out
