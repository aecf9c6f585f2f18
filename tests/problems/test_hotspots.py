"""Tests of bo_ncgp.problems.hotspots (the hotspot pool problem)."""

from __future__ import annotations

import numpy as np
import pytest

from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.problems.hotspots import HotspotPool


def toy(seed=0, P=12, num_trials=100):
    rng = np.random.default_rng(123)
    return HotspotPool(
        rng.random((P, 3)), np.linspace(0.01, 0.6, P), 0.1, seed=seed, num_trials=num_trials
    )


def test_permutation_and_initial_design_per_seed():
    a, b, c = toy(0), toy(0), toy(1)
    assert sorted(a.permutation.tolist()) == list(range(12))
    assert np.array_equal(a.permutation, b.permutation)
    assert not np.array_equal(a.permutation, c.permutation)
    init = a.initial_design(5, np.random.default_rng(99))
    assert np.array_equal(init, a.permutation[:5])
    assert np.array_equal(init, a.initial_design(5, np.random.default_rng(1)))  # rng unused
    with pytest.raises(ValueError):
        a.initial_design(13, None)


def test_observations_depend_only_on_seed_and_village():
    a, b = toy(0), toy(0)
    forward = [a.observe(i) for i in range(12)]
    backward = [b.observe(i) for i in reversed(range(12))][::-1]
    assert forward == backward  # order of the surveys does not matter
    assert forward == [a.observe(i) for i in range(12)]  # repeatable
    assert forward != [toy(1).observe(i) for i in range(12)]
    ev = a.evaluate_index(4)
    assert ev.value == forward[4] and ev.extra == {"village": 4}
    assert all(0 <= v <= 100 and v == int(v) for v in forward)
    with pytest.raises(IndexError):
        a.observe(12)
    with pytest.raises(UnsupportedError, match="evaluate_index"):
        a.evaluate(np.zeros(3))


def test_observations_are_binomial_in_theta():
    # village prevalence theta_i: the counts over many seeds average to 100 theta_i
    counts = np.array([[toy(s, P=3).observe(i) for i in range(3)] for s in range(400)])
    theta = toy(P=3).theta
    se = np.sqrt(100 * theta * (1 - theta) / 400)
    assert np.all(np.abs(counts.mean(0) - 100 * theta) < 4 * se)
    assert toy(P=3, num_trials=1).observe(2) in (0, 1)


def test_metrics_on_a_hand_made_pool():
    prob = HotspotPool(np.zeros((4, 1)), np.array([0.05, 0.2, 0.5, 0.01]), 0.1, seed=0)
    pred = np.array([0.9, 0.15, 0.05, 0.02])
    m = prob.metrics(pred, observed=np.array([0]))
    # remaining villages 1, 2, 3: predicted hotspots [T, F, F], true [T, T, F]
    assert m["accuracy"] == pytest.approx(2 / 3)
    assert m["mse"] == pytest.approx(((0.15 - 0.2) ** 2 + (0.05 - 0.5) ** 2 + 0.01**2) / 3)
    assert m["sensitivity"] == pytest.approx(1 / 2) and m["num_remaining"] == 3
    # every village, the surveyed village 0 included (wrongly called a hotspot): [F, T, F, T]
    assert m["accuracy_all"] == pytest.approx(2 / 4)
    sq = [(0.9 - 0.05) ** 2, (0.15 - 0.2) ** 2, (0.05 - 0.5) ** 2, 0.01**2]
    assert m["mse_all"] == pytest.approx(sum(sq) / 4)
    assert prob.metrics(pred, observed=np.array([0, 1]))["mse_all"] == m["mse_all"]
    full = prob.metrics(pred, observed=None)
    assert full["accuracy"] == pytest.approx(2 / 4) and full["num_remaining"] == 4  # 0 wrong
    assert np.isnan(prob.metrics(pred, np.array([1, 2]))["sensitivity"])  # no true hotspot left
    assert list(prob.remaining(np.array([2, 0]))) == [1, 3]
    with pytest.raises(ValueError, match="no village left"):
        prob.metrics(pred, np.arange(4))
    with pytest.raises(ValueError, match="3 entries"):
        prob.metrics(pred[:3], None)
    with pytest.raises(ValueError, match="NaN"):
        prob.metrics(np.array([np.nan, 0.1, 0.1, 0.1]), None)
    with pytest.raises(ValueError, match="NaN"):  # a surveyed village is scored too
        prob.metrics(np.array([np.nan, 0.1, 0.1, 0.1]), np.array([0]))


def test_validation_and_config():
    with pytest.raises(ValueError, match="prevalences"):
        HotspotPool(np.zeros((3, 2)), np.zeros(2), 0.1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        HotspotPool(np.zeros((2, 2)), np.array([0.1, 1.1]), 0.1)
    with pytest.raises(ValueError, match="threshold"):
        HotspotPool(np.zeros((2, 2)), np.array([0.1, 0.2]), 0.0)
    with pytest.raises(ValueError, match="NaN"):
        HotspotPool(np.full((2, 2), np.nan), np.array([0.1, 0.2]), 0.1)
    cfg = toy().config()
    assert cfg["seed"] == 0 and cfg["threshold"] == 0.1 and cfg["num_villages"] == 12
    other = toy()
    other.theta = other.theta.copy()
    other.theta[0] += 0.01
    assert (
        HotspotPool(other.features, other.theta, 0.1).config()["data_sha256"] != cfg["data_sha256"]
    )


def test_from_country(data_root):
    prob = HotspotPool.from_country("civ", seed=3, root=data_root)
    assert prob.pool.shape == (1500, 8) and prob.threshold == 0.1 and prob.name == "hotspots-civ"
    assert len(set(prob.initial_design(100, None).tolist())) == 100
