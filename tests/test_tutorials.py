"""The tutorials (``tutorials/NN_*.py``, jupytext percent format) run top to bottom as notebooks.

Every tutorial is converted with jupytext and executed by ``nbclient`` with the ``python3``
kernel of this interpreter, in a temporary folder (so its figures go to ``<tmp>/output``), with
``BO_NCGP_TUTORIAL_QUICK=1`` (its small budget), one torch thread and pykeops' banner off (as
in the docs build). The test then runs one more cell of its own in the same kernel, which reads
the numbers the checks below need from the notebook's variables and prints them as JSON: the
tutorials carry no test scaffolding. No cell may fail or write to stderr (a warning shown to
the reader). One test per tutorial, so pytest-xdist spreads them over workers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
MARK = "TUTORIAL-TEST-VALUES "


def execute(path: Path, cwd: Path, values: dict[str, str]) -> tuple[dict[str, float], list]:
    """Run ``path`` as a notebook in ``cwd``; return ``values`` (name -> expression, evaluated
    in the notebook's namespace after its last cell) and the executed cells of the tutorial."""
    nb = jupytext.read(path)
    n_cells = len(nb.cells)
    entries = ", ".join(f"{k!r}: float({v})" for k, v in values.items())
    nb.cells.append(
        nbformat.v4.new_code_cell(f"print({MARK!r} + __import__('json').dumps({{{entries}}}))")
    )
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    assert MARK in text, f"{path.name}: the value cell printed {text!r}"
    return json.loads(text.split(MARK, 1)[1]), nb.cells[:n_cells]


def finite(r: dict[str, float], *keys: str) -> None:
    for k in keys:
        assert math.isfinite(r[k]), f"{k}={r[k]} is not finite"


# ------------------------------------------------------------------------------- checks
# name -> expression in the tutorial's namespace, then the checks on the values
VALUES_01 = {
    "seeds": "len(SEEDS)",
    "runs": "min(len(v) for v in runs.values())",
    "best_dual_worst": "min(r['Y'].max() for r in runs['DualSVGP'])",
    "best_gp_worst": "min(r['Y'].max() for r in runs['SingleTaskGP'])",
    "best_max": "max(r['Y'].max() for v in runs.values() for r in v)",
    "regret_min": "min(r['regret'].min() for v in runs.values() for r in v)",
    "regret_monotone": "all((np.diff(r['regret']) <= 0).all() for v in runs.values() for r in v)",
    "seconds_min": "min(r[p] for v in runs.values() for r in v for p in ('model', 'acq'))",
}


def check_01(r: dict[str, float]) -> None:
    assert r["seeds"] >= 2 and r["runs"] == r["seeds"]  # error bars need several seeds
    finite(r, "best_dual_worst", "best_gp_worst")
    assert r["best_max"] <= -0.397887 + 1e-6, "a value beats the global optimum of -branin"
    assert r["best_dual_worst"] > -10.0 and r["best_gp_worst"] > -10.0  # not clearly bad
    assert r["regret_min"] >= -1e-6 and r["regret_monotone"] == 1
    assert r["seconds_min"] > 0


VALUES_02 = {
    "seeds": "len(SEEDS)",
    "runs": "min(len(v) for v in runs.values())",
    "best_bo_min": "min(r['Y'].max() for r in runs['batch BO'])",
    "best_random_min": "min(r['Y'].max() for r in runs['random search'])",
    "best_max": "max(r['Y'].max() for v in runs.values() for r in v)",
    "bo_not_below_initial": "all(r['Y'].max() >= r['Y'][:N_INIT].max() for r in runs['batch BO'])",
    "same_initial": "all(torch.equal(a['U'][:N_INIT], b['U'][:N_INIT]) "
    "for a, b in zip(runs['batch BO'], runs['random search']))",
    "num_evaluations": "min(r['U'].shape[0] for v in runs.values() for r in v)",
    "num_evaluations_max": "max(r['U'].shape[0] for v in runs.values() for r in v)",
    "expected_evaluations": "N_INIT + Q * N_BATCHES",
    "in_bounds": "all(((r['U'] >= 0) & (r['U'] <= 1)).all() for v in runs.values() for r in v)",
    "labels_binary": "all(((r['S'] == 0) | (r['S'] == 1)).all() for v in runs.values() for r in v)",
    "num_gaps": "sum(len(r['gaps']) for r in runs['batch BO'])",
    "crash_value": "crash.value",
}


def check_02(r: dict[str, float]) -> None:
    assert r["seeds"] >= 2 and r["runs"] == r["seeds"]
    finite(r, "best_bo_min", "best_random_min", "crash_value")
    assert r["bo_not_below_initial"] == 1 and r["same_initial"] == 1
    assert r["best_bo_min"] > r["crash_value"]  # better than never firing an engine
    assert r["best_random_min"] > r["crash_value"]
    assert -1000.0 < r["best_max"] < 400.0  # lunar-lander rewards
    assert r["num_evaluations"] == r["num_evaluations_max"] == r["expected_evaluations"]
    assert r["in_bounds"] == 1 and r["labels_binary"] == 1
    assert r["num_gaps"] == r["seeds"] * 2  # one smallest distance per batch (quick: 2 batches)


VALUES_03 = {
    "seeds": "len(SEEDS)",
    "runs": "min(len(v) for v in states.values())",
    "accuracy_min": "min(curve(st, 'accuracy')[1].min() for v in states.values() for st in v)",
    "accuracy_max": "max(curve(st, 'accuracy')[1].max() for v in states.values() for st in v)",
    "mse_max": "max(curve(st, 'mse')[1][-1] for v in states.values() for st in v)",
    "same_initial": "all(curve(a, 'accuracy')[1][0] == curve(b, 'accuracy')[1][0] "
    "for a, b in zip(states['entropy'], states['random']))",
    "surveys_distinct": "all(len({e['point'] for e in st['evaluations']}) "
    "== len(st['evaluations']) == N_INIT + N_STEPS for v in states.values() for st in v)",
    "prevalence_min": "prevalence.min()",
    "prevalence_max": "prevalence.max()",
    "exceedance_min": "p_hot.min()",
    "exceedance_max": "p_hot.max()",
}


def check_03(r: dict[str, float]) -> None:
    assert r["seeds"] >= 2 and r["runs"] == r["seeds"]
    assert 0.0 < r["accuracy_min"] <= r["accuracy_max"] <= 1.0
    assert 0.0 <= r["mse_max"] < 0.1
    assert r["same_initial"] == 1  # same initial design for both strategies of a seed
    assert r["surveys_distinct"] == 1  # never a village twice
    assert 0.0 < r["prevalence_min"] <= r["prevalence_max"] < 1.0
    assert 0.0 <= r["exceedance_min"] <= r["exceedance_max"] <= 1.0


VALUES_04 = {
    **{f"mean_var_{i}": f"mean_var[{i}]" for i in range(5)},
    "num_budgets": "len(BUDGETS)",
    "mean_var_exact": "var_exact.mean()",
    "mean_var_prior": "kernel.outputscale",
    "max_abs_mean_error_largest_budget": "(fits[BUDGETS[-1]][1] - mean_exact).abs().max()",
    "trace_max_increase": "increase",
    "trace_first": "trace[0].mean()",
    "trace_last": "trace[-1].mean()",
}


def check_04(r: dict[str, float]) -> None:
    var = [r[f"mean_var_{i}"] for i in range(int(r["num_budgets"]))]
    exact, prior = r["mean_var_exact"], r["mean_var_prior"]
    # more solver iterations: less (computational) uncertainty, towards the exact Laplace one
    assert var[-1] <= var[0]
    assert var[-1] - exact < 0.25 * (var[0] - exact)
    assert all(exact * 0.95 <= v <= prior + 1e-9 for v in var), (var, exact, prior)
    assert r["max_abs_mean_error_largest_budget"] < 0.05
    # within one Newton step the variance never increases (pointwise, up to round-off)
    assert r["trace_max_increase"] <= 1e-6
    assert r["trace_last"] < r["trace_first"]


VALUES_05 = {
    "rmse_values_only": "rmse['values only']",
    "rmse_with_derivatives": "rmse['values + derivatives']",
    "sd_values_only": "curves['values only'][1].clamp_min(0).sqrt().mean()",
    "sd_with_derivatives": "curves['values + derivatives'][1].clamp_min(0).sqrt().mean()",
    "integral_rmse": "rmse_int",
    "integral_target_sd": "yte.std()",
    "density_corr": "corr",
    "integral_var_min": "pred_var.min()",
}


def check_05(r: dict[str, float]) -> None:
    finite(r, "rmse_values_only", "rmse_with_derivatives", "integral_rmse", "density_corr")
    assert r["rmse_with_derivatives"] < 0.5 * r["rmse_values_only"]
    assert r["sd_with_derivatives"] < r["sd_values_only"]
    assert r["rmse_with_derivatives"] < 0.1
    assert r["integral_rmse"] < 0.5 * r["integral_target_sd"]  # better than a constant
    assert r["density_corr"] > 0.7
    assert r["integral_var_min"] >= 0.0


VALUES_06 = {
    "elbo_first": "trace[0]",
    "elbo_last": "trace[-1]",
    "test_rmse": "rmse",
    "noise_sd": "gam.likelihood.noise.sqrt().item()",
    "var_sum": "var_sum.mean()",
    "sum_component_vars": "sum_of_vars.mean()",
    **{f"component_{c + 1}_rmse": f"errors[{c}]" for c in range(4)},
    **{f"component_{c + 1}_amplitude": f"amplitudes[{c}]" for c in range(4)},
    "ucb_f_gap": "f(torch.tensor([0.25, 0.0, 1.0, 0.5])) - f(x_best)",
}


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


CHECKS: dict[str, tuple[dict[str, str], Callable[[dict[str, float]], None]]] = {
    "01": (VALUES_01, check_01),
    "02": (VALUES_02, check_02),
    "03": (VALUES_03, check_03),
    "04": (VALUES_04, check_04),
    "05": (VALUES_05, check_05),
    "06": (VALUES_06, check_06),
}


def hotspot_data_available() -> bool:
    from bo_ncgp.data.hotspots import load_hotspots

    try:
        load_hotspots("civ")
    except FileNotFoundError:
        return False
    return True


def test_tutorials_are_found():
    assert [p.name[:2] for p in TUTORIALS][:6] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs_as_a_notebook(path, tmp_path, monkeypatch):
    number = path.name[:2]
    values, check = CHECKS.get(number, ({}, None))  # a tutorial without checks must still run
    if number == "03" and not hotspot_data_available():
        pytest.skip("tutorial 3 needs the hotspot data ($BO_NCGP_DATA)")
    monkeypatch.setenv("BO_NCGP_TUTORIAL_QUICK", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("KEOPS_VERBOSE", "0")  # as the docs build does (docs/conf.py)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    results, cells = execute(path, tmp_path, values)
    stderr = [
        o.get("text", "")
        for c in cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stderr"
    ]
    assert not stderr, f"{path.name} shows warnings or errors to the reader: {stderr}"
    shown = "".join(o.get("text", "") for c in cells for o in c.get("outputs", []))
    assert not re.search(r"^RESULT \w+=", shown, re.MULTILINE), f"{path.name} prints test lines"
    if check is None:
        return
    check(results)
    images = sum("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", []))
    assert images, f"{path.name} shows no figure"
    assert list((tmp_path / "output").glob(f"{number}_*.png")), f"{path.name} saved no figure"
