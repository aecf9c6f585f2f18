"""Smoke tests of benchmarks/conditioning_check.py and benchmarks/batch_diversity.py: well-formed
output, and the numbers the benchmarks exist to show (dual conditioning removes the exact
update's variance; batches of 4 hold no repeat)."""

import json

from benchmarks import batch_diversity, conditioning_check


def test_conditioning_check(tmp_path, capsys):
    out = tmp_path / "cond.json"
    assert conditioning_check.main(["--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    removed = res["variance_removed"]
    assert abs(removed["condition"] - removed["exact update of q"]) < 0.05 * removed["condition"]
    assert [r["m"] for r in res["qnipv"]] == [30, 24]
    assert all(r["spearman"] > 0.8 for r in res["qnipv"])
    assert "| condition |" in capsys.readouterr().out


def test_batch_diversity_quick(tmp_path, capsys):
    out = tmp_path / "bd.json"
    assert batch_diversity.main(["--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {r["strategy"]: r for r in res["rows"]}
    assert set(rows) == {"dual mean", "dual sample", "dual mean, fixed incumbent",
                         "SingleTaskGP KB"}  # fmt: skip
    assert all(r["problem"] == "Branin" and r["seeds"] == 1 for r in rows.values())
    assert rows["dual mean"]["batches_with_duplicate"] == 0
    assert rows["dual sample"]["batches_with_duplicate"] == 0
    assert "| Branin | dual mean |" in capsys.readouterr().out
