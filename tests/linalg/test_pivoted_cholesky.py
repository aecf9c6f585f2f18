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


class _CountingRows:
    """Row access through a kernel operator that counts the requests."""

    def __init__(self, op):
        self.op, self.calls = op, 0

    def diagonal(self):
        return self.op.diagonal()

    def rows(self, idx):
        self.calls += 1
        return self.op.rows(idx)


class _LazyRowByRow:
    """The plain lazy GPyTorch evaluation of one row per request (sum over a kernel batch)."""

    def __init__(self, kernel, X):
        self.kernel, self.X = kernel, X

    def diagonal(self):
        d = self.kernel(self.X, self.X, diag=True)
        return d.reshape(-1, d.shape[-1]).sum(0)

    def rows(self, idx):
        assert len(idx) == 1
        r = self.kernel(self.X[idx], self.X).to_dense()
        return r.reshape(-1, *r.shape[-2:]).sum(0)


_B3 = torch.Size([3])
_KERNELS = {
    "rbf": lambda: gpytorch.kernels.RBFKernel(),
    "matern32": lambda: gpytorch.kernels.MaternKernel(nu=1.5),
    "scale-rbf-ard": lambda: gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.RBFKernel(ard_num_dims=3)
    ),
    "batch-matern52": lambda: gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=3, batch_shape=_B3), batch_shape=_B3
    ),
}


@pytest.mark.parametrize("name", sorted(_KERNELS))
@pytest.mark.parametrize("n", [120, 400])
def test_blocked_rows_give_the_row_by_row_pivots_and_factor(name, n):
    from bo_ncgp.models.dual.inducing import _SummedRows

    torch.manual_seed(0)
    X = torch.rand(n, 3, dtype=torch.float64)
    kernel = _KERNELS[name]().to(torch.float64)
    with torch.no_grad():
        ref = pivoted_cholesky(_LazyRowByRow(kernel, X), max_rank=60, block_entries=1)
        counted = _CountingRows(_SummedRows(kernel, X))
        res = pivoted_cholesky(counted, max_rank=60)
    assert res.pivots.tolist() == ref.pivots.tolist()
    torch.testing.assert_close(res.L, ref.L, atol=1e-12, rtol=0)
    torch.testing.assert_close(res.error, ref.error, atol=1e-10, rtol=1e-12)
    assert counted.calls <= len(res.pivots) // 3  # blocks, not one request per pivot


def test_block_entries_one_requests_one_row_per_pivot():
    X = torch.rand(50, 2, dtype=torch.float64)
    counted = _CountingRows(KernelOperator(gpytorch.kernels.RBFKernel().double(), X))
    with torch.no_grad():
        res = pivoted_cholesky(counted, max_rank=10, block_entries=1)
    assert counted.calls == len(res.pivots) == 10


def test_bad_block_entries():
    with pytest.raises(ValueError, match="block_entries must be an integer >= 1, got 0"):
        pivoted_cholesky(torch.eye(3), 2, block_entries=0)


@pytest.mark.parametrize(
    "kernel",
    [
        gpytorch.kernels.RBFKernel(active_dims=[0, 2]),
        gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=0.5, batch_shape=_B3)),
        gpytorch.kernels.RBFKernel() + gpytorch.kernels.LinearKernel(),
    ],
    ids=["active-dims", "batch-scale-matern", "sum"],
)
def test_kernel_operator_rows_equal_the_lazy_kernel_rows(kernel):
    X = torch.rand(30, 3, dtype=torch.float64)
    kernel = kernel.to(torch.float64)
    idx = torch.tensor([4, 0, 29])
    with torch.no_grad():
        rows = KernelOperator(kernel, X).rows(idx)
        lazy_rows = kernel(X.index_select(-2, idx), X).to_dense()
        ref = kernel(X).to_dense()[..., idx, :]
    assert rows.shape == ref.shape
    torch.testing.assert_close(rows, lazy_rows, atol=1e-14, rtol=1e-14)
    # against the full matrix, GPyTorch's distance between a point and itself is exact zero
    # only when x1 is x2; between copies it is sqrt of a cancellation (~1e-8), which the
    # Matern-1/2 kernel passes on at slope 1 / lengthscale
    torch.testing.assert_close(rows, ref, atol=1e-7, rtol=0)
