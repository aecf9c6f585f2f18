"""Unit tests of the dual-SVGP building blocks in bo_ncgp/models/dual/."""

from __future__ import annotations

import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import NumericalWarning
from bo_ncgp.likelihoods import Bernoulli, Gaussian, Softmax
from bo_ncgp.models.dual.inducing import (
    project_dual_pair,
    repair_psd,
    select_inducing_points,
)
from bo_ncgp.models.dual.objective import dual_objective, sequential_elbo
from bo_ncgp.models.dual.posterior import dual_factors, dual_predict, site_block
from bo_ncgp.models.dual.sites import damp, expected_terms, site_contributions, site_targets


def _kernel():
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    k.base_kernel.lengthscale = 0.5
    return k


def _setup(m=6, n=9):
    k = _kernel()
    Z = torch.linspace(0, 3, m)[:, None]
    X = torch.rand(n, 1) * 3
    Kzz = k(Z).to_dense().unsqueeze(0)
    Kzx = k(Z, X).to_dense().unsqueeze(0)
    eta, beta = torch.randn(1, n), torch.rand(1, n) + 0.1
    lam, B = site_contributions(Kzx, eta, beta)
    return k, Z, X, Kzz, Kzx, lam, B


def test_site_contributions_are_eq_11():
    _, _, _, _, Kzx, lam, B = _setup()
    eta, beta = torch.randn(1, 9), torch.rand(1, 9)
    lam, B = site_contributions(Kzx, eta, beta)
    K = Kzx[0]
    assert torch.allclose(lam[0], sum(K[:, i] * eta[0, i] for i in range(9)))
    assert torch.allclose(B[0], sum(beta[0, i] * torch.outer(K[:, i], K[:, i]) for i in range(9)))


def test_dual_predict_matches_eq_10_written_out():
    k, Z, _, Kzz, _, lam, B = _setup()
    Xs = torch.rand(5, 1) * 3
    f = dual_factors(Kzz, B, lam)
    mean, cov = dual_predict(f, k(Z, Xs).to_dense().unsqueeze(0), k(Xs).to_dense()[None], True)
    Ksz = k(Xs, Z).to_dense()
    A = Kzz[0] + B[0]
    m_ref = Ksz @ torch.linalg.solve(A, lam[0])
    c_ref = (
        k(Xs).to_dense()
        - Ksz @ torch.linalg.solve(Kzz[0], Ksz.T)
        + Ksz @ torch.linalg.solve(A, Ksz.T)
    )
    assert torch.allclose(mean[0], m_ref, atol=1e-10)
    assert torch.allclose(cov[0], c_ref, atol=1e-10)


def _sigma(k, Z, Kzz, B, A_rows, A_cols):
    """Eq. 10 covariance written out: k - K_az K_zz^-1 K_zb + K_az (K_zz + B)^-1 K_zb."""
    Kaz, Kzb = k(A_rows, Z).to_dense(), k(Z, A_cols).to_dense()
    return (
        k(A_rows, A_cols).to_dense()
        - Kaz @ torch.linalg.solve(Kzz[0], Kzb)
        + Kaz @ torch.linalg.solve(Kzz[0] + B[0], Kzb)
    )


def test_site_block_is_gaussian_conditioning_of_the_eq_10_process():
    """Sites (eta, beta) at X_c, batched over sites and inputs: the conditioned mean and
    covariance are mu + S_xc (I + B S_cc)^-1 (eta - B mu_c) and S - S_xc (I + B S_cc)^-1 B S_cx
    with S the Eq. 10 covariance (Nystrom residual included), written out with dense solves;
    one site has beta = 0 and eta != 0 (a pure mean shift)."""
    k, Z, _, Kzz, _, lam, B = _setup()
    f = dual_factors(Kzz, B, lam)
    Xc = torch.rand(3, 2, 1) * 3  # (bx=3, n=2)
    eta_c = torch.randn(4, 3, 1, 2)  # (b=4, 3, L=1, n=2)
    beta_c = torch.rand(4, 3, 1, 2) * 5
    beta_c[0, 0, 0, 1] = 0.0
    Kzc = k(Z, Xc).to_dense().unsqueeze(-3)  # (3, 1, m, 2)
    block = site_block(f, Kzc, k(Xc).to_dense().unsqueeze(-3), eta_c, beta_c)
    Xs = torch.rand(5, 1) * 3
    Kzs, kss = k(Z, Xs).to_dense()[None], k(Xs).to_dense()[None]
    Kcs = k(Xc, Xs.expand(3, 5, 1)).to_dense().unsqueeze(-3)
    mean, cov = dual_predict(f, Kzs, kss, True, block=block, Kcx=Kcs)
    _, var = dual_predict(f, Kzs, kss.diagonal(0, -2, -1), block=block, Kcx=Kcs)
    assert mean.shape == (4, 3, 1, 5) and cov.shape == (4, 3, 1, 5, 5)
    torch.testing.assert_close(var, cov.diagonal(0, -2, -1), rtol=0, atol=1e-10)

    def mu(X):
        return k(X, Z).to_dense() @ torch.linalg.solve(Kzz[0] + B[0], lam[0])

    for i in range(4):
        for j in range(3):
            C, b = Xc[j], torch.diag(beta_c[i, j, 0])
            S_sc, S_cc = _sigma(k, Z, Kzz, B, Xs, C), _sigma(k, Z, Kzz, B, C, C)
            Minv = torch.linalg.inv(torch.eye(2) + b @ S_cc)
            m_ref = mu(Xs) + S_sc @ Minv @ (eta_c[i, j, 0] - b @ mu(C))
            c_ref = _sigma(k, Z, Kzz, B, Xs, Xs) - S_sc @ Minv @ b @ S_sc.T
            torch.testing.assert_close(mean[i, j, 0], m_ref, rtol=0, atol=1e-9)
            torch.testing.assert_close(cov[i, j, 0], c_ref, rtol=0, atol=1e-9)


def test_site_block_equals_the_inducing_set_extended_by_the_conditioned_inputs():
    """Base sites at inputs in Z, new sites at X_c outside Z: conditioning equals the Eq. 10
    posterior refactorised with Z + X_c and all sites (Eq. 11)."""
    k, Z, _, Kzz, _, _, _ = _setup()
    Xd = Z[::2]  # data inside Z
    eta_d, beta_d = torch.randn(1, 3), torch.rand(1, 3) + 0.5
    lam, B = site_contributions(k(Z, Xd).to_dense()[None], eta_d, beta_d)
    f = dual_factors(Kzz, B, lam)
    C = torch.tensor([[0.4], [1.3]])
    eta_c, beta_c = torch.randn(1, 2), torch.rand(1, 2) + 0.5
    block = site_block(f, k(Z, C).to_dense()[None], k(C).to_dense()[None], eta_c, beta_c)
    Xs = torch.rand(6, 1) * 3
    mean, cov = dual_predict(
        f, k(Z, Xs).to_dense()[None], k(Xs).to_dense()[None], True, block, k(C, Xs).to_dense()[None]
    )
    Z2 = torch.cat([Z, C])
    lam2, B2 = site_contributions(
        k(Z2, torch.cat([Xd, C])).to_dense()[None], torch.cat([eta_d, eta_c], -1),
        torch.cat([beta_d, beta_c], -1),
    )  # fmt: skip
    ref = dual_factors(k(Z2).to_dense()[None], B2, lam2)
    m_ref, c_ref = dual_predict(ref, k(Z2, Xs).to_dense()[None], k(Xs).to_dense()[None], True)
    torch.testing.assert_close(mean, m_ref, rtol=0, atol=1e-8)
    torch.testing.assert_close(cov, c_ref, rtol=0, atol=1e-8)


def test_site_targets_gaussian_are_exact_and_softmax_uses_the_diagonal():
    eta, beta = site_targets(
        Gaussian(0.5), torch.tensor([1.0, -2.0]), torch.randn(1, 2), torch.rand(1, 2)
    )
    assert torch.allclose(eta, torch.tensor([[2.0, -4.0]]))
    assert torch.allclose(beta, torch.full((1, 2), 2.0))
    lik = Softmax(3, num_samples=64)
    mean, var = torch.randn(3, 4), torch.rand(3, 4)
    y = torch.tensor([0, 2, 1, 1])
    _, alpha, beta = expected_terms(lik, y, mean, var)
    _, a_ref, b_ref = lik.expected(y, mean.T, var.T)
    assert torch.allclose(alpha, a_ref.T) and torch.allclose(beta, b_ref.diagonal(0, -2, -1).T)
    # targets with more batch dimensions than the posterior (fantasies)
    _, _, b2 = expected_terms(lik, y.expand(5, 4), mean, var)
    assert b2.shape == (5, 3, 4) and torch.allclose(b2[2], beta)


def test_damp_is_a_convex_combination_and_keeps_sites_on_overflow():
    old = (torch.ones(1, 3), torch.ones(1, 3))
    new = (torch.tensor([[3.0, float("nan"), 5.0]]), torch.tensor([[3.0, 1.0, float("inf")]]))
    with pytest.warns(NumericalWarning, match="not finite"):
        eta, beta = damp(old, new, 0.5)
    assert torch.allclose(eta, torch.tensor([[2.0, 1.0, 1.0]]))
    assert torch.allclose(beta, torch.tensor([[2.0, 1.0, 1.0]]))


def test_projection_is_eq_27_and_repair_reports_non_psd():
    k, Z, _, Kzz, _, lam, B = _setup()
    Z_new = torch.rand(4, 1) * 3
    K_no = k(Z_new, Z).to_dense()[None]
    lam_new, B_new = project_dual_pair(Kzz, K_no, lam, B)
    P = K_no[0] @ torch.linalg.inv(Kzz[0])  # reference only
    assert torch.allclose(lam_new[0], P @ lam[0], atol=1e-8)
    assert torch.allclose(B_new[0], P @ B[0] @ P.T, atol=1e-8)
    bad = torch.diag(torch.tensor([2.0, 1.0, -0.5]))[None]
    with pytest.warns(NumericalWarning, match="not positive semi-definite"):
        fixed = repair_psd(bad)
    assert torch.linalg.eigvalsh(fixed).min() >= -1e-12
    assert torch.allclose(fixed, torch.diag(torch.tensor([2.0, 1.0, 0.0]))[None])
    ok = B + 0 * B
    assert torch.equal(repair_psd(ok), 0.5 * (ok + ok.mT))


def test_select_inducing_points_batched_kernel_and_duplicates():
    X = torch.cat([torch.rand(20, 2), torch.rand(20, 2)])
    X[25] = X[3]  # a duplicate can never be chosen twice
    k = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([3]))
    Z = select_inducing_points(k, X, 10)
    assert Z.shape == (10, 2)
    assert torch.unique(Z, dim=0).shape[0] == 10
    assert all((X == z).all(-1).any() for z in Z)
    few = select_inducing_points(gpytorch.kernels.RBFKernel(), X[:3].repeat(4, 1), 10)
    assert few.shape == (3, 2)


def test_eq_26_and_eq_21_differ_by_the_rest_terms():
    """For q = q_theta: Eq. 21 - Eq. 26 = E_q[log T_rest] - log Z_rest (module docstring of
    objective.py); with an empty rest both are the ELBO at q_theta."""
    k, Z, _, Kzz, _, lam_r, B_r = _setup()
    lik = Bernoulli()
    Xa = torch.rand(7, 1) * 3
    y = torch.bernoulli(torch.full((7,), 0.5))
    Kza, kaa = k(Z, Xa).to_dense()[None], k(Xa, diag=True)[None]
    eta, beta = torch.randn(1, 7), torch.rand(1, 7) + 0.05
    w = torch.ones(7)

    def q_theta(lr, Br):
        dl, dB = site_contributions(Kza, eta, beta)
        A = Kzz + Br + dB
        mu_v = torch.linalg.solve(A, (lr + dl).unsqueeze(-1)).squeeze(-1)
        m_u = (Kzz @ mu_v.unsqueeze(-1)).squeeze(-1)
        V = Kzz @ torch.linalg.solve(A, Kzz)
        return m_u, torch.linalg.cholesky(V), mu_v, A

    zero_l, zero_B = torch.zeros_like(lam_r), torch.zeros_like(B_r)
    m_u, L_V, _, _ = q_theta(zero_l, zero_B)
    e26 = dual_objective(lik, Kzz, Kza, kaa, y, eta, beta, w, zero_l, zero_B)
    e21 = sequential_elbo(lik, Kzz, Kza, kaa, y, w, m_u, L_V, zero_l, zero_B)
    assert torch.allclose(e26, e21, atol=1e-8)
    m_u, L_V, mu_v, A = q_theta(lam_r, B_r)
    e26 = dual_objective(lik, Kzz, Kza, kaa, y, eta, beta, w, lam_r, B_r)
    e21 = sequential_elbo(lik, Kzz, Kza, kaa, y, w, m_u, L_V, lam_r, B_r)
    Sv = torch.linalg.inv(A[0])  # reference only
    e_log_rest = lam_r[0] @ mu_v[0] - 0.5 * torch.trace(
        B_r[0] @ (Sv + torch.outer(mu_v[0], mu_v[0]))
    )
    R = Kzz[0] + B_r[0]
    log_Z_rest = 0.5 * (
        torch.logdet(Kzz[0]) - torch.logdet(R) + lam_r[0] @ torch.linalg.solve(R, lam_r[0])
    )
    assert torch.allclose(e21 - e26, e_log_rest - log_Z_rest, atol=1e-8)


@pytest.mark.parametrize("lengthscale", [0.3, 0.7, 1.5, 3.0])
def test_eq26_is_the_exact_evidence_when_k_zz_is_nearly_singular(lengthscale):
    """Z = X (10 points on [0, 1]) with long lengthscales: K_zz and K_zz + B_u are both nearly
    singular, and Eq. 26 must still be the exact GP's log evidence (the whitened form; forming
    log|K_zz| - log|K_zz + B_u| from two jittered factors was off by 10-28 nats here)."""
    X = torch.linspace(0, 1, 10).unsqueeze(-1)
    y, s2 = 3.0 + torch.sin(6 * X[:, 0]), 0.3
    K = 2.0 * torch.exp(-0.5 * torch.cdist(X, X) ** 2 / lengthscale**2)
    eta, beta = (y / s2)[None], torch.full((1, 10), 1 / s2)
    zeros_l, zeros_B = torch.zeros(1, 10), torch.zeros(1, 10, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)  # jitter on K_zz is expected here
        obj = dual_objective(Gaussian(s2), K[None], K[None], K.diagonal()[None], y, eta, beta,
                             torch.ones(10), zeros_l, zeros_B, False)  # fmt: skip
    exact = torch.distributions.MultivariateNormal(torch.zeros(10), K + s2 * torch.eye(10))
    assert float(obj) == pytest.approx(float(exact.log_prob(y)), abs=1e-6)


def test_dual_predict_on_fantasy_batches_equals_the_broadcast_solves(monkeypatch):
    """Fantasies x candidates x q against one shared K_zz / K_zz + B factor: the folded solves
    give the broadcast solves' mean and covariance (float64, the suite's default dtype)."""
    import bo_ncgp.models.dual.posterior as posterior

    k, Z, _, Kzz, _, lam, B = _setup(m=7)
    f = dual_factors(Kzz, B, lam)
    Xc = torch.rand(5, 1, 1) * 3  # 5 candidates, one fantasy point each
    Kzc = k(Z, Xc).to_dense().unsqueeze(-3)  # (5, 1, m, 1)
    eta, beta = torch.randn(4, 5, 1, 1), torch.rand(1, 1) + 0.1  # 4 fantasies
    Xq = torch.rand(4, 5, 3, 1) * 3  # q = 3 points per fantasy model
    Kzq, kqq = k(Z, Xq).to_dense().unsqueeze(-3), k(Xq).to_dense().unsqueeze(-3)
    kcc = k(Xc).to_dense().unsqueeze(-3)
    Kcq = k(Xc.expand(4, 5, 1, 1), Xq).to_dense().unsqueeze(-3)
    block = site_block(f, Kzc, kcc, eta, beta)
    mean, cov = dual_predict(f, Kzq, kqq, True, block, Kcq)
    monkeypatch.setattr(
        posterior,
        "solve_lower",
        lambda L, R: torch.linalg.solve_triangular(L, R, upper=False),
    )
    ref_block = site_block(f, Kzc, kcc, eta, beta)
    m_ref, c_ref = dual_predict(f, Kzq, kqq, True, ref_block, Kcq)
    assert mean.shape == (4, 5, 1, 3) and cov.shape == (4, 5, 1, 3, 3)
    torch.testing.assert_close(mean, m_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(cov, c_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("latents", [None, 3])
@pytest.mark.parametrize("full_cov", [True, False])
@pytest.mark.parametrize("conditioned", ["none", "shared", "batched"])
def test_prior_blocks_of_one_kernel_call_equal_the_separate_blocks(latents, full_cov, conditioned):
    from bo_ncgp.linalg import latent_block
    from bo_ncgp.models.dual import DualSVGP

    torch.manual_seed(0)
    batch = torch.Size([]) if latents is None else torch.Size([latents])
    kernel = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.RBFKernel(batch_shape=batch), batch_shape=batch
    )
    lik = Gaussian(0.1) if latents is None else Softmax(latents)
    model = DualSVGP(kernel.double(), lik, torch.rand(5, 2, dtype=torch.float64))
    X = torch.rand(4, 3, 2, dtype=torch.float64, requires_grad=True)
    Xc = {"none": None, "shared": torch.rand(2, 2), "batched": torch.rand(4, 1, 2, 2)}[conditioned]
    Xc = None if Xc is None else Xc.double()
    Kzx, Kcx, kxx = model._prior_blocks(X, full_cov, Xc)
    assert torch.allclose(Kzx, model._Kzx(X), atol=1e-12)
    assert torch.allclose(kxx, model._kxx(X, full_cov), atol=1e-12)
    if Xc is None:
        assert Kcx is None
    else:
        shape = torch.broadcast_shapes(Xc.shape[:-2], X.shape[:-2])
        ref = latent_block(model.kernel, Xc.expand(*shape, *Xc.shape[-2:]), X.expand(*shape, 3, 2))
        assert Kcx.shape == ref.shape and torch.allclose(Kcx, ref, atol=1e-12)
    # gradients in X flow through the shared call as through the separate ones
    (g,) = torch.autograd.grad(Kzx.sum() + kxx.sum(), X)
    (ref_g,) = torch.autograd.grad(model._Kzx(X).sum() + model._kxx(X, full_cov).sum(), X)
    assert torch.allclose(g, ref_g, atol=1e-10)
