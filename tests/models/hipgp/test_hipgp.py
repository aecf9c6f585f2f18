"""Tests of bo_ncgp.models.hipgp (Wu et al. 2022): textbook limits and bad input."""

import itertools

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models.hipgp import HIPGP, Grid
from bo_ncgp.models.hipgp.interdomain import as_op_codes, transformed_covariance
from tests.models.contract import ModelContractTests


def _kernel(D, ls, var=0.5, family="rbf"):
    base = (
        gpytorch.kernels.RBFKernel(ard_num_dims=D)
        if family == "rbf"
        else gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=D)
    )
    k = gpytorch.kernels.ScaleKernel(base)
    k.outputscale = var
    base.lengthscale = torch.as_tensor(ls, dtype=torch.float64).expand(1, D)
    return k


def _exact(k, X, codes, y, noise, Xs, cs):
    """Dense exact inter-domain GP posterior (every covariance by quadrature/closed form)."""
    Knn = transformed_covariance(k, X, codes) + torch.diag(noise)
    Ksn = transformed_covariance(k, Xs, cs, X, codes)
    Kss = transformed_covariance(k, Xs, cs)
    L = torch.linalg.cholesky(Knn)
    mean = Ksn @ torch.cholesky_solve(y[:, None], L)[:, 0]
    cov = Kss - Ksn @ torch.cholesky_solve(Ksn.T, L)
    return mean, cov


def test_full_rank_fine_grid_matches_exact_gp_1d_mixed_operators():
    k = _kernel(1, 0.3)
    X = torch.rand(24, 1) * 1.6 - 0.8
    codes = torch.tensor([0] * 8 + [1] * 8 + [-1] * 8)
    y = torch.randn(24) * 0.3
    noise = torch.cat([torch.full((8,), 0.01), torch.full((8,), 0.04), torch.full((8,), 0.01)])
    # a 1e-8 jitter lets PCG converge to 1e-10 in ~45 iterations (without it the RBF K_uu is
    # numerically singular and CG runs ~400 iterations into loss of orthogonality)
    m = HIPGP(k, Grid([-1.2], [1.2], (64,)), variational="full", pcg_tol=1e-10, jitter=1e-8)
    m.natgrad_step(X, y, codes, obs_noise=noise)  # lr = 1, full batch: the optimum
    assert m.last_pcg_iterations < 100
    Xs = torch.linspace(-0.8, 0.8, 6).unsqueeze(-1)
    for op in ["value", "derivative", "integral"]:
        cs = as_op_codes(op, 6, 1)
        mean, cov = m.predict_f(Xs, op=op, full_cov=True)
        mean_e, cov_e = _exact(k, X, codes, y, noise, Xs, cs)
        scale = float(cov_e.diagonal().max().detach())
        torch.testing.assert_close(mean, mean_e, atol=2e-4 * scale**0.5, rtol=0)
        torch.testing.assert_close(cov, cov_e, atol=2e-4 * scale, rtol=0)


def test_full_rank_fine_grid_matches_exact_gp_2d_mixed_operators():
    k = _kernel(2, 0.4)
    X = torch.rand(18, 2) * 1.2 - 0.6
    codes = torch.tensor([0] * 6 + [1] * 3 + [2] * 3 + [-1] * 6)
    y = torch.randn(18) * 0.3
    noise = torch.full((18,), 0.02)
    m = HIPGP(
        k,
        Grid([-1.0, -1.0], [1.0, 1.0], (12, 12)),
        variational="full",
        pcg_tol=1e-10,
        jitter=1e-6,
        likelihood=Gaussian(noise=0.02),
    )
    assert m.whitener().embedding.num_clamped == 0  # the 2x embedding is PSD here
    m.natgrad_step(X, y, codes)
    # value, d/dx_1 and line-integral predictions in one call (one PCG solve)
    Xs = (torch.rand(5, 2) - 0.5).repeat(3, 1)
    cs = torch.tensor([0] * 5 + [2] * 5 + [-1] * 5)
    mean, var = m.predict_f(Xs, op=cs)
    mean_e, cov_e = _exact(k, X, codes, y, noise, Xs, cs)
    for i in range(3):
        sl = slice(5 * i, 5 * i + 5)
        scale = float(cov_e.diagonal()[sl].max().detach())
        torch.testing.assert_close(mean[sl], mean_e[sl], atol=1e-3 * scale**0.5, rtol=0)
        torch.testing.assert_close(var[sl], cov_e.diagonal()[sl], atol=1e-3 * scale, rtol=0)


def test_fft_and_cholesky_whitening_give_the_same_posterior():
    k = _kernel(1, 0.15, family="matern")
    X, y = torch.rand(30, 1), torch.randn(30)
    grid = Grid([0.0], [1.0], (40,))
    ms = [
        HIPGP(k, grid, variational="full", whitening=w, pcg_tol=1e-12) for w in ("fft", "cholesky")
    ]
    for m in ms:
        m.natgrad_step(X, y)
    Xs = torch.rand(7, 1)
    (m1, v1), (m2, v2) = (m.predict_f(Xs) for m in ms)
    torch.testing.assert_close(m1, m2, atol=1e-7, rtol=0)
    torch.testing.assert_close(v1, v2, atol=1e-7, rtol=0)
    torch.testing.assert_close(ms[0].elbo(X, y), ms[1].elbo(X, y), atol=1e-6, rtol=0)


@pytest.mark.parametrize("variational", ["mean_field", "block"])
def test_structured_family_natgrad_reaches_the_optimal_mean(variational):
    # For a Gaussian likelihood the optimal mean does not depend on the family; the block
    # natural gradient is a damped block-Jacobi iteration that must reach it.
    k = _kernel(1, 0.1, family="matern")
    X, y = torch.rand(15, 1), torch.randn(15)
    grid = Grid([0.0], [1.0], (16,))
    full = HIPGP(k, grid, variational="full", pcg_tol=1e-12, likelihood=Gaussian(0.5))
    full.natgrad_step(X, y)
    m = HIPGP(
        k,
        grid,
        variational=variational,
        block_shape=(4,) if variational == "block" else None,
        pcg_tol=1e-12,
        likelihood=Gaussian(0.5),
    )
    K = m.whitened_cross_covariance(X, as_op_codes(None, 15, 1))
    for _ in range(300):
        m.natgrad_step(X, y, lr=0.5, K=K)
    torch.testing.assert_close(m.q.mean, full.q.mean, atol=1e-6, rtol=0)
    # and the ELBO of the structured family cannot exceed the full-rank optimum
    assert float(m.elbo(X, y)) <= float(full.elbo(X, y)) + 1e-8


def test_block_natgrad_with_lr_one_reaches_the_optimal_mean_in_one_step_and_lr_below_ascends():
    # the mean step solves the minibatch's full precision (CG preconditioned by the blocks),
    # so the coupling between blocks is not lost
    k = _kernel(2, 0.3, family="matern")
    grid = Grid([0.0, 0.0], [1.0, 1.0], (8, 8))
    X, y = torch.rand(40, 2), torch.randn(40)
    full = HIPGP(k, grid, variational="full", pcg_tol=1e-12, likelihood=Gaussian(0.1))
    assert full.q.last_cg is None
    full.natgrad_step(X, y, tol=1e-10)
    # the full family's precision is the system's, so its CG stops after one iteration
    assert full.q.last_cg == (1, True)
    m = HIPGP(k, grid, block_shape=(2, 2), pcg_tol=1e-12, likelihood=Gaussian(0.1))
    K = m.whitened_cross_covariance(X, as_op_codes(None, 40, 2))
    for tol, close in ((1e-3, 1e-2), (1e-10, 1e-8)):  # the default and a tight mean solve
        m.q.reset()
        m.natgrad_step(X, y, K=K, tol=tol)
        gap = (m.q.mean - full.q.mean).norm() / full.q.mean.norm()
        assert float(gap) < close
        assert m.q.last_cg[0] > 1 and m.q.last_cg[1]
    m.q.reset()
    m.natgrad_step(X, y, K=K, tol=1e-10, max_iters=1)  # stopped early: reported as such
    assert m.q.last_cg == (1, False)

    def objective(mean):  # the ELBO's dependence on the mean (Gaussian likelihood)
        return float(-0.5 * mean.square().sum() - 0.5 / 0.1 * (y - K @ mean).square().sum())

    m.q.reset()
    values = [objective(m.q.mean)]
    for _ in range(5):
        m.natgrad_step(X, y, lr=0.3, K=K)
        values.append(objective(m.q.mean))
    assert all(b > a for a, b in itertools.pairwise(values))


def test_fit_takes_steps_of_one_on_the_whole_data_and_of_a_tenth_on_minibatches(monkeypatch):
    k = _kernel(1, 0.2, family="matern")
    m = HIPGP(k, Grid([0.0], [1.0], (16,)), likelihood=Gaussian(0.1))
    seen = []
    monkeypatch.setattr(m.q, "natgrad_step", lambda *a, **kw: seen.append(a[-1]))
    X, y = torch.rand(20, 1), torch.randn(20)
    m.fit(X, y)
    m.fit(X, y, batch_size=5)
    assert seen == [1.0] + [0.1] * 4


def test_elbo_approaches_log_marginal_likelihood_and_hyper_gradients_match_fd():
    k = _kernel(1, 0.2, family="matern")
    lik = Gaussian(noise=0.1)
    X, y = torch.rand(20, 1), torch.randn(20)
    m = HIPGP(k, Grid([-0.2], [1.2], (48,)), likelihood=lik, variational="full", pcg_tol=1e-12)
    m.natgrad_step(X, y)
    elbo = m.elbo(X, y)
    Kn = k(X).to_dense() + 0.1 * torch.eye(20)
    lml = torch.distributions.MultivariateNormal(torch.zeros(20), Kn).log_prob(y)
    assert float(elbo) <= float(lml) + 1e-6
    assert float(lml - elbo) < 0.05
    # gradient through the PCG solves (adjoint backward) against central finite differences
    params = [k.raw_outputscale, k.base_kernel.raw_lengthscale, lik.raw_noise]
    grads = torch.autograd.grad(m.elbo(X, y), params)
    for p, g in zip(params, grads, strict=True):
        eps = 1e-5
        with torch.no_grad():
            p.add_(eps)
        up = float(m.elbo(X, y))
        with torch.no_grad():
            p.sub_(2 * eps)
        down = float(m.elbo(X, y))
        with torch.no_grad():
            p.add_(eps)
        fd = (up - down) / (2 * eps)
        assert abs(float(g.sum()) - fd) < 1e-5 * max(1.0, abs(fd)), (p.shape, float(g.sum()), fd)


def test_predict_batch_shapes_and_input_gradient():
    k = _kernel(2, 0.3, family="matern")
    m = HIPGP(k, Grid([-0.5, -0.5], [1.5, 1.5], (12, 12)), variational="block", pcg_tol=1e-12)
    X, y = torch.rand(25, 2), torch.randn(25)
    m.fit(X, y, num_epochs=2, batch_size=10, natgrad_lr=0.5)
    Xs = torch.rand(3, 4, 2, requires_grad=True)
    mean, cov = m.predict_f(Xs, full_cov=True)
    assert mean.shape == (3, 4) and cov.shape == (3, 4, 4)
    mean2, var2 = m.predict_f(Xs[1])
    torch.testing.assert_close(mean[1], mean2)
    torch.testing.assert_close(cov[1].diagonal(), var2)
    assert bool((torch.linalg.eigvalsh(cov) > -1e-9).all())
    g = torch.autograd.grad(mean.sum() + var2.sum(), Xs)[0]
    x0 = Xs.detach().clone()
    eps = 1e-5
    for idx in [(0, 0, 0), (1, 2, 1)]:
        xp, xm = x0.clone(), x0.clone()
        xp[idx] += eps
        xm[idx] -= eps
        with torch.no_grad():
            fp = m.predict_f(xp)[0].sum() + m.predict_f(xp[1])[1].sum()
            fm = m.predict_f(xm)[0].sum() + m.predict_f(xm[1])[1].sum()
        fd = float(fp - fm) / (2 * eps)
        assert abs(float(g[idx]) - fd) < 1e-5 * max(1.0, abs(fd))


def test_hyperparameter_learning_increases_elbo_and_non_gaussian_runs():
    k = _kernel(1, 0.2, family="matern")
    X = torch.rand(60, 1)
    y = torch.sin(12 * X[:, 0]) + 0.1 * torch.randn(60)
    m = HIPGP(
        k, Grid([0.0], [1.0], (32,)), likelihood=Gaussian(0.3), pcg_tol=1e-8, embedding_factor=4
    )
    trace = m.fit(X, y, num_epochs=15, learn_hyperparameters=True, hyper_lr=0.05).history
    assert trace[-1] > trace[0]
    yb = (y > 0).double()
    mb = HIPGP(_kernel(1, 0.1, family="matern"), Grid([0.0], [1.0], (32,)), likelihood=Bernoulli())
    mb.fit(X, yb, num_epochs=5, natgrad_lr=0.5)
    p = mb.predict_y(X)
    assert p.shape == (60,)
    assert float(((p > 0.5).double() == yb).double().mean()) > 0.8


def test_bad_inputs():
    k = _kernel(2, 0.3)
    with pytest.raises(ValueError, match="whitening"):
        HIPGP(k, Grid([0.0, 0.0], [1.0, 1.0], (4, 4)), whitening="svd")
    with pytest.raises(ValueError, match="variational"):
        HIPGP(k, Grid([0.0, 0.0], [1.0, 1.0], (4, 4)), variational="diag")
    with pytest.raises(ValueError, match="tile"):
        HIPGP(k, Grid([0.0, 0.0], [1.0, 1.0], (4, 4)), block_shape=(3, 3))
    m = HIPGP(k, Grid([0.0, 0.0], [1.0, 1.0], (4, 4)))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., n, 2\)"):
        m.predict_f(torch.rand(3, 3))
    with pytest.raises(ValueError, match="NaN"):
        m.fit(torch.tensor([[0.1, float("nan")]]), torch.zeros(1))
    with pytest.raises(ValueError, match="empty"):
        m.predict_f(torch.rand(0, 2))
    with pytest.raises(ValueError, match="3 rows but y has 2"):
        m.fit(torch.rand(3, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="y contains NaN"):
        m.fit(torch.rand(2, 2), torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="operator codes"):
        m.fit(torch.rand(2, 2), torch.zeros(2), op=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="ambiguous"):
        m.predict_f(torch.rand(2, 2), op="derivative")
    with pytest.raises(ValueError, match="obs_noise must be positive"):
        m.fit(torch.rand(2, 2), torch.zeros(2), obs_noise=torch.tensor([0.1, -1.0]))
    with pytest.raises(ValueError, match="batch_size"):
        m.fit(torch.rand(2, 2), torch.zeros(2), batch_size=0)


def test_fit_callback_gets_fit_steps_per_minibatch():
    m = HIPGP(_kernel(1, 0.2), Grid([0.0], [1.0], (16,)), likelihood=Gaussian(0.1))
    X = torch.rand(20, 1, dtype=torch.float64)
    seen = []
    m.fit(X, X[:, 0].sin(), callback=seen.append, num_epochs=2, batch_size=8)
    assert [s.step for s in seen] == list(range(6))
    assert [dict(s.info) for s in seen[:4]] == [
        {"epoch": 0, "batch": 0},
        {"epoch": 0, "batch": 1},
        {"epoch": 0, "batch": 2},
        {"epoch": 1, "batch": 0},
    ]
    assert all(s.model is m and s.loss is None for s in seen)
    seen.clear()
    m.fit(X, X[:, 0].sin(), callback=seen.append, learn_hyperparameters=True, batch_size=8)
    assert all(s.loss is not None for s in seen)
    assert [-s.loss * 20 for s in seen] == m.history


class TestHIPGPContract(ModelContractTests):
    multi_step = False  # one natural-gradient step per minibatch; one minibatch by default

    def make(self):
        k = _kernel(1, 0.2)
        m = HIPGP(k, Grid([0.0], [1.0], (16,)), likelihood=Gaussian(0.1))
        X = torch.rand(
            12,
            1,
            dtype=torch.float64,
            generator=torch.Generator(torch.get_default_device()).manual_seed(0),
        )
        return m, X, torch.sin(6 * X[:, 0])
