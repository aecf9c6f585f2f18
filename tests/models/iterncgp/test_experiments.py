"""The IterNCGP experiment scripts' --quick configurations write well-formed results."""

import json
import math
from pathlib import Path

import pytest

from tests._helpers import load_script

EXP = Path(__file__).resolve().parents[3] / "experiments"


def _load(name):
    return load_script(f"experiments/{name}.py")


def _check_classification(res, methods):
    assert set(res["summary"]) == methods
    for name, s in res["summary"].items():
        assert 0 <= s["test_acc"] <= 1 and 0 <= s["test_ece"] <= 1, name
        assert math.isfinite(s["test_nll"]) and s["test_nll"] > 0, name
        curve = res["runs"][name]["curve"]
        assert [r["time"] for r in curve] == sorted(r["time"] for r in curve), name
    for name, run in res["runs"].items():
        if name.startswith("IterNCGP"):
            assert run["cache_vs_predict_f"] < 1e-8  # the cached metrics are predict_f's


def test_gmm_quick(tmp_path):
    res = _load("iterncgp_gmm").main(["--quick", "--inline", "--out", str(tmp_path)])
    methods = {"IterNCGP-CG R=inf", "IterNCGP-CG R=10", "SoD N_sub=50", "SVGP U=10/class lr=0.05"}
    _check_classification(res, methods)
    assert json.loads((tmp_path / "gmm_quick.json").read_text())["summary"] == res["summary"]
    assert (tmp_path / "gmm_quick.png").stat().st_size > 0


def test_mnist_quick(tmp_path, data_root):
    mod = _load("iterncgp_mnist")
    res = mod.main(["--quick", "--inline", "--out", str(tmp_path), "--root", str(data_root)])
    _check_classification(res, {"IterNCGP-CG j<=5", "SoD N_sub=50", "SVGP U=10/class lr=0.05"})
    assert (tmp_path / "mnist_quick.png").stat().st_size > 0


def test_poisson_quick(tmp_path):
    res = _load("iterncgp_poisson").main(["--quick", "--out", str(tmp_path)])
    budget = res["setting"]["budget"]
    for s in (s for v in res["variants"].values() for s in v["schedules"].values()):
        assert len(s["median"]) == budget + 1 and all(math.isfinite(v) for v in s["median"])
    assert res["exact_laplace_test_nll_median"] > 0
    assert (tmp_path / "poisson_quick.png").stat().st_size > 0


@pytest.mark.slow
def test_condition_quick(tmp_path):
    res = _load("iterncgp_condition").main(["--quick", "--out", str(tmp_path)])
    setting = res["settings"]["gmm"]
    for row in setting["rows"]:
        assert [c["num_iters"] for c in row["condition"]] == [1, 3]
        for c in row["condition"]:
            assert c["k_products"] <= 2 * c["num_iters"] and math.isfinite(c["mean_dev"])
        assert row["refit"]["k_products"] > 0 and math.isfinite(row["refit"]["mean_dev"])
    assert setting["fantasies"]["max_mean_difference"] < 1e-8  # batched == separate calls
    assert (tmp_path / "condition_quick.json").is_file()
