import pytest
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.acquisition.analytic import PosteriorStandardDeviation
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf, optimize_acqf_discrete

from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.bo.fantasy import build_fantasy_batch, kriging_believer_batch
from tests.bo.toy_models import ExactGP, distinct_batch

BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


def toy():
    X = torch.rand(8, 2)
    return LatentGPModel(ExactGP(X, torch.sin(6 * X[:, :1])))


def ucb(models):
    return UpperConfidenceBound(models[0], beta=4.0)


def test_q1_equals_plain_maximisation():
    model = toy()
    torch.manual_seed(3)
    batch = build_fantasy_batch(model, ucb, q=1, bounds=BOUNDS, num_restarts=4, raw_samples=64)
    torch.manual_seed(3)
    x, v = optimize_acqf(ucb([model]), BOUNDS, q=1, num_restarts=4, raw_samples=64)
    torch.testing.assert_close(batch.X, x)
    torch.testing.assert_close(batch.acquisition_values, v.reshape(1))


def test_batch_points_distinct_and_models_conditioned():
    model = toy()
    # pure exploration: after conditioning on a fantasy, its variance collapses, so the
    # next point must be elsewhere
    batch = distinct_batch(model, lambda ms: PosteriorStandardDeviation(ms[0]))
    assert len(batch.optimize_seconds) == len(batch.condition_seconds) == 3
    final = batch.models[0]
    var_before = model.posterior(batch.X).variance
    var_after = final.posterior(batch.X).variance
    assert (var_after < 0.1 * var_before).all()
    # posterior-mean fantasies leave the mean unchanged at the fantasised points
    torch.testing.assert_close(
        final.posterior(batch.X).mean, model.posterior(batch.X).mean, atol=1e-5, rtol=1e-5
    )


def test_discrete_choices_distinct_and_q1_equivalence():
    model = toy()
    choices = torch.rand(40, 2)
    batch = build_fantasy_batch(
        model, lambda ms: PosteriorStandardDeviation(ms[0]), q=4, choices=choices
    )
    assert len(set(batch.indices.tolist())) == 4
    torch.testing.assert_close(batch.X, choices[batch.indices])
    one = build_fantasy_batch(model, ucb, q=1, choices=choices)
    x, _ = optimize_acqf_discrete(ucb([model]), q=1, choices=choices)
    torch.testing.assert_close(one.X, x)


def test_kriging_believer_with_single_task_gp_and_frozen_second_model():
    X = torch.rand(10, 2)
    gp = SingleTaskGP(X, torch.sin(6 * X[:, :1]))
    other = toy()
    batch = kriging_believer_batch(
        [gp, other],
        lambda ms: PosteriorStandardDeviation(ms[0]),
        q=3,
        conditionable=[True, False],
        bounds=BOUNDS,
        num_restarts=4,
        raw_samples=64,
    )
    assert batch.models[1] is other  # left unchanged
    assert batch.models[0] is not gp
    assert batch.models[0].train_inputs[0].shape[-2] == 13


def test_bad_arguments():
    model = toy()
    with pytest.raises(ValueError, match="exactly one"):
        build_fantasy_batch(model, ucb, q=2)
    with pytest.raises(ValueError, match="choices for a batch"):
        build_fantasy_batch(model, ucb, q=5, choices=torch.rand(3, 2))
    with pytest.raises(ValueError, match="fantasy"):
        build_fantasy_batch(model, ucb, q=1, bounds=BOUNDS, fantasy="median")
