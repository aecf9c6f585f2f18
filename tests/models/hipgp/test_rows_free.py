"""HIP-GP's natural-gradient steps without the ``n x N`` rows (Gaussian likelihood, FFT
whitening): the rows are solved in chunks and the step runs on ``K = X R``."""

import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.linalg.toeplitz import Grid
from bo_ncgp.models.hipgp import HIPGP
from bo_ncgp.models.hipgp import model as hipgp_model
from bo_ncgp.models.hipgp.interdomain import as_op_codes

D = torch.float64


def _setup(op, cap=None):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5)).to(D)
    k.base_kernel.lengthscale = 0.3
    k.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    X = 0.05 + 0.9 * torch.rand(50, 2, generator=g, dtype=D)
    y = torch.sin(3 * X[:, 0]) + 0.05 * torch.randn(50, generator=g, dtype=D)
    grid = Grid(torch.zeros(2, dtype=D), torch.ones(2, dtype=D), (8, 8))
    models = [
        HIPGP(
            k,
            grid,
            likelihood=Gaussian(noise=0.01),
            pcg_tol=1e-10,
            pcg_max_iters=cap,
            embedding_factor=3,
        )
        for _ in range(2)
    ]
    return models, X, y, op


@pytest.mark.parametrize("cap", [None, 0])
@pytest.mark.parametrize("op", [None, "integral"])
def test_steps_without_the_rows_equal_the_steps_with_them(monkeypatch, op, cap):
    (free, full), X, y, op = _setup(op, cap)
    monkeypatch.setattr(hipgp_model, "ROW_CHUNK_ENTRIES", 7 * free.q.N)  # 8 chunks of rows
    for lr in (1.0, 0.5):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            free.natgrad_step(X, y, op=op, lr=lr, tol=1e-12, max_iters=5000)
        assert not [w for w in caught if "parse" in str(w.message)]  # no torch.sparse notices
        with torch.no_grad():
            K = full.whitened_cross_covariance(X, as_op_codes(op, 50, 2))
        full.natgrad_step(X, y, op=op, lr=lr, K=K, tol=1e-12, max_iters=5000)
        a, b = free.q.mean, full.q.mean
        assert float((a - b).norm() / b.norm()) < 1e-6  # to the solvers' tolerances
        torch.testing.assert_close(free.q.prec, full.q.prec, atol=1e-8, rtol=1e-8)
    assert free._last_pcg_solution.shape == (50, free.num_inducing)
    # without a solve the factor is the sparse interpolation weights
    sparse = free._last_pcg_solution.layout == torch.sparse_csr
    assert sparse == (cap == 0)


def test_fit_passes_the_mean_solve_tolerance_and_refuses_bad_ones():
    (a, b), X, y, op = _setup("integral")
    a.fit(X, y, op=op, natgrad_tol=1e-12, natgrad_max_iters=5000)
    b.natgrad_step(X, y, op=op, tol=1e-12, max_iters=5000)
    assert float((a.q.mean - b.q.mean).norm() / b.q.mean.norm()) < 1e-8
    loose = _setup("integral")[0][0]
    loose.fit(X, y, op=op, natgrad_tol=0.5, natgrad_max_iters=1)
    assert float((loose.q.mean - b.q.mean).norm() / b.q.mean.norm()) > 1e-3
    with pytest.raises(ValueError, match="natgrad_tol"):
        a.fit(X, y, op=op, natgrad_tol=0.0)
    with pytest.raises(ValueError, match="natgrad_max_iters"):
        a.fit(X, y, op=op, natgrad_max_iters=0)


@pytest.mark.parametrize("op", ["value", "integral"])
def test_cholesky_rows_formed_in_chunks_equal_the_rows_at_once(monkeypatch, op):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5)).to(D)
    k.base_kernel.lengthscale = 0.3
    X = 0.05 + 0.9 * torch.rand(23, 2, generator=torch.Generator().manual_seed(1), dtype=D)
    grid = Grid(torch.zeros(2, dtype=D), torch.ones(2, dtype=D), (6, 6))
    m = HIPGP(k, grid, likelihood=Gaussian(noise=0.01), whitening="cholesky", jitter=1e-8)
    codes = as_op_codes(op, 23, 2)
    whole = m.whitened_cross_covariance(X, codes)
    monkeypatch.setattr(hipgp_model, "CHOLESKY_CHUNK_ENTRIES", 5 * 36)  # 5 rows per chunk
    chunked = m.whitened_cross_covariance(X, codes)
    assert chunked.shape == whole.shape == (23, 36)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-12)
    # gradients reach the hyperparameters through every chunk
    chunked.square().sum().backward()
    assert k.raw_outputscale.grad is not None and torch.isfinite(k.raw_outputscale.grad)
