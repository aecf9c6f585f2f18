"""The hotspot models (bo_ncgp.campaigns.strategies.hotspot_models) against plain loops.

The references below are the training loops written out by hand (Adam with BoTorch's
exponential-moving-average stopping rule; joint NGD + Adam); the models must reproduce them
bitwise.
"""

from __future__ import annotations

import gpytorch
import pytest
import torch
from botorch.optim.stopping import ExpMAStoppingCriterion

from bo_ncgp.campaigns.strategies.hotspot_models import (
    DTYPE,
    ConstantMeanSVGP,
    RefitGPConfig,
    RefittedSVGPConfig,
    RefitVariationalGP,
)
from bo_ncgp.likelihoods import Binomial
from bo_ncgp.models.svgp import SVGP
from bo_ncgp.models.training import NonFiniteError


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(15, 2, dtype=DTYPE, generator=g)
    y = torch.randint(0, 40, (15,), generator=g).to(DTYPE)
    return X, y, Binomial(100).to(DTYPE)


def _reference_fit(gp, X, y, lik, beta, steps, lr, rel_tol):
    """Adam on the tempered ELBO, stopped by BoTorch's ExpMA rule after each step."""
    stop = None if rel_tol is None else ExpMAStoppingCriterion(maxiter=steps, rel_tol=rel_tol)
    gp.train()
    opt = torch.optim.Adam(gp.parameters(), lr=lr)
    taken, loss = 0, None
    for _ in range(steps):
        opt.zero_grad()
        q = gp(X)
        elp = lik.expected_log_prob(y, q.mean, q.variance).sum()
        kl = gp.variational_strategy.kl_divergence()
        prior = sum(pr.log_prob(cl(m)).sum() for _, m, pr, cl, _ in gp.named_priors())
        loss = -(elp - beta * kl + prior) / X.shape[-2]
        loss.backward()
        opt.step()
        taken += 1
        if stop is not None and stop(loss.detach()):
            break
    gp.eval()
    return float(loss.detach()), taken


@pytest.mark.parametrize(("steps", "rel_tol", "beta"), [(40, None, 1.0), (3000, 1e-3, 0.1)])
def test_constant_mean_fit_is_adam_with_botorchs_stopping_rule(data, steps, rel_tol, beta):
    X, y, lik = data
    torch.manual_seed(1)  # q(u)'s random initial mean
    ref = ConstantMeanSVGP(X, outputscale_prior=True)
    loss_ref, taken = _reference_fit(ref, X, y, lik, beta, steps, 0.01, rel_tol)
    torch.manual_seed(1)
    gp = ConstantMeanSVGP(X, outputscale_prior=True)
    loss = gp.fit(X, y, lik, beta, steps, 0.01, rel_tol)
    assert gp.steps_taken == taken and loss == loss_ref and not gp.training
    if rel_tol is not None:
        assert 11 < taken < steps  # stopped early, at the same step
    for (name, a), (_, b) in zip(gp.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_constant_mean_fit_defaults_are_the_strategy_configs(data, monkeypatch):
    X, y, lik = data
    seen = {}
    real = ExpMAStoppingCriterion

    def recording(maxiter, rel_tol):
        seen["maxiter"] = maxiter
        return real(maxiter=maxiter, rel_tol=rel_tol)

    monkeypatch.setattr("botorch.optim.stopping.ExpMAStoppingCriterion", recording)
    torch.manual_seed(1)
    gp = ConstantMeanSVGP(X)
    gp.fit(X, y, lik, rel_tol=1.0)
    assert seen["maxiter"] == RefittedSVGPConfig().num_steps
    torch.manual_seed(1)
    ref = ConstantMeanSVGP(X)
    c = RefittedSVGPConfig()
    _reference_fit(ref, X, y, lik, c.beta, c.num_steps, c.lr, 1.0)
    for a, b in zip(gp.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


def test_constant_mean_model_is_the_svgp_builder(data):
    X, _, _ = data
    gp = ConstantMeanSVGP(X)
    assert isinstance(gp, SVGP) and gp.inducing_points.requires_grad
    assert isinstance(gp.mean_module, gpytorch.means.ConstantMean)
    assert isinstance(gp.variational_strategy._variational_distribution,
                      gpytorch.variational.CholeskyVariationalDistribution)  # fmt: skip
    assert not hasattr(ConstantMeanSVGP(X).kernel, "outputscale_prior")
    assert hasattr(ConstantMeanSVGP(X, outputscale_prior=True).kernel, "outputscale_prior")


def _reference_refit(kernel, X, y, lik, c):
    """Joint NGD (q(u)) + Adam (hyperparameters) steps, then NGD-only polish steps."""
    gp = SVGP(kernel, X, variational="natural", learn_inducing_locations=False).to(DTYPE)
    gp.train()
    n = X.shape[0]

    def neg_elbo():
        q = gp(X)
        elbo = lik.expected_log_prob(y, q.mean, q.variance).sum(-1)
        return -(elbo - gp.variational_strategy.kl_divergence()) / n

    ngd = gpytorch.optim.NGD(gp.variational_parameters(), num_data=n, lr=c.ngd_lr)
    adam = torch.optim.Adam(gp.hyperparameters(), lr=c.lr)
    for _ in range(c.num_steps):
        ngd.zero_grad()
        adam.zero_grad()
        loss = neg_elbo()  # before the prior: the order gradients are accumulated in
        prior = sum(pr.log_prob(cl(m)).sum() for _, m, pr, cl, _ in gp.kernel.named_priors())
        (loss - prior / n).backward()
        ngd.step()
        adam.step()
    for p in gp.kernel.parameters():
        p.requires_grad_(False)
    ngd = gpytorch.optim.NGD(gp.variational_parameters(), num_data=n, lr=c.polish_lr)
    for _ in range(c.polish_steps):
        ngd.zero_grad()
        neg_elbo().sum().backward()
        ngd.step()
    gp.eval()
    return gp


def test_refit_is_joint_ngd_and_adam_then_polish(data):
    from bo_ncgp.campaigns.strategies.hotspot_models import hotspot_kernel

    X, y, lik = data
    c = RefitGPConfig(num_steps=25)
    torch.manual_seed(2)  # q(u)'s random initialisation
    model = RefitVariationalGP(lik, c).fit(X, y)
    torch.manual_seed(2)
    ref = _reference_refit(hotspot_kernel(2), X, y, lik, c)
    for (name, a), (_, b) in zip(model.gp.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    with torch.no_grad():
        mean = model.predict_f(X)[0]
        assert torch.equal(mean, ref(X).mean)


def test_refit_raises_on_a_non_finite_elbo(data):
    X, y, lik = data
    lik.expected_log_prob = lambda y, mean, var: torch.full_like(mean, float("nan"))
    with pytest.raises(NonFiniteError, match="refit-entropy") as err:
        RefitVariationalGP(lik, RefitGPConfig(num_steps=3)).fit(X, y)
    assert isinstance(err.value, FloatingPointError)


def test_constant_mean_fit_stops_at_the_last_finite_step(data):
    from bo_ncgp.exceptions import NumericalWarning

    X, y, lik = data
    gp = ConstantMeanSVGP(X)
    before = [p.detach().clone() for p in gp.hyperparameters()]
    lik.expected_log_prob = lambda y, mean, var: torch.full_like(mean, float("nan"))
    with pytest.warns(NumericalWarning, match="ConstantMeanSVGP"):
        loss = gp.fit(X, y, lik, steps=5)
    assert gp.steps_taken == 0 and loss != loss  # no step taken: NaN loss
    for a, b in zip(gp.hyperparameters(), before, strict=True):  # q(u) is initialised
        assert torch.equal(a, b)
