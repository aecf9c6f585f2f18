"""The HIP-GP experiments' (Wu et al. 2022) --quick configurations write well-formed
results."""

import json
import math

import pytest

from experiments.wu2022 import derivative, dust, magnetometer, pcg, whitening


def test_whitening_and_pcg_quick(tmp_path):
    assert whitening.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "whitening_quick.json").read_text())
    for row in res["rows"]:
        assert row["hipgp"]["seconds"] > 0 and row["cholesky"]["seconds"] > 0
        # both whitenings give the same |k_n|^2 = k_un^T K_uu^{-1} k_un
        assert math.isclose(
            row["hipgp"]["knorm2_mean"], row["cholesky"]["knorm2_mean"], rel_tol=1e-5
        )
    assert pcg.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "pcg_quick.json").read_text())
    assert all(0 < r["fraction_mean"] < 1 and r["pcg"]["converged"] for r in res["rows"])
    assert (tmp_path / "pcg_quick.png").stat().st_size > 0


def test_derivative_quick(tmp_path):
    assert derivative.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "derivative_quick.json").read_text())
    s = res["summary"]["with_derivatives"]
    assert set(s) >= {"exact", "hipgp", "svgp"}
    assert abs(s["hipgp"]["rmse"]["mean"] - s["exact"]["rmse"]["mean"]) < 0.05


@pytest.mark.slow
def test_dust_and_magnetometer_quick(tmp_path, data_root):
    assert dust.main(["--quick", "--out", str(tmp_path), "--root", str(data_root)]) == 0
    res = json.loads((tmp_path / "dust_quick.json").read_text())
    assert {r["model"] for r in res["rows"]} == {"hipgp", "svgp"}
    (pair,) = res["paired"]  # HIP-GP against the SVGP on the same held-out stars
    assert all(math.isfinite(v) for v in pair["squared_error_diff"])
    assert (tmp_path / "dust_quick_maps.png").stat().st_size > 0
    # pairing rows of result files afterwards gives the run's own pairs
    args = ["--pair", str(tmp_path / "dust_quick.json"), "--file", "pairs.json"]
    assert dust.main([*args, "--out", str(tmp_path), "--root", str(data_root)]) == 0
    assert json.loads((tmp_path / "pairs.json").read_text())["paired"] == res["paired"]
    assert magnetometer.main(["--quick", "--out", str(tmp_path), "--root", str(data_root)]) == 0
    res = json.loads((tmp_path / "magnetometer_quick.json").read_text())
    assert all(math.isfinite(r["rmse"]) and r["seconds_per_epoch"] > 0 for r in res["rows"])
    assert len(res["paired"]) == 4  # two HIP-GP grids against two SVGP grids
    assert all(r["within_fit_budget"] for r in res["rows"])
