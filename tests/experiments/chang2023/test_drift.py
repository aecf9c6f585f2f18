"""The drift diagnostic and the streaming-variants comparison of the dual SVGP run in their
tiny configurations and write well-formed outputs."""

from __future__ import annotations

import json
import math

import pytest

from experiments.chang2023 import drift, streaming_variants


@pytest.mark.slow  # offline fits from three starts after every recorded update
def test_drift_quick(tmp_path, capsys):
    argv = ["--quick", "--streams", "bernoulli", "--variants", "paper", "default"]
    assert drift.main([*argv, "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "bernoulli.json").read_text())
    assert (tmp_path / "bernoulli.png").stat().st_size > 0
    assert set(saved["variants"]) == {"paper", "default"}
    for res in saved["variants"].values():
        recs = res["records"]
        assert [r["num_data"] for r in recs] == [10, 30, 50]
        assert all(math.isfinite(r["gap"]) and r["distance_stream_offline"] >= 0 for r in recs)
        assert set(recs[-1]["stream"]) == set(recs[-1]["offline"]) == set(recs[-1]["own"])
        assert len(res["update_seconds"]) == 4 and res["finite"]
    assert "| bernoulli | default |" in capsys.readouterr().out


def test_streaming_variants_quick(data_root, tmp_path, capsys):
    argv = ["--quick", "--variants", "paper", "default_no_memory", "--out", str(tmp_path)]
    assert streaming_variants.main([*argv, "--root", str(data_root)]) == 0
    saved = json.loads((tmp_path / "banana.json").read_text())
    assert set(saved["runs"]) == {"paper", "default_no_memory"}
    assert all(0 <= r["accuracy"] <= 1 for rs in saved["runs"].values() for r in rs)
    assert "| default_no_memory |" in capsys.readouterr().out


def test_streaming_variants_seed_ranges_merge_paired(data_root, tmp_path, capsys):
    argv = ["--quick", "--variants", "default", "default_no_memory", "--root", str(data_root)]
    assert streaming_variants.main([*argv, "--out", str(tmp_path)]) == 0
    assert streaming_variants.main([*argv, "--first-seed", "1", "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "banana_seeds1-1.json").is_file()
    capsys.readouterr()
    assert streaming_variants.main(["--merge", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "banana_summary.json").read_text())
    assert [r["seed"] for r in saved["runs"]["default_no_memory"]] == [0, 1]
    rows = {r[0]: r for r in saved["summary"]}
    assert rows["default"][4] == 2 and rows["default"][5] == "+0.000 +- 0.000"
    runs = saved["runs"]
    pairs = zip(runs["default"], runs["default_no_memory"], strict=True)
    d = [b["accuracy"] - a["accuracy"] for a, b in pairs]
    assert rows["default_no_memory"][5].startswith(f"{sum(d) / 2:+.3f} +- ")
    assert "| default_no_memory |" in capsys.readouterr().out
