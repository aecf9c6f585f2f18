import gpytorch
import pytest
import torch

from bo_ncgp.linalg import KernelOperator, pivoted_cholesky


def reference_greedy(K, r):
    """Textbook O(n^2 r) pivoted Cholesky on the dense matrix (full Schur complements)."""
    R = K.clone()
    piv, cols = [], []
    for _ in range(r):
        d = R.diagonal().clone()
        d[piv] = -float("inf")
        i = int(torch.argmax(d))
        col = R[:, i] / R[i, i].sqrt()
        piv.append(i)
        cols.append(col)
        R = R - torch.outer(col, col)
    return torch.tensor(piv), torch.stack(cols, 1)


def test_exact_on_rank_r_matrix():
    A = torch.randn(60, 7)
    K = A @ A.T
    res = pivoted_cholesky(K, max_rank=20)
    assert len(res.pivots) == 7  # stops at the numerical rank
    torch.testing.assert_close(res.L @ res.L.T, K, atol=1e-9, rtol=1e-9)
    assert res.error < 1e-8


def test_reproduces_greedy_pivot_order():
    X = torch.rand(80, 3)
    K = gpytorch.kernels.MaternKernel(nu=2.5)(X).to_dense().detach()
    res = pivoted_cholesky(K, max_rank=15)
    piv_ref, L_ref = reference_greedy(K, 15)
    assert res.pivots.tolist() == piv_ref.tolist()
    torch.testing.assert_close(res.L, L_ref, atol=1e-10, rtol=1e-10)
    # residual trace reported correctly
    torch.testing.assert_close(res.error, (K - res.L @ res.L.T).diagonal().sum())


def test_operator_row_access_matches_dense_and_never_forms_K(monkeypatch):
    X = torch.rand(100, 2)
    k = gpytorch.kernels.RBFKernel()
    op = KernelOperator(k, X)
    monkeypatch.setattr(KernelOperator, "to_dense", lambda self: pytest.fail("formed K"))
    res_op = pivoted_cholesky(op, max_rank=10)
    K = k(X).to_dense().detach()
    res_d = pivoted_cholesky(K, max_rank=10)
    assert res_op.pivots.tolist() == res_d.pivots.tolist()
    torch.testing.assert_close(res_op.L.detach(), res_d.L)


def test_tolerance_stops_early():
    A = torch.randn(40, 40)
    K = A @ A.T
    full = pivoted_cholesky(K, max_rank=40)
    tol = float(K.trace()) * 0.5
    res = pivoted_cholesky(K, max_rank=40, tol=tol)
    assert len(res.pivots) < len(full.pivots)
    assert res.error <= tol


def test_bad_input():
    with pytest.raises(ValueError, match="square"):
        pivoted_cholesky(torch.ones(3, 4), 2)
    with pytest.raises(ValueError, match="max_rank"):
        pivoted_cholesky(torch.eye(3), -1)
