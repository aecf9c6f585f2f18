"""Tests of bo_ncgp.models.dual: the textbook limits of Chang et al. (2023) and the API
contract other layers rely on (shapes, batching, conditioning, checkpointing, bad input)."""

from __future__ import annotations

import math
import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import InputDataError, NumericalWarning, UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.dual import DualSVGP as DirectDualSVGP
from bo_ncgp.models.svgp import SVGP


# --------------------------------------------------------------------------- helpers
def rbf(lengthscale: float = 0.3, outputscale: float = 1.0) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k


def matern(lengthscale: float = 0.6, outputscale: float = 2.0, d: int | None = None):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5, ard_num_dims=d))
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k


def exact_posterior(kernel, noise, X, y, Xs):
    K = kernel(X).to_dense() + noise * torch.eye(X.shape[0])
    L = torch.linalg.cholesky(K)
    Ks = kernel(Xs, X).to_dense()
    mean = Ks @ torch.cholesky_solve(y[:, None], L)
    cov = kernel(Xs).to_dense() - Ks @ torch.cholesky_solve(Ks.T, L)
    return mean[:, 0], cov


def reg_data(n: int = 25):
    X = torch.linspace(0, 5, n)[:, None]
    y = torch.sin(2 * X[:, 0]) + 0.1 * torch.randn(n)
    return X, y


def bernoulli_data(n: int = 50):
    X = torch.linspace(0, 5, n)[:, None]
    y = torch.bernoulli(torch.sigmoid(2 * torch.sin(2 * X[:, 0])))
    return X, y


def poisson_data(n: int = 50):
    X = torch.linspace(0, 5, n)[:, None]
    y = torch.poisson(torch.exp(1 + torch.sin(2 * X[:, 0])))
    return X, y


def fixed_model(kernel, lik, Z, **kw) -> DualSVGP:
    cfg = dict(memory_size=None, rho=1.0, num_inner_steps=1, num_hyper_steps=0)
    cfg.update(kw)
    return DualSVGP(kernel, lik, Z, inducing_update="fixed", **cfg)


# ------------------------------------------------------------- textbook limits (CI)
def test_exact_gp_limit_gaussian():
    """Z = X, one update with rho = 1: Eq. 10 equals the exact GP posterior to 1e-6."""
    X, y = reg_data()
    k, lik = rbf(), Gaussian(0.05)
    model = fixed_model(k, lik, X).update(X, y)
    Xs = torch.linspace(-0.5, 5.5, 40)[:, None]
    mean, cov = model.predict_f(Xs, full_cov=True)
    em, ec = exact_posterior(k, 0.05, X, y, Xs)
    assert torch.allclose(mean, em, atol=1e-6)
    assert torch.allclose(cov, ec, atol=1e-6)
    _, var = model.predict_f(Xs)
    assert torch.allclose(var, ec.diagonal(), atol=1e-6)
    # any leading batch dimensions of X
    mb, vb = model.predict_f(Xs.reshape(2, 4, 5, 1))
    assert mb.shape == (2, 4, 5) and torch.allclose(mb.reshape(-1), em, atol=1e-6)
    assert torch.allclose(vb.reshape(-1), ec.diagonal(), atol=1e-6)


def test_objective_equals_exact_log_marginal_likelihood_and_gradient():
    X, y = reg_data()
    k, lik = rbf(), Gaussian(0.05)
    model = fixed_model(k, lik, X).update(X, y)
    obj = model.log_marginal(include_prior=False)
    K = k(X).to_dense() + lik.noise * torch.eye(X.shape[0])
    exact = torch.distributions.MultivariateNormal(torch.zeros(X.shape[0]), K).log_prob(y)
    assert abs(float(obj - exact)) < 1e-6
    params = list(model.parameters())
    assert len(params) == 3  # lengthscale, outputscale, noise
    g_obj = torch.autograd.grad(obj, params)
    g_ex = torch.autograd.grad(exact, params)
    for a, b in zip(g_obj, g_ex, strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6), (a, b)


def test_sequential_elbo_equals_exact_lml_at_exact_posterior():
    """Eq. 21 (rest empty, memory = all data) is tight at the exact posterior, and so is its
    gradient."""
    X, y = reg_data()
    k, lik = rbf(), Gaussian(0.05)
    model = fixed_model(k, lik, X).update(X, y)
    elbo = model.elbo()
    K = k(X).to_dense() + lik.noise * torch.eye(X.shape[0])
    exact = torch.distributions.MultivariateNormal(torch.zeros(X.shape[0]), K).log_prob(y)
    assert abs(float(elbo - exact)) < 1e-6
    params = list(model.parameters())
    for a, b in zip(
        torch.autograd.grad(elbo, params), torch.autograd.grad(exact, params), strict=True
    ):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _converged(kernel, lik, X, y, steps=80, rho=0.5):
    return fixed_model(kernel, lik, X, rho=rho, num_inner_steps=steps).update(X, y)


@pytest.mark.parametrize(
    "lik_factory, data", [(Bernoulli, bernoulli_data), (Poisson, poisson_data)]
)
def test_fixed_point_satisfies_stationarity_eqs_7_8(lik_factory, data):
    """Z = X: V^{-1} m = sum a_i beta_i y_hat_i (Eq. 7) and V^{-1} = sum a_i beta_i a_i^T + K^{-1}
    (Eq. 8) with the sites recomputed (Eq. 9) at the final posterior."""
    X, y = data()
    k, lik = matern(), lik_factory()
    model = _converged(k, lik, X, y)
    m_u, V_u = model.inducing_posterior()
    m_u, V_u = m_u[0].detach(), V_u[0].detach()
    with torch.no_grad():
        K = k(X).to_dense()
        L = torch.linalg.cholesky(K)
        A = torch.cholesky_solve(K, L)  # a_i = K^{-1} k_i as columns (the identity here)
        mean = A.T @ m_u
        var = k(X, diag=True) - (A * K).sum(0) + (A * (V_u @ A)).sum(0)
        _, alpha, beta = lik.expected(y, mean, var)
        y_hat = alpha / beta + mean
        # Eq. 8: V^{-1} = A diag(beta) A^T + K^{-1}  <=>  V (A diag(beta) A^T) + V K^{-1} = I
        VKinv = torch.cholesky_solve(V_u, L).T
        resid8 = V_u @ (A * beta) @ A.T + VKinv - torch.eye(X.shape[0])
        # Eq. 7: m = V A diag(beta) y_hat
        resid7 = V_u @ (A @ (beta * y_hat)) - m_u
    assert resid8.abs().max() < 1e-6
    assert resid7.abs().max() < 1e-6 * (1 + m_u.abs().max())


class _LogitBernoulli(gpytorch.likelihoods._OneDimensionalLikelihood):
    def forward(self, function_samples, **kwargs):
        return torch.distributions.Bernoulli(logits=function_samples)


class _LogPoisson(gpytorch.likelihoods._OneDimensionalLikelihood):
    def forward(self, function_samples, **kwargs):
        return torch.distributions.Poisson(torch.exp(function_samples))


@pytest.mark.parametrize(
    "ours, theirs, data",
    [(Bernoulli, _LogitBernoulli, bernoulli_data), (Poisson, _LogPoisson, poisson_data)],
)
def test_matches_gpytorch_variational_gp(ours, theirs, data):
    """The fixed point equals a GPyTorch SVGP (natural-gradient trained to convergence, same
    kernel, Z = X, hyperparameters fixed). Tolerance 1e-4: both use Gauss-Hermite
    quadrature (ours 32 nodes or closed form, GPyTorch 60 nodes) and GPyTorch adds Cholesky
    jitter to K_zz."""
    X, y = data(40)
    k = matern()
    model = _converged(k, ours(), X, y)
    vgp_kernel = matern()
    vgp_kernel.load_state_dict(k.state_dict())
    vgp = SVGP(vgp_kernel, X, variational="natural", learn_inducing_locations=False)
    vlik = theirs()
    vlik.quadrature = gpytorch.utils.quadrature.GaussHermiteQuadrature1D(num_locs=60)
    elbo = gpytorch.mlls.VariationalELBO(vlik, vgp, num_data=X.shape[0])
    ngd = gpytorch.optim.NGD(vgp.variational_parameters(), num_data=X.shape[0], lr=0.5)
    vgp.train()
    for _ in range(150):
        ngd.zero_grad()
        (-elbo(vgp(X), y)).backward()
        ngd.step()
    vgp.eval()
    Xs = torch.linspace(-0.3, 5.3, 30)[:, None]
    with torch.no_grad():
        post = vgp(Xs)
        mean, var = model.predict_f(Xs)
    assert torch.allclose(mean, post.mean, atol=1e-4)
    assert torch.allclose(var, post.variance, atol=1e-4)


def test_memory_with_all_data_equals_batch_posterior_and_objective():
    X, y = bernoulli_data(45)
    Z = X[::3]
    cfg = dict(rho=0.7, num_inner_steps=60)
    batch = fixed_model(matern(), Bernoulli(), Z, **cfg).update(X, y)
    stream = fixed_model(matern(), Bernoulli(), Z, **cfg)
    perm = torch.randperm(45)
    for idx in perm.split(15):
        stream.update(X[idx], y[idx])
    assert len(stream.memory) == 45 and stream.num_data == 45
    Xs = torch.linspace(0, 5, 17)[:, None]
    mb, vb = batch.predict_f(Xs)
    ms, vs = stream.predict_f(Xs)
    assert torch.allclose(mb, ms, atol=1e-6) and torch.allclose(vb, vs, atol=1e-6)
    assert abs(float(batch.log_marginal() - stream.log_marginal())) < 1e-6


def test_gaussian_streaming_without_memory_equals_batch():
    """Gaussian sites are exact, so folding them into B_rest loses nothing (fixed Z, theta)."""
    X, y = reg_data(30)
    Z = X[::2]
    batch = fixed_model(rbf(), Gaussian(0.1), Z).update(X, y)
    stream = fixed_model(rbf(), Gaussian(0.1), Z, memory_size=0)
    for idx in torch.arange(30).split(7):
        stream.update(X[idx], y[idx])
    assert len(stream.memory) == 0
    Xs = torch.rand(11, 1) * 5
    for a, b in zip(batch.predict_f(Xs, True), stream.predict_f(Xs, True), strict=True):
        assert torch.allclose(a, b, atol=1e-8)


def test_projection_onto_superset_leaves_predictions_unchanged():
    X, y = bernoulli_data(40)
    model = fixed_model(matern(), Bernoulli(), X[::4], memory_size=0, rho=0.8, num_inner_steps=5)
    model.update(X[:20], y[:20]).update(X[20:], y[20:])
    Xs = torch.linspace(-1, 6, 25)[:, None]
    before = model.predict_f(Xs, full_cov=True)
    Z_new = torch.cat([model.Z, torch.tensor([[0.33], [2.71], [4.9]])])[torch.randperm(13)]
    model.project(Z_new)
    assert model.num_inducing == 13
    after = model.predict_f(Xs, full_cov=True)
    for a, b in zip(before, after, strict=True):
        assert torch.allclose(a, b, atol=1e-8)
    # a genuine move (a subset) does change them: the check above can fail
    model.project(model.Z[::2])
    assert not torch.allclose(model.predict_f(Xs)[0], before[0], atol=1e-3)


def test_condition_equals_update_gaussian_and_leaves_self_untouched():
    """Conditioned inputs inside Z: conditioning equals ``update`` with Z and hyperparameters
    frozen (the sites enter Eq. 11 through k_zi exactly)."""
    X, y = reg_data(30)
    model = fixed_model(rbf(), Gaussian(0.1), torch.cat([X[:20:3], X[20:]]), memory_size=3)
    model.update(X[:20], y[:20])
    Xs = torch.rand(9, 1) * 5
    before = model.predict_f(Xs, full_cov=True)
    cond = model.condition(X[20:], y[20:])
    upd = model.copy().update(X[20:], y[20:])
    for a, b in zip(cond.predict_f(Xs, True), upd.predict_f(Xs, True), strict=True):
        assert torch.allclose(a, b, atol=1e-8)
    for a, b in zip(before, model.predict_f(Xs, True), strict=True):
        assert torch.equal(a, b)
    assert cond.num_data == 30 and model.num_data == 20
    # sequential conditioning on a Gaussian model equals conditioning on the union
    two = model.condition(X[20:25], y[20:25]).condition(X[25:], y[25:])
    for a, b in zip(two.predict_f(Xs, True), cond.predict_f(Xs, True), strict=True):
        assert torch.allclose(a, b, atol=1e-8)


def _exact_gp_data(n: int = 12):
    g = torch.Generator().manual_seed(4)
    X = torch.rand(n, 1, generator=g) * 5
    return X, torch.sin(2 * X[:, 0]) + 0.1 * torch.randn(n, generator=g)


@pytest.mark.parametrize("where", [[[2.61]], [[0.37], [4.2]]])
def test_condition_at_new_points_equals_the_exact_gp_update(where):
    """Z = X (the exact-GP limit), conditioned at points outside Z: the posterior equals the
    exact GP on X plus the new points (mean and covariance everywhere), and the variance
    removed at a new point is the exact update's ``v^2 / (v + s2)``."""
    X, y = _exact_gp_data()
    noise = 0.05
    model = fixed_model(rbf(0.7), Gaussian(noise), X).update(X, y)
    xn = torch.tensor(where)
    yn = torch.cos(xn[:, 0])
    cond = model.condition(xn, yn)
    Xs = torch.cat([torch.linspace(0, 5, 9)[:, None], xn])
    mean, cov = cond.predict_f(Xs, full_cov=True)
    m_ref, c_ref = exact_posterior(model.kernel, noise, torch.cat([X, xn]), torch.cat([y, yn]), Xs)
    torch.testing.assert_close(mean, m_ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(cov, c_ref, rtol=0, atol=1e-6)
    v0 = model.predict_f(xn[:1])[1]
    removed = 1 - cond.predict_f(xn[:1])[1] / v0
    if len(xn) == 1:
        torch.testing.assert_close(removed, v0 / (v0 + noise), rtol=0.05, atol=0)


def test_gaussian_fantasy_removes_the_variance_of_the_exact_update_of_q():
    """Z smaller than the data (a sparse posterior q with a Nystrom residual): a fantasy at a
    new point removes ``v / (v + s2)`` of the variance there, the exact Gaussian update of q
    with the same hyperparameters (within 5 %), and conditioning further is sequential
    Gaussian conditioning."""
    torch.manual_seed(0)
    X = torch.rand(60, 2)
    y = torch.sin(6 * X[:, 0]) + torch.cos(4 * X[:, 1])
    noise = 0.01
    model = fixed_model(rbf(0.25), Gaussian(noise), X[:20]).update(X, y)
    xn = torch.tensor([[0.93, 0.07], [0.5, 0.52]])
    mu, v0 = model.predict_f(xn)
    cond = model.condition(xn[:1], mu[:1])
    v1 = cond.predict_f(xn[:1])[1]
    torch.testing.assert_close(1 - v1 / v0[:1], v0[:1] / (v0[:1] + noise), rtol=0.05, atol=0)
    both = cond.condition(xn[1:], mu[1:])
    joint = model.condition(xn, mu)
    for a, b in zip(both.predict_f(X[:5], True), joint.predict_f(X[:5], True), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-8)


def test_gaussian_condition_gradients_in_the_fantasy_inputs_match_finite_differences():
    from bo_ncgp.models.dual import fixed_hyperparameters

    X, y = reg_data(20)
    model = fixed_model(rbf(), Gaussian(0.05), X[::4]).update(X, y)
    x = torch.tensor([[1.13], [3.71]], requires_grad=True)
    Xs = torch.rand(4, 1) * 5

    def post(x_):
        mean, var = model.condition(x_, torch.tensor([0.3, -0.2])).predict_f(Xs)
        return torch.cat([mean, var])

    torch.autograd.gradcheck(post, (x,))
    with fixed_hyperparameters():  # the adapter's context: the same gradients
        g_fixed = torch.autograd.grad(post(x).sum(), x)[0]
    torch.testing.assert_close(g_fixed, torch.autograd.grad(post(x).sum(), x)[0])
    assert g_fixed.abs().sum() > 0


def _bernoulli_model():
    X, y = bernoulli_data(40)
    model = DualSVGP(
        matern(), Bernoulli(), X[::4], memory_size=4, rho=0.8, num_inner_steps=8,
        num_hyper_steps=0,
    )  # fmt: skip
    return model.update(X[:20], y[:20]).update(X[20:], y[20:])


def test_batched_condition_equals_loop():
    model = _bernoulli_model()
    Xc = torch.rand(3, 2, 1) * 5  # (b2=3, n=2, d)
    Yc = torch.bernoulli(torch.full((4, 3, 2), 0.5))  # (b1=4, b2=3, n=2)
    cond = model.condition(Xc, Yc)
    assert cond.batch_shape == (4, 3)
    Xs = torch.rand(5, 1) * 5
    mean, cov = cond.predict_f(Xs, full_cov=True)
    assert mean.shape == (4, 3, 5) and cov.shape == (4, 3, 5, 5)
    for i in range(4):
        for j in range(3):
            m_ij, c_ij = model.condition(Xc[j], Yc[i, j]).predict_f(Xs, full_cov=True)
            assert torch.allclose(mean[i, j], m_ij, atol=1e-10)
            assert torch.allclose(cov[i, j], c_ij, atol=1e-10)
    # BoTorch-style broadcasting of test inputs against the model batch
    mb, vb = cond.predict_f(torch.rand(3, 7, 1))
    assert mb.shape == (4, 3, 7) and vb.shape == (4, 3, 7)
    # conditioning a conditioned model broadcasts and concatenates
    again = cond.condition(torch.rand(1, 1) * 5, torch.ones(4, 1, 1))
    assert again.batch_shape == (4, 3) and again.num_data == model.num_data + 3


def test_condition_many_single_point_fantasies_is_vectorised():
    """The hotspot pattern: candidates x fantasies, one point each (shapes only; the speed is
    measured by benchmarks/dual_svgp_timing.py)."""
    model = _bernoulli_model()
    Xc = torch.rand(50, 1, 1) * 5
    Yc = torch.bernoulli(torch.full((16, 50, 1), 0.5))
    cond = model.condition(Xc, Yc)
    mean, var = cond.predict_f(Xc)
    assert mean.shape == (16, 50, 1) and torch.isfinite(var).all() and (var >= 0).all()
    m_ref, v_ref = model.condition(Xc[7], Yc[3, 7]).predict_f(Xc[7])
    assert torch.allclose(mean[3, 7], m_ref) and torch.allclose(var[3, 7], v_ref)


def test_bls_equals_beta_times_predictive_variance():
    X, y = bernoulli_data(30)
    model = _converged(matern(), Bernoulli(), X, y, steps=20)
    h = model.bls(X, y)
    mean, var = model.predict_f(X)
    _, _, beta = Bernoulli().expected(y, mean, var)
    assert torch.allclose(h, beta * var, atol=1e-12)
    # Eq. 30 with Z = X (no Nystrom residual): h_i = beta_i a_i^T V a_i with a_i = e_i
    _, V_u = model.inducing_posterior()
    assert torch.allclose(h, beta * V_u[0].diagonal(), atol=1e-8)


# -------------------------------------------------------------------- behaviour
def test_predict_f_is_differentiable_in_inputs_and_hyperparameters():
    model = _bernoulli_model()
    Xs = (torch.rand(4, 1) * 5).requires_grad_(True)
    torch.autograd.gradcheck(lambda x: model.predict_f(x), (Xs,))
    mean, var = model.predict_f(Xs)
    grads = torch.autograd.grad((mean + var).sum(), list(model.kernel.parameters()))
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


def test_condition_is_differentiable_in_the_conditioned_inputs():
    model = _bernoulli_model()
    x = (torch.rand(2, 1) * 5).requires_grad_(True)
    y = torch.tensor([1.0, 0.0])
    Xs = torch.rand(3, 1) * 5
    torch.autograd.gradcheck(lambda x_: model.condition(x_, y).predict_f(Xs)[0], (x,))


def test_hyperparameter_steps_improve_objective_and_use_priors():
    X, y = reg_data(40)
    k = matern(lengthscale=3.0, outputscale=0.3)
    k.base_kernel.register_prior(
        "lengthscale_prior", gpytorch.priors.GammaPrior(3.0, 6.0), "lengthscale"
    )
    k.register_prior("outputscale_prior", gpytorch.priors.GammaPrior(2.0, 0.15), "outputscale")
    model = DualSVGP(
        k, Gaussian(0.3), X[::4], memory_size=5, num_inner_steps=1, num_hyper_steps=0,
    )  # fmt: skip
    model.update(X, y)
    before = float(model.log_marginal())
    prior = sum(p.log_prob(c(m)).sum() for _, m, p, c, _ in model.kernel.named_priors()) + 0.0
    assert (
        abs(float(model.log_marginal() - model.log_marginal(include_prior=False) - prior)) < 1e-10
    )
    model.num_hyper_steps, model.lr = 60, 0.05
    model.update(X[:5] + 0.01, y[:5])
    assert float(model.log_marginal()) > before
    for objective in ("dual", "elbo"):
        m2 = DualSVGP(matern(), Gaussian(0.3), X[::4], hyper_objective=objective, lr=0.05)
        m2.update(X, y)
        assert torch.isfinite(m2.predict_f(X)[1]).all()


def test_pivoted_cholesky_moves_inducing_points_from_old_and_new():
    X, y = bernoulli_data(60)
    model = DualSVGP(matern(), Bernoulli(), X[:6], memory_size=2, num_hyper_steps=0)
    seen = X[:6]
    for idx in torch.arange(60).split(20):
        model.update(X[idx], y[idx])
        assert model.num_inducing == 6
        pool = torch.cat([seen, X[idx]])
        assert all((pool == z).all(-1).any() for z in model.Z)
        seen = torch.cat([seen, X[idx]])
    assert model.Z.max() > 3.0  # the inducing points followed the stream
    assert len(model.memory) == 6 and model.num_data == 60


def test_memory_cap_and_random_selection():
    X, y = bernoulli_data(60)
    model = DualSVGP(
        matern(), Bernoulli(), X[:8], memory_size=5, memory_cap=7, memory_selection="random",
        num_hyper_steps=0, generator=torch.Generator(torch.get_default_device()).manual_seed(1),
    )  # fmt: skip
    Xs = torch.rand(5, 1) * 5
    for idx in torch.arange(60).split(10):
        total = model.predict_f(Xs)  # the split memory / folded factor is invisible ...
        model.update(X[idx], y[idx])
        assert len(model.memory) <= 7
    assert len(model.memory) == 7
    assert all((X == x).all(-1).any() for x in model.memory_inputs)
    assert model.memory_targets.shape == (7,)
    assert torch.isfinite(total[1]).all()


def test_state_dict_round_trip_and_copy():
    model = _bernoulli_model()
    fresh = DualSVGP(matern(), Bernoulli(), torch.rand(3, 1), memory_size=4)
    fresh.load_state_dict(model.state_dict())
    Xs = torch.rand(6, 1) * 5
    for a, b in zip(model.predict_f(Xs), fresh.predict_f(Xs), strict=True):
        assert torch.allclose(a, b, atol=1e-12)
    assert fresh.num_data == model.num_data and fresh.batch_shape == model.batch_shape
    assert torch.equal(fresh.memory_inputs, model.memory_inputs)
    Xs = torch.rand(6, 1) * 5
    before = model.predict_f(Xs)[0].detach()
    dup = model.copy()
    dup.num_hyper_steps = 3
    dup.update(torch.rand(5, 1) * 5, torch.ones(5))
    assert dup.num_data == model.num_data + 5
    assert torch.equal(model.predict_f(Xs)[0].detach(), before)  # the copy is independent
    assert not torch.allclose(dup.predict_f(Xs)[0], before)


def test_softmax_multi_latent_shapes_and_robustness():
    C = 3
    X = torch.rand(90, 2)
    y = (X[:, 0] * C).floor().clamp(max=C - 1)
    batched = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.RBFKernel(batch_shape=torch.Size([C])), batch_shape=torch.Size([C])
    )
    for kernel in (batched, rbf(0.4)):
        model = DualSVGP(
            kernel, Softmax(C, num_samples=128), X[:12], memory_size=5, rho=0.8,
            num_inner_steps=5, num_hyper_steps=3, lr=0.05,
        )  # fmt: skip
        for idx in torch.arange(90).split(30):
            model.update(X[idx], y[idx])
        mean, var = model.predict_f(X[:4])
        assert mean.shape == (4, C) and var.shape == (4, C)
        _, cov = model.predict_f(X[:4], full_cov=True)
        assert cov.shape == (C, 4, 4)
        assert torch.allclose(cov.diagonal(dim1=-2, dim2=-1).mT, var, atol=1e-10)
        p = model.predict_y(X)
        assert torch.allclose(p.sum(-1), torch.ones(90), atol=1e-6)
        assert (p.argmax(-1) == y).double().mean() > 0.8
        cond = model.condition(X[:2], torch.tensor([[0, 1], [2, 2]]))
        assert cond.predict_f(X[:5])[0].shape == (2, 5, C)
        assert model.bls(X[:3], y[:3]).shape == (3, C)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_binomial_hotspot_configuration_is_robust(dtype):
    """Binomial(100) with the hotspot kernel (Matern-3/2 ARD, Gamma priors) streams without
    NaN in float64 and float32."""
    X = torch.rand(120, 2, dtype=dtype)
    theta = torch.sigmoid(3 * torch.sin(5 * X[:, 0]) - 1)
    y = torch.distributions.Binomial(100, theta).sample()
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(
            nu=1.5, ard_num_dims=2, lengthscale_prior=gpytorch.priors.GammaPrior(3.0, 6.0)
        ),
        outputscale_prior=gpytorch.priors.GammaPrior(2.0, 0.15),
    ).to(dtype)
    model = DualSVGP(
        k, Binomial(100).to(dtype), X[:20], memory_size=5, rho=0.5, num_inner_steps=10,
        num_hyper_steps=10, lr=0.05,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)  # jitter in float32 is reported
        for idx in torch.arange(120).split(30):
            model.update(X[idx], y[idx])
        p = model.predict_y(X) / 100
    assert torch.isfinite(p).all()
    assert float(((p - theta) ** 2).mean()) < 0.01


def test_direct_import_and_lazy_export_are_the_same_class():
    assert DualSVGP is DirectDualSVGP


# -------------------------------------------------------------------- bad input
@pytest.fixture
def small_model():
    X, y = bernoulli_data(20)
    return DualSVGP(matern(), Bernoulli(), X[::4], num_hyper_steps=0).update(X, y)


def test_bad_inputs_raise_clear_errors(small_model):
    m = small_model
    X = torch.rand(5, 1)
    with pytest.raises(ValueError, match="shape mismatch"):
        m.update(X, torch.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        m.update(X, torch.tensor([1.0, 0.0, float("nan"), 1.0, 0.0]))
    with pytest.raises(ValueError, match="labels must be in"):
        m.update(X, torch.tensor([1.0, 0.0, 2.0, 1.0, 0.0]))
    with pytest.raises(InputDataError, match="X is empty"):
        m.update(torch.zeros(0, 1), torch.zeros(0))
    with pytest.raises(ValueError, match="input dimension"):
        m.predict_f(torch.rand(5, 2))
    with pytest.raises(ValueError, match="NaN or inf"):
        m.predict_f(torch.tensor([[float("nan")]]))
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        m.update(torch.rand(2, 5, 1), torch.ones(2, 5))
    with pytest.raises(ValueError, match="do not broadcast"):
        m.condition(torch.rand(3, 2, 1), torch.ones(4, 2))
    with pytest.raises(UnsupportedError, match="returned by condition"):
        m.condition(torch.rand(2, 1), torch.ones(3, 2)).update(X, torch.ones(5))
    assert not hasattr(m.condition(torch.rand(2, 1), torch.ones(2)), "log_marginal")
    with pytest.raises(ValueError, match="rho"):
        DualSVGP(matern(), Bernoulli(), X, rho=0.0)
    with pytest.raises(ValueError, match="num_latents"):
        DualSVGP(matern(), Softmax(3), X, num_latents=2)
    with pytest.raises(ValueError, match="counts"):
        DualSVGP(matern(), Poisson(), X, num_hyper_steps=0).update(X, -torch.ones(5))


def test_duplicate_inducing_points_are_dropped_with_warning():
    Z = torch.tensor([[0.0], [1.0], [1.0], [2.0]])
    with pytest.warns(UserWarning, match="duplicate"):
        model = DualSVGP(matern(), Bernoulli(), Z)
    assert model.num_inducing == 3
    with pytest.raises(ValueError, match="NaN"):
        DualSVGP(matern(), Bernoulli(), torch.tensor([[math.nan]]))
    with pytest.raises(ValueError, match="empty"):
        DualSVGP(matern(), Bernoulli(), torch.zeros(0, 1))


def test_conditioned_model_is_its_own_class_and_leaves_self_untouched():
    from bo_ncgp.models.dual import ConditionedDualSVGP

    model = _bernoulli_model()
    Xs = torch.rand(3, 1) * 5
    mean_before = model.predict_f(Xs)[0].detach()
    cond = model.condition(torch.rand(2, 1) * 5, torch.tensor([1.0, 0.0]))
    assert isinstance(cond, ConditionedDualSVGP) and not cond.supports_update
    assert cond.num_data == model.num_data + 2 and cond.kernel is model.kernel
    X, y = bernoulli_data(10)
    model.update(X, y)  # the conditioned model keeps the state it was conditioned on
    before = cond.predict_f(Xs)[0].detach()
    assert len(cond.memory) == 8 and len(model.memory) == 12
    assert torch.equal(cond.predict_f(Xs)[0].detach(), before)
    assert not torch.equal(model.predict_f(Xs)[0].detach(), mean_before)


def test_update_callback_sees_every_hyperparameter_step_and_can_stop():
    X, y = bernoulli_data(30)
    model = DualSVGP(
        matern(), Bernoulli(), X[::5], num_hyper_steps=4, num_rounds=2, hyper_optimizer="adam"
    )
    steps = []
    model.update(X, y, callback=lambda s: steps.append((s.step, dict(s.info), s.loss)))
    assert [s[0] for s in steps] == list(range(8))
    assert steps[5][1] == {"round": 1, "hyper_step": 1} and math.isfinite(steps[5][2])
    stopped = DualSVGP(
        matern(), Bernoulli(), X[::5], num_hyper_steps=4, num_rounds=2, hyper_optimizer="adam"
    )
    seen = []
    stopped.update(X, y, callback=lambda s: seen.append(s.step) or s.step == 2)
    assert seen == [0, 1, 2] and stopped.num_data == 30
    fixed = DualSVGP(matern(), Bernoulli(), X[::5], num_hyper_steps=0, num_rounds=3)
    rounds = []
    fixed.update(X, y, callback=lambda s: rounds.append((s.info["round"], s.loss)))
    assert rounds == [(0, None), (1, None), (2, None)]


def test_runaway_hyperparameter_steps_are_reported_not_propagated():
    X, y = poisson_data(30)
    y = y * 40  # large counts and a huge learning rate drive the outputscale to overflow
    model = DualSVGP(
        matern(), Poisson(), X[::3], memory_size=5, num_inner_steps=3, num_hyper_steps=30,
        lr=20.0, rho=0.5, hyper_optimizer="adam",
    )  # fmt: skip
    with pytest.warns(NumericalWarning):
        model.update(X, y)
    mean, var = model.predict_f(X)
    assert torch.isfinite(mean).all() and torch.isfinite(var).all()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_cached_factorisation_follows_hyperparameter_changes():
    """Under no_grad the factorisation is cached; setting a hyperparameter (GPyTorch setters
    write through .data) or an optimiser step must invalidate it."""
    model = _bernoulli_model()
    Xs = torch.rand(4, 1) * 5
    with torch.no_grad():
        first = model.predict_f(Xs)[1]
        assert torch.equal(model.predict_f(Xs)[1], first)
        model.kernel.base_kernel.lengthscale = 2.5
        changed = model.predict_f(Xs)[1]
    ref = model.copy()
    with torch.no_grad():
        assert torch.allclose(changed, ref.predict_f(Xs)[1], atol=1e-12)
        assert not torch.allclose(changed, first)
        model.kernel.raw_outputscale.add_(0.5)
        assert torch.allclose(model.predict_f(Xs)[1], model.copy().predict_f(Xs)[1], atol=1e-12)


def test_condition_accepts_relaxed_labels_inside_soft_targets():
    from bo_ncgp.likelihoods import soft_targets

    model = _bernoulli_model()
    X = torch.rand(4, 2, 1) * 5
    Y = torch.rand(3, 4, 2)  # probabilities as relaxed fantasy labels
    with pytest.raises(ValueError, match="labels must be in"):
        model.condition(X, Y)
    with soft_targets():
        cond = model.condition(X, Y)
    mean, var = cond.predict_f(torch.rand(5, 1) * 5)
    assert mean.shape == (3, 4, 5) and torch.isfinite(mean).all() and (var >= 0).all()


def test_unenforced_constraints_are_projected_after_adam_steps():
    """BoTorch's default kernels use GreaterThan(..., transform=None), meant for bounded
    L-BFGS; after an Adam step the raw values are clamped back into the constraint (a negative
    lengthscale would otherwise make the LogNormal prior raise)."""
    from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior

    from bo_ncgp.likelihoods import Gaussian

    X = torch.rand(20, 3)
    y = torch.sin(6 * X[:, 0])
    k = get_covar_module_with_dim_scaled_prior(3).double()
    model = DualSVGP(
        k, Gaussian(0.01), X[:10], memory_size=None, num_hyper_steps=5, hyper_optimizer="adam"
    )
    with torch.no_grad():
        k.raw_lengthscale.copy_(torch.tensor([[-0.5, 0.01, 0.7]]))
    model._project_unenforced_constraints()
    torch.testing.assert_close(k.lengthscale, torch.tensor([[0.025, 0.025, 0.7]]))
    calls = []
    orig = model._project_unenforced_constraints
    model._project_unenforced_constraints = lambda: (calls.append(1), orig())
    model.update(X, y)
    assert len(calls) == 5  # once per Adam step
    assert (k.lengthscale >= 0.025).all()


def test_fixed_hyperparameters_caches_the_base_factorisation_and_keeps_x_gradients(monkeypatch):
    import bo_ncgp.models.dual.model as mod
    from bo_ncgp.models.dual import fixed_hyperparameters

    torch.manual_seed(3)
    X = torch.rand(40, 2)
    y = (X.sum(-1) > 1.0).to(X)
    m = DualSVGP(
        gpytorch.kernels.RBFKernel(), Bernoulli(), X[:10], memory_size=None, num_hyper_steps=0
    ).update(X, y)
    cond = m.condition(X[:2], torch.tensor([1.0, 0.0]))
    calls = []
    real = mod.dual_factors
    monkeypatch.setattr(mod, "dual_factors", lambda *a: calls.append(1) or real(*a))
    for model in (m, cond):
        x = torch.rand(5, 2, requires_grad=True)
        mean, var = model.predict_f(x)  # hyperparameters require grad: nothing cached
        gx = torch.autograd.grad((mean + var).sum(), x)[0]
        n0 = len(calls)
        for _ in range(3):
            x2 = x.detach().clone().requires_grad_(True)
            with fixed_hyperparameters():
                mean2, var2 = model.predict_f(x2)
            gx2 = torch.autograd.grad((mean2 + var2).sum(), x2)[0]
            torch.testing.assert_close(mean2, mean.detach())
            torch.testing.assert_close(var2, var.detach())
            torch.testing.assert_close(gx2, gx)
        assert len(calls) - n0 <= 1  # three calls, at most one factorisation
    with fixed_hyperparameters():  # a fantasy input that requires grad keeps its gradient
        xf = X[:1].clone().requires_grad_(True)
        fant = m.condition(xf, torch.tensor([1.0]))
        v = fant.predict_f(torch.rand(4, 2))[1].sum()
    assert torch.autograd.grad(v, xf)[0].abs().sum() > 0


def test_a_no_op_to_keeps_the_cached_factors_and_a_conversion_drops_them(monkeypatch):
    """BoTorch's analytic acquisitions call ``self.to(X)`` on every evaluation: with nothing
    to move, the base factorisation and the conditioned block stay cached."""
    import bo_ncgp.models.dual.conditioned as cmod
    import bo_ncgp.models.dual.model as mod
    from bo_ncgp.models.dual import fixed_hyperparameters

    m = _bernoulli_model()
    cond = m.condition(torch.rand(3, 1, 1) * 5, torch.ones(3, 1))
    calls = []
    real_factors, real_block = mod.dual_factors, cmod.site_block
    monkeypatch.setattr(mod, "dual_factors", lambda *a: calls.append("f") or real_factors(*a))
    monkeypatch.setattr(cmod, "site_block", lambda *a: calls.append("b") or real_block(*a))
    Xs = torch.rand(4, 1) * 5
    with fixed_hyperparameters():
        first = cond.predict_f(Xs)[0]
        n0 = len(calls)
        for _ in range(3):
            cond.to(Xs)  # same dtype and device: nothing moves
            torch.testing.assert_close(cond.predict_f(Xs)[0], first, rtol=0, atol=0)
        assert len(calls) == n0
        cond.float()
        again = cond.predict_f(Xs.float())[0]
    assert calls[n0:] == ["f", "b"] and again.dtype == torch.float32
    torch.testing.assert_close(again, first.float(), rtol=1e-4, atol=1e-4)


def test_max_inducing_lets_z_grow_from_a_small_initial_design():
    torch.manual_seed(0)
    X = torch.rand(40, 2)
    y = torch.sin(6 * X[:, 0]) + torch.cos(5 * X[:, 1])
    kw = dict(memory_size=None, num_hyper_steps=0)
    fixed = DualSVGP(gpytorch.kernels.RBFKernel(), Gaussian(1e-3), X[:6], **kw)
    grow = DualSVGP(gpytorch.kernels.RBFKernel(), Gaussian(1e-3), X[:6], max_inducing=25, **kw)
    for lo in range(0, 40, 8):
        fixed.update(X[lo : lo + 8], y[lo : lo + 8])
        grow.update(X[lo : lo + 8], y[lo : lo + 8])
    assert fixed.num_inducing == 6 and grow.num_inducing == 25
    assert grow.copy().max_inducing == 25
    Xt = torch.rand(300, 2)
    yt = torch.sin(6 * Xt[:, 0]) + torch.cos(5 * Xt[:, 1])
    err = [(m.predict_f(Xt)[0] - yt).pow(2).mean().sqrt() for m in (fixed, grow)]
    assert err[1] < 0.5 * err[0]
    with pytest.raises(ValueError, match="max_inducing"):
        DualSVGP(gpytorch.kernels.RBFKernel(), Gaussian(1e-3), X[:6], max_inducing=0)
