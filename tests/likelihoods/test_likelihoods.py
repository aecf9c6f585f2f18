"""Closed-form derivatives against autograd, expectations against Monte Carlo, bad input."""

import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax


def scalar_cases():
    n = 7
    return [
        (Gaussian(noise=0.3), torch.randn(n)),
        (Bernoulli(), torch.tensor([0.0, 1, 1, 0, 1, 0, 1])),
        (Bernoulli(labels="pm1"), torch.tensor([-1.0, 1, 1, -1, 1, -1, 1])),
        (Binomial(100), torch.tensor([0.0, 3, 50, 97, 100, 12, 64])),
        (Binomial(torch.tensor([5.0, 10, 20, 5, 8, 9, 1])), torch.tensor([0.0, 3, 20, 5, 1, 9, 1])),
        (Poisson(), torch.tensor([0.0, 1, 2, 5, 11, 0, 3])),
    ]


IDS = ["gaussian", "bernoulli01", "bernoulli_pm1", "binomial", "binomial_vec", "poisson"]


@pytest.mark.parametrize("case", range(6), ids=IDS)
def test_grad_and_neg_hessian_match_autograd(case):
    lik, y = scalar_cases()[case]
    f = (1.5 * torch.randn(y.shape[0])).requires_grad_(True)
    lp = lik.log_prob(y, f)
    (g_auto,) = torch.autograd.grad(lp.sum(), f, create_graph=True)
    (h_auto,) = torch.autograd.grad(g_auto.sum(), f)
    torch.testing.assert_close(lik.grad(y, f), g_auto)
    torch.testing.assert_close(lik.neg_hessian(y, f), -h_auto)


@pytest.mark.parametrize("case", range(6), ids=IDS)
def test_expected_matches_monte_carlo(case):
    lik, y = scalar_cases()[case]
    n = y.shape[0]
    mean = torch.randn(n)
    var = 0.2 + torch.rand(n)
    S = 1_000_000
    g = torch.Generator(torch.get_default_device()).manual_seed(1)
    f = mean + var.sqrt() * torch.randn(S, n, generator=g)
    with torch.no_grad():
        mc = [lik.log_prob(y, f).mean(0), lik.grad(y, f).mean(0), lik.neg_hessian(y, f).mean(0)]
        se = [lik.log_prob(y, f).std(0), lik.grad(y, f).std(0), lik.neg_hessian(y, f).std(0)]
        quad = lik.expected(y, mean, var)
    for q, m, s in zip(quad, mc, se, strict=True):
        # 6 standard errors of the MC estimate (plus a float floor for zero-variance terms)
        assert ((q - m).abs() <= 6 * s / S**0.5 + 1e-9).all(), (q, m)


@pytest.mark.parametrize("case", range(6), ids=IDS)
def test_predictive_log_prob_and_mean_match_dense_integration(case):
    # reference: trapezoidal rule on a fine grid over mean +- 12 sd (Monte Carlo is too noisy
    # for the sharply peaked Binomial(100) likelihood at y = 0 or y = N)
    lik, y = scalar_cases()[case]
    n = y.shape[0]
    mean, var = torch.randn(n), 0.1 + torch.rand(n)
    t = torch.linspace(-12, 12, 40001)
    f = mean[:, None] + var.sqrt()[:, None] * t  # (n, G)
    dens = torch.exp(-0.5 * t**2) / (2 * torch.pi) ** 0.5
    with torch.no_grad():
        lp = lik.log_prob(y[:, None].expand_as(f).T, f.T).T
        ref = torch.log(torch.trapezoid(torch.exp(lp) * dens, t, dim=-1))
        q = lik.predictive_log_prob(y, mean, var)
        ey = lik.predictive_mean(mean, var)
    torch.testing.assert_close(q, ref, rtol=1e-4, atol=1e-4)
    if isinstance(lik, Bernoulli):
        ref_mean = torch.trapezoid(torch.sigmoid(f) * dens, t, dim=-1)
        torch.testing.assert_close(ey, ref_mean, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", range(6), ids=IDS)
def test_inverse_neg_hessian_product(case):
    lik, y = scalar_cases()[case]
    f = torch.randn(y.shape[0])
    v = torch.randn(y.shape[0])
    W = lik.neg_hessian(y, f)
    torch.testing.assert_close(lik.neg_hessian_inv_matvec(y, f, W * v), v)
    torch.testing.assert_close(lik.neg_hessian_matvec(y, f, v), W * v)


def test_softmax_derivatives_match_autograd():
    C, n = 4, 6
    lik = Softmax(C)
    y = torch.tensor([0, 3, 1, 2, 2, 0])
    f = torch.randn(n, C, requires_grad=True)
    lp = lik.log_prob(y, f)
    (g,) = torch.autograd.grad(lp.sum(), f)
    torch.testing.assert_close(lik.grad(y, f), g)
    for i in range(n):
        H = torch.autograd.functional.hessian(
            lambda fi, i=i: lik.log_prob(y[i : i + 1], fi[None])[0], f[i].detach()
        )
        torch.testing.assert_close(lik.neg_hessian(y, f)[i], -H)


def test_softmax_pseudo_inverse():
    C, n = 5, 8
    lik = Softmax(C)
    y = torch.randint(0, C, (n,))
    f = 2 * torch.randn(n, C)
    W = lik.neg_hessian(y, f)
    Wp = lik.neg_hessian_pinv(y, f)
    torch.testing.assert_close(W @ Wp @ W, W)  # Moore–Penrose conditions
    torch.testing.assert_close(Wp @ W @ Wp, Wp)
    torch.testing.assert_close(W @ Wp, (W @ Wp).mT)
    torch.testing.assert_close(Wp, torch.linalg.pinv(W), rtol=1e-6, atol=1e-6)
    v = torch.randn(n, C)
    torch.testing.assert_close(
        lik.neg_hessian_inv_matvec(y, f, v), (Wp @ v.unsqueeze(-1)).squeeze(-1)
    )
    torch.testing.assert_close(lik.neg_hessian_matvec(y, f, v), (W @ v.unsqueeze(-1)).squeeze(-1))


def test_softmax_expected_matches_monte_carlo_and_full_cov():
    C, n = 3, 4
    lik = Softmax(C, num_samples=20_000)
    y = torch.tensor([0, 1, 2, 1])
    mean, var = torch.randn(n, C), 0.1 + torch.rand(n, C)
    elp, alpha, beta = lik.expected(y, mean, var)
    assert elp.shape == (n,) and alpha.shape == (n, C) and beta.shape == (n, C, C)
    f = mean + var.sqrt() * torch.randn(
        1_000_000, n, C, generator=torch.Generator(torch.get_default_device()).manual_seed(3)
    )
    torch.testing.assert_close(elp, lik.log_prob(y, f).mean(0), rtol=0, atol=2e-2)
    torch.testing.assert_close(alpha, lik.grad(y, f).mean(0), rtol=0, atol=1e-2)
    torch.testing.assert_close(beta, lik.neg_hessian(y, f).mean(0), rtol=0, atol=1e-2)
    # deterministic (fixed base samples)
    torch.testing.assert_close(lik.expected(y, mean, var)[1], alpha)
    # full covariance with diagonal entries equals the independent-latent form
    full = lik.expected(y, mean, torch.diag_embed(var))
    torch.testing.assert_close(full[1], alpha, rtol=1e-6, atol=1e-6)
    probs = lik.predictive_mean(mean, var)
    torch.testing.assert_close(probs.sum(-1), torch.ones(n))


def test_expected_is_differentiable():
    lik = Bernoulli()
    mean = torch.zeros(3, requires_grad=True)
    var = torch.ones(3, requires_grad=True)
    elp, _, _ = lik.expected(torch.tensor([1.0, 0.0, 1.0]), mean, var)
    elp.sum().backward()
    assert torch.isfinite(mean.grad).all() and torch.isfinite(var.grad).all()
    assert (mean.grad.abs() > 0).all()


def test_gaussian_noise_is_learnable_and_positive():
    lik = Gaussian(noise=0.5)
    torch.testing.assert_close(lik.noise, torch.tensor(0.5))
    lp = lik.log_prob(torch.tensor([1.0]), torch.tensor([0.0]))
    lp.sum().backward()
    assert lik.raw_noise.grad is not None
    with pytest.raises(ValueError, match="positive"):
        Gaussian(noise=0.0)


@pytest.mark.parametrize(
    "lik, y, match",
    [
        (Bernoulli(), torch.tensor([0.0, -1.0]), r"labels must be in \{0, 1\}.*labels='pm1'"),
        (Bernoulli(), torch.tensor([0.0, 0.5]), "labels must be"),
        (Bernoulli(labels="pm1"), torch.tensor([0.0, 1.0]), r"\{-1, 1\}"),
        (Binomial(10), torch.tensor([3.0, 11.0]), r"out of range \[0, 10\].*11"),
        (Binomial(10), torch.tensor([2.5]), "integers.*2.5"),
        (Poisson(), torch.tensor([-1.0]), "out of range"),
        (Poisson(), torch.tensor([1.2]), "integers"),
        (Gaussian(), torch.tensor([float("nan")]), "NaN"),
        (Poisson(), torch.tensor([float("nan")]), "NaN"),
    ],
)
def test_bad_targets_raise_value_error(lik, y, match):
    f = torch.zeros(y.shape[0])
    with pytest.raises(ValueError, match=match):
        lik.log_prob(y, f)
    with pytest.raises(ValueError, match=match):
        lik.expected(y, f, torch.ones_like(f))


def test_shape_and_nan_f_errors():
    with pytest.raises(ValueError, match="shape mismatch"):
        Bernoulli().log_prob(torch.tensor([0.0, 1.0, 1.0]), torch.zeros(2))
    with pytest.raises(ValueError, match="f contains NaN"):
        Poisson().grad(torch.tensor([1.0]), torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="non-negative"):
        Bernoulli().expected(torch.tensor([1.0]), torch.zeros(1), -torch.ones(1))
    sm = Softmax(3)
    with pytest.raises(ValueError, match=r"out of range \[0, 2\]"):
        sm.log_prob(torch.tensor([3]), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="trailing dimension"):
        sm.log_prob(torch.tensor([1]), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="shape mismatch"):
        sm.log_prob(torch.tensor([1, 2]), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="num_classes"):
        Softmax(1)
    with pytest.raises(ValueError, match="labels must be"):
        Bernoulli(labels="-1,1")
    with pytest.raises(ValueError, match="num_trials"):
        Binomial(0)


def test_fantasy_batch_broadcasting():
    # targets with a leading fantasy dimension against one latent vector
    lik = Binomial(100)
    y = torch.randint(0, 101, (16, 5)).double()
    mean, var = torch.randn(5), torch.rand(5)
    elp, alpha, beta = lik.expected(y, mean, var)
    assert elp.shape == alpha.shape == beta.shape == (16, 5)
    torch.testing.assert_close(alpha[3], lik.expected(y[3], mean, var)[1])


def test_soft_targets_context():
    from bo_ncgp.likelihoods import soft_targets

    f = torch.tensor([0.0, 1.0])
    with pytest.raises(ValueError, match="labels must be"):
        Bernoulli().log_prob(torch.tensor([0.3, 1.0]), f)
    with soft_targets():
        g = Bernoulli().grad(torch.tensor([0.3, 1.0]), f)
        torch.testing.assert_close(g, torch.tensor([0.3, 1.0]) - torch.sigmoid(f))
        Binomial(10).log_prob(torch.tensor([2.5, 9.9]), f)
        Poisson().expected(torch.tensor([0.5, 2.2]), f, torch.ones(2))
        with pytest.raises(ValueError, match="labels must be in"):
            Bernoulli().log_prob(torch.tensor([1.5, 0.0]), f)
        with pytest.raises(ValueError, match="out of range"):
            Binomial(10).log_prob(torch.tensor([10.5, 0.0]), f)
    with pytest.raises(ValueError, match="integers"):
        Poisson().log_prob(torch.tensor([0.5, 1.0]), f)


@pytest.mark.parametrize("case", range(6), ids=IDS)
def test_sample_matches_predictive_mean(case):
    lik, y = scalar_cases()[case]
    f = torch.randn(y.shape[0])
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    draws = torch.stack([lik.sample(f, generator=g) for _ in range(20_000)])
    lik.check_targets(draws[0])  # valid observations
    mean = draws.mean(0)
    if isinstance(lik, Bernoulli) and lik.labels == "pm1":
        mean = (mean + 1) / 2
    torch.testing.assert_close(
        mean, lik.predictive_mean(f, torch.zeros_like(f)), atol=0.1, rtol=0.03
    )


def test_softmax_sample_frequencies():
    lik = Softmax(3)
    f = torch.tensor([[0.0, 1.0, -1.0]])
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    y = torch.stack([lik.sample(f, generator=g) for _ in range(20_000)]).flatten()
    freq = torch.bincount(y, minlength=3).double() / y.numel()
    torch.testing.assert_close(freq, torch.softmax(f[0], -1), atol=0.015, rtol=0)
