"""HIP-GP's PCG: the circulant preconditioner of a non-PSD minimal embedding, warm starts and
the interpolation initial guess."""

import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.linalg.cg_solve import cg_solve
from bo_ncgp.linalg.toeplitz import CirculantEmbedding, Grid, circulant_first_row
from bo_ncgp.models.hipgp import HIPGP
from bo_ncgp.models.hipgp.interdomain import cross_covariance
from bo_ncgp.models.hipgp.whitening import interpolation_guess

D = torch.float64


def _embedding():
    """A minimal (factor 2) embedding with negative eigenvalues: lengthscale 0.3 on [0, 1]^2."""
    k = gpytorch.kernels.MaternKernel(nu=2.5)
    k.lengthscale = 0.3
    k = k.to(D)
    g = Grid(torch.zeros(2, dtype=D), torch.ones(2, dtype=D), (12, 12))
    emb = CirculantEmbedding(circulant_first_row(k, g), grid_shape=g.shape, jitter=1e-6, warn=False)
    X = torch.rand(5, 2, generator=torch.Generator().manual_seed(0), dtype=D)
    return emb, k(X, g.points()).to_dense().detach()


def test_preconditioner_of_a_non_psd_embedding_beats_plain_cg_and_solves_exactly():
    emb, B = _embedding()
    assert emb.num_clamped > 0
    x, pcg = emb.solve(B, precondition=True, tol=1e-8, max_iters=2000)
    _, plain = emb.solve(B, precondition=False, tol=1e-8, max_iters=2000)
    assert bool(pcg.converged.all())
    assert pcg.iterations < 150  # |lambda| preconditioner; at the eigenvalue floor: ~400
    assert pcg.iterations < plain.iterations / 2
    exact = torch.linalg.solve(emb.kuu_dense(), B.mT).mT
    assert torch.allclose(emb.kuu_mv(x), B, atol=1e-6)
    assert torch.allclose(x, exact, rtol=1e-3, atol=1e-3 * float(exact.abs().max()))


def test_warm_start_from_the_solution_runs_no_iteration_and_returns_it():
    emb, B = _embedding()
    x, _ = emb.solve(B, tol=1e-8, max_iters=2000)
    x2, res = emb.solve(B, tol=1e-8, max_iters=2000, x0=x)
    assert res.iterations == 0 and bool(res.converged.all())
    assert torch.equal(x2, x)


def test_capped_warm_started_solves_reach_the_converged_solution():
    emb, B = _embedding()
    ref, _ = emb.solve(B, tol=1e-8, max_iters=2000)
    x, res = emb.solve(B, tol=1e-8, max_iters=20)
    for _ in range(20):
        if bool(res.converged.all()):
            break
        x, res = emb.solve(B, tol=1e-8, max_iters=20, x0=x)
    assert bool(res.converged.all())
    assert torch.allclose(x, ref, rtol=1e-5, atol=1e-6 * float(ref.abs().max()))


def test_warm_start_keeps_the_gradient_of_the_solve():
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=D)
    a = torch.tensor([1.0, 2.0], dtype=D, requires_grad=True)
    B = torch.tensor([[1.0], [2.0]], dtype=D)

    def mm(V, a_):
        return A @ V + a_.unsqueeze(-1) * V

    grads = []
    for x0 in (None, torch.tensor([[0.3], [0.4]], dtype=D)):
        X, _ = cg_solve(mm, B, (a,), tol=1e-12, x0=x0)
        (g,) = torch.autograd.grad(X.sum(), a)
        grads.append(g)
    assert torch.allclose(grads[0], grads[1], atol=1e-10)


@pytest.mark.parametrize("cap", [None, 10])
def test_fit_with_warm_starts_matches_cold_solves(cap):
    """Converged solves give the same posterior; capped ones, warm started, the converged one."""
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5)).to(D)
    k.base_kernel.lengthscale = 0.3
    k.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    X = torch.rand(120, 2, generator=g, dtype=D)
    y = torch.sin(4 * X[:, 0]) + 0.1 * torch.randn(120, generator=g, dtype=D)
    grid = Grid(torch.zeros(2, dtype=D), torch.ones(2, dtype=D), (10, 10))
    models = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for warm in (True, False):
            m = HIPGP(k, grid, likelihood=Gaussian(noise=0.01), pcg_max_iters=cap,
                      pcg_train_max_iters=None, pcg_tol=1e-8, pcg_warm_start=warm)  # fmt: skip
            m.likelihood.requires_grad_(False)
            its: list[int] = []
            m.fit(X, y, num_epochs=30 if cap else 2, batch_size=40,
                  generator=torch.Generator().manual_seed(1),
                  callback=lambda s, m=m, its=its: its.append(m.last_pcg_iterations))  # fmt: skip
            models[warm] = (m, its)
    (mw, its_w), (mc, its_c) = models[True], models[False]
    if cap is None:
        assert max(its_w[3:]) == 0 < min(its_c[3:])  # later epochs reuse converged solves
        assert torch.allclose(mw.q.mean, mc.q.mean, atol=1e-6)
        assert torch.allclose(mw.predict_f(X[:10])[0], mc.predict_f(X[:10])[0], atol=1e-6)
    else:
        assert its_w[-1] < cap <= min(its_c)  # warm solves converge below the cap


def _long_lengthscale_problem():
    """lengthscale / spacing ~ 5 on a 16 x 16 grid: plain PCG from zero converges slowly."""
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5)).to(D)
    k.base_kernel.lengthscale = 0.3
    g = Grid(torch.zeros(2, dtype=D), torch.ones(2, dtype=D), (16, 16))
    X = torch.rand(6, 2, generator=torch.Generator().manual_seed(1), dtype=D)
    K = k(g.points()).to_dense().detach() + 1e-6 * torch.eye(256, dtype=D)
    return k, g, X, K


def _energy_error(x, exact, K):
    e = x - exact
    return float(((e * (e @ K)).sum(-1) / (exact * (exact @ K)).sum(-1)).sqrt().max())


def test_interpolation_guess_is_close_to_the_whitening_solution():
    k, g, X, K = _long_lengthscale_problem()
    codes = torch.tensor([0, 0, 0, 1, 2, -1])
    k_un = cross_covariance(k, g.points(), X, codes).detach().mT  # (n, M)
    exact = torch.linalg.solve(K, k_un.mT).mT
    W = interpolation_guess(X, g, codes)
    assert W.shape == (6, 256)
    # K_uu W reproduces the cross-covariances (values, derivatives and the line integral,
    # whose guess sums the weights at its quadrature nodes) ...
    rel = (W @ K - k_un).norm(dim=-1) / k_un.norm(dim=-1)
    assert float(rel.max()) < 1e-2
    one_node = interpolation_guess(X[5:], g, codes[5:], num_quad=1)  # too coarse a rule
    rel_one = (one_node @ K - k_un[5:]).norm(dim=-1) / k_un[5:].norm(dim=-1)
    assert float(rel_one) > 10 * float(rel[5])
    # ... so W is close to K_uu^{-1} k* in the norm of |R^T e|, where 5 PCG iterations
    # from zero are not
    emb = CirculantEmbedding(circulant_first_row(k, g), grid_shape=g.shape, jitter=1e-6, warn=False)
    assert _energy_error(W[:3], exact[:3], K) < 0.02
    with torch.no_grad():
        zero, _ = emb.solve(k_un[:3], tol=1e-12, max_iters=5)
    assert _energy_error(zero, exact[:3], K) > 0.1


def test_model_with_the_interpolation_guess_converges_to_the_zero_start_answer():
    k, g, X, _ = _long_lengthscale_problem()
    y = torch.sin(4 * X[:, 0])
    ms = [
        HIPGP(k, g, likelihood=Gaussian(0.1), pcg_tol=1e-10, pcg_initial_guess=s)
        for s in ("interpolation", "zero")
    ]
    iters = []
    for m in ms:
        m.fit(X, y)
        iters.append(m.last_pcg_iterations)
    assert iters[0] < iters[1]
    Xs = torch.rand(5, 2, generator=torch.Generator().manual_seed(2), dtype=D)
    with torch.no_grad():
        (m1, v1), (m2, v2) = (m.predict_f(Xs) for m in ms)
    torch.testing.assert_close(m1, m2, atol=1e-6, rtol=0)
    torch.testing.assert_close(v1, v2, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="pcg_initial_guess must be"):
        HIPGP(k, g, pcg_initial_guess="ones")


def test_no_solve_whitening_from_the_interpolation_guess_is_close_to_the_solved_one():
    k, g, X, _ = _long_lengthscale_problem()
    y = torch.sin(4 * X[:, 0])
    solved = HIPGP(k, g, likelihood=Gaussian(0.1), pcg_tol=1e-10)
    guessed = HIPGP(k, g, likelihood=Gaussian(0.1), pcg_max_iters=0)
    codes = torch.tensor([0, 0, 0, 1, 2, 0])
    rows = [m.whitened_cross_covariance(X, codes).detach() for m in (solved, guessed)]
    assert guessed.last_pcg_iterations == 0
    rel = (rows[0] - rows[1]).norm(dim=-1) / rows[0].norm(dim=-1)
    # values to ~1 %; derivatives of the cubic weights are an order less accurate
    assert float(rel[codes == 0].max()) < 0.02 and float(rel.max()) < 0.2
    for m in (solved, guessed):
        m.fit(X, y)
    Xs = torch.rand(5, 2, generator=torch.Generator().manual_seed(3), dtype=D, requires_grad=True)
    (m1, v1), (m2, v2) = (m.predict_f(Xs) for m in (solved, guessed))
    torch.testing.assert_close(m2, m1, atol=0.02, rtol=0)
    torch.testing.assert_close(v2, v1, atol=0.02, rtol=0)
    (grad,) = torch.autograd.grad(m2.sum(), Xs)  # differentiable in the inputs
    assert bool(torch.isfinite(grad).all()) and float(grad.abs().sum()) > 0
    # a line integral's rows from the guess at its quadrature nodes, without a solve
    ints = torch.full((3,), -1)
    rows = [m.whitened_cross_covariance(X[:3], ints).detach() for m in (solved, guessed)]
    assert guessed.last_pcg_iterations == 0
    assert float(((rows[0] - rows[1]).norm(dim=-1) / rows[0].norm(dim=-1)).max()) < 0.02
    with pytest.raises(ValueError, match="needs pcg_initial_guess='interpolation' or None"):
        HIPGP(k, g, pcg_max_iters=0, pcg_initial_guess="zero")
