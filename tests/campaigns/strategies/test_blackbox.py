"""Strategies of box problems: the classifier of the constrained strategy learns from
failures, falls back to the base rate and constrains the latent's sign; the Sobol sequence
continues across asks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bo_ncgp.campaigns.strategies.base import History
from bo_ncgp.campaigns.strategies.blackbox import (
    SobolSearch,
    constrained_log_ei,
    feasibility_classifier,
)
from bo_ncgp.campaigns.strategies.lunar import DualModelConfig
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.problems.registry import make_problem


def _history(X, values, success):
    return History(X, np.asarray(values, float), np.asarray(success, float), None, [])


def test_the_constrained_classifier_learns_from_evaluations_that_failed():
    problem = make_problem("branin-halfplane")
    strategy = build_strategy("constrained", "dual", hyper_steps=0)
    strategy.setup(problem, seed=0)
    X = np.array([[0.1, 0.2], [0.2, 0.1], [0.9, 0.4], [0.7, 0.8]])
    evs = [problem.evaluate(x) for x in X]
    assert [e.success for e in evs] == [False, False, True, True]
    strategy.observe(X, evs, _history(X, [e.value for e in evs], [e.success for e in evs]))
    assert strategy.classifier.num_data == 4  # the two failures are labelled 0
    assert strategy.reward.num_data == 2  # no value was observed at the failures


def test_a_constrained_run_without_any_value_yet_proposes_random_points():
    problem = make_problem("branin-halfplane")
    strategy = build_strategy("constrained", "dual", hyper_steps=0)
    strategy.setup(problem, seed=0)
    X = np.array([[0.1, 0.2], [0.2, 0.1]])
    evs = [problem.evaluate(x) for x in X]
    h = _history(X, [np.nan, np.nan], [0.0, 0.0])
    strategy.observe(X, evs, h)
    U = strategy.ask(h, 3, np.random.default_rng(0))
    assert U.shape == (3, 2) and ((U >= 0) & (U <= 1)).all()


def test_sobol_search_continues_one_sequence_per_seed():
    problem = make_problem("hartmann6")
    s = SobolSearch()
    s.setup(problem, seed=3)
    empty = _history(np.zeros((0, 6)), [], [])
    first = s.ask(empty, 4, None)
    later = s.ask(_history(first, [0.0] * 4, [np.nan] * 4), 4, None)
    both = s.ask(empty, 8, None)
    np.testing.assert_array_equal(np.vstack([first, later]), both)
    other = SobolSearch()
    other.setup(problem, seed=4)
    assert not np.array_equal(other.ask(empty, 4, None), first)


def test_the_feasibility_classifier_falls_back_to_the_base_rate_away_from_the_data():
    """2 of 14 points feasible, all of them in one corner: far from them the classifier's
    latent is the prior mean logit(3 / 16), not a zero-mean guess of P = 1/2."""
    problem = make_problem("branin-halfplane")
    strategy = build_strategy("constrained", "dual", hyper_steps=0)
    strategy.setup(problem, seed=0)
    X = np.random.default_rng(0).random((14, 2)) * 0.3
    X[:2] = [[0.6, 0.5], [0.5, 0.6]]
    evs = [problem.evaluate(x) for x in X]
    assert sum(e.success for e in evs) == 2
    strategy.observe(X, evs, _history(X, [e.value for e in evs], [e.success for e in evs]))
    assert strategy.classifier.mean_constant == pytest.approx(math.log(3 / 13))
    mean, _ = strategy.classifier.predict_f(torch.tensor([[0.05, 0.95]], dtype=torch.float64))
    assert float(mean) == pytest.approx(math.log(3 / 13), abs=0.1)


def test_the_feasibility_classifier_takes_the_base_rate_of_its_first_labels():
    U = torch.rand(10, 2, dtype=torch.float64)
    labels = torch.tensor([1.0] * 7 + [0.0] * 3, dtype=torch.float64)
    clf = feasibility_classifier(DualModelConfig(hyper_steps=0), U, labels)
    assert clf.mean_constant == pytest.approx(math.log(8 / 4))


def test_the_constrained_acquisition_is_log_ei_plus_log_phi_of_the_latent():
    from botorch.acquisition.analytic import LogExpectedImprovement
    from botorch.models import SingleTaskGP

    X = torch.rand(12, 2, dtype=torch.float64)
    objective = SingleTaskGP(X, torch.sin(3 * X[:, :1]))
    latent = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)
    x = torch.rand(5, 1, 2, dtype=torch.float64)
    with torch.no_grad():
        post = latent.posterior(x)
        mu, sigma = post.mean.squeeze(), post.variance.sqrt().squeeze()
        want = LogExpectedImprovement(objective, best_f=0.5)(x) + torch.special.log_ndtr(mu / sigma)
        got = constrained_log_ei(objective, latent, best_f=0.5)(x)
    torch.testing.assert_close(got, want)


def test_the_constrained_strategy_builds_a_batch_of_two_distinct_points():
    problem = make_problem("branin-halfplane")
    strategy = build_strategy("constrained", "dual", hyper_steps=0, num_restarts=2, raw_samples=32)
    strategy.setup(problem, seed=0)
    X = np.array([[0.1, 0.2], [0.2, 0.1], [0.9, 0.4], [0.7, 0.8], [0.5, 0.9], [0.3, 0.3]])
    evs = [problem.evaluate(x) for x in X]
    h = _history(X, [e.value for e in evs], [e.success for e in evs])
    strategy.observe(X, evs, h)
    batch = strategy.ask(h, 2, np.random.default_rng(0))
    assert batch.shape == (2, 2) and np.linalg.norm(batch[0] - batch[1]) > 1e-6
