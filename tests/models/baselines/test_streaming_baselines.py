"""Tests of bo_ncgp.models.baselines: the Bui et al. (2017) streaming sparse GP (Eq. 5 of
Chang et al. 2023) and the offline GPyTorch SVGP baseline.

Textbook limits: the first streaming step is the batch SVGP ELBO (Eq. 3, checked against
GPyTorch's SVGP); the two extra KL terms equal ``torch.distributions`` KL divergences; with a
Gaussian likelihood and fixed hyperparameters the streamed posterior equals the batch
(Titsias) posterior with the same inducing inputs, the exact GP posterior when they hold every
input, and the optimal objectives add up to the exact log marginal likelihood.
"""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from bo_ncgp.exceptions import NumericalWarning
from bo_ncgp.likelihoods import Bernoulli, Gaussian, Softmax
from bo_ncgp.linalg import whitened_kl
from bo_ncgp.models.baselines import BuiStreamingSVGP, OfflineSVGP, old_posterior
from bo_ncgp.models.baselines.objective import (
    old_terms,
    predictive_marginals,
    streaming_elbo,
)


def rbf(lengthscale: float = 0.7, outputscale: float = 1.0) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k


def reg_data(n: int = 12):
    X = torch.linspace(0, 5, n)[:, None]
    return X, torch.sin(2 * X[:, 0]) + 0.1 * torch.randn(n)


def exact_gp(kernel, noise, X, y, Xs):
    K = kernel(X).to_dense() + noise * torch.eye(X.shape[0])
    Ks = kernel(Xs, X).to_dense()
    mean = Ks @ torch.linalg.solve(K, y)
    var = kernel(Xs, diag=True) - (Ks * torch.linalg.solve(K, Ks.T).T).sum(-1)
    lml = MultivariateNormal(torch.zeros(X.shape[0]), K).log_prob(y)
    return mean, var, lml


def random_q(L: int, m: int, scale: float = 0.3):
    mu = torch.randn(L, m)
    Lq = torch.tril(scale * torch.randn(L, m, m), -1) + torch.diag_embed(0.5 + torch.rand(L, m))
    return mu, Lq


def gaussian_model(kernel, noise, Z, **kw):
    kw = {
        "num_steps": 100,
        "learn_hyperparameters": False,
        "inducing_update": "fixed",
        "optimizer": "lbfgs",
        "jitter": 0.0,
        **kw,
    }
    return BuiStreamingSVGP(kernel, Gaussian(noise), Z, **kw)


# ------------------------------------------------------------------ objective
def test_first_batch_objective_is_the_batch_svgp_elbo():
    """Eq. 5 without an old posterior is Eq. 3, checked term by term (un-whitened form)."""
    X, y = reg_data(10)
    Z = torch.rand(4, 1) * 5
    k, noise = rbf(), 0.2
    mu, Lq = random_q(1, 4)
    with torch.no_grad():
        Kzz = k(Z).to_dense()
        L_b = torch.linalg.cholesky(Kzz)
        val = streaming_elbo(
            Gaussian(noise), y, L_b[None], k(Z, X).to_dense()[None], k(X, diag=True)[None],
            mu, Lq,
        )  # fmt: skip
        m_u, S_u = L_b @ mu[0], L_b @ Lq[0] @ Lq[0].T @ L_b.T
        A = torch.linalg.solve(Kzz, k(Z, X).to_dense()).T  # a_i^T rows
        mean = A @ m_u
        var = k(X, diag=True) - (A * k(X, Z).to_dense()).sum(-1) + ((A @ S_u) * A).sum(-1)
        elp = -0.5 * (math.log(2 * math.pi * noise) + ((y - mean) ** 2 + var) / noise)
        kl = kl_divergence(MultivariateNormal(m_u, S_u), MultivariateNormal(torch.zeros(4), Kzz))
    assert torch.allclose(val, elp.sum() - kl, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("latents", [1, 3])
def test_extra_kl_terms_equal_torch_kl_divergences(latents):
    """``KL[q(a)||p_old(a)] - KL[q(a)||q_old(a)]`` with new hyperparameters, new inducing
    inputs and a shared kernel across latents."""
    k_old, k_new = rbf(0.9, 1.3), rbf(0.6, 0.8)
    Za, Zb = torch.rand(4, 1) * 5, torch.rand(5, 1) * 5
    mu_o, Lq_o = random_q(latents, 4)
    mu, Lq = random_q(latents, 5)
    with torch.no_grad():
        Ka_old = k_old(Za).to_dense()
        La = torch.linalg.cholesky(Ka_old)
        old = old_posterior(Za, La[None], mu_o, Lq_o)
        Kbb, Kab, Kaa = k_new(Zb).to_dense(), k_new(Za, Zb).to_dense(), k_new(Za).to_dense()
        Lb = torch.linalg.cholesky(Kbb)
        val = old_terms(old, Lb[None], Kab[None], Kaa[None], mu, Lq)
        expected = 0.0
        for c in range(latents):
            # q(a) = ∫ p(a|b) q(b) db under the new hyperparameters, u-space
            Ab = Kab @ torch.linalg.inv(Kbb)
            m_b, S_b = Lb @ mu[c], Lb @ Lq[c] @ Lq[c].T @ Lb.T
            qa = MultivariateNormal(Ab @ m_b, Kaa - Ab @ Kab.T + Ab @ S_b @ Ab.T)
            p_old = MultivariateNormal(torch.zeros(4), Ka_old)
            q_old = MultivariateNormal(La @ mu_o[c], La @ Lq_o[c] @ Lq_o[c].T @ La.T)
            expected = expected + kl_divergence(qa, p_old) - kl_divergence(qa, q_old)
    assert torch.allclose(val, expected, rtol=1e-8, atol=1e-8)


def test_objective_gradients_match_finite_differences():
    k = rbf()
    Za, Zb = torch.rand(3, 1) * 5, torch.rand(4, 1) * 5
    X, y = reg_data(6)
    with torch.no_grad():
        La = torch.linalg.cholesky(k(Za).to_dense())[None]
        old = old_posterior(Za, La, *random_q(1, 3))
        Lb = torch.linalg.cholesky(k(Zb).to_dense())[None]
        Kbx, kxx = k(Zb, X).to_dense()[None], k(X, diag=True)[None]
        Kab, Kaa = k(Za, Zb).to_dense()[None], k(Za).to_dense()[None]
    mu, Lq = random_q(1, 4)
    lik = Bernoulli()
    yb = (y > 0).double()

    def f(mu, Lq):
        return streaming_elbo(lik, yb, Lb, Kbx, kxx, mu, torch.tril(Lq), old, Kab, Kaa)

    assert torch.autograd.gradcheck(f, (mu.requires_grad_(), Lq.requires_grad_()))


def test_first_streaming_step_equals_gpytorch_svgp_elbo():
    """Cross-implementation check of Eq. 3 with a Bernoulli likelihood: the Bui model's first
    objective equals the GPyTorch SVGP (OfflineSVGP) ELBO at the same whitened q(u)."""
    X = torch.rand(30, 2)
    y = (X[:, 0] > 0.5).double()
    Z = X[:6].clone()
    bui = BuiStreamingSVGP(rbf(0.4), Bernoulli(), Z, inducing_update="fixed", jitter=0.0)
    mu, Lq = random_q(1, 6)
    bui._mu, bui._L = mu, Lq
    off = OfflineSVGP(rbf(0.4), Bernoulli(), Z, learn_inducing=False, jitter=1e-12,
                      backend="gpytorch")  # fmt: skip
    strategy = off.gp.variational_strategy
    strategy.variational_params_initialized.fill_(1)  # keep our q(u), no prior initialisation
    dist = strategy._variational_distribution
    with torch.no_grad():
        dist.variational_mean.copy_(mu[0])
        dist.chol_variational_covar.copy_(Lq[0])
        ours = bui.objective(X, y)
        theirs = off.train().elbo(X, y)
    assert torch.allclose(ours, theirs, rtol=1e-7)


def test_native_offline_elbo_equals_gpytorch_for_softmax():
    """The native offline SVGP backend computes GPyTorch's multitask ELBO (3 latents, one
    shared kernel) at the same q(u), and the same predictive marginals."""
    X = torch.rand(25, 2)
    y = (3 * X[:, 0]).floor().clamp(max=2)
    Z = X[:5].clone()
    mu, Lq = random_q(3, 5)
    lik = Softmax(3, num_samples=64)
    gp = OfflineSVGP(rbf(0.5), lik, Z, learn_inducing=False, jitter=1e-12, backend="gpytorch")
    strategy = gp.gp.variational_strategy.base_variational_strategy
    strategy.variational_params_initialized.fill_(1)
    nat = OfflineSVGP(rbf(0.5), lik, Z, learn_inducing=False, jitter=0.0)
    with torch.no_grad():
        strategy._variational_distribution.variational_mean.copy_(mu)
        strategy._variational_distribution.chol_variational_covar.copy_(Lq)
        nat.gp.mu.copy_(mu)
        nat.gp.L_raw.copy_(Lq)
        assert torch.allclose(nat.elbo(X, y, 100), gp.train().elbo(X, y, 100), rtol=1e-7)
        (m1, v1), (m2, v2) = nat.predict_f(X), gp.predict_f(X)
    assert m1.shape == (25, 3) and torch.allclose(m1, m2, atol=1e-7)
    assert torch.allclose(v1, v2, atol=1e-7)


# --------------------------------------------------------- textbook limits
def test_gaussian_stream_with_all_inputs_as_inducing_points_is_exact():
    """Z = every input, fixed hyperparameters: after each batch the posterior is the exact GP
    posterior of the data so far, and the optimal objectives sum to log p(y)."""
    X, y = reg_data(12)
    k, noise = rbf(), 0.1
    model = gaussian_model(k, noise, X)
    total = 0.0
    for idx in torch.arange(12).tensor_split(3):
        seen = torch.cat([torch.arange(int(idx[0])), idx])
        model.update(X[idx], y[idx])
        total += model.last_objective
        with torch.no_grad():
            mean, var = model.predict_f(X)
            e_mean, e_var, lml = exact_gp(k, noise, X[seen], y[seen], X)
        assert torch.allclose(mean, e_mean, atol=1e-6)
        assert torch.allclose(var, e_var, atol=1e-6)
    assert total == pytest.approx(float(lml), abs=1e-6)


def test_gaussian_stream_equals_batch_titsias_posterior_with_the_same_Z():
    """Fixed Z with m < n: the Bui et al. recursion reproduces the collapsed batch optimum
    q(u) = N(K (K + s^-2 K_uf K_fu)^-1 K_uf y / s^2, K (K + s^-2 K_uf K_fu)^-1 K)."""
    X, y = reg_data(20)
    Z = torch.linspace(0.2, 4.8, 6)[:, None]
    k, noise = rbf(0.8), 0.05
    model = gaussian_model(k, noise, Z)
    for idx in torch.randperm(20).tensor_split(4):
        model.update(X[idx], y[idx])
    with torch.no_grad():
        Kuu, Kuf = k(Z).to_dense(), k(Z, X).to_dense()
        Sig = Kuu + Kuf @ Kuf.T / noise
        m_exp = Kuu @ torch.linalg.solve(Sig, Kuf @ y) / noise
        S_exp = Kuu @ torch.linalg.solve(Sig, Kuu)
        m_u, S_u = model.inducing_posterior()
    assert torch.allclose(m_u[0], m_exp, atol=1e-6)
    assert torch.allclose(S_u[0], S_exp, atol=1e-6)


# ----------------------------------------------------------- behaviour / API
@pytest.mark.parametrize("lik", [Bernoulli(), Softmax(3, num_samples=64)])
def test_non_gaussian_streaming_runs_learns_and_moves_inducing_points(lik):
    X = torch.rand(60, 2)
    y = (X[:, 0] > 0.5).double() if lik.num_latents == 1 else (3 * X[:, 0]).floor().clamp(max=2)
    k = rbf(1.0)
    model = BuiStreamingSVGP(k, lik, X[:5], num_steps=30, lr=0.05, learn_inducing=True)
    model.max_inducing = 10
    ls0 = float(k.base_kernel.lengthscale.detach())
    for idx in torch.arange(60).tensor_split(3):
        model.update(X[idx], y[idx])
    assert model.num_data == 60 and model.num_inducing == 10
    assert float(k.base_kernel.lengthscale.detach()) != ls0
    with torch.no_grad():
        p = model.predict_y(X)
    C = lik.num_latents
    if C == 1:
        acc = ((p > 0.5).double() == y).double().mean()
        assert p.shape == (60,)
    else:
        acc = (p.argmax(-1).double() == y).double().mean()
        assert p.shape == (60, 3) and torch.allclose(p.sum(-1), torch.ones(60))
    assert acc > 0.8
    assert math.isfinite(model.last_objective)


def test_steps_increase_the_objective_and_state_round_trips():
    X = torch.rand(40, 2)
    y = (X.sum(-1) > 1).double()
    model = BuiStreamingSVGP(rbf(), Bernoulli(), X[:6], num_steps=0)
    model.update(X[:20], y[:20])
    with torch.no_grad():
        before = float(model.objective(X[20:], y[20:], old=None))
    trained = BuiStreamingSVGP(rbf(), Bernoulli(), X[:6], num_steps=100, lr=0.05)
    trained.update(X[20:], y[20:])
    with torch.no_grad():
        after = float(trained.objective(X[20:], y[20:], old=None))
    assert after > before
    fresh = BuiStreamingSVGP(rbf(), Bernoulli(), X[:3])
    fresh.load_state_dict(trained.state_dict())
    with torch.no_grad():
        a, b = fresh.predict_f(X), trained.predict_f(X)
    assert fresh.num_inducing == trained.num_inducing and torch.allclose(a[0], b[0])


def test_bad_inputs_raise_clear_errors():
    X = torch.rand(10, 2)
    model = BuiStreamingSVGP(rbf(), Bernoulli(), X[:3])
    with pytest.raises(ValueError, match="shape"):
        model.update(torch.rand(5, 3), torch.ones(5))
    with pytest.raises(ValueError, match="y must have shape"):
        model.update(X, torch.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        model.update(torch.full((2, 2), float("nan")), torch.ones(2))
    with pytest.raises(ValueError, match="labels"):
        model.update(X, torch.full((10,), 2.0))
    with pytest.raises(ValueError, match="batch_shape"):
        BuiStreamingSVGP(gpytorch.kernels.RBFKernel(batch_shape=torch.Size([2])), Bernoulli(), X)
    with pytest.raises(ValueError, match="optimizer"):
        BuiStreamingSVGP(rbf(), Bernoulli(), X, optimizer="sgd")
    with pytest.raises(ValueError, match="likelihood"):
        OfflineSVGP(rbf(), gpytorch.likelihoods.BernoulliLikelihood(), X)
    with pytest.raises(ValueError, match="backend"):
        OfflineSVGP(rbf(), Bernoulli(), X, backend="keops")


class _FailsAfter(Gaussian):
    """A Gaussian likelihood whose expectations turn NaN after ``k`` calls (an overflow)."""

    def __init__(self, k: int) -> None:
        super().__init__(0.1)
        self.calls, self.k = 0, k

    def expected_log_prob(self, y, mean, var, num_points=None):
        self.calls += 1
        out = super().expected_log_prob(y, mean, var, num_points)
        return out if self.calls <= self.k else out * float("nan")


def test_runaway_steps_are_reported_and_reverted():
    X = torch.rand(20, 1)
    y = torch.sin(6 * X[:, 0])
    model = BuiStreamingSVGP(rbf(), _FailsAfter(5), X[:4], num_steps=50, lr=0.05)
    with pytest.warns(NumericalWarning, match="non-finite"):
        model.update(X, y)
    with torch.no_grad():
        mean, var = model.predict_f(X)
    assert torch.isfinite(mean).all() and torch.isfinite(var).all()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert math.isfinite(model.last_objective) and model.num_data == 20


def test_offline_svgp_fits_and_predicts():
    X = torch.rand(80, 2)
    y = (X[:, 0] > 0.5).double()
    off = OfflineSVGP(rbf(0.5), Bernoulli(), X[:8])
    off.fit(
        X,
        y,
        num_steps=150,
        batch_size=40,
        lr=0.05,
        generator=torch.Generator(torch.get_default_device()).manual_seed(0),
    )
    assert off.losses[-1] < off.losses[0]
    p = off.predict_y(X)
    assert p.shape == (80,) and ((p > 0.5).double() == y).double().mean() > 0.85
    assert not torch.equal(off.Z, X[:8])  # inducing inputs were learned


def test_whitened_kl_and_marginals_small_cases():
    eye = torch.eye(2).expand(1, 2, 2)
    assert float(whitened_kl(torch.ones(1, 2), eye).sum()) == pytest.approx(1.0)
    mean, var = predictive_marginals(eye, eye, torch.ones(1, 2), torch.ones(1, 2), 0.5 * eye)
    assert torch.allclose(mean, torch.ones(1, 2)) and torch.allclose(var, torch.full((1, 2), 0.25))
