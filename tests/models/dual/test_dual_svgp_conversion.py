"""Tests of DualSVGP's constant prior mean and of DualSVGP.from_inducing_posterior: the
textbook limits (exact GP regression with a constant prior mean, the standard SVGP
predictive, Gaussian conditioning) and the errors for bad input."""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.svgp import SVGP

DT = torch.float64


def matern(lengthscale: float = 0.4, outputscale: float = 1.5) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5)).to(DT)
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k


def dense(kernel, A, B=None) -> torch.Tensor:
    with torch.no_grad():
        return kernel(A, A if B is None else B).to_dense()


def data(n: int = 12, seed: int = 0):
    g = torch.Generator(torch.get_default_device()).manual_seed(seed)
    X = torch.rand(n, 1, generator=g, dtype=DT)
    y = torch.sin(6 * X[:, 0]) + 3.0 + 0.1 * torch.randn(n, generator=g, dtype=DT)
    return X, y


def gaussian_model(X, c: float, s2: float = 0.05, **kw) -> DualSVGP:
    opts = dict(memory_size=None, rho=1.0, num_inner_steps=1, num_hyper_steps=0)
    opts.update(kw)
    return DualSVGP(matern(), Gaussian(s2).to(DT), X, mean_constant=c, **opts)


# ------------------------------------------------------------- constant prior mean
def test_constant_mean_is_exact_gp_regression_with_that_prior_mean():
    """Gaussian likelihood, Z = X: the posterior is the exact GP's with prior mean c."""
    X, y = data()
    c, s2 = 3.0, 0.05
    model = gaussian_model(X, c, s2).update(X, y)
    Xs = torch.linspace(0, 1, 7, dtype=DT).unsqueeze(-1)
    K, Ks, Kss = dense(model.kernel, X), dense(model.kernel, Xs, X), dense(model.kernel, Xs)
    A = K + s2 * torch.eye(len(X), dtype=DT)
    ref_mean = c + Ks @ torch.linalg.solve(A, y - c)
    ref_var = (Kss - Ks @ torch.linalg.solve(A, Ks.T)).diagonal()
    mean, var = model.predict_f(Xs)
    assert torch.allclose(mean, ref_mean, atol=1e-8)
    assert torch.allclose(var, ref_var, atol=1e-8)
    # the log marginal likelihood (Eq. 26) and the ELBO (Eq. 21) equal log N(y | c, K + s2 I)
    exact = torch.distributions.MultivariateNormal(torch.full_like(y, c), A).log_prob(y)
    with torch.no_grad():
        assert torch.isclose(model.log_marginal(include_prior=False), exact, atol=1e-6)
        assert torch.isclose(model.elbo(include_prior=False), exact, atol=1e-6)
    # the zero-mean model does not pass this check (the test can fail)
    zero = gaussian_model(X, 0.0, s2).update(X, y)
    assert (zero.predict_f(Xs)[0] - ref_mean).abs().max() > 0.1


def test_constant_mean_equals_zero_mean_model_on_shifted_targets():
    """Streaming with memory, sparse Z and conditioning: f = c + g with g fitted to y - c."""
    X, y = data(30, seed=1)
    c = -1.7
    kw = dict(memory_size=4, inducing_update="fixed", num_inner_steps=2)
    with_mean = gaussian_model(X[:8], c, **kw)
    shifted = gaussian_model(X[:8], 0.0, **kw)
    for sl in (slice(0, 10), slice(10, 20), slice(20, 30)):
        with_mean.update(X[sl], y[sl])
        shifted.update(X[sl], y[sl] - c)
    Xs = torch.rand(9, 1, dtype=DT)
    m1, v1 = with_mean.predict_f(Xs)
    m0, v0 = shifted.predict_f(Xs)
    assert torch.allclose(m1, m0 + c, atol=1e-9) and torch.allclose(v1, v0, atol=1e-9)
    Xc, Yc = torch.rand(2, 1, dtype=DT), torch.tensor([[1.0, 2.0], [0.0, 5.0]], dtype=DT)
    cm1, cv1 = with_mean.condition(Xc, Yc).predict_f(Xs)
    cm0, cv0 = shifted.condition(Xc, Yc - c).predict_f(Xs)
    assert torch.allclose(cm1, cm0 + c, atol=1e-9) and torch.allclose(cv1, cv0, atol=1e-9)


def test_constant_mean_survives_copy_and_state_dict():
    X, y = data()
    model = gaussian_model(X, 2.5).update(X, y)
    assert model.copy().mean_constant == 2.5
    fresh = gaussian_model(X, 0.0)
    fresh.load_state_dict(model.state_dict())
    assert fresh.mean_constant == 2.5
    assert torch.allclose(fresh.predict_f(X)[0], model.predict_f(X)[0])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_constant_mean_must_be_finite(bad):
    with pytest.raises(ValueError, match="mean_constant must be a finite number"):
        gaussian_model(torch.rand(3, 1, dtype=DT), bad)


def test_hyperparameter_gradients_with_constant_mean_match_autograd_of_exact_lml():
    """Eq. 26 with a mean offset: its gradient in the kernel hyperparameters equals the exact
    log marginal likelihood's (Gaussian likelihood, converged sites, Z = X)."""
    X, y = data()
    c, s2 = 3.0, 0.05
    model = gaussian_model(X, c, s2).update(X, y)
    raw = model.kernel.raw_outputscale
    lml = model.log_marginal(include_prior=False)
    (g_model,) = torch.autograd.grad(lml, raw)
    K = model.kernel(X).to_dense() + s2 * torch.eye(len(X), dtype=DT)
    exact = torch.distributions.MultivariateNormal(torch.full_like(y, c), K).log_prob(y)
    (g_exact,) = torch.autograd.grad(exact, raw)
    assert torch.allclose(g_model, g_exact, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------- from_inducing_posterior
def _random_svgp(m: int = 6, seed: int = 0) -> SVGP:
    """A whitened GPyTorch SVGP with a ConstantMean (the layout of Maddox et al.'s model)."""
    g = torch.Generator(torch.get_default_device()).manual_seed(seed)
    Z = torch.rand(m, 2, generator=g, dtype=DT)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5, ard_num_dims=2))
    gp = SVGP(kernel, Z, mean="constant")
    var = gp.variational_strategy._variational_distribution
    with torch.no_grad():
        var.variational_mean.copy_(torch.randn(m, generator=g, dtype=DT))
        L = torch.tril(0.3 * torch.randn(m, m, generator=g, dtype=DT), -1)
        var.chol_variational_covar.copy_(L + torch.diag(0.2 + 0.6 * torch.rand(m, generator=g)))
        gp.mean_module.constant.fill_(-2.3)
        gp.variational_strategy.variational_params_initialized.fill_(1)  # keep this q(u)
        gp.kernel.outputscale = 1.7
        gp.kernel.base_kernel.lengthscale = torch.tensor([[0.3, 0.5]])
    gp.eval()
    return gp


def test_from_inducing_posterior_reproduces_the_gpytorch_svgp_predictive():
    gp = _random_svgp()
    Z, m_u, S_u = gp.inducing_posterior()
    dual = DualSVGP.from_inducing_posterior(gp.kernel, Bernoulli(), Z, m_u, S_u,
                                            mean_constant=float(gp.mean_module.constant.detach()),
                                            num_data=40)  # fmt: skip
    Xs = torch.rand(
        15, 2, dtype=DT, generator=torch.Generator(torch.get_default_device()).manual_seed(3)
    )
    with torch.no_grad(), gpytorch.settings.variational_cholesky_jitter(double_value=1e-14):
        ref = gp(Xs)
        ref_mean, ref_var = ref.mean, ref.variance
    mean, var = dual.predict_f(Xs)
    assert torch.allclose(mean, ref_mean, atol=1e-6)
    assert torch.allclose(var, ref_var, atol=1e-6)
    assert dual.num_data == 40 and dual.mean_constant == pytest.approx(-2.3)
    assert dual.inducing_update == "fixed" and torch.equal(dual.Z, Z)


def test_conditioning_a_converted_model_at_an_inducing_input_is_gaussian_conditioning():
    """A Gaussian site at x = Z[j] acts on u_j itself: conditioning the converted model equals
    conditioning its joint predictive N(mu, Sigma) on y = f(x) + noise (textbook formula)."""
    gp = _random_svgp(seed=1)
    Z, m_u, S_u = gp.inducing_posterior()
    s2 = 0.2
    dual = DualSVGP.from_inducing_posterior(gp.kernel, Gaussian(s2).to(DT), Z, m_u, S_u,
                                            mean_constant=-2.3)  # fmt: skip
    Xs = torch.cat([Z[2:3], torch.rand(6, 2, dtype=DT)])
    mu, Sigma = dual.predict_f(Xs, full_cov=True)
    y = torch.tensor([0.7], dtype=DT)
    gain = Sigma[:, 0] / (Sigma[0, 0] + s2)
    ref_mean = mu + gain * (y - mu[0])
    ref_var = Sigma.diagonal() - gain * Sigma[0]
    mean, var = dual.condition(Z[2:3], y).predict_f(Xs)
    assert torch.allclose(mean, ref_mean, atol=1e-8)
    assert torch.allclose(var, ref_var, atol=1e-8)


def test_fast_pool_conditioning_of_a_converted_model_matches_condition():
    """The rank-one acquisition path (bo.active_learning) sees the constant mean too."""
    gp = _random_svgp(seed=2)
    Z, m_u, S_u = gp.inducing_posterior()
    dual = DualSVGP.from_inducing_posterior(gp.kernel, Binomial(100).to(DT), Z, m_u, S_u,
                                            mean_constant=-2.3)  # fmt: skip
    pool = torch.rand(
        20, 2, dtype=DT, generator=torch.Generator(torch.get_default_device()).manual_seed(4)
    )
    Y = torch.tensor([[3.0, 40.0], [0.0, 12.0]], dtype=DT)
    mean, var = dual.pool_fantasies(pool).conditioned(torch.tensor([0, 1]), Y)
    for i in range(2):
        for j in range(2):
            ref_mean, ref_var = dual.condition(pool[i : i + 1], Y[i, j : j + 1]).predict_f(pool)
            assert torch.allclose(mean[i, j], ref_mean, atol=1e-8)
            assert torch.allclose(var[i, j], ref_var, atol=1e-8)


def test_update_after_conversion_matches_update_of_a_fitted_model():
    """Gaussian likelihood: converting the exact q(u) of a fitted DualSVGP and then updating
    with new data gives the model that saw all the data."""
    X, y = data(20, seed=5)
    Z = X[:10]
    full = gaussian_model(Z, 3.0, inducing_update="fixed").update(X[:10], y[:10])
    m_u, V_u = full.inducing_posterior()
    conv = DualSVGP.from_inducing_posterior(
        full.kernel, Gaussian(0.05).to(DT), Z, m_u[0], V_u[0], mean_constant=3.0,
        num_data=10, memory_size=None, rho=1.0, num_inner_steps=1, num_hyper_steps=0,
    )  # fmt: skip
    full.update(X[10:], y[10:])
    conv.update(X[10:], y[10:])
    Xs = torch.rand(5, 1, dtype=DT)
    for a, b in zip(full.predict_f(Xs), conv.predict_f(Xs), strict=True):
        assert torch.allclose(a, b, atol=1e-8)
    assert conv.num_data == 20


def test_from_inducing_posterior_rejects_bad_input():
    Z = torch.rand(4, 1, dtype=DT)
    k = matern()
    K = dense(k, Z)
    with pytest.raises(ValueError, match=r"mean must be \(4,\)"):
        DualSVGP.from_inducing_posterior(k, Bernoulli(), Z, torch.zeros(3, dtype=DT), K)
    with pytest.raises(ValueError, match="covariance"):
        DualSVGP.from_inducing_posterior(k, Bernoulli(), Z, torch.zeros(4, dtype=DT), K[:3, :3])
    with pytest.raises(ValueError, match="not positive definite"):
        DualSVGP.from_inducing_posterior(k, Bernoulli(), Z, torch.zeros(4, dtype=DT), -K)
    nan = torch.zeros(4, dtype=DT)
    nan[1] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        DualSVGP.from_inducing_posterior(k, Bernoulli(), Z, nan, K)
    with pytest.raises(ValueError, match="num_data"):
        DualSVGP.from_inducing_posterior(k, Bernoulli(), Z, torch.zeros(4, dtype=DT), K,
                                         num_data=-1)  # fmt: skip
