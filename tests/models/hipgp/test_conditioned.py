"""Tests of HIPGP.condition / ConditionedHIPGP: Gaussian conditioning of the HIP-GP posterior
on new value, derivative and integral observations."""

import copy

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import InputDataError, NumericalWarning, UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models.hipgp import HIPGP, ConditionedHIPGP, Grid
from bo_ncgp.models.hipgp.interdomain import as_op_codes, transformed_covariance

NOISE = 0.01


def _kernel(D, ls, var=0.7):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D))
    k.outputscale = var
    k.base_kernel.lengthscale = torch.full((1, D), float(ls))
    return k


def _fitted(whitening="fft", D=1, variational="block", n=30, shape=None):
    """A HIP-GP fitted on ``n`` noisy values (a tight PCG tolerance, a factor-4 embedding so
    that the circulant embedding needs no clamping)."""
    shape = shape or ((24,) if D == 1 else (10, 10))
    m = HIPGP(
        _kernel(D, 0.25),
        Grid([-0.2] * D, [1.2] * D, shape),
        likelihood=Gaussian(NOISE),
        whitening=whitening,
        variational=variational,
        pcg_tol=1e-11,
        embedding_factor=4,
    )
    X = torch.rand(n, D)
    y = torch.sin(5 * X[:, 0]) + (X[:, 1] if D > 1 else 0)
    m.fit(X, y, num_epochs=2, batch_size=n // 2)
    return m


def _dense(model, Xc, cc, Yc, Xt, ct, noise=NOISE):
    """Condition the joint predictive Gaussian of ``predict_f(full_cov=True)`` by hand."""
    n = Xc.shape[0]
    M, C = model.predict_f(torch.cat([Xc, Xt]), full_cov=True, op=torch.cat([cc, ct]))
    A = C[:n, :n] + noise * torch.eye(n)
    mean = M[n:] + C[n:, :n] @ torch.linalg.solve(A, Yc - M[:n])
    cov = C[n:, n:] - C[n:, :n] @ torch.linalg.solve(A, C[:n, n:])
    return mean, cov


@pytest.mark.parametrize("whitening", ["fft", "cholesky"])
@pytest.mark.parametrize(("cond_op", "query_op"), [(0, 0), (1, 0), (-1, 0), (0, 2), (2, -1)])
def test_equals_dense_conditioning_of_the_joint_predictive(whitening, cond_op, query_op):
    m = _fitted(whitening, D=2)
    Xc, Xt = torch.rand(3, 2), torch.rand(5, 2)
    cc, ct = torch.full((3,), cond_op), torch.full((5,), query_op)
    Yc = torch.randn(3)
    cond = m.condition(Xc, Yc, op=cc)
    mean, cov = cond.predict_f(Xt, full_cov=True, op=ct)
    ref_mean, ref_cov = _dense(m, Xc, cc, Yc, Xt, ct)
    torch.testing.assert_close(mean, ref_mean, atol=1e-7, rtol=1e-7)
    torch.testing.assert_close(cov, ref_cov, atol=1e-9, rtol=1e-7)
    mean_d, var = cond.predict_f(Xt, op=ct)
    torch.testing.assert_close(mean_d, mean)
    torch.testing.assert_close(var, ref_cov.diagonal(), atol=1e-7, rtol=1e-6)


def test_mixed_operators_within_the_conditioned_set():
    m = _fitted("cholesky", D=2)
    Xc, Xt = torch.rand(4, 2), torch.rand(3, 2)
    cc, ct = torch.tensor([0, 1, 2, -1]), torch.tensor([0, -1, 1])
    Yc = torch.randn(4)
    mean, cov = m.condition(Xc, Yc, op=cc).predict_f(Xt, full_cov=True, op=ct)
    ref_mean, ref_cov = _dense(m, Xc, cc, Yc, Xt, ct)
    torch.testing.assert_close(mean, ref_mean)
    torch.testing.assert_close(cov, ref_cov)


@pytest.mark.parametrize("op", ["value", "derivative", "integral"])
def test_fine_grid_full_rank_matches_the_exact_gp_on_all_data(op):
    k = _kernel(1, 0.3)
    X = torch.rand(16, 1) * 1.6 - 0.8
    y = torch.sin(3 * X[:, 0])
    m = HIPGP(
        k,
        Grid([-1.2], [1.2], (64,)),
        likelihood=Gaussian(NOISE),
        variational="full",
        pcg_tol=1e-10,
        jitter=1e-8,
    )
    m.natgrad_step(X, y)  # full rank, whole data, lr = 1: the exact variational optimum
    Xc = torch.tensor([[-0.5], [0.1], [0.6]])
    cc = as_op_codes(op, 3, 1)
    Yc = torch.tensor([0.4, -0.2, 0.3])
    Xs = torch.linspace(-0.8, 0.8, 7).unsqueeze(-1)
    cs = as_op_codes("value", 7, 1)
    mean, cov = m.condition(Xc, Yc, op=op).predict_f(Xs, full_cov=True)
    # the exact inter-domain GP on the old and the new data together
    Xa, ca, ya = (
        torch.cat([X, Xc]),
        torch.cat([as_op_codes("value", 16, 1), cc]),
        torch.cat([y, Yc]),
    )
    Knn = transformed_covariance(k, Xa, ca) + NOISE * torch.eye(19)
    Ksn = transformed_covariance(k, Xs, cs, Xa, ca)
    L = torch.linalg.cholesky(Knn)
    mean_e = Ksn @ torch.cholesky_solve(ya[:, None], L)[:, 0]
    cov_e = transformed_covariance(k, Xs, cs) - Ksn @ torch.cholesky_solve(Ksn.T, L)
    torch.testing.assert_close(mean, mean_e, atol=1e-4, rtol=0)
    torch.testing.assert_close(cov, cov_e, atol=1e-5, rtol=0)


def test_batched_fantasies_equal_a_loop_and_share_query_points():
    m = _fitted("fft", D=2)
    Xc = torch.rand(2, 3, 2)  # 2 candidate sets, shared by 4 fantasies
    Yc = torch.randn(4, 2, 3)
    Xt = torch.rand(2, 5, 2)  # one query set per candidate set
    cond = m.condition(Xc, Yc, op=torch.tensor([0, 1, 0]))
    assert cond.batch_shape == (4, 2) and cond.num_conditioned == 3
    mean, cov = cond.predict_f(Xt, full_cov=True)
    assert mean.shape == (4, 2, 5) and cov.shape == (4, 2, 5, 5)
    shared, _ = cond.predict_f(Xt[0])  # a query without batch dimensions broadcasts
    assert shared.shape == (4, 2, 5)
    for f in range(4):
        for b in range(2):
            one = m.condition(Xc[b], Yc[f, b], op=torch.tensor([0, 1, 0]))
            mu, cv = one.predict_f(Xt[b], full_cov=True)
            torch.testing.assert_close(mean[f, b], mu)
            torch.testing.assert_close(cov[f, b], cv)
            torch.testing.assert_close(shared[f, b], one.predict_f(Xt[0])[0])


def test_conditioning_twice_equals_conditioning_once_on_both():
    m = _fitted("cholesky", D=1)
    X1, X2, Xt = torch.rand(2, 1), torch.rand(3, 1), torch.rand(4, 1)
    Y1, Y2 = torch.randn(2), torch.randn(5, 3)
    twice = m.condition(X1, Y1).condition(X2, Y2, op="derivative")
    once = m.condition(
        torch.cat([X1, X2]), torch.cat([Y1.expand(5, 2), Y2], -1), op=torch.tensor([0, 0, 1, 1, 1])
    )
    assert twice.batch_shape == (5,)
    mean2, cov2 = twice.predict_f(Xt, full_cov=True)
    mean1, cov1 = once.predict_f(Xt, full_cov=True)
    torch.testing.assert_close(mean2, mean1)
    torch.testing.assert_close(cov2, cov1)


def test_gradients_in_query_and_fantasy_inputs_match_finite_differences():
    m = _fitted("cholesky", D=2, n=20)
    for p in m.parameters():
        p.requires_grad_(False)
    Yc = torch.randn(2)

    def f(Xc, Xt):
        mean, cov = m.condition(Xc, Yc, op=torch.tensor([0, 2])).predict_f(Xt, full_cov=True)
        return mean.sum() + cov.sum()

    Xc = torch.rand(2, 2, requires_grad=True)
    Xt = torch.rand(3, 2, requires_grad=True)
    assert torch.autograd.gradcheck(f, (Xc, Xt), eps=1e-6, atol=1e-5)


def test_fft_gradient_in_the_fantasy_input_matches_finite_differences():
    m = _fitted("fft", D=1)
    Xt = torch.rand(4, 1)

    def var_sum(x):
        return m.condition(x.reshape(1, 1), torch.tensor([0.3])).predict_f(Xt)[1].sum()

    x = torch.tensor([0.4], requires_grad=True)
    (g,) = torch.autograd.grad(var_sum(x), x)
    h = 1e-5
    fd = (var_sum(x.detach() + h) - var_sum(x.detach() - h)) / (2 * h)
    torch.testing.assert_close(g[0], fd.detach(), rtol=1e-4, atol=1e-8)
    assert float(g.abs()) > 0


def test_conditioning_reduces_variance_and_pulls_the_mean():
    m = _fitted("fft", D=1)
    x = torch.tensor([[0.5]])
    mean0, var0 = m.predict_f(x)
    mean1, var1 = m.condition(x, mean0 + 1.0).predict_f(x)
    assert float(var1) < float(var0)
    assert 0 < float(mean1 - mean0) < 1.0


def test_obs_noise_and_non_gaussian_likelihoods():
    m = _fitted("cholesky", D=1)
    Xc, Xt, Yc = torch.rand(2, 1), torch.rand(3, 1), torch.randn(2)
    noisy = m.condition(Xc, Yc, obs_noise=torch.tensor([0.1, 0.2]))
    M, C = m.predict_f(torch.cat([Xc, Xt]), full_cov=True)
    A = C[:2, :2] + torch.diag(torch.tensor([0.1, 0.2]))
    ref = M[2:] + C[2:, :2] @ torch.linalg.solve(A, Yc - M[:2])
    torch.testing.assert_close(noisy.predict_f(Xt)[0], ref)
    clf = HIPGP(_kernel(1, 0.25), Grid([0.0], [1.0], (16,)), likelihood=Bernoulli())
    with pytest.raises(UnsupportedError, match="Gaussian likelihood or obs_noise"):
        clf.condition(Xc, torch.ones(2))
    assert clf.condition(Xc, torch.ones(2), obs_noise=0.5).predict_f(Xt)[0].shape == (3,)


def test_bad_input_is_refused_with_the_offending_value():
    m = _fitted("cholesky", D=1)
    X = torch.rand(2, 1)
    with pytest.raises(InputDataError, match=r"shape \(\.\.\., 2\).*\(3,\)"):
        m.condition(X, torch.zeros(3))
    with pytest.raises(InputDataError, match="NaN or inf"):
        m.condition(X, torch.tensor([0.0, float("nan")]))
    with pytest.raises(InputDataError, match=r"obs_noise must be positive.*-1"):
        m.condition(X, torch.zeros(2), obs_noise=torch.tensor([1.0, -1.0]))
    with pytest.raises(InputDataError, match="obs_noise must be a number or have 2 entries"):
        m.condition(X, torch.zeros(2), obs_noise=torch.ones(3))
    with pytest.raises(InputDataError, match="batch shapes do not broadcast"):
        m.condition(torch.rand(3, 2, 1), torch.zeros(4, 2))
    with pytest.raises(InputDataError, match="operator codes must lie in"):
        m.condition(X, torch.zeros(2), op=torch.tensor([0, 5]))
    periodic = HIPGP(
        gpytorch.kernels.PeriodicKernel(), Grid([0.0], [1.0], (16,)), whitening="cholesky"
    )
    cond = periodic.condition(X, torch.zeros(2))  # values work with any stationary kernel
    assert cond.predict_f(X)[0].shape == (2,)
    with pytest.raises(UnsupportedError, match="need an RBF or Matern kernel"):
        cond.predict_f(X, op="derivative")


def test_is_a_latent_gp_that_follows_a_refit_of_the_base():
    m = _fitted("cholesky", D=1)
    cond = m.condition(torch.rand(2, 1), torch.zeros(2))
    assert isinstance(cond, ConditionedHIPGP) and cond.likelihood is m.likelihood
    Xt = torch.rand(3, 1)
    before = cond.predict_f(Xt)[0]
    X = torch.rand(10, 1)
    m.fit(X, 3 + X[:, 0])  # the shared base moves: the conditioned factors follow
    after = cond.predict_f(Xt)[0]
    fresh = m.condition(cond.conditioned_inputs, torch.zeros(2)).predict_f(Xt)[0]
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, fresh)


def test_remembered_rows_serve_predictions_and_conditionings_unchanged():
    m = _fitted("fft", D=2)
    pool, other = torch.rand(12, 2), torch.rand(3, 2)
    with torch.no_grad():
        ref = m.predict_f(torch.cat([pool[:4], other]), full_cov=True)
        ref_c = m.condition(pool[:2], torch.ones(2)).predict_f(pool)
    m.remember_rows(pool)
    m.last_pcg_iterations = None
    with torch.no_grad():
        got = m.predict_f(pool[:4])  # all hits: no PCG solve
        assert m.last_pcg_iterations is None
        mixed = m.predict_f(torch.cat([pool[:4], other]), full_cov=True)  # hits and misses
        got_c = m.condition(pool[:2], torch.ones(2)).predict_f(pool)
    torch.testing.assert_close(got[0], ref[0][:4])
    torch.testing.assert_close(mixed[1], ref[1])
    torch.testing.assert_close(got_c[0], ref_c[0])
    torch.testing.assert_close(got_c[1], ref_c[1])
    # gradients in X bypass the cache
    x = pool[:1].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(m.predict_f(x)[1].sum(), x)
    assert float(g.abs().sum()) > 0
    # new hyperparameters (set through GPyTorch's setter) invalidate it and the whitener
    m.kernel.base_kernel.lengthscale = 0.2
    with torch.no_grad():
        after = m.predict_f(pool[:4])[0]
    twin = copy.deepcopy(m)
    twin._row_cache = twin._whitener_cache = None
    with torch.no_grad():
        torch.testing.assert_close(after, twin.predict_f(pool[:4])[0])


def _clamped_model() -> HIPGP:
    """A HIP-GP whose lengthscale is long against its grid, so the embedding is clamped."""
    k = gpytorch.kernels.RBFKernel()
    k.lengthscale = 1.5
    with pytest.warns(Warning, match="clamped"):
        m = HIPGP(k, Grid([0.0], [1.0], (8,)), likelihood=Gaussian(1e-3), variational="full")
        X = torch.linspace(0, 1, 20).unsqueeze(-1)
        m.fit(X, torch.sin(3 * X[:, 0]))
    return m


def test_conditioning_where_the_circulant_embedding_is_clamped():
    """A lengthscale long against the grid clamps the embedding (R R^T != K_uu), so the
    Nystrom deficit k** - k^T k is negative near the edge; the conditioned covariance uses the
    clamped variances of predict_f and stays positive definite."""
    m = _clamped_model()
    x = torch.zeros(1, 1)
    with torch.no_grad():
        K = m.whitened_cross_covariance(x, torch.zeros(1, dtype=torch.long))
        assert float(1.0 - (K * K).sum()) < -1e-2  # the deficit is negative here
        _, var0 = m.predict_f(x)
        mean, var = m.condition(x, torch.tensor([0.5])).predict_f(x)
    assert bool(torch.isfinite(mean).all()) and 0 <= float(var) <= float(var0)


def test_an_indefinite_approximate_covariance_is_repaired_with_a_warning():
    """Many conditioned points and small noise where the embedding is clamped: the HIP-GP
    covariance of the conditioned points is indefinite; the directions it gets wrong are left
    unconditioned (NumericalWarning) instead of failing."""
    m = _clamped_model()
    Xc = torch.linspace(-0.1, 1.1, 12).unsqueeze(-1)
    Yc = torch.zeros(12)
    with torch.no_grad():
        mu, var0 = m.predict_f(Xc)
        with pytest.warns(NumericalWarning, match="indefinite.*left unconditioned"):
            mean, var = m.condition(Xc, Yc, obs_noise=1e-4).predict_f(Xc)
    # along the kept directions the mean moves by at most the residual
    assert float((mean - mu).norm()) <= float((Yc - mu).norm()) + 1e-8
    assert bool((var >= 0).all()) and bool((var <= var0 + 1e-12).all())
