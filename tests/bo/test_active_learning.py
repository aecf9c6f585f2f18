"""Tests of bo_ncgp.bo.active_learning (thresholded entropy reduction, rank-one fast path)."""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch

from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.bo.active_learning import (
    ThresholdEntropyReduction,
    _log_pmf_grid,
    conditioned_pool_marginals,
    exceedance_entropy,
    exceedance_probability,
    pool_state,
    predictive_quantile_fantasies,
    spiked_entropy,
    threshold_entropy_reduction,
)
from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax
from bo_ncgp.models import DualSVGP

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
    with pytest.raises(ValueError, match="finite support"):
        predictive_quantile_fantasies(Poisson(), mean, var)
    with pytest.raises(ValueError, match="num_fantasies"):
        predictive_quantile_fantasies(lik, mean, var, 0)
    with pytest.raises(ValueError, match="shift"):
        predictive_quantile_fantasies(lik, mean, var, 4, shift=1.0)


def _brute_force(model, pool, cand, Y):
    """``DualSVGP.condition`` per (candidate, fantasy), then ``predict_f`` on the pool."""
    cond = model.condition(cand.view(-1, 1, 1, cand.shape[-1]), Y.unsqueeze(-1))
    return cond.predict_f(pool)


def test_rank_one_fast_path_equals_dual_conditioning(binomial_model):
    model = binomial_model
    pool = torch.rand(40, 2)
    st = pool_state(model, pool)
    idx = torch.tensor([0, 5, 17, 39])
    Y = torch.tensor([[0.0, 3, 9, 20], [1, 2, 3, 4], [5, 5, 6, 19], [0, 0, 1, 2]])
    mean, var = conditioned_pool_marginals(model, st, st.G[:, idx], st.mean[idx], st.var[idx], Y)
    mean_ref, var_ref = _brute_force(model, pool, pool[idx], Y)
    assert mean.shape == mean_ref.shape == (4, 4, 40)
    assert torch.allclose(mean, mean_ref, atol=1e-8, rtol=0)
    assert torch.allclose(var, var_ref, atol=1e-8, rtol=0)
    # and the conditioning changed something (the check can fail)
    assert (mean - st.mean).abs().max() > 1e-2 and (st.var - var).min() > -1e-12


def test_fast_path_with_a_bernoulli_classifier():
    X = torch.rand(25, 2)
    y = (latent(X) > -0.5).double()
    model = DualSVGP(kernel(), Bernoulli(), X[:10], memory_size=None, num_hyper_steps=0)
    model.update(X, y)
    pool = torch.rand(15, 2)
    st = pool_state(model, pool)
    Y = predictive_quantile_fantasies(model.likelihood, st.mean, st.var, 4)
    mean, var = conditioned_pool_marginals(model, st, st.G, st.mean, st.var, Y)
    mean_ref, var_ref = _brute_force(model, pool, pool, Y)
    assert torch.allclose(mean, mean_ref, atol=1e-8) and torch.allclose(var, var_ref, atol=1e-8)


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
    st = pool_state(model, pool)
    G_c = torch.linalg.solve_triangular(st.L_A, k(model.Z, xs).to_dense(), upper=False)
    mc, vc = model.predict_f(xs)
    mean, var = conditioned_pool_marginals(model, st, G_c, mc, vc, ys)
    Xa, ya = torch.cat([X, xs]), torch.cat([y, ys[0]])
    with torch.no_grad():
        K = k(Xa).to_dense() + noise * torch.eye(13)
        Kp = k(pool, Xa).to_dense()
        L = torch.linalg.cholesky(K)
        exact_mean = Kp @ torch.cholesky_solve(ya.unsqueeze(-1), L).squeeze(-1)
        exact_var = k(pool, diag=True) - (
            torch.linalg.solve_triangular(L, Kp.mT, upper=False) ** 2
        ).sum(0)
    assert torch.allclose(mean[0, 0], exact_mean, atol=1e-8)
    assert torch.allclose(var[0, 0], exact_var, atol=1e-8)


def test_scores_equal_the_brute_force_entropy_reduction(binomial_model):
    model = binomial_model
    pool = torch.rand(30, 2)
    acq = ThresholdEntropyReduction(DualSVGPModel(model), pool, threshold=0.2, num_fantasies=6)
    st = acq.state
    Y = predictive_quantile_fantasies(model.likelihood, st.mean, st.var, 6)
    mean_ref, var_ref = _brute_force(model, pool, pool, Y)
    H0 = exceedance_entropy(st.mean, st.var, LEVEL).sum()
    ref = H0 - exceedance_entropy(mean_ref, var_ref, LEVEL).sum(-1).mean(-1)
    scores = acq.score_pool()
    assert torch.allclose(scores, ref.detach(), atol=1e-10)
    assert acq.entropy() == pytest.approx(float(H0))
    assert scores.max() > 1e-3  # an observation does change the entropy
    sub = torch.tensor([3, 4, 29])
    assert torch.allclose(acq.score_pool(sub), scores[sub], atol=1e-12)
    # forward() on arbitrary points, here pool members and a point outside the pool
    assert torch.allclose(acq(pool[sub].unsqueeze(-2)), scores[sub], atol=1e-10)
    x_new = torch.rand(1, 2)
    Yn = predictive_quantile_fantasies(model.likelihood, *model.predict_f(x_new), 6)
    mn, vn = _brute_force(model, pool, x_new, Yn)
    ref_new = H0 - exceedance_entropy(mn, vn, LEVEL).sum(-1).mean(-1)
    assert torch.allclose(acq(x_new.unsqueeze(-2)), ref_new.detach(), atol=1e-10)
    # pool weights: zero weight on every pool point -> zero reduction
    w0 = threshold_entropy_reduction(
        model, st, st.G, st.mean, st.var, LEVEL, 6, pool_weights=torch.zeros(30)
    )
    assert torch.equal(w0, torch.zeros(30))
    # chunking does not change anything
    chunked = threshold_entropy_reduction(model, st, st.G, st.mean, st.var, LEVEL, 6, chunk_size=7)
    assert torch.allclose(chunked, scores, atol=1e-12)


def _spiked_by_dense_quadrature(mean: float, var: float, level: float) -> float:
    """``E[h(sigmoid f) 1(f > level)]`` by the trapezoid rule on 400,001 points."""
    sd = math.sqrt(var)
    lo, hi = max(level, mean - 14 * sd), mean + 14 * sd
    if lo >= hi:
        return 0.0
    f = torch.linspace(lo, hi, 400_001)
    p = torch.sigmoid(f)
    h = -(torch.special.xlogy(p, p) + torch.special.xlogy(1 - p, 1 - p))
    density = torch.exp(-0.5 * ((f - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
    return float(torch.trapezoid(h * density, f))


def test_spiked_entropy_equals_dense_quadrature():
    level = math.log(0.1 / 0.9)
    g = torch.Generator().manual_seed(0)
    points = [(m, v) for m in (-8.0, -4.0, -2.2, -1.0, 0.0, 1.5, 4.0, 10.0)
              for v in (1e-4, 0.01, 0.25, 1.0, 4.0, 25.0)]  # fmt: skip
    points += [
        (float(torch.empty(()).uniform_(-10, 10, generator=g)),
         float(torch.empty(()).uniform_(-8, 4.5, generator=g).exp()))
        for _ in range(40)
    ]  # fmt: skip
    mean = torch.tensor([m for m, _ in points])
    var = torch.tensor([v for _, v in points])
    got = spiked_entropy(mean, var, level)  # table lookup
    want = torch.tensor([_spiked_by_dense_quadrature(m, v, level) for m, v in points])
    assert (got - want).abs().max() < 5e-4  # nats, ~0.1 % of the largest values
    # the certain limit: h(sigmoid(mean)) above the level, 0 below
    mean = torch.tensor([-3.0, -1.0, 0.5])
    p = torch.sigmoid(mean)
    want = -(p * p.log() + (1 - p) * torch.log1p(-p)) * (mean > level)
    assert torch.allclose(spiked_entropy(mean, torch.full((3,), 1e-7), level), want, atol=1e-3)
    # float32 inputs use the same (converted) table
    got32 = spiked_entropy(mean.float(), torch.full((3,), 0.5).float(), level)
    assert got32.dtype == torch.float32
    assert torch.allclose(
        got32.double(), spiked_entropy(mean, torch.full((3,), 0.5), level), atol=1e-6
    )


def test_table_lookup_is_exact_on_a_bilinear_table_up_to_its_edges():
    from bo_ncgp.bo.active_learning import _bilinear

    table = torch.arange(12.0).reshape(3, 4)  # 4 i + j, at x = 1 + 0.5 i, y = -1 + 2 j
    x = torch.tensor([1.0, 1.25, 2.0, 2.0, 9.0, -5.0])  # the upper edge, then clamped inputs
    y = torch.tensor([-1.0, 2.0, 5.0, 4.0, 99.0, -9.0])
    i = ((x - 1) / 0.5).clamp(0, 2)
    j = ((y + 1) / 2).clamp(0, 3)
    for dtype in (torch.float64, torch.float32):
        got = _bilinear(table.to(dtype), x.to(dtype), 1.0, 0.5, y.to(dtype), -1.0, 2.0)
        assert torch.allclose(got, (4 * i + j).to(dtype))


def test_spiked_scores_equal_the_brute_force_reduction(binomial_model):
    model = binomial_model
    pool = torch.rand(30, 2)
    acq = ThresholdEntropyReduction(model, pool, threshold=0.2, num_fantasies=6, criterion="spiked")
    st = acq.state
    Y = predictive_quantile_fantasies(model.likelihood, st.mean, st.var, 6)
    mean_ref, var_ref = _brute_force(model, pool, pool, Y)
    H0 = spiked_entropy(st.mean, st.var, LEVEL).sum()
    ref = H0 - spiked_entropy(mean_ref, var_ref.clamp_min(0), LEVEL).sum(-1).mean(-1)
    scores = acq.score_pool()
    assert torch.allclose(scores, ref.detach(), atol=1e-10)
    assert acq.entropy() == pytest.approx(float(H0))
    assert scores.max() > 1e-3
    # a different criterion ranks the pool differently, but both reward information
    plain = ThresholdEntropyReduction(model, pool, threshold=0.2, num_fantasies=6).score_pool()
    assert not torch.allclose(scores, plain)
    w = torch.rand(30)
    weighted = threshold_entropy_reduction(
        model, st, st.G, st.mean, st.var, LEVEL, 6, pool_weights=w, criterion="spiked", chunk_size=7
    )
    H0w = (spiked_entropy(st.mean, st.var, LEVEL) * w).sum()
    refw = H0w - (spiked_entropy(mean_ref, var_ref.clamp_min(0), LEVEL) * w).sum(-1).mean(-1)
    assert torch.allclose(weighted, refw.detach(), atol=1e-10)
    f32 = ThresholdEntropyReduction(
        model, pool, 0.2, num_fantasies=6, criterion="spiked", compute_dtype=torch.float32
    ).score_pool()
    assert (f32 - scores).abs().max() < 1e-3 * max(1.0, float(scores.abs().max()))


@pytest.mark.parametrize("criterion", ["exceedance", "spiked"])
def test_clamped_scores_count_only_per_village_decreases(binomial_model, criterion):
    model = binomial_model
    pool = torch.rand(30, 2)
    acq = ThresholdEntropyReduction(
        model, pool, threshold=0.2, num_fantasies=6, criterion=criterion, clamp=True
    )
    st = acq.state
    per_point = spiked_entropy if criterion == "spiked" else exceedance_entropy
    Y = predictive_quantile_fantasies(model.likelihood, st.mean, st.var, 6)
    mean_ref, var_ref = _brute_force(model, pool, pool, Y)
    change = per_point(st.mean, st.var, LEVEL) - per_point(mean_ref, var_ref.clamp_min(0), LEVEL)
    ref = change.clamp_min(0).sum(-1).mean(-1)  # (candidates,)
    scores = acq.score_pool()
    assert torch.allclose(scores, ref.detach(), atol=1e-10)
    # entropy increases exist here, so clamping changes the scores (the check can fail)
    assert (change < -1e-6).any()
    plain = change.sum(-1).mean(-1).detach()
    assert (scores > plain + 1e-6).any() and (scores >= plain - 1e-10).all()
    w = torch.rand(30)
    weighted = threshold_entropy_reduction(
        model, st, st.G, st.mean, st.var, LEVEL, 6, pool_weights=w, criterion=criterion,
        chunk_size=7, clamp=True,
    )  # fmt: skip
    assert torch.allclose(weighted, (change.clamp_min(0) * w).sum(-1).mean(-1).detach(), atol=1e-10)


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
    acq = ThresholdEntropyReduction(DualSVGPModel(binomial_model), pool, threshold=0.2)
    x, _ = optimize_acqf_discrete(acq, q=1, choices=pool)
    best = int(acq.score_pool().argmax())
    assert torch.equal(x[0], pool[best])


def test_errors(binomial_model):
    pool = torch.rand(5, 2)
    with pytest.raises(ValueError, match=r"threshold must lie in \(0, 1\)"):
        ThresholdEntropyReduction(binomial_model, pool, threshold=1.0)
    with pytest.raises(ValueError, match="DualSVGP"):
        pool_state(torch.nn.Linear(2, 1), pool)
    soft = DualSVGP(kernel(), Softmax(3), torch.rand(4, 2), num_hyper_steps=0)
    with pytest.raises(ValueError, match="single-latent"):
        pool_state(soft, pool)
    batched = binomial_model.condition(torch.rand(3, 1, 2), torch.ones(3, 1))
    with pytest.raises(ValueError, match="unbatched"):
        pool_state(batched, pool)
    with pytest.raises(ValueError, match=r"pool must be \(P, d\)"):
        pool_state(binomial_model, torch.rand(5))
    st = pool_state(binomial_model, pool)
    with pytest.raises(ValueError, match="chunk_size"):
        threshold_entropy_reduction(binomial_model, st, st.G, st.mean, st.var, 0.0, chunk_size=0)
    with pytest.raises(ValueError, match="criterion must be one of"):
        threshold_entropy_reduction(binomial_model, st, st.G, st.mean, st.var, 0.0, criterion="x")
    with pytest.raises(ValueError, match="criterion must be one of"):
        ThresholdEntropyReduction(binomial_model, pool, 0.2, criterion="entropy")
