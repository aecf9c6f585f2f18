"""The IterNCGP experiments' (Tatzel et al.) --quick configurations write well-formed
results."""

import json
import math

import pytest

from experiments.tatzel import condition, gmm, mnist, poisson


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
    assert gmm.main(["--quick", "--inline", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "gmm_quick.json").read_text())
    methods = {"IterNCGP-CG R=inf", "IterNCGP-CG R=10", "SoD N_sub=50", "SVGP U=10/class lr=0.05"}
    _check_classification(res, methods)
    assert (tmp_path / "gmm_quick.png").stat().st_size > 0


def test_mnist_quick(tmp_path, data_root):
    argv = ["--quick", "--inline", "--out", str(tmp_path), "--root", str(data_root)]
    assert mnist.main(argv) == 0
    res = json.loads((tmp_path / "mnist_quick.json").read_text())
    _check_classification(res, {"IterNCGP-CG j<=5", "SoD N_sub=50", "SVGP U=10/class lr=0.05"})
    assert (tmp_path / "mnist_quick.png").stat().st_size > 0


def test_poisson_quick(tmp_path):
    assert poisson.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "poisson_quick.json").read_text())
    budget = res["setting"]["budget"]
    for s in (s for v in res["variants"].values() for s in v["schedules"].values()):
        assert len(s["median"]) == budget + 1 and all(math.isfinite(v) for v in s["median"])
    assert res["exact_laplace_test_nll_median"] > 0
    assert (tmp_path / "poisson_quick.png").stat().st_size > 0


@pytest.mark.slow
def test_condition_quick(tmp_path):
    assert condition.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "condition_quick.json").read_text())
    setting = res["settings"]["gmm"]
    for row in setting["rows"]:
        assert [c["num_iters"] for c in row["condition"]] == [1, 3]
        for c in row["condition"]:
            assert c["k_products"] <= 2 * c["num_iters"] and math.isfinite(c["mean_dev"])
        assert row["refit"]["k_products"] > 0 and math.isfinite(row["refit"]["mean_dev"])
    assert setting["fantasies"]["max_mean_difference"] < 1e-8  # batched == separate calls
