"""Ours on box objectives: the streaming model's hyperparameters reach the optimum that a
refitted exact GP finds on the same data, also from a start where they were trapped."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from bo_ncgp.campaigns.strategies.base import History
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.problems.registry import make_problem


def _history(X, values):
    n = len(values)
    return History(X, np.asarray(values, float), np.full(n, np.nan), None, [])


def _observe(strategy, problem, X):
    evs = [problem.evaluate(x) for x in X]
    strategy.observe(X, evs, _history(X, [e.value for e in evs]))


def _exact_objective(kernel, noise, U, y, fit, mean=0.0):
    """Log marginal likelihood plus log priors per point of an exact GP with ``kernel``, noise
    ``noise`` and the constant prior mean ``mean`` (priors as ours), optionally refitted first
    (the constant too, as a ``SingleTaskGP``'s ``ConstantMean``)."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.likelihoods import GaussianLikelihood
    from gpytorch.means import ConstantMean
    from gpytorch.mlls import ExactMarginalLogLikelihood
    from gpytorch.priors import LogNormalPrior

    lik = GaussianLikelihood(noise_prior=LogNormalPrior(-4.0, 1.0)).to(torch.float64)
    lik.noise = noise
    mean_module = ConstantMean().to(torch.float64)
    mean_module.constant = mean
    if not fit:
        mean_module.raw_constant.requires_grad_(False)
    gp = SingleTaskGP(
        U, y.unsqueeze(-1), likelihood=lik, covar_module=copy.deepcopy(kernel),
        mean_module=mean_module, outcome_transform=None,
    )  # fmt: skip
    mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
    if fit:
        fit_gpytorch_mll(mll)
    gp.train()
    with torch.no_grad():
        return float(mll(gp(U), y))


def _streaming(problem_name, n0, steps, seed=0, **options):
    problem = make_problem(problem_name)
    strategy = build_strategy("continuous", "dual", **options)
    strategy.setup(problem, seed=seed)
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(problem.bounds[0]), np.asarray(problem.bounds[1])
    X = lo + (hi - lo) * rng.random((n0 + steps, problem.dim))
    _observe(strategy, problem, X[:n0])
    for i in range(n0, n0 + steps):
        _observe(strategy, problem, X[i : i + 1])
    return strategy


def test_streaming_hyperparameters_reach_the_refitted_exact_gps_optimum():
    s = _streaming("branin", 6, 4)
    model = s.surrogate.model
    U, y = s.U, s.Y
    fresh_kernel = copy.deepcopy(model.kernel)
    base = fresh_kernel.base_kernel
    base.lengthscale = base.lengthscale_prior.mode
    fresh_kernel.outputscale = 1.0
    best = _exact_objective(fresh_kernel, 1e-2, U, y, fit=True)
    noise = float(model.likelihood.noise)
    ours = _exact_objective(model.kernel, noise, U, y, fit=False, mean=model.mean_constant)
    assert ours >= best - 1e-2 * abs(best)


def test_the_prior_mean_is_learned_as_a_refitted_exact_gps_constant():
    """Values far below the initial design's level (the standardised scale's 0), as where an
    objective has a long tail of bad values: the fitted constant goes there, as the
    ``ConstantMean`` of a refitted exact GP does, and reaches that GP's optimum; a mean fixed
    at 0 does not."""
    from bo_ncgp.campaigns.strategies.blackbox import ObjectiveModelConfig, StreamingDualObjective

    torch.manual_seed(1)
    U = torch.rand(16, 2, dtype=torch.float64)
    y = 0.5 * torch.sin(6 * U[:, 0]) * torch.cos(4 * U[:, 1]) - 2.0
    ok = torch.ones(16, dtype=torch.bool)
    fits = {}
    for learn in (True, False):
        s = StreamingDualObjective(ObjectiveModelConfig(learn_mean=learn))
        s.setup(2)
        s.observe(U[:12], y[:12], ok[:12])
        for i in range(12, 16):
            s.observe(U[i : i + 1], y[i : i + 1], ok[i : i + 1])
        m = s.model
        noise, c = float(m.likelihood.noise), m.mean_constant
        fits[learn] = (c, _exact_objective(m.kernel, noise, U, y, fit=False, mean=c))
    fresh_kernel = copy.deepcopy(s.model.kernel)
    fresh_kernel.base_kernel.lengthscale = fresh_kernel.base_kernel.lengthscale_prior.mode
    fresh_kernel.outputscale = 1.0
    best = _exact_objective(fresh_kernel, 1e-2, U, y, fit=True)
    assert fits[True][0] < -1.0 and fits[False][0] == 0.0
    assert fits[True][1] >= best - 0.05  # nats per point
    assert fits[False][1] < best - 0.5


def test_a_fit_from_the_priors_mode_forgets_where_the_last_update_left_the_model():
    """Without the warm start every update fits from the prior's mode (the constant mean from
    0), as ``fit_gpytorch_mll`` refits a ``SingleTaskGP``: hyperparameters and constant moved
    before an update do not change what it ends at."""
    from bo_ncgp.campaigns.strategies.blackbox import MatchedObjectiveConfig, StreamingDualObjective

    torch.manual_seed(0)
    U = torch.rand(14, 2, dtype=torch.float64)
    y = torch.sin(5 * U[:, 0]) + U[:, 1] - 1.0
    ok = torch.ones(14, dtype=torch.bool)
    ends = []
    for moved in (False, True):
        s = StreamingDualObjective(MatchedObjectiveConfig())
        s.setup(2)
        s.observe(U[:13], y[:13], ok[:13])
        if moved:
            s.model.kernel.base_kernel.lengthscale = torch.tensor([[3.0, 0.05]])
            s.model.kernel.outputscale = 7.0
            s.model.mean_constant = 4.0
        s.observe(U[13:], y[13:], ok[13:])
        m = s.model
        ends.append(
            torch.cat(
                [
                    m.kernel.base_kernel.lengthscale.detach().flatten(),
                    m.kernel.outputscale.detach().reshape(1),
                    m.likelihood.noise.detach().reshape(1),
                    torch.tensor([m.mean_constant], dtype=torch.float64),
                ]
            )
        )
    assert torch.allclose(ends[0], ends[1], rtol=1e-6, atol=1e-8)


@pytest.mark.filterwarnings("ignore::bo_ncgp.exceptions.NumericalWarning")
def test_a_fit_trapped_in_the_noise_explanation_is_left_by_the_restart():
    from bo_ncgp.campaigns.strategies.blackbox import ObjectiveModelConfig, StreamingDualObjective

    torch.manual_seed(0)
    U = torch.rand(22, 2, dtype=torch.float64)
    y = torch.sin(12 * U[:, 0]) + 0.5 * torch.cos(9 * U[:, 1])
    y = (y - y.mean()) / y.std()
    ok = torch.ones(22, dtype=torch.bool)
    fits = {}
    for restart in (True, False):
        s = StreamingDualObjective(ObjectiveModelConfig(restart=restart, warm_start=True))
        s.setup(2)
        s.observe(U[:20], y[:20], ok[:20])
        # a local optimum: long lengthscales, the signal explained as noise
        s.model.kernel.base_kernel.lengthscale = torch.tensor([[5.0, 5.0]])
        s.model.kernel.outputscale = 0.05
        s.model.likelihood.noise = torch.tensor(0.9)
        for i in range(20, 22):
            s.observe(U[i : i + 1], y[i : i + 1], ok[i : i + 1])
        m = s.model
        fits[restart] = _exact_objective(m.kernel, float(m.likelihood.noise), U, y, fit=False)
    assert fits[True] > fits[False] + 0.1
    assert float(s.model.likelihood.noise) > 0.05  # without the restart: still mostly noise


@pytest.mark.parametrize("rule", ["fantasy", "fantasy-mean", "fantasy-plugin"])
def test_fantasy_batches_raise_the_incumbent_so_the_batch_spreads(rule):
    from bo_ncgp.campaigns.strategies.blackbox import BatchRule, min_distance
    from bo_ncgp.campaigns.strategies.lunar import BatchConfig

    torch.manual_seed(0)
    # a model whose log EI has a second mode once the first point is fantasised (with the
    # learned constant mean the residual EI next to the first point, a corner of the cube,
    # stays the largest on these 12 points)
    s = _streaming("branin", 12, 0, learn_mean=False)
    model = s.surrogate.botorch_model()
    # an incumbent far below every prediction: without raising it inside the batch, the
    # point of largest mean stays the maximiser of EI after it is fantasised
    batch = BatchRule(rule, BatchConfig(num_restarts=2, raw_samples=64))
    X = batch.select(model, s.U, best=-10.0, q=3)
    assert min_distance(X.numpy()) > 0.05


def test_the_plug_in_rule_takes_the_best_posterior_mean_as_the_incumbent(monkeypatch):
    """``fantasy-plugin`` ignores the observed incumbent it is given: at ``q = 1`` log EI
    runs against the largest posterior mean at the observed points, for batches
    ``build_fantasy_batch`` gets those points as ``incumbent_at``."""
    import botorch.acquisition as acquisition

    import bo_ncgp.bo as bo
    from bo_ncgp.campaigns.strategies.blackbox import BatchRule
    from bo_ncgp.campaigns.strategies.lunar import BatchConfig

    s = _streaming("branin", 12, 0)
    model = s.surrogate.botorch_model()
    with torch.no_grad():
        plug_in = float(model.posterior(s.U).mean.max())
    seen = {}
    real_logei, real_batch = acquisition.LogExpectedImprovement, bo.build_fantasy_batch

    def logei(m, best_f):
        seen["best_f"] = float(best_f)
        return real_logei(m, best_f=best_f)

    def batch(*args, **kwargs):
        seen["kwargs"] = kwargs
        return real_batch(*args, **kwargs)

    monkeypatch.setattr(acquisition, "LogExpectedImprovement", logei)
    monkeypatch.setattr(bo, "build_fantasy_batch", batch)
    rule = BatchRule("fantasy-plugin", BatchConfig(num_restarts=2, raw_samples=32))
    rule.select(model, s.U, best=1e3, q=1)
    assert seen["best_f"] == pytest.approx(plug_in)
    rule.select(model, s.U, best=1e3, q=2)
    assert seen["kwargs"]["best_f"] is None and torch.equal(seen["kwargs"]["incumbent_at"], s.U)
    assert seen["kwargs"]["fantasy"] == "sample"


def test_a_fit_that_starts_nowhere_is_refused():
    from bo_ncgp.campaigns.strategies.blackbox import ObjectiveModelConfig
    from bo_ncgp.exceptions import InputDataError

    with pytest.raises(InputDataError, match="restart and warm_start are both False"):
        ObjectiveModelConfig(restart=False, warm_start=False)


@pytest.mark.parametrize("what", ["noise_floor", "lengthscale_floor_fraction"])
@pytest.mark.parametrize("floor", [0.0, -1.0, float("nan")])
def test_a_floor_that_is_not_a_positive_number_is_refused(what, floor):
    from bo_ncgp.campaigns.strategies.blackbox import ObjectiveModelConfig, StreamingDualObjective
    from bo_ncgp.exceptions import InputDataError

    with pytest.raises(InputDataError, match=f"{what} must be a positive number"):
        StreamingDualObjective(ObjectiveModelConfig(), **{what: floor})


def test_the_fit_is_the_refitted_singletaskgps_with_standardized_values():
    """Outputscale at the sample variance of every value so far, noise prior scaled by it, a
    learned constant mean, every fit from the prior's mode, every point inducing: the model
    of a ``SingleTaskGP`` refitted with its ``Standardize`` outcome transform, and the same
    fit on the same data (hyperparameters, evidence and posterior)."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from bo_ncgp.campaigns.strategies.blackbox import MatchedObjectiveConfig, StreamingDualObjective

    torch.manual_seed(3)
    U = torch.rand(14, 2, dtype=torch.float64)
    y = torch.sin(5 * U[:, 0]) * torch.cos(3 * U[:, 1]) + 2.0 * U[:, 1]
    y = (y - y[:10].mean()) / y[:10].std()  # the initial design's scale, as the strategies do
    ok = torch.ones(14, dtype=torch.bool)
    s = StreamingDualObjective(MatchedObjectiveConfig())
    s.setup(2)
    s.observe(U[:10], y[:10], ok[:10])
    for i in range(10, 14):
        s.observe(U[i : i + 1], y[i : i + 1], ok[i : i + 1])
    m = s.model
    gp = SingleTaskGP(U, y.unsqueeze(-1))
    mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
    fit_gpytorch_mll(mll)
    sd, mu = float(y.std()), float(y.mean())
    assert float(m.kernel.outputscale) == pytest.approx(sd**2, rel=1e-6)
    ls = m.kernel.base_kernel.lengthscale.detach()
    assert torch.allclose(ls, gp.covar_module.lengthscale.detach(), rtol=1e-3)
    assert m.mean_constant == pytest.approx(mu + sd * float(gp.mean_module.constant), abs=1e-3)
    noise = float(gp.likelihood.noise) * sd**2
    assert float(m.likelihood.noise) == pytest.approx(noise, rel=1e-3)
    # the same evidence (plus log priors, at the SingleTaskGP's scale) and posterior
    gp.train()
    with torch.no_grad():
        best = float(mll(gp(*gp.train_inputs), gp.train_targets))
    gp.likelihood.noise = float(m.likelihood.noise) / sd**2
    gp.covar_module.lengthscale = ls
    gp.mean_module.constant = (m.mean_constant - mu) / sd
    with torch.no_grad():
        ours = float(mll(gp(*gp.train_inputs), gp.train_targets))
        assert ours == pytest.approx(best, abs=1e-6)
        gp.eval()
        Ut = torch.rand(5, 2, dtype=torch.float64)
        post = gp.posterior(Ut)
        mean, var = m.predict_f(Ut)
    assert torch.allclose(mean, post.mean.squeeze(-1), atol=1e-5)
    assert torch.allclose(var, post.variance.squeeze(-1), atol=1e-5)


def test_report_records_the_streaming_models_fit_after_each_update():
    problem = make_problem("hartmann6-noisy", seed=0)
    ours = build_strategy("continuous", "dual-fantasy")
    ours.setup(problem, 0)
    rng = np.random.default_rng(0)
    X = rng.random((20, 6))
    _observe(ours, problem, X)
    rec = ours.report(_history(X, np.zeros(20)))
    m = ours.surrogate.model
    assert rec["noise"] == pytest.approx(float(m.likelihood.noise.reshape(-1)[0]))
    assert rec["outputscale"] == pytest.approx(float(m.kernel.outputscale.reshape(-1)[0]))
    assert rec["num_inducing"] == 20.0  # every point inducing below the cap of 64
    assert math.isfinite(rec["mean_constant"])
    # the values were divided by value_scale: standardised, the first batch has unit spread
    assert rec["value_scale"] > 0 and float(ours.Y.std(unbiased=False)) == pytest.approx(1.0)
    # a refitted exact GP has no streaming model to record
    exact = build_strategy("continuous", "botorch")
    exact.setup(problem, 0)
    _observe(exact, problem, X)
    assert not {"noise", "outputscale"} & set(exact.report(_history(X, np.zeros(20))))
