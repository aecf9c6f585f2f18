import math

import pytest
import torch
from botorch.acquisition.analytic import LogExpectedImprovement
from botorch.optim import optimize_acqf

from bo_ncgp.bo.acquisition import (
    BALD,
    BinaryPredictiveEntropy,
    ConstrainedLogExpectedImprovement,
    LogProbabilityOfSuccess,
    ProbabilityOfSuccess,
)
from bo_ncgp.bo.base import LatentGPModel
from tests.bo.toy_models import ExactGP


def classifier(scale=3.0):
    X = torch.rand(15, 2)
    Y = scale * torch.sin(6 * X[:, :1]) - 0.5
    return LatentGPModel(ExactGP(X, Y, noise=0.3))


def mc_moments(model, X, S=400_000):
    post = model.posterior(X)
    mean, var = post.mean.squeeze(-1).squeeze(-1), post.variance.squeeze(-1).squeeze(-1)
    f = mean + var.sqrt() * torch.randn(
        S, *mean.shape, generator=torch.Generator(torch.get_default_device()).manual_seed(0)
    )
    p = torch.sigmoid(f)
    return p, mean, var


def H(p):
    p = p.clamp(1e-12, 1 - 1e-12)
    return -(p * p.log() + (1 - p) * (1 - p).log())


def test_probability_of_success_and_entropy_match_monte_carlo():
    model = classifier()
    X = torch.rand(20, 1, 2)
    p, _, _ = mc_moments(model, X)
    pos = ProbabilityOfSuccess(model)(X)
    assert pos.shape == (20,)
    # the probit approximation of E[sigmoid(f)] is accurate to ~0.02
    torch.testing.assert_close(pos, p.mean(0), atol=0.02, rtol=0)
    torch.testing.assert_close(LogProbabilityOfSuccess(model)(X), pos.log())
    torch.testing.assert_close(BinaryPredictiveEntropy(model)(X), H(pos))


def test_bald_matches_monte_carlo_mutual_information():
    model = classifier()
    X = torch.rand(20, 1, 2)
    p, _, _ = mc_moments(model, X)
    mi = H(p.mean(0)) - H(p).mean(0)
    bald = BALD(model)(X)
    assert (bald >= -1e-9).all()
    torch.testing.assert_close(bald, mi, atol=2e-3, rtol=0)


def test_constrained_log_ei_is_sum_and_optimizable():
    reg = LatentGPModel(ExactGP(torch.rand(10, 2), torch.rand(10, 1)))
    clf = classifier()
    acq = ConstrainedLogExpectedImprovement(reg, clf, best_f=0.8)
    X = torch.rand(7, 1, 2, requires_grad=True)
    val = acq(X)
    ref = LogExpectedImprovement(reg, best_f=0.8)(X) + LogProbabilityOfSuccess(clf)(X)
    torch.testing.assert_close(val, ref)
    val.sum().backward()
    assert torch.isfinite(X.grad).all()
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    cand, v = optimize_acqf(acq, bounds, q=1, num_restarts=3, raw_samples=64)
    assert cand.shape == (1, 2) and ((cand >= 0) & (cand <= 1)).all()
    grid = torch.rand(256, 1, 2)
    assert v >= acq(grid).max() - 1e-3  # the optimiser beats random search


def test_probit_approximation_limits():
    model = classifier(scale=50.0)  # confident regions
    X = torch.rand(50, 1, 2)
    log_pos = LogProbabilityOfSuccess(model)(X)
    assert torch.isfinite(log_pos).all() and log_pos.min() < -30  # no log(0) when saturated
    ent = BinaryPredictiveEntropy(model)(X)
    assert (ent >= 0).all() and ent.max() <= math.log(2) + 1e-12
    assert torch.isfinite(BALD(model)(X)).all()
    with pytest.raises(Exception, match="q"):
        ProbabilityOfSuccess(model)(torch.rand(3, 2, 2))
