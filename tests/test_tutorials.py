"""The tutorials (``tutorials/NN_*.py``, jupytext percent format) run top to bottom.

Every tutorial runs as a subprocess with ``BO_NCGP_TUTORIAL_QUICK=1`` (its small budget), one
torch thread and the Agg backend, in a temporary working directory (so its figures go to
``<tmp>/tutorials/output``). It must exit with code 0 and print machine-checkable lines
``RESULT key=value``; each tutorial's values are checked for sanity below. A tutorial that
cannot run without the shared data prints ``RESULT skipped=1`` and is skipped. One test per
tutorial, so pytest-xdist spreads them over workers.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
RESULT = re.compile(r"^RESULT (\w+)=(\S+)$", re.MULTILINE)


def run_tutorial(path: Path, cwd: Path) -> tuple[dict[str, float], subprocess.CompletedProcess]:
    env = dict(os.environ, BO_NCGP_TUTORIAL_QUICK="1", OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, (
        f"{path.name} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n"
        f"--- stderr\n{proc.stderr[-5000:]}"
    )
    results = {k: float(v) for k, v in RESULT.findall(proc.stdout)}
    assert results, f"{path.name} printed no RESULT lines\n{proc.stdout[-3000:]}"
    return results, proc


def finite(r: dict[str, float], *keys: str) -> None:
    for k in keys:
        assert k in r, f"missing RESULT {k}"
        assert math.isfinite(r[k]), f"RESULT {k}={r[k]} is not finite"


# ------------------------------------------------------------------------------- checks
def check_01(r: dict[str, float]) -> None:
    finite(r, "best_dual", "best_gp")
    optimum = -0.397887  # negated Branin
    for k in ("best_dual", "best_gp"):
        assert r[k] <= optimum + 1e-6, f"{k}={r[k]} beats the global optimum"
        assert r[k] > -10.0, f"{k}={r[k]}: worse than a clearly bad value of -branin"


def check_02(r: dict[str, float]) -> None:
    finite(r, "best_bo", "best_random", "best_initial", "crash_value", "reference_value")
    assert r["best_bo"] >= r["best_initial"]  # best-so-far bookkeeping
    assert r["best_bo"] > r["crash_value"]  # better than never firing an engine
    assert r["best_random"] > r["crash_value"]
    assert r["num_evaluations"] == r["num_distinct"] > 0  # batches have distinct points
    assert r["in_bounds"] == 1 and r["p_success_in_unit"] == 1
    assert 0 <= r["num_landed_bo"] <= r["num_evaluations"]
    assert 0 <= r["num_landed_random"] <= r["num_evaluations"]
    if math.isfinite(r["best_landed_bo"]):
        assert r["best_landed_bo"] <= r["best_bo"]
    assert -1000.0 < r["best_bo"] < 400.0  # lunar-lander rewards


def check_03(r: dict[str, float]) -> None:
    for name in ("entropy", "random"):
        finite(r, f"{name}_accuracy_final", f"{name}_mse_final")
        for k in (f"{name}_accuracy_initial", f"{name}_accuracy_final"):
            assert 0.5 < r[k] <= 1.0, f"{k}={r[k]}"
        assert 0.0 <= r[f"{name}_mse_final"] < 0.1
        assert r[f"{name}_num_surveys"] == r[f"{name}_num_distinct"]  # never a village twice
    assert r["entropy_accuracy_initial"] == r["random_accuracy_initial"]  # same initial design
    assert 0.0 < r["prevalence_min"] <= r["prevalence_max"] < 1.0
    assert 0.0 <= r["exceedance_min"] <= r["exceedance_max"] <= 1.0


def check_04(r: dict[str, float]) -> None:
    budgets = sorted(int(k.rsplit("_", 1)[1]) for k in r if re.fullmatch(r"mean_var_\d+", k))
    assert len(budgets) >= 3
    var = [r[f"mean_var_{k}"] for k in budgets]
    exact, prior = r["mean_var_exact"], r["mean_var_prior"]
    # more solver iterations: less (computational) uncertainty, towards the exact Laplace one
    assert var[-1] <= var[0]
    assert var[-1] - exact < 0.25 * (var[0] - exact)
    assert all(exact * 0.95 <= v <= prior + 1e-9 for v in var), (var, exact, prior)
    assert r["max_abs_mean_error_largest_budget"] < 0.05
    # within one Newton step the variance never increases (pointwise, up to round-off)
    assert r["trace_max_increase"] <= 1e-6
    assert r["trace_last"] < r["trace_first"]


def check_05(r: dict[str, float]) -> None:
    finite(r, "rmse_values_only", "rmse_with_derivatives", "integral_rmse", "density_corr")
    assert r["rmse_with_derivatives"] < 0.5 * r["rmse_values_only"]
    assert r["sd_with_derivatives"] < r["sd_values_only"]
    assert r["rmse_with_derivatives"] < 0.1
    assert r["integral_rmse"] < 0.5 * r["integral_target_sd"]  # better than a constant
    assert r["density_corr"] > 0.7
    assert r["integral_var_min"] >= 0.0


def check_06(r: dict[str, float]) -> None:
    finite(r, "elbo_first", "elbo_last", "test_rmse")
    assert r["elbo_last"] > r["elbo_first"]
    assert r["test_rmse"] < 0.15
    assert 0.05 < r["noise_sd"] < 0.2  # true 0.1
    for c in (1, 2, 3):
        assert r[f"component_{c}_rmse"] < 0.1
    assert r["component_4_amplitude"] < 0.1  # the irrelevant input is switched off
    assert r["component_1_amplitude"] > 0.5
    assert -1e-9 <= r["ucb_f_gap"] < 0.2
    # the levels of the components are uncertain, their sum is not (coupled posterior)
    assert 0.0 < r["var_sum"] < 0.1 * r["sum_component_vars"]


CHECKS: dict[str, Callable[[dict[str, float]], None]] = {
    "01": check_01,
    "02": check_02,
    "03": check_03,
    "04": check_04,
    "05": check_05,
    "06": check_06,
}


def test_tutorials_are_found():
    assert [p.name[:2] for p in TUTORIALS][:6] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs_and_prints_sane_results(path, tmp_path):
    number = path.name[:2]
    assert number in CHECKS, f"add sanity checks for {path.name} to tests/test_tutorials.py"
    results, proc = run_tutorial(path, tmp_path)
    if results.get("skipped") == 1:
        lines = [ln for ln in proc.stdout.splitlines() if ln and not ln.startswith("[KeOps]")]
        pytest.skip(f"{path.name} skipped itself: {lines[0]}")
    CHECKS[number](results)
    figures = list((tmp_path / "tutorials" / "output").glob(f"{number}_*.png"))
    assert figures, f"{path.name} saved no figure"
