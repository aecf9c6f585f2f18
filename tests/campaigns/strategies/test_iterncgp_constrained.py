"""The constrained strategy with an IterNCGP feasibility classifier, and the two uncertainties
of IterNCGP's posterior it is built on."""

from __future__ import annotations

import math

import gpytorch
import numpy as np
import pytest
import torch

from bo_ncgp.bo import IterNCGPModel
from bo_ncgp.bo.acquisition import LogProbabilityOfSuccess
from bo_ncgp.campaigns.runner import run_seeds
from bo_ncgp.campaigns.strategies.iterncgp_constrained import (
    IterNCGPClassifierConfig,
    IterNCGPConstrainedBO,
)
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Softmax
from bo_ncgp.models import IterNCGP
from bo_ncgp.problems.benchmarks import FeasibleFunction

D = torch.float64


def _labels(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=D)
    return X, ((X - 0.5).square().sum(-1) < 0.35**2).to(D)  # the disc of branin-disc


def _kernel() -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).to(D)
    k.base_kernel.lengthscale, k.outputscale = 0.25, 4.0
    return k


def _budgeted(X: torch.Tensor, y: torch.Tensor) -> IterNCGP:
    """Two CG iterations per Newton step, actions compressed to rank 4."""
    model = IterNCGP(_kernel(), Bernoulli(), max_solver_iters_per_step=2, compression_rank=4)
    return model.fit(X, y)


# ------------------------------------------------------------------ the two uncertainties
def test_combined_variance_is_the_mathematical_plus_a_nonnegative_computational_part():
    X, y = _labels(30)
    model = _budgeted(X, y)
    Xt = torch.rand(50, 2, dtype=D)
    mean_c, var_c = model.predict_f(Xt)
    mean_m, var_m = model.predict_f(Xt, uncertainty="mathematical")
    assert torch.allclose(mean_c, mean_m, rtol=1e-12, atol=1e-12)  # Eq. 8 in both
    comp = var_c - var_m
    assert bool((comp >= -1e-10).all()) and float(comp.max()) > 1e-2
    _, cov_m = model.predict_f(Xt[:5], full_cov=True, uncertainty="mathematical")
    assert torch.allclose(cov_m.diagonal(dim1=-2, dim2=-1), var_m[:5])


def test_the_mathematical_variance_is_the_laplace_variance_of_the_last_newton_step():
    X, y = _labels(20)
    model = _budgeted(X, y)
    Xt = torch.rand(7, 2, dtype=D)
    # K_hat = K + W(f_i)^{-1} at the iterate f_i of the last step, written out densely
    f_i = model._problem.f[0, :, 0]
    p = torch.sigmoid(f_i)
    with torch.no_grad():
        K = model.kernel(X).to_dense()
        Ks = model.kernel(Xt, X).to_dense()
        prior = model.kernel(Xt, diag=True)
    Khat = K + torch.diag(1 / (p * (1 - p)))
    want = prior - (Ks @ torch.linalg.solve(Khat, Ks.mT)).diagonal()
    _, var_m = model.predict_f(Xt, uncertainty="mathematical")
    assert torch.allclose(var_m, want, rtol=1e-8, atol=1e-10)


def test_an_exact_solve_has_no_computational_uncertainty():
    X, y = _labels(15)
    model = IterNCGP.exact_laplace(_kernel(), Bernoulli(), 15).fit(X, y)
    Xt = torch.rand(9, 2, dtype=D)
    _, var_c = model.predict_f(Xt)
    _, var_m = model.predict_f(Xt, uncertainty="mathematical")
    assert torch.allclose(var_c, var_m, rtol=1e-6, atol=1e-9)


def test_the_mathematical_variance_of_a_model_conditioned_on_soft_labels():
    from bo_ncgp.likelihoods import soft_targets

    X, y = _labels(12)
    model = _budgeted(X, y)
    with soft_targets():  # posterior-mean fantasies: probabilities as labels
        fantasy = model.condition(X[:2] + 0.01, torch.tensor([0.3, 0.8], dtype=D), num_iters=2)
    _, var = fantasy.predict_f(X, uncertainty="mathematical")  # outside the context
    assert bool(torch.isfinite(var).all())


def test_uncertainty_is_checked():
    X, y = _labels(10)
    model = _budgeted(X, y)
    with pytest.raises(InputDataError, match="uncertainty must be"):
        model.predict_f(X, uncertainty="computational")
    with pytest.raises(InputDataError, match="uncertainty must be"):
        IterNCGPModel.from_model(model, uncertainty="both")
    with pytest.raises(InputDataError, match="uncertainty must be"):
        IterNCGPClassifierConfig(uncertainty="both")
    soft = IterNCGP(gpytorch.kernels.RBFKernel(), Softmax(3), max_solver_iters_per_step=2)
    soft = soft.fit(X.float(), torch.arange(10) % 3)
    with pytest.raises(UnsupportedError, match="scalar likelihoods"):
        soft.predict_f(X.float(), uncertainty="mathematical")


def test_the_adapter_passes_the_uncertainty_to_the_posterior_and_keeps_it_when_conditioned():
    X, y = _labels(25)
    model = _budgeted(X, y)
    Xt = torch.rand(6, 1, 2, dtype=D)
    for uncertainty in ("combined", "mathematical"):
        adapter = IterNCGPModel.from_model(model, uncertainty=uncertainty, condition_iters=2)
        _, var = model.predict_f(Xt, uncertainty=uncertainty)
        assert torch.allclose(adapter.posterior(Xt).variance[..., 0], var)
        cond = adapter.condition_on_observations(Xt[0], torch.ones(1, 1, dtype=D))
        _, want = cond.model.predict_f(Xt, uncertainty=uncertainty)
        assert torch.allclose(cond.posterior(Xt).variance[..., 0], want)


# ------------------------------------------------------------------------------ recycling
def test_recycled_warm_starts_need_fewer_solver_iterations_than_a_fresh_solve():
    X, y = _labels(41)
    exact = {"max_solver_iters_per_step": None, "tol": 1e-6, "solver_rtol": 1e-8}
    old = IterNCGP(_kernel(), Bernoulli(), **exact).fit(X[:40], y[:40])
    warm = old.condition(X[40:], y[40:], num_iters=100, max_newton_steps=20)
    fresh = IterNCGP(_kernel(), Bernoulli(), **exact).fit(X, y)
    assert torch.allclose(warm.predict_f(X)[0], fresh.predict_f(X)[0], atol=1e-4)
    assert warm.num_solver_iters < fresh.num_solver_iters / 3


# ------------------------------------------------------------------------------- strategy
@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """Three acquisition steps after the initial design on the disc-constrained Branin (the
    classifier's rank, at most 3 + 2, below the 9 points: computational uncertainty is left)."""
    out = tmp_path_factory.mktemp("iterncgp")
    opts = {"hyper_steps": 2, "num_restarts": 2, "raw_samples": 32, "compression_rank": 3}
    strategies = []

    def make():
        strategies.append(build_strategy("constrained", "dual-iterncgp", **opts))
        return strategies[-1]

    (state,) = run_seeds(
        lambda: FeasibleFunction("branin", region="disc"),
        make,
        [0],
        out,
        budget=9,
        batch_size=1,
        num_initial=6,
        progress=False,
    )
    return state, strategies[-1]


def test_the_strategy_runs_with_an_iterncgp_classifier_conditioned_step_by_step(campaign):
    state, strategy = campaign
    assert len(state["evaluations"]) == 9 and [len(b) for b in state["batches"]] == [6, 1, 1, 1]
    assert isinstance(strategy, IterNCGPConstrainedBO)
    assert isinstance(strategy.classifier, IterNCGP) and strategy.classifier._X.shape[-2] == 9
    metrics = [it["metrics"] for it in state["iterations"][1:]]
    for m in metrics:
        assert 0 < m["classifier_solver_iters"] <= 2 * 2  # solver_iters x Newton steps
        assert 0 <= m["computational_share"] <= 1
    assert state["strategy"]["uncertainty"] == "combined"


def test_the_acquisition_sees_the_combined_variance(campaign):
    _, strategy = campaign
    clf = strategy.batch.wrap(strategy.classifier)
    Xt = torch.rand(64, 1, 2, dtype=D)
    mean, var_c = strategy.classifier.predict_f(Xt)
    _, var_m = strategy.classifier.predict_f(Xt, uncertainty="mathematical")
    assert float((var_c - var_m).max()) > 1e-3  # the budget leaves computational uncertainty
    kappa = torch.rsqrt(1 + math.pi / 8 * var_c)
    want = torch.nn.functional.logsigmoid(kappa * mean)[..., 0]
    assert torch.allclose(LogProbabilityOfSuccess(clf)(Xt), want, atol=1e-8)
    ablation = build_strategy("constrained", "dual-iterncgp-math")
    var = ablation.batch.wrap(strategy.classifier).posterior(Xt).variance
    assert torch.allclose(var[..., 0], var_m)


def test_the_classifier_recycles_the_previous_solve(campaign, monkeypatch):
    _, strategy = campaign
    calls = []
    real = IterNCGP.condition

    def spy(self, *args, **kwargs):
        calls.append((self, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(IterNCGP, "condition", spy)
    before = strategy.classifier
    X = np.array([[0.5, 0.5]]) * (strategy.hi - strategy.lo).numpy() + strategy.lo.numpy()
    ev = FeasibleFunction("branin", region="disc").evaluate(X[0])
    strategy.observe(X, [ev], None)
    ((self_, kwargs),) = calls
    assert self_ is before and kwargs == {"num_iters": 2, "max_newton_steps": 2}
    assert strategy.classifier._X.shape[-2] == before._X.shape[-2] + 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dual-iterncgp", "dual-iterncgp-math"])
def test_batches_of_two_condition_the_classifier_on_fantasies(tmp_path, name):
    from bo_ncgp.campaigns import bench

    r = bench.bench_job("branin-disc", name, 0, tmp_path, evaluations=8, batch_size=2, initial=6)
    assert "error" not in r and math.isfinite(r["final"])
