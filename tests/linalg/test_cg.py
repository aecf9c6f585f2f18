import pytest
import torch

from bo_ncgp.linalg import cg, low_rank_plus_diagonal_inverse, pivoted_cholesky


def spd(n, cond=1e3):
    Q, _ = torch.linalg.qr(torch.randn(n, n))
    ev = torch.logspace(0, torch.log10(torch.tensor(cond)), n)
    return Q @ torch.diag(ev) @ Q.T


def test_cg_matches_solve_batched_columns():
    A = spd(40)
    B = torch.randn(40, 5)
    res = cg(lambda V: A @ V, B, tol=1e-12)
    torch.testing.assert_close(res.solution, torch.linalg.solve(A, B), rtol=1e-8, atol=1e-8)
    assert res.converged.all()
    assert res.column_iterations.shape == (5,)
    assert (res.residual_norms <= 1e-12 * torch.linalg.vector_norm(B, dim=0) * 1.01).all()


def test_cg_vector_rhs_and_dense_matrix_and_batch():
    A = torch.stack([spd(20), spd(20)])
    b = torch.randn(2, 20, 3)
    res = cg(A, b, tol=1e-11)
    torch.testing.assert_close(res.solution, torch.linalg.solve(A, b), rtol=1e-7, atol=1e-7)
    A1 = spd(15)
    b1 = torch.randn(15)
    res1 = cg(A1, b1, tol=1e-12)
    assert res1.solution.shape == (15,)
    torch.testing.assert_close(res1.solution, torch.linalg.solve(A1, b1))


def test_cg_x0_exact_needs_no_iterations():
    A = spd(10)
    b = torch.randn(10, 1)
    x = torch.linalg.solve(A, b)
    res = cg(A, b, x0=x, tol=1e-8)
    assert res.iterations == 0


def test_cg_respects_max_iters_and_reports_nonconvergence():
    A = spd(50, cond=1e6)
    b = torch.randn(50, 2)
    res = cg(A, b, tol=1e-14, max_iters=3)
    assert res.iterations == 3
    assert not res.converged.any()


def test_preconditioned_cg_converges_in_fewer_iterations():
    # K + s^2 I with a smooth kernel: pivoted-Cholesky preconditioner captures the spectrum
    X = torch.rand(300, 2)
    K = torch.exp(-(torch.cdist(X, X) ** 2) / (2 * 0.3**2))
    A = K + 1e-3 * torch.eye(300)
    b = torch.randn(300, 2)
    plain = cg(A, b, tol=1e-10, max_iters=2000)
    L = pivoted_cholesky(K, max_rank=40).L
    pre = cg(A, b, precond=low_rank_plus_diagonal_inverse(L, 1e-3), tol=1e-10, max_iters=2000)
    exact = torch.linalg.solve(A, b)
    torch.testing.assert_close(pre.solution, exact, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(plain.solution, exact, rtol=1e-6, atol=1e-6)
    assert pre.iterations < plain.iterations / 3


def test_cg_history_decreases_overall_and_nan_rejected():
    A = spd(30)
    res = cg(A, torch.randn(30, 1), tol=1e-10, record_history=True)
    assert len(res.history) == res.iterations + 1
    assert res.history[-1].item() < 1e-10 < res.history[0].item()
    with pytest.raises(ValueError, match="NaN"):
        cg(A, torch.full((30, 1), float("nan")))


def test_zero_rhs_is_converged_immediately():
    res = cg(spd(5), torch.zeros(5, 2))
    assert res.iterations == 0 and res.converged.all()
    assert (res.solution == 0).all()
