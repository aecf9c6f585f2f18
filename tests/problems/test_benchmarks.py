"""Benchmark problems of ``bo-ncgp bench``: the unit-cube test functions, their feasible
regions and constrained optima, the count-valued problem, the lander's wind."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.benchmarks import (
    FeasibleFunction,
    PoissonRate,
    UnitCubeFunction,
)
from bo_ncgp.problems.registry import make_problem

#: (registry name, share of the cube documented in the module docstring)
_CONSTRAINED = [
    ("branin-halfplane", 0.50),
    ("branin-disc", 0.385),
    ("hartmann6-ring", 0.15),
    ("levy4-corner", 0.31),
]


@pytest.mark.parametrize(("name", "share"), _CONSTRAINED)
def test_regions_cover_the_documented_share_and_the_optimum_is_never_beaten(name, share):
    p = make_problem(name)
    assert p.strategy_family == "constrained"
    U = np.random.default_rng(0).random((3000, p.dim))
    feasible = np.array([p.feasible(u) for u in U])
    assert feasible.mean() == pytest.approx(share, abs=0.03)
    values = -p._f.evaluate_true(torch.as_tensor(p.lo + U * (p.hi - p.lo))).numpy()
    assert values[0] == pytest.approx(p.objective(U[0]))
    best = values[feasible].max()
    assert p.optimal_value >= best  # a simple regret is never negative
    assert p.optimal_value - best < 0.5 * (p.optimal_value - values.min())


def test_an_infeasible_point_returns_no_value_and_a_failure():
    p = FeasibleFunction("branin", region="halfplane")
    out, inside = p.evaluate(np.array([0.1, 0.2])), p.evaluate(np.array([0.9, 0.2]))
    assert math.isnan(out.value) and out.success is False
    assert inside.success is True and inside.value == p.objective(np.array([0.9, 0.2]))


def test_unit_cube_functions_know_their_optimum_and_survive_pickling():
    for name, u in [("branin", [0.9617, 0.165]), ("levy4", [0.55] * 4)]:
        p = make_problem(name)
        assert p.optimal_value - p.evaluate(np.array(u)).value == pytest.approx(0, abs=1e-3)
        again = pickle.loads(pickle.dumps(p))
        assert again.evaluate(np.array(u)).value == p.evaluate(np.array(u)).value
    with pytest.raises(InputDataError, match="dim must be an int"):
        UnitCubeFunction("branin", "disc")
    with pytest.raises(InputDataError, match="unknown region 'moon'"):
        FeasibleFunction("branin", region="moon")


def test_noisy_and_count_evaluations_depend_on_the_point_only():
    noisy = make_problem("hartmann6-noisy")
    x = np.full(6, 0.3)
    a, b = noisy.evaluate(x), noisy.evaluate(x)
    assert a.value == b.value != a.extra["true_value"]
    assert a.extra["true_value"] == UnitCubeFunction("hartmann").evaluate(x).value
    counts = PoissonRate("branin", peak=20.0, scale=10.0)
    u = np.array([0.9617, 0.165])
    ev = counts.evaluate(u)
    assert ev.value == counts.evaluate(u).value and float(ev.value).is_integer()
    assert counts.optimal_value == 20.0 and ev.extra["true_value"] == pytest.approx(20, abs=1e-3)
    assert counts.strategy_family == "counts"


def test_the_lander_takes_gymnasiums_wind_as_an_option():
    calm = make_problem("lunar-lander", episodes=1, heldout_episodes=1)
    windy = make_problem("lunar-lander-wind", episodes=1, heldout_episodes=1)
    assert "enable_wind" not in calm.config()  # campaigns saved without wind still resume
    assert windy.name == "lunar-lander-wind" and windy.config()["wind_power"] == 15.0
    with pytest.raises(InputDataError, match="wind_power must lie in"):
        make_problem("lunar-lander", enable_wind=True, wind_power=30.0)
