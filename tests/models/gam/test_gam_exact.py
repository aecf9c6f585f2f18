"""SparseGAM against dense computations and the exact additive GP.

* the KL and marginal formulas of Appendix C (and of the mean-field / full families) equal
  dense Gaussian computations built from the same variational parameters;
* Gaussian likelihood, inducing inputs = data for every component: the analytic optimum of the
  ``full`` (and ``coupled_precision``) family reproduces the exact additive-GP posterior and
  its ELBO equals the log marginal likelihood, with zero gradient;
* the ELBO ordering mean_field <= coupled_precision <= full <= log p(y) after optimisation.
"""

from __future__ import annotations

import math

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models.gam import SparseGAM
from bo_ncgp.models.gam.anova_kernel import ANOVAKernel

FAMILIES = ["mean_field", "coupled_precision", "full"]


# --------------------------------------------------------------------------- helpers
def make_components(Z1, Z2, Z12, ls=(0.3, 0.4, 0.5)):
    k1 = ScaleKernel(RBFKernel())
    k1.base_kernel.lengthscale = ls[0]
    k1.outputscale = 1.3
    k2 = ScaleKernel(ANOVAKernel())
    k2.base_kernel.lengthscale = ls[1]
    k2.outputscale = 0.7
    k12 = ScaleKernel(ANOVAKernel(active_dims=[0]) * ANOVAKernel(active_dims=[1]))
    k12.outputscale = 2.0
    for k in k12.base_kernel.kernels:
        k.lengthscale = ls[2]
    return [(k1, [0], Z1), (k2, [2], Z2), (k12, [0, 1], Z12)]


def randomize(model, scale=0.3):
    """Random variational parameters (a posterior unlike the prior)."""
    g = torch.Generator(torch.get_default_device()).manual_seed(1)
    with torch.no_grad():
        for p in model.variational.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def blockdiag(mats):
    return torch.block_diag(*mats)


def dense_q(model):
    """``(mu_U, Sigma_UU)`` of the model's q(U), rebuilt densely from its parameters."""
    q = model.variational
    Kuu = model._kuu()
    L = [torch.linalg.cholesky(K) for K in Kuu]
    Lb = blockdiag(L)
    if q.name == "mean_field":
        m = torch.cat(list(q.mean))
        R = blockdiag([torch.tril(r) for r in q.chol])
        S = R @ R.mT
        return (Lb @ m, Lb @ S @ Lb.mT) if q.whiten else (m, S)
    if q.name == "full":
        R = torch.tril(q.chol)
        S = R @ R.mT
        return (Lb @ q.mean, Lb @ S @ Lb.mT) if q.whiten else (q.mean, S)
    # coupled precision, Eq. 7
    m = torch.cat(list(q.mean))
    B = torch.cat(q.factors())
    eye = torch.eye(B.shape[0])
    if q.whiten:
        Sv = torch.linalg.solve(eye + B @ B.mT, eye)
        return Lb @ m, Lb @ Sv @ Lb.mT
    K = blockdiag(Kuu)
    return K @ m, torch.linalg.solve(torch.linalg.solve(K, eye) + B @ B.mT, eye)


def dense_kl(model):
    mu, S = dense_q(model)
    K = blockdiag(model._kuu())
    Kinv_S = torch.linalg.solve(K, S)
    return 0.5 * (
        Kinv_S.trace()
        + mu @ torch.linalg.solve(K, mu)
        - mu.numel()
        + torch.logdet(K)
        - torch.logdet(S)
    )


def dense_components(model, X):
    """Joint posterior of all components at X: mean (C n,), cov (C n, C n) (component-major)."""
    mu, S = dense_q(model)
    K = blockdiag(model._kuu())
    Phi = blockdiag([c.kux(X).mT for c in model.components])  # (C n, MC)
    Kff = blockdiag([c.kxx(X, diag=False) for c in model.components])
    A = torch.linalg.solve(K, Phi.mT).mT  # Phi K^{-1}
    mean = A @ mu
    cov = Kff - A @ Phi.mT + A @ S @ A.mT
    return mean, cov


def summing(C, n):
    return torch.cat([torch.eye(n)] * C, dim=1)  # (n, C n)


def exact_additive_posterior(components, noise, X, y, Xs):
    """Exact GP with kernel sum_c k_c: per-component posterior at Xs and log p(y)."""
    Ks = [c.kxx(X, diag=False) for c in components]
    Ky = sum(Ks) + noise * torch.eye(X.shape[0])
    Lk = torch.linalg.cholesky(Ky)
    alpha = torch.cholesky_solve(y.unsqueeze(-1), Lk)[:, 0]
    lml = -0.5 * y @ alpha - Lk.diagonal().log().sum() - 0.5 * X.shape[0] * math.log(2 * math.pi)
    cross = [c.kernel(c.select(Xs), c.select(X)).to_dense() for c in components]  # (ns, n)
    means = torch.cat([Kc @ alpha for Kc in cross])
    Kss = blockdiag([c.kxx(Xs, diag=False) for c in components])
    Kxs = torch.cat(cross, dim=0)  # (C ns, n)
    cov = Kss - Kxs @ torch.cholesky_solve(Kxs.mT, Lk)
    return means, cov, lml


# ---------------------------------------------------------------------- Appendix C
@pytest.mark.parametrize("posterior", FAMILIES)
@pytest.mark.parametrize("whiten", [True, False])
def test_kl_and_marginals_equal_dense(posterior, whiten):
    Z1 = torch.linspace(0, 1, 5)
    Z2 = torch.linspace(0.1, 0.9, 4)
    Z12 = torch.cartesian_prod(torch.linspace(0, 1, 3), torch.linspace(0, 1, 2))
    model = SparseGAM(make_components(Z1, Z2, Z12), Gaussian(0.1), posterior, whiten=whiten)
    randomize(model)
    X = torch.rand(7, 3)
    C, n = model.num_components, X.shape[0]

    assert torch.allclose(model.kl(), dense_kl(model), rtol=1e-8, atol=1e-8)

    mean, cov = dense_components(model, X)
    Ssum = summing(C, n)
    m_sum, v_sum = model.predict_f(X)
    assert torch.allclose(m_sum, Ssum @ mean, atol=1e-9)
    assert torch.allclose(v_sum, (Ssum @ cov @ Ssum.mT).diagonal(), atol=1e-9)
    _, c_full = model.predict_f(X, full_cov=True)
    assert torch.allclose(c_full, Ssum @ cov @ Ssum.mT, atol=1e-9)

    cm, cv = model.predict_components(X, joint=True)
    idx = torch.arange(C) * n  # component-major layout of the dense reference
    for i in range(n):
        block = cov[(idx + i)[:, None], (idx + i)[None, :]]
        assert torch.allclose(cv[i], block, atol=1e-9)
        assert torch.allclose(cm[i], mean[idx + i], atol=1e-9)
    _, cvar = model.predict_components(X)
    assert torch.allclose(cvar, cv.diagonal(dim1=-2, dim2=-1), atol=1e-12)


def test_coupled_precision_gradients_equal_dense_autograd():
    """Gradients of the Appendix C ELBO (structured) equal those of the dense ELBO."""
    Z = torch.linspace(0, 1, 4)
    Z12 = torch.cartesian_prod(torch.linspace(0, 1, 2), torch.linspace(0, 1, 2))
    model = SparseGAM(make_components(Z, Z, Z12), Gaussian(0.2), whiten=False)
    randomize(model, 0.5)
    X, y = torch.rand(6, 3), torch.randn(6)
    params = [*model.variational.parameters(), *model.components.parameters()]

    elbo = model.elbo(X, y)
    g_struct = torch.autograd.grad(elbo, params)

    mean, cov = dense_components(model, X)
    Ssum = summing(model.num_components, 6)
    m, v = Ssum @ mean, (Ssum @ cov @ Ssum.mT).diagonal()
    s2 = model.likelihood.noise
    ell = -0.5 * (torch.log(2 * math.pi * s2) + ((y - m) ** 2 + v) / s2)
    elbo_dense = ell.sum() - dense_kl(model)
    g_dense = torch.autograd.grad(elbo_dense, params)
    assert torch.allclose(elbo, elbo_dense, atol=1e-9)
    for a, b in zip(g_struct, g_dense, strict=True):
        assert torch.allclose(a, b, atol=1e-7, rtol=1e-6)


# --------------------------------------------------------------- exact GP limit
def _exact_setup(n=8):
    X = torch.rand(n, 3)
    y = torch.sin(6 * X[:, 0]) + (X[:, 2] - 0.5) ** 2 + X[:, 0] * X[:, 1] + 0.1 * torch.randn(n)
    comps = make_components(X[:, 0], X[:, 2], X[:, :2])
    return X, y, comps


def _set_optimum(model, X, y):
    """Analytic optimum of q(U) for a Gaussian likelihood when Z_c = X for every c."""
    comps = model.components
    C, n = len(comps), X.shape[0]
    noise = model.likelihood.noise.detach()
    means, cov, _ = exact_additive_posterior(comps, noise, X, y, X)  # posterior of U = F
    Kuu = model._kuu()
    Lb = blockdiag([torch.linalg.cholesky(K) for K in Kuu])
    q = model.variational
    with torch.no_grad():
        if q.name == "full":
            m_w = torch.linalg.solve_triangular(Lb, means[:, None], upper=False)[:, 0]
            Sw = torch.linalg.solve_triangular(Lb, cov, upper=False)
            Sw = torch.linalg.solve_triangular(Lb, Sw.mT, upper=False)
            q.mean.copy_(m_w)
            q.chol.copy_(torch.linalg.cholesky(0.5 * (Sw + Sw.mT)))
        elif q.name == "coupled_precision":  # Eq. 6: K^{-1} + K^{-1} 1 (I/s2) 1^T K^{-1}
            ones = torch.cat([torch.eye(n)] * C, dim=0) / noise.sqrt()  # (C n, n)
            m_w = torch.linalg.solve_triangular(Lb, means[:, None], upper=False)[:, 0]
            B_w = Lb.mT @ ones  # whitened B~ = L^T B with B = K^{-1} 1 / s
            for c in range(C):
                q.mean[c].copy_(m_w[c * n : (c + 1) * n])
            q.set_factors([B_w[c * n : (c + 1) * n] for c in range(C)])
        else:
            raise AssertionError("no closed form for the mean-field optimum")
    return means, cov


@pytest.mark.parametrize("posterior", ["full", "coupled_precision"])
def test_optimum_with_inducing_at_data_is_exact_additive_gp(posterior):
    X, y, comps = _exact_setup()
    model = SparseGAM(comps, Gaussian(0.05), posterior, jitter=0.0)
    _set_optimum(model, X, y)
    noise = model.likelihood.noise.detach()
    Xs = torch.rand(5, 3)
    means, cov, lml = exact_additive_posterior(model.components, noise, X, y, Xs)
    C, ns = model.num_components, Xs.shape[0]
    Ssum = summing(C, ns)

    m, c = model.predict_f(Xs, full_cov=True)
    assert torch.allclose(m, Ssum @ means, atol=1e-7)
    assert torch.allclose(c, Ssum @ cov @ Ssum.mT, atol=1e-7)
    cm, cv = model.predict_components(Xs, joint=True)
    idx = torch.arange(C) * ns
    for i in range(ns):
        assert torch.allclose(cm[i], means[idx + i], atol=1e-7)
        assert torch.allclose(cv[i], cov[(idx + i)[:, None], (idx + i)[None, :]], atol=1e-7)

    elbo = model.elbo(X, y)
    assert torch.allclose(elbo, lml, atol=1e-6)
    grads = torch.autograd.grad(elbo, list(model.variational.parameters()))
    assert max(float(g.abs().max()) for g in grads) < 1e-5  # a stationary point


def _optimise_variational(model, X, y, max_iter=400, restarts=3):
    model.initialize_variational(X, y)  # a good start; L-BFGS then polishes
    params = list(model.variational.parameters())
    opt = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-10,
        tolerance_change=1e-14,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure():
        opt.zero_grad()
        loss = -model.elbo(X, y)
        loss.backward()
        return loss

    for _ in range(restarts):
        opt.step(closure)
    return float(model.elbo(X, y).detach())


def test_elbo_ordering_at_optimum_inducing_at_data():
    X, y, _ = _exact_setup(n=8)
    values = {}
    for posterior in FAMILIES:
        comps = make_components(X[:, 0], X[:, 2], X[:, :2])
        model = SparseGAM(comps, Gaussian(0.05), posterior, jitter=0.0)
        values[posterior] = _optimise_variational(model, X, y)
    noise = torch.tensor(0.05)
    _, _, lml = exact_additive_posterior(model.components, noise, X, y, X[:1])
    lml = float(lml.detach())
    mf, cp, full = values["mean_field"], values["coupled_precision"], values["full"]
    assert mf <= cp + 1e-6 <= full + 2e-6 <= lml + 3e-6
    # with Z = X both coupled families contain the optimum (Eq. 6): the bound is tight
    assert abs(full - lml) < 1e-4 and abs(cp - lml) < 1e-4
    # the mean-field family cannot represent the posterior coupling of the components
    assert lml - mf > 1e-2


def test_elbo_ordering_sparse_bernoulli():
    """Non-conjugate, M < N: coupled <= full and mean_field <= full after optimisation."""
    X = torch.rand(30, 3)
    f = 3 * torch.sin(6 * X[:, 0]) + 4 * (X[:, 2] - 0.5)
    y = torch.bernoulli(torch.sigmoid(f))
    Z = torch.linspace(0, 1, 5)
    Z12 = torch.cartesian_prod(torch.linspace(0, 1, 3), torch.linspace(0, 1, 3))
    values = {}
    for posterior in FAMILIES:
        model = SparseGAM(make_components(Z, Z, Z12), Bernoulli(), posterior)
        # full and mean_field converge in < 30 evaluations; coupled_precision (a subset of full)
        # only creeps further towards full's value, so a short run keeps the test fast
        values[posterior] = _optimise_variational(model, X, y, max_iter=50, restarts=1)
    assert values["mean_field"] <= values["full"] + 1e-6
    assert values["coupled_precision"] <= values["full"] + 1e-6
    assert values["mean_field"] < values["full"]  # coupling matters with a shared predictor


@pytest.mark.parametrize("posterior", FAMILIES)
@pytest.mark.parametrize("whiten", [True, False])
def test_initialize_variational_is_the_optimum_for_gaussian(posterior, whiten):
    """One natural-gradient step from the prior is the family's optimum (sparse, M < N):
    the joint Titsias posterior for ``full``, its precision blocks for ``mean_field`` and, with
    rank R = MC, the exact optimum for ``coupled_precision`` too."""
    X = torch.rand(30, 3)
    y = torch.sin(6 * X[:, 0]) + X[:, 2] + 0.1 * torch.randn(30)
    Z = torch.linspace(0, 1, 5)
    Z12 = torch.cartesian_prod(torch.linspace(0, 1, 3), torch.linspace(0, 1, 2))
    kwargs = {"rank": 5 + 5 + 6} if posterior == "coupled_precision" else {}
    model = SparseGAM(
        make_components(Z, Z, Z12), Gaussian(0.05), posterior, whiten=whiten, **kwargs
    )
    model.initialize_variational(X, y, num_newton_steps=1)
    elbo = model.elbo(X, y)
    grads = torch.autograd.grad(elbo, list(model.variational.parameters()))
    assert max(float(g.abs().max()) for g in grads) < 1e-6 * X.shape[0]
    if posterior != "mean_field":  # the collapsed bound of Titsias (2009)
        Kuu = blockdiag(model._kuu())
        Kuf = torch.cat([c.kux(X) for c in model.components])
        Qff = Kuf.mT @ torch.linalg.solve(Kuu, Kuf)
        trace = sum(c.kxx(X) for c in model.components).sum() - Qff.trace()
        s2 = model.likelihood.noise.detach()
        dist = torch.distributions.MultivariateNormal(torch.zeros(30), Qff + s2 * torch.eye(30))
        titsias = dist.log_prob(y) - 0.5 * trace / s2
        assert torch.allclose(elbo, titsias, atol=1e-6)


def test_initialize_variational_improves_bernoulli_elbo():
    X = torch.rand(40, 3)
    y = torch.bernoulli(torch.sigmoid(4 * torch.sin(6 * X[:, 0])))
    Z = torch.linspace(0, 1, 5)
    Z12 = torch.cartesian_prod(torch.linspace(0, 1, 3), torch.linspace(0, 1, 2))
    for posterior in FAMILIES:
        model = SparseGAM(make_components(Z, Z, Z12), Bernoulli(), posterior)
        before = float(model.elbo(X, y).detach())
        model.initialize_variational(X, y)
        assert float(model.elbo(X, y).detach()) > before
