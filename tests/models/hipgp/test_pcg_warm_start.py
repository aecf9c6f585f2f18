"""HIP-GP's PCG: the circulant preconditioner of a non-PSD minimal embedding, warm starts."""

import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.linalg.cg_solve import cg_solve
from bo_ncgp.linalg.toeplitz import CirculantEmbedding, Grid, circulant_first_row
from bo_ncgp.models.hipgp import HIPGP

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
                      pcg_tol=1e-8, pcg_warm_start=warm)  # fmt: skip
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
