import json

import numpy as np
import pytest

from bo_ncgp.campaigns.compare import paired_differences
from bo_ncgp.cli import main


def _write(root, name, seed, values, strategy="s", sha="abc"):
    its = [{"num_evaluations": n, "metrics": {"mse": v}} for n, v in values.items()]
    st = {"seed": seed, "strategy": {"name": strategy}, "problem": {"data_sha256": sha},
          "iterations": its}  # fmt: skip
    d = root / name / f"seed_{seed}"
    d.mkdir(parents=True)
    (d / "state.json").write_text(json.dumps(st))


def test_paired_differences_by_hand_and_only_on_shared_seeds(tmp_path):
    a = {0: {10: 0.3, 11: 0.1}, 1: {10: 0.5, 11: 0.2}, 2: {10: 0.9, 11: 0.9}}
    b = {0: {10: 0.1, 11: 0.3}, 1: {10: 0.2, 11: 0.25}, 3: {10: 0.0, 11: 0.0}}
    for s, v in a.items():
        _write(tmp_path, "a", s, v)
    for s, v in b.items():
        _write(tmp_path, "b", s, v)
    res = paired_differences(tmp_path / "a", tmp_path / "b", ("mse",), (10, 11, 12))
    assert res["seeds"] == [0, 1]  # seeds 2 and 3 ran in one folder only
    d = np.array([0.3 - 0.1, 0.5 - 0.2])
    assert res["mse"]["10"]["mean"] == pytest.approx(d.mean())
    assert res["mse"]["10"]["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(2))
    assert res["mse"]["10"]["a_lower"] == 0 and res["mse"]["11"]["a_lower"] == 2
    assert res["mse"]["12"]["n"] == 0  # step not reached


def test_refuses_other_data_no_shared_seed_and_mixed_strategies(tmp_path, capsys):
    _write(tmp_path, "a", 0, {5: 0.1})
    _write(tmp_path, "b", 0, {5: 0.1}, sha="other")
    _write(tmp_path, "c", 1, {5: 0.1})
    _write(tmp_path, "mixed", 0, {5: 0.1})
    _write(tmp_path, "mixed", 1, {5: 0.1}, strategy="t")
    with pytest.raises(ValueError, match="different data"):
        paired_differences(tmp_path / "a", tmp_path / "b", ("mse",), (5,))
    with pytest.raises(ValueError, match="share no seed"):
        paired_differences(tmp_path / "a", tmp_path / "c", ("mse",), (5,))
    with pytest.raises(ValueError, match="several strategies"):
        paired_differences(tmp_path / "mixed", tmp_path / "a", ("mse",), (5,))
    assert main(["compare", str(tmp_path / "nothing"), str(tmp_path / "a")]) == 2
    assert "no state.json" in capsys.readouterr().err


def test_cli_prints_and_writes_json(tmp_path, capsys):
    _write(tmp_path, "a", 0, {5: 0.1})
    _write(tmp_path, "b", 0, {5: 0.3})
    out = tmp_path / "res" / "paired.json"
    args = ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metrics", "mse"]
    assert main([*args, "--at", "5", "--json", str(out)]) == 0
    assert "mse@5: A - B = -0.2" in capsys.readouterr().out
    assert json.loads(out.read_text())["mse"]["5"]["a_lower"] == 1
