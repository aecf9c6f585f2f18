"""Strategies of box problems: the classifier of the constrained strategy learns from
failures, the Sobol sequence continues across asks."""

from __future__ import annotations

import numpy as np

from bo_ncgp.campaigns.strategies.base import History
from bo_ncgp.campaigns.strategies.blackbox import SobolSearch
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
