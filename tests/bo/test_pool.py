"""Tests of bo_ncgp.bo.acquisition.pool (pool entropy reduction on the model contract)."""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch

from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.bo.acquisition import (
    CRITERIA,
    GAINS,
    ThresholdEntropyReduction,
    check_criterion,
    check_gain,
    entropy_reduction,
    exceedance_entropy,
    exceedance_probability,
    fantasies_of,
    predictive_quantile_fantasies,
    register_criterion,
    register_gain,
    threshold_entropy_reduction,
)
from bo_ncgp.bo.acquisition.pool import _log_pmf_grid
from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.base import PoolFantasies

LEVEL = math.log(0.2 / 0.8)  # logit of a prevalence threshold of 0.2


def kernel(d=2):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5, ard_num_dims=d))
    k.outputscale = 2.0
    k.base_kernel.lengthscale = torch.tensor([0.3, 0.5])
    return k


def latent(X):
    return 1.5 * torch.sin(5 * X[:, 0]) - 1.0 + X[:, 1]


@pytest.fixture
def binomial_model():
    X = torch.rand(30, 2)
    y = torch.binomial(torch.full((30,), 20.0), torch.sigmoid(latent(X)))
    m = DualSVGP(
        kernel(), Binomial(20), X[:12], memory_size=5, num_hyper_steps=0, inducing_update="fixed"
    )
    m.update(X[:18], y[:18]).update(X[18:], y[18:])  # a memory and a folded factor
    return m


def brute_force(model, pool, cand, Y):
    """``condition`` per (candidate, fantasy), then ``predict_f`` on the pool."""
    cond = model.condition(cand.view(-1, 1, 1, cand.shape[-1]), Y.unsqueeze(-1))
    return cond.predict_f(pool)


def brute_force_after(model, pool, num_fantasies=6):
    """Marginals ``(P, J, P)`` of the pool after each pool member's QMC fantasies."""
    with torch.no_grad():
        mean, var = model.predict_f(pool)
        Y = predictive_quantile_fantasies(model.likelihood, mean, var, num_fantasies)
        return (mean, var), brute_force(model, pool, pool, Y)


def test_exceedance_probability_and_entropy():
    mean, var = torch.tensor([-1.0, 0.3, 2.0]), torch.tensor([0.5, 2.0, 0.1])
    f = mean + var.sqrt() * torch.randn(200_000, 3)
    mc = (torch.sigmoid(f) > 0.2).double().mean(0)
    p = exceedance_probability(mean, var, LEVEL)
    assert torch.allclose(p, mc, atol=5e-3)  # P(sigmoid(f) > t) = P(f > logit t)
    h = exceedance_entropy(mean, var, LEVEL)
    xlogy = torch.special.xlogy
    assert torch.allclose(h, -(xlogy(p, p) + xlogy(1 - p, 1 - p)), atol=1e-12)
    assert exceedance_entropy(torch.tensor(0.0), torch.tensor(1.0), 0.0) == pytest.approx(
        math.log(2)
    )
    # symmetric in the distance to the level, exact zero far away, never NaN (also var = 0)
    far = exceedance_entropy(torch.tensor([-60.0, 60.0, 0.0]), torch.tensor([1.0, 1.0, 0.0]), 0.0)
    assert far[0] == far[1] == 0.0 and far[2] == pytest.approx(math.log(2))
    z = torch.linspace(-8, 8, 33)
    assert torch.allclose(
        exceedance_entropy(z, torch.ones(33), 0.0), exceedance_entropy(-z, torch.ones(33), 0.0)
    )


@pytest.mark.parametrize("lik", [Binomial(7), Bernoulli(), Bernoulli(labels="pm1")])
def test_log_pmf_grid_equals_the_likelihood(lik):
    f = torch.randn(4, 5) * 3
    support, logp = _log_pmf_grid(lik, f)
    ref = lik.log_prob(support.expand(4, 5, -1), f.unsqueeze(-1).expand(4, 5, len(support)))
    assert torch.allclose(logp, ref, atol=1e-10)
    assert torch.allclose(logp.exp().sum(-1), torch.ones(4, 5))


def test_predictive_quantile_fantasies_are_quantiles_of_the_predictive():
    lik = Binomial(30)
    mean, var = torch.tensor([-1.0, 0.5, 2.5]), torch.tensor([0.3, 1.5, 0.01])
    J = 8
    Y = predictive_quantile_fantasies(lik, mean, var, J, num_points=32)
    support = torch.arange(31.0)
    # the predictive pmf from the likelihood's own quadrature
    pmf = torch.stack(
        [
            lik.predictive_log_prob(torch.full((3,), s), mean, var, num_points=32).exp()
            for s in support
        ],
        -1,
    )
    cdf = pmf.cumsum(-1)
    u = (torch.arange(J) + 0.5) / J
    for i in range(3):
        for j in range(J):  # smallest y with F(y) >= u_j
            k = int(Y[i, j])
            assert cdf[i, k] >= u[j] - 1e-12 and (k == 0 or cdf[i, k - 1] < u[j] + 1e-12)
    assert bool((Y[:, 1:] >= Y[:, :-1]).all())
    # with a tiny latent variance the fantasies sit around N sigmoid(mean)
    assert (Y[2] - 30 * torch.sigmoid(torch.tensor(2.5))).abs().max() < 5
    yb = predictive_quantile_fantasies(Bernoulli(), torch.tensor([3.0]), torch.tensor([0.1]), 10)
    assert set(yb.flatten().tolist()) <= {0.0, 1.0} and yb.mean() > 0.8
    with pytest.raises(UnsupportedError, match="finite support"):
        predictive_quantile_fantasies(Poisson(), mean, var)
    with pytest.raises(InputDataError, match="num_fantasies"):
        predictive_quantile_fantasies(lik, mean, var, 0)
    with pytest.raises(InputDataError, match="shift"):
        predictive_quantile_fantasies(lik, mean, var, 4, shift=1.0)
    with pytest.raises(InputDataError, match=r"must both be \(n,\)"):
        predictive_quantile_fantasies(lik, mean, var[:2])


def test_pool_fantasies_of_a_model_and_of_its_adapter_agree(binomial_model):
    pool = torch.rand(40, 2)
    fant = fantasies_of(DualSVGPModel.from_model(binomial_model), pool)
    assert isinstance(fant, PoolFantasies)
    idx = torch.tensor([0, 5, 17, 39])
    Y = torch.tensor([[0.0, 3, 9, 20], [1, 2, 3, 4], [5, 5, 6, 19], [0, 0, 1, 2]])
    mean, var = fant.conditioned(idx, Y)
    mean_ref, var_ref = brute_force(binomial_model, pool, pool[idx], Y)
    assert mean.shape == mean_ref.shape == (4, 4, 40)
    assert torch.allclose(mean, mean_ref, atol=1e-10) and torch.allclose(var, var_ref, atol=1e-10)
    # and the conditioning changed something (the check can fail)
    assert (mean - fant.mean).abs().max() > 1e-2 and (fant.var - var).min() > -1e-12


def test_gaussian_limit_is_the_exact_gp_posterior_with_the_new_point():
    """Textbook limit: Gaussian likelihood, inducing points = data and candidate, rho = 1:
    conditioning on (x*, y*) gives the exact GP posterior on X and x*."""
    X, xs = torch.rand(12, 2), torch.rand(1, 2)
    y, ys, noise = torch.randn(12), torch.tensor([[0.7]]), 0.05
    k = kernel()
    model = DualSVGP(
        k, Gaussian(noise), torch.cat([X, xs]), memory_size=None, num_hyper_steps=0,
        num_inner_steps=1, inducing_update="fixed",
    )  # fmt: skip
    model.update(X, y)
    pool = torch.rand(9, 2)
    fant = fantasies_of(model, torch.cat([pool, xs]))  # the candidate after the pool
    mean, var = fant.conditioned(torch.tensor([9]), ys)
    Xa, ya = torch.cat([X, xs]), torch.cat([y, ys[0]])
    with torch.no_grad():
        K = k(Xa).to_dense() + noise * torch.eye(13)
        Kp = k(pool, Xa).to_dense()
        L = torch.linalg.cholesky(K)
        exact_mean = Kp @ torch.cholesky_solve(ya.unsqueeze(-1), L).squeeze(-1)
        exact_var = k(pool, diag=True) - (
            torch.linalg.solve_triangular(L, Kp.mT, upper=False) ** 2
        ).sum(0)
    assert torch.allclose(mean[0, 0, :9], exact_mean, atol=1e-8)
    assert torch.allclose(var[0, 0, :9], exact_var, atol=1e-8)


def test_scores_equal_the_brute_force_entropy_reduction(binomial_model):
    model = binomial_model
    pool = torch.rand(30, 2)
    acq = ThresholdEntropyReduction(
        DualSVGPModel.from_model(model), pool, threshold=0.2, num_fantasies=6
    )
    (mean, var), (mean_ref, var_ref) = brute_force_after(model, pool)
    H0 = exceedance_entropy(mean, var, LEVEL).sum()
    ref = H0 - exceedance_entropy(mean_ref, var_ref, LEVEL).sum(-1).mean(-1)
    scores = acq.score_pool()
    assert torch.allclose(scores, ref.detach(), atol=1e-10)
    assert acq.entropy() == pytest.approx(float(H0))
    assert torch.allclose(acq.exceedance(), exceedance_probability(mean, var, LEVEL))
    assert scores.max() > 1e-3  # an observation does change the entropy
    sub = torch.tensor([3, 4, 29])
    assert torch.allclose(acq.score_pool(sub), scores[sub], atol=1e-12)
    # forward() on arbitrary points, here pool members and a point outside the pool
    assert torch.allclose(acq(pool[sub].unsqueeze(-2)), scores[sub], atol=1e-10)
    x_new = torch.rand(1, 2)
    Yn = predictive_quantile_fantasies(model.likelihood, *model.predict_f(x_new), 6)
    mn, vn = brute_force(model, pool, x_new, Yn)
    ref_new = H0 - exceedance_entropy(mn, vn, LEVEL).sum(-1).mean(-1)
    assert torch.allclose(acq(x_new.unsqueeze(-2)), ref_new.detach(), atol=1e-10)
    fant, every = acq.fantasies, torch.arange(30)
    # pool weights: zero weight on every pool point -> zero reduction; any weights: weighted sums
    w0 = threshold_entropy_reduction(fant, every, LEVEL, 6, pool_weights=torch.zeros(30))
    assert torch.equal(w0, torch.zeros(30))
    w = torch.rand(30)
    weighted = threshold_entropy_reduction(fant, every, LEVEL, 6, pool_weights=w, chunk_size=7)
    h_after = exceedance_entropy(mean_ref, var_ref, LEVEL)
    refw = (exceedance_entropy(mean, var, LEVEL) * w).sum() - (h_after * w).sum(-1).mean(-1)
    assert torch.allclose(weighted, refw.detach(), atol=1e-10)
    # chunking does not change anything
    chunked = threshold_entropy_reduction(fant, every, LEVEL, 6, chunk_size=7)
    assert torch.allclose(chunked, scores, atol=1e-12)


def test_a_gain_function_replaces_the_per_point_change(binomial_model):
    model = binomial_model
    pool = torch.rand(30, 2)
    (mean, var), (mean_ref, var_ref) = brute_force_after(model, pool)
    change = exceedance_entropy(mean, var, LEVEL) - exceedance_entropy(mean_ref, var_ref, LEVEL)

    def doubled(h_now, h_after):
        return 2 * (h_now - h_after)

    acq = ThresholdEntropyReduction(model, pool, 0.2, num_fantasies=6, gain=doubled)
    assert torch.allclose(acq.score_pool(), 2 * change.sum(-1).mean(-1).detach(), atol=1e-10)
    w = torch.rand(30)
    weighted = threshold_entropy_reduction(
        acq.fantasies, torch.arange(30), LEVEL, 6, pool_weights=w, gain=doubled, chunk_size=7
    )
    assert torch.allclose(weighted, 2 * (change * w).sum(-1).mean(-1).detach(), atol=1e-10)


def test_gains_are_registered_by_name_and_reduction_is_the_plain_path(binomial_model):
    pool = torch.rand(25, 2)
    plain = ThresholdEntropyReduction(binomial_model, pool, 0.2, num_fantasies=4)
    named = ThresholdEntropyReduction(binomial_model, pool, 0.2, num_fantasies=4, gain="reduction")
    assert named.gain is None and torch.equal(named.score_pool(), plain.score_pool())  # bitwise
    unfused = ThresholdEntropyReduction(  # the same sum, per point (other rounding)
        binomial_model, pool, 0.2, num_fantasies=4, gain=lambda h, g: entropy_reduction(h, g)
    )
    assert torch.allclose(unfused.score_pool(), plain.score_pool(), atol=1e-10)

    def halved(h_now, h_after):
        return 0.5 * (h_now - h_after)

    register_gain("test-halved", halved)
    try:
        register_gain("test-halved", halved)  # the same: a no-op
        with pytest.raises(InputDataError, match="already registered"):
            register_gain("test-halved", entropy_reduction)
        assert check_gain("test-halved") == "test-halved"
        half = ThresholdEntropyReduction(
            binomial_model, pool, 0.2, num_fantasies=4, gain="test-halved"
        )
        assert torch.allclose(half.score_pool(), 0.5 * plain.score_pool(), atol=1e-10)
        fant = plain.fantasies
        direct = threshold_entropy_reduction(fant, torch.arange(25), LEVEL, 4, gain="test-halved")
        assert torch.allclose(direct, half.score_pool(), atol=1e-12)
    finally:
        del GAINS["test-halved"]
    with pytest.raises(InputDataError, match="gain must be one of"):
        ThresholdEntropyReduction(binomial_model, pool, 0.2, gain="test-halved")
    with pytest.raises(InputDataError, match="non-empty str"):
        register_gain("", halved)
    with pytest.raises(InputDataError, match="callable"):
        ThresholdEntropyReduction(binomial_model, pool, 0.2, gain=3)


def test_a_registered_criterion_drives_the_acquisition(binomial_model):
    model = binomial_model
    pool = torch.rand(20, 2)

    def exceedance_variance(mean, var, level):  # p (1 - p) of the exceedance indicator
        p = exceedance_probability(mean, var, level)
        return p * (1 - p)

    register_criterion("exceedance-variance", exceedance_variance)
    try:
        register_criterion("exceedance-variance", exceedance_variance)  # the same: a no-op
        with pytest.raises(InputDataError, match="already registered"):
            register_criterion("exceedance-variance", exceedance_entropy)
        acq = ThresholdEntropyReduction(
            model, pool, 0.2, num_fantasies=6, criterion="exceedance-variance"
        )
        (mean, var), (mean_ref, var_ref) = brute_force_after(model, pool)
        ref = exceedance_variance(mean, var, LEVEL).sum() - exceedance_variance(
            mean_ref, var_ref, LEVEL
        ).sum(-1).mean(-1)
        assert torch.allclose(acq.score_pool(), ref.detach(), atol=1e-10)
        assert acq.entropy() == pytest.approx(float(exceedance_variance(mean, var, LEVEL).sum()))
    finally:
        del CRITERIA["exceedance-variance"]
    with pytest.raises(InputDataError, match="criterion must be one of"):
        check_criterion("exceedance-variance")
    with pytest.raises(InputDataError, match="non-empty str"):
        register_criterion("", exceedance_entropy)


def test_float32_entropy_sums_agree(binomial_model):
    pool = torch.rand(200, 2)
    a64 = ThresholdEntropyReduction(binomial_model, pool, 0.2).score_pool()
    a32 = ThresholdEntropyReduction(
        binomial_model, pool, 0.2, compute_dtype=torch.float32
    ).score_pool()
    assert a32.dtype == torch.float64
    assert (a32 - a64).abs().max() < 1e-3 * max(1.0, float(a64.abs().max()))


def test_discrete_botorch_optimisation_picks_the_best_pool_point(binomial_model):
    from botorch.optim import optimize_acqf_discrete

    pool = torch.rand(25, 2)
    acq = ThresholdEntropyReduction(DualSVGPModel.from_model(binomial_model), pool, threshold=0.2)
    x, _ = optimize_acqf_discrete(acq, q=1, choices=pool)
    best = int(acq.score_pool().argmax())
    assert torch.equal(x[0], pool[best])


def test_a_single_latent_model_with_a_batched_kernel_is_scored():
    X = torch.rand(20, 2)
    y = torch.binomial(torch.full((20,), 10.0), torch.sigmoid(latent(X)))
    k = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([1]))
    model = DualSVGP(k, Binomial(10), X[:6], num_hyper_steps=0).update(X, y)
    pool = torch.rand(9, 2)
    scores = ThresholdEntropyReduction(model, pool, 0.3, num_fantasies=4).score_pool()
    (mean, var), (mean_ref, var_ref) = brute_force_after(model, pool, 4)
    lvl = math.log(0.3 / 0.7)
    ref = exceedance_entropy(mean, var, lvl).sum() - exceedance_entropy(mean_ref, var_ref, lvl).sum(
        -1
    ).mean(-1)
    assert scores.shape == (9,) and torch.allclose(scores, ref.detach(), atol=1e-10)


def test_errors(binomial_model):
    pool = torch.rand(5, 2)
    with pytest.raises(InputDataError, match=r"threshold must lie in \(0, 1\)"):
        ThresholdEntropyReduction(binomial_model, pool, threshold=1.0)
    with pytest.raises(UnsupportedError, match="needs a bo_ncgp model"):
        fantasies_of(torch.nn.Linear(2, 1), pool)
    soft = DualSVGP(kernel(), Softmax(3), torch.rand(4, 2), num_hyper_steps=0)
    with pytest.raises(UnsupportedError, match="single-latent model, got DualSVGP with 3"):
        ThresholdEntropyReduction(soft, pool, 0.2)
    batched = binomial_model.condition(torch.rand(3, 1, 2), torch.ones(3, 1))
    with pytest.raises(UnsupportedError, match="unbatched"):
        fantasies_of(batched, pool)
    with pytest.raises(InputDataError, match=r"pool must be \(P, d\)"):
        fantasies_of(binomial_model, torch.rand(5))
    fant = fantasies_of(binomial_model, pool)
    with pytest.raises(InputDataError, match="chunk_size"):
        threshold_entropy_reduction(fant, torch.arange(5), 0.0, chunk_size=0)
    with pytest.raises(InputDataError, match="pool_weights"):
        threshold_entropy_reduction(fant, torch.arange(5), 0.0, pool_weights=torch.ones(4))
    with pytest.raises(InputDataError, match=r"index must be \(n,\)"):
        threshold_entropy_reduction(fant, torch.zeros(1, 2), 0.0)
    with pytest.raises(InputDataError, match="criterion must be one of"):
        threshold_entropy_reduction(fant, torch.arange(5), 0.0, criterion="x")
    with pytest.raises(InputDataError, match="criterion must be one of"):
        ThresholdEntropyReduction(binomial_model, pool, 0.2, criterion="entropy")
    gauss = DualSVGP(kernel(), Gaussian(0.1), torch.rand(4, 2), num_hyper_steps=0)
    with pytest.raises(UnsupportedError, match="finite support"):
        ThresholdEntropyReduction(gauss, pool, 0.2).score_pool()


def test_variances_shared_by_the_fantasies_may_come_broadcastable(binomial_model):
    """Binomial sites have a precision that does not depend on y: a model may return the
    conditioned variances as (n, 1, P)."""

    class Shared(PoolFantasies):
        def conditioned(self, index, Y):
            mean, var = super().conditioned(index, Y)
            assert torch.allclose(var, var[:, :1].expand_as(var))
            return mean, var[:, :1]

    pool = torch.rand(25, 2)
    full = fantasies_of(binomial_model, pool)
    shared = Shared(binomial_model, pool)
    for criterion, gain in (("exceedance", None), ("exceedance", lambda h, g: h - g)):
        a = threshold_entropy_reduction(
            full, torch.arange(25), LEVEL, 4, criterion=criterion, gain=gain
        )
        b = threshold_entropy_reduction(
            shared, torch.arange(25), LEVEL, 4, criterion=criterion, gain=gain
        )
        assert torch.allclose(a, b, atol=1e-12)
