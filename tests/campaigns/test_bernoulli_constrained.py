"""The variational Bernoulli GP baseline of the constrained suite, and the label model of
ours (``dual``) on constrained problems."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bo_ncgp.campaigns import bench as B
from bo_ncgp.campaigns.strategies.bernoulli_constrained import (
    BernoulliConstrainedLogEI,
    fit_bernoulli_gp,
)
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.problems.registry import make_problem

D = torch.float64


def test_log_p_feasible_is_the_bernoulli_likelihoods_marginal():
    from botorch.acquisition import LogExpectedImprovement
    from botorch.models import SingleTaskGP

    g = torch.Generator().manual_seed(0)
    U = torch.rand(20, 2, generator=g, dtype=D)
    gp = fit_bernoulli_gp(U, (U.sum(-1) > 1.0).to(D))
    value = SingleTaskGP(U, torch.sin(3 * U[:, :1]))
    x = torch.rand(6, 1, 2, generator=g, dtype=D)
    acq = BernoulliConstrainedLogEI(value, gp, best_f=0.3)(x)
    with torch.no_grad():
        probs = gp.likelihood(gp.model(x.squeeze(1))).probs  # GPyTorch's marginal P(y = 1)
        log_ei = LogExpectedImprovement(value, best_f=0.3)(x)
    torch.testing.assert_close(acq.detach(), log_ei + probs.log(), rtol=1e-6, atol=1e-8)
    assert bool(probs[x[:, 0].sum(-1) > 1.3].gt(0.5).all())  # deep inside: feasible


def test_the_bernoulli_baseline_takes_steps_in_the_constrained_suite(tmp_path):
    assert "botorch-bernoulli" in B.SUITES["constrained"]["strategies"]
    r = B.bench_job(
        "branin-disc", "botorch-bernoulli", 0, tmp_path, evaluations=8, batch_size=1, initial=6
    )
    state = json.loads(
        (tmp_path / "branin-disc" / "botorch-bernoulli" / "seed_0" / "state.json").read_text()
    )
    assert "error" not in r and [len(b) for b in state["batches"]] == [6, 1, 1]


def test_the_bernoulli_baseline_refuses_batches():
    s = build_strategy("constrained", "botorch-bernoulli")
    s.setup(make_problem("branin-disc"), 0)
    s.Y = torch.zeros(3, dtype=D)  # enough feasible values for a model
    with pytest.raises(UnsupportedError, match="one point per batch"):
        s.ask(None, 2, np.random.default_rng(0))


def test_ours_label_model_learns_a_constant_prior_mean_below_one_half():
    s = build_strategy("constrained", "dual", hyper_steps=20)
    s.setup(make_problem("branin-disc"), 0)
    g = torch.Generator().manual_seed(1)
    U = torch.rand(12, 2, generator=g, dtype=D)
    labels = torch.zeros(12, dtype=D)
    labels[:2] = 1.0  # a small feasible share
    s._update_classifier(U, labels)
    s._update_classifier(torch.rand(2, 2, generator=g, dtype=D), torch.zeros(2, dtype=D))
    model = s.feasibility.model
    assert model.learn_mean_constant and model.mean_constant < -0.1
    # far from the data the label model predicts the learned constant, not label 1/2
    with torch.no_grad():
        mean, _ = model.predict_f(torch.full((1, 2), 3.0, dtype=D))
    assert float(mean) == pytest.approx(model.mean_constant, abs=1e-3)


def test_a_noise_floor_holds_the_label_models_noise_and_failures_still_rule_a_point_out():
    """With ``noise_floor`` (the option ``bo-ncgp label-model-check`` compares) the label
    model's noise variance stays above it where the evidence of interpolated labels would
    take it lower, and four failures at one point still take ``P(feasible)`` there below
    1e-2."""
    from bo_ncgp.campaigns.strategies.blackbox import DualConstrainedBO, ObjectiveModelConfig

    free = DualConstrainedBO.label_model(ObjectiveModelConfig(), 2)
    floored = DualConstrainedBO.label_model(ObjectiveModelConfig(), 2, noise_floor=0.1)
    g = torch.Generator().manual_seed(2)
    U = torch.rand(16, 2, generator=g, dtype=D)
    labels = (U.sum(-1) > 1.0).to(D)  # a sharp boundary: the evidence wants no noise
    for s in (free, floored):
        DualConstrainedBO.observe_labels(s, U, labels)
    assert float(free.model.likelihood.noise.detach()) < 0.1
    assert float(floored.model.likelihood.noise.detach()) >= 0.1 - 1e-9
    x = torch.tensor([[0.9, 0.8]], dtype=D)  # feasible by the labels' trend

    def p_feasible() -> float:
        with torch.no_grad():
            mean, var = floored.model.predict_f(x)
        return float(torch.distributions.Normal(0.0, 1.0).cdf(mean / var.sqrt()))

    before = p_feasible()
    for _ in range(4):
        DualConstrainedBO.observe_labels(floored, x, torch.zeros(1, dtype=D))
    assert float(floored.model.likelihood.noise.detach()) >= 0.1 - 1e-9
    assert before > 0.5 and p_feasible() < 1e-2


def test_a_lengthscale_floor_holds_the_label_models_lengthscales_above_half_the_prior_mode():
    """With ``lengthscale_floor_fraction=0.5`` (the label model of ``dual-long-labels``) the
    label model's lengthscales stay at or above half the prior's mode on a sharp half-space
    boundary in 4-D (half the points drawn near it, as a loop places them), where the free
    model's evidence takes them down to 0.09; failures still take ``P(feasible)`` at their
    point below 1/2."""
    from bo_ncgp.campaigns.strategies.blackbox import DualConstrainedBO, ObjectiveModelConfig

    free = DualConstrainedBO.label_model(ObjectiveModelConfig(), 4)
    floored = DualConstrainedBO.label_model(
        ObjectiveModelConfig(), 4, lengthscale_floor_fraction=0.5
    )
    g = torch.Generator().manual_seed(0)
    spread = torch.rand(40, 4, generator=g, dtype=D)
    near = 0.275 + 0.3 * torch.rand(40, 4, generator=g, dtype=D)  # sums around 1.7
    U = torch.cat([spread[:20], near[:20]])
    labels = (U.sum(-1) < 1.7).to(D)
    for s in (free, floored):
        DualConstrainedBO.observe_labels(s, U, labels)
    base = floored.model.kernel.base_kernel
    floor = 0.5 * float(base.lengthscale_prior.mode)
    assert float(free.model.kernel.base_kernel.lengthscale.min()) < floor
    assert float(base.lengthscale.min()) >= floor - 1e-9
    x = torch.tensor([[0.3, 0.3, 0.3, 0.3]], dtype=D)  # feasible by the labels' trend
    for _ in range(3):
        DualConstrainedBO.observe_labels(floored, x, torch.zeros(1, dtype=D))
    with torch.no_grad():
        mean, _ = floored.model.predict_f(x)
    assert float(base.lengthscale.min()) >= floor - 1e-9
    assert float(mean) < 0.0  # label - 1/2 below 0: P(label > 1/2) < 1/2


def test_an_isotropic_label_model_has_one_lengthscale_and_the_strategy_says_so():
    from bo_ncgp.campaigns.strategies.blackbox import DualConstrainedBO, ObjectiveModelConfig
    from bo_ncgp.campaigns.strategies.registry import build_strategy

    m = DualConstrainedBO.label_model(ObjectiveModelConfig(), 3, isotropic=True)
    g = torch.Generator().manual_seed(1)
    U = torch.rand(12, 3, generator=g, dtype=D)
    DualConstrainedBO.observe_labels(m, U, (U[:, 0] > 0.5).to(D))
    assert m.model.kernel.base_kernel.lengthscale.shape == (1, 1)
    assert build_strategy("constrained", "dual-iso-labels").config()["label_isotropic"] is True
    assert "label_isotropic" not in build_strategy("constrained", "dual").config()
