"""Strategies of box problems: the feasibility model of the constrained strategy learns
from failures, gives up a point that failed, keeps the loop off the walls of a run that
stalled there and constrains the latent's sign; runs whose initial design failed
standardise by their first values; the Sobol sequence continues across asks."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from bo_ncgp.campaigns.strategies.base import History
from bo_ncgp.campaigns.strategies.blackbox import (
    SobolSearch,
    constrained_log_ei,
)
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


def _log_p_feasible(strategy, u):
    """``log P(latent > 0)`` of the strategy's feasibility model at the unit-cube point ``u``."""
    mean, var = strategy.classifier.predict_f(torch.tensor([u], dtype=torch.float64))
    return float(torch.special.log_ndtr(mean / var.sqrt()).squeeze())


def test_a_point_that_failed_again_is_given_up():
    """Feasibility is a set: repeated failures at one point drive P(feasible) there to ~0
    (a logistic likelihood leaves it at a few percent), and each one lowers it further."""
    problem = make_problem("branin-halfplane")
    strategy = build_strategy("constrained", "dual", hyper_steps=20)
    strategy.setup(problem, seed=0)
    X = np.random.default_rng(1).random((12, 2))
    evs = [problem.evaluate(x) for x in X]
    strategy.observe(X, evs, _history(X, [e.value for e in evs], [e.success for e in evs]))
    corner, logs = np.zeros((1, 2)), []
    for _ in range(4):
        ev = [problem.evaluate(corner[0])]
        strategy.observe(corner, ev, _history(corner, [np.nan], [0.0]))
        logs.append(_log_p_feasible(strategy, [0.0, 0.0]))
    assert logs[-1] < math.log(1e-3)
    assert all(b < a for a, b in itertools.pairwise(logs))


# the first 30 evaluations of a constrained run (branin-halfplane, seed 0) after which a
# Bernoulli classifier with P(latent > 0) proposed points on the walls u1 = 0 and u2 = 0 far
# outside the feasible half-plane u1 + u2 > 1 for the rest of its budget
_STALLED = [
    (0.636962, 0.269787),
    (0.0409735, 0.0165276),
    (0.81327, 0.912756),
    (0.606636, 0.729497),
    (0.543625, 0.935072),
    (0.815854, 0.0027385),
    (0.603914, 0.672936),
    (0.524341, 0.571167),
    (0.387124, 0.441501),
    (0.169941, 0.450439),
    (0.46986, 0.501843),
    (0.232978, 0.601775),
    (0.36378, 0.183432),
    (0.53447, 0.492951),
    (0.0, 0.411878),
    (0.520609, 0.429451),
    (0.0, 0.636598),
    (0.328685, 0.0),
    (0.0, 0.211517),
    (0.504583, 0.472904),
    (1.0, 0.0),
    (0.0, 0.749599),
    (0.404889, 0.550482),
    (0.64429, 0.377952),
    (0.568079, 0.399912),
    (0.0, 0.0),
    (0.570265, 0.41393),
    (0.493039, 0.0),
    (0.565139, 0.431054),
    (0.0, 0.0),
]


def test_the_constrained_loop_leaves_the_walls_of_a_run_that_stalled_there():
    torch.manual_seed(0)
    problem = make_problem("branin-halfplane")
    strategy = build_strategy("constrained", "dual", num_restarts=4, raw_samples=128)
    strategy.setup(problem, seed=0)
    X = np.array(_STALLED)
    evs = [problem.evaluate(x) for x in X]
    strategy.observe(X, evs, _history(X, [e.value for e in evs], [e.success for e in evs]))
    proposals = []
    for _ in range(3):
        h = _history(X, [e.value for e in evs], [e.success for e in evs])
        x = strategy.ask(h, 1, np.random.default_rng(0))
        ev = [problem.evaluate(x[0])]
        strategy.observe(x, ev, h)
        X, evs = np.vstack([X, x]), evs + ev
        proposals.append(x[0])
    # none deep in the infeasible region (0.2 or more from the boundary u1 + u2 = 1)
    assert min(p.sum() for p in proposals) > 0.8, proposals


def test_a_run_whose_initial_design_all_failed_standardises_by_its_first_values():
    problem = make_problem("levy4-corner")
    strategy = build_strategy("constrained", "dual", hyper_steps=0)
    strategy.setup(problem, seed=0)
    strategy._standardise(np.array([np.nan, np.nan]))
    np.testing.assert_allclose(strategy._standardise(np.array([-20.0, -10.0])), [-1.0, 1.0])


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
