"""Tests of bo_ncgp.linalg.toeplitz (Wu et al. 2022, Eqs. 16-22)."""

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import NumericalWarning
from bo_ncgp.linalg.toeplitz import (
    CirculantEmbedding,
    Grid,
    circulant_first_row,
    toeplitz_first_row,
)


def _kernel(D, ls=0.15, nu=2.5):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=nu, ard_num_dims=D))
    k.outputscale = 0.7
    k.base_kernel.lengthscale = torch.full((1, D), ls)
    return k


@pytest.mark.parametrize("shape", [(40,), (7, 6), (5, 4, 6)])
def test_root_squares_to_kuu(shape):
    D = len(shape)
    k = _kernel(D)
    grid = Grid([0.0] * D, [1.0 + 0.3 * d for d in range(D)], shape)
    emb = CirculantEmbedding(circulant_first_row(k, grid))
    K = k(grid.points()).to_dense()
    assert emb.num_clamped == 0 or emb.clamped_fraction < 1e-12
    R = emb.root_dense()
    assert R.shape == (grid.num_points, emb.num_whitened)
    assert emb.num_whitened == 2**D * grid.num_points
    torch.testing.assert_close(R @ R.T, K, atol=1e-10, rtol=0)
    torch.testing.assert_close(emb.kuu_dense(), K, atol=1e-12, rtol=0)
    # R e and R^T v are adjoint products
    e, v = torch.randn(emb.num_whitened), torch.randn(grid.num_points)
    torch.testing.assert_close(emb.root_mv(e), R @ e)
    torch.testing.assert_close(emb.root_t_mv(v), R.T @ v)
    torch.testing.assert_close(toeplitz_first_row(k, grid).reshape(-1), K[0])


@pytest.mark.parametrize("shape", [(60,), (12, 10)])
def test_pcg_equals_dense_solve(shape):
    D = len(shape)
    k = _kernel(D, ls=0.1)
    grid = Grid([0.0] * D, [1.0] * D, shape)
    emb = CirculantEmbedding(circulant_first_row(k, grid), jitter=1e-6)
    K = k(grid.points()).to_dense() + 1e-6 * torch.eye(grid.num_points)
    B = torch.randn(3, grid.num_points)
    X, res = emb.solve(B, tol=1e-11)
    assert bool(res.converged.all())
    torch.testing.assert_close(X, torch.linalg.solve(K, B.T).T, atol=1e-7, rtol=1e-7)


def test_preconditioner_reduces_iterations():
    k = _kernel(2, ls=0.1)
    grid = Grid([0.0, 0.0], [1.0, 1.0], (20, 20))
    emb = CirculantEmbedding(circulant_first_row(k, grid))
    B = torch.randn(4, grid.num_points)
    _, plain = emb.solve(B, precondition=False, tol=1e-10)
    _, pre = emb.solve(B, precondition=True, tol=1e-10)
    assert bool(plain.converged.all()) and bool(pre.converged.all())
    assert pre.iterations < 0.5 * plain.iterations


def test_solve_gradients_match_dense_autograd():
    k = _kernel(1, ls=0.1)
    grid = Grid([0.0], [1.0], (30,))
    B = torch.randn(2, 30, requires_grad=True)
    W = torch.randn(2, 30)

    def loss_fft():
        emb = CirculantEmbedding(circulant_first_row(k, grid))
        return (emb.solve(B, tol=1e-12)[0] * W).sum()

    def loss_dense():
        K = k(grid.points()).to_dense()
        return (torch.linalg.solve(K, B.T).T * W).sum()

    params = [B, *k.parameters()]
    g1 = torch.autograd.grad(loss_fft(), params)
    g2 = torch.autograd.grad(loss_dense(), params)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("shape,factor", [((9,), 3), ((6, 5), 2), ((4, 3, 5), (2, 3, 2))])
def test_chunked_pruned_products_and_solves_match_dense(shape, factor):
    # products run as pruned 1-D FFT passes in cache-sized chunks of vectors; one vector per
    # chunk must give the dense answers, values and gradients, for odd embedding sizes too
    D = len(shape)
    k = _kernel(D, ls=0.2)
    grid = Grid([0.0] * D, [1.0] * D, shape)
    M = grid.num_points
    K = k(grid.points()).to_dense() + 1e-6 * torch.eye(M)
    B = torch.randn(2, 3, M, requires_grad=True)
    W = torch.randn(2, 3, M)

    def fft_loss(chunk):
        emb = CirculantEmbedding(
            circulant_first_row(k, grid, factor=factor), grid_shape=shape, jitter=1e-6
        )
        emb.chunk_elements = chunk
        X, res = emb.solve(B, tol=1e-12)
        return emb, X, res, (X * W).sum()

    emb, X1, res1, loss1 = fft_loss(1)  # one vector per chunk
    assert emb._chunk_rows() == 1
    assert res1.column_iterations.shape == (2, 3, 1) and bool(res1.converged.all())
    torch.testing.assert_close(X1, torch.linalg.solve(K, B.detach().mT).mT.reshape(2, 3, M))
    R = emb.root_dense()
    torch.testing.assert_close(R @ R.T, K, atol=1e-10, rtol=0)
    torch.testing.assert_close(emb.kuu_mv(B.detach()), B.detach() @ K)
    e = torch.randn(2, 3, emb.num_whitened)
    torch.testing.assert_close(emb.root_mv(e), e @ R.T)
    torch.testing.assert_close(emb.root_t_mv(B.detach()), B.detach() @ R)
    params = [B, *k.parameters()]
    g_chunked = torch.autograd.grad(loss1, params)
    g_dense = torch.autograd.grad(
        (torch.linalg.solve(k(grid.points()).to_dense() + 1e-6 * torch.eye(M), B.mT).mT * W).sum(),
        params,
    )
    for a, b in zip(g_chunked, g_dense, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_negative_eigenvalues_are_clamped_with_warning():
    k = _kernel(1, ls=2.0, nu=2.5)  # lengthscale >> domain: the embedding is not PSD
    grid = Grid([0.0], [1.0], (20,))
    with pytest.warns(NumericalWarning, match=r"clamped \d+ negative eigenvalue.*spectral mass"):
        emb = CirculantEmbedding(circulant_first_row(k, grid))
    assert emb.num_clamped > 0 and 0 < emb.clamped_fraction < 1
    assert bool((emb.sqrt_eigenvalues >= 0).all())
    # K_uu products stay exact; only the root is approximate
    K = k(grid.points()).to_dense()
    torch.testing.assert_close(emb.kuu_dense(), K, atol=1e-12, rtol=0)
    # a larger embedding repairs it: R R^T = K_uu again with prod(factor M_d) columns
    emb8 = CirculantEmbedding(circulant_first_row(k, grid, factor=48), grid_shape=grid.shape)
    R = emb8.root_dense()
    assert R.shape == (20, 960)
    torch.testing.assert_close(R @ R.T, K, atol=1e-9, rtol=0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="at least 2 points"):
        Grid([0.0], [1.0], (1,))
    with pytest.raises(ValueError, match="same length"):
        Grid([0.0, 0.0], [1.0], (3,))
    with pytest.raises(ValueError, match="must exceed"):
        Grid([1.0], [0.0], (3,))
    with pytest.raises(ValueError, match="at most half"):
        CirculantEmbedding(torch.ones(5), grid_shape=(3,))
    with pytest.raises(ValueError, match="factor"):
        circulant_first_row(_kernel(1), Grid([0.0], [1.0], (4,)), factor=1)
    with pytest.raises(ValueError, match="NaN"):
        CirculantEmbedding(torch.tensor([1.0, float("nan")]))
    emb = CirculantEmbedding(circulant_first_row(_kernel(1), Grid([0.0], [1.0], (8,))))
    with pytest.raises(ValueError, match="length 8"):
        emb.kuu_mv(torch.ones(7))
