"""The table of the IterNCGP-classifier constrained benchmark, from a synthetic bench folder."""

import json
import math

from experiments.tatzel import constrained as C


def _bench(tmp_path):
    finals = {"botorch-labels": [1.0, 2.0], "dual": [3.0, 3.0], "dual-iterncgp": [2.0, 1.0]}
    finals["dual-iterncgp-math"] = [2.0, 2.0]
    strategies = {}
    for name, v in finals.items():
        per_seed = {str(s): [9.0, x] for s, x in enumerate(v)}
        strategies[name] = {
            "per_seed": per_seed,
            "final": {"mean": sum(v) / 2, "se": 0.5, "n": 2},
            "seconds": {"iteration": {"mean": 0.5, "se": 0.1, "n": 2}},
        }
        for s in range(len(v)):
            folder = tmp_path / "p" / name / f"seed_{s}"
            folder.mkdir(parents=True)
            points = [[0.1], [0.2], [0.3 if name != "dual-iterncgp-math" or s else 0.4]]
            state = {
                "evaluations": [{"point": p} for p in points],
                "batches": [[0], [1], [2]],
                "iterations": [{"metrics": {}}, {"metrics": {"computational_share": 0.25}}],
                "finished": True,
            }
            (folder / "state.json").write_text(json.dumps(state))
    summary = {"settings": {"seeds": [0, 1]}, "problems": {"p": {"strategies": strategies}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return tmp_path


def test_the_table_pairs_the_seeds_and_finds_where_the_ablation_diverges(tmp_path, capsys):
    bench = _bench(tmp_path / "bench")
    out = tmp_path / "out"
    assert C.main(["--bench", str(bench), "--out", str(out), "--no-replay"]) == 0
    row = json.loads((out / "table.json").read_text())["problems"]["p"]
    assert row["lead_over_dual"]["mean"] == 1.5  # dual 3, 3 vs ours 2, 1
    assert row["lead_over_botorch-labels"]["mean"] == 0.0
    assert math.isclose(row["lead_over_dual-iterncgp-math"]["mean"], 0.5)
    assert row["first_divergent_evaluation"] == {"0": 3, "1": None}
    assert row["computational_share"]["mean"] == 0.25
    assert "| p |" in capsys.readouterr().out
