import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.linalg import KernelOperator, _keops
from tests.conftest import selected_device


def kernels():
    k_rbf = gpytorch.kernels.RBFKernel(ard_num_dims=3)
    k_rbf.lengthscale = torch.tensor([0.3, 0.7, 1.4])
    k_m12 = gpytorch.kernels.MaternKernel(nu=0.5)
    k_m32 = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5, ard_num_dims=3))
    k_m32.outputscale = 2.5
    k_m52 = gpytorch.kernels.MaternKernel(nu=2.5, lengthscale_constraint=None)
    k_sum = gpytorch.kernels.AdditiveKernel(
        gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(active_dims=[0, 1])),
        gpytorch.kernels.MaternKernel(nu=2.5, active_dims=[2]),
    )
    return {"rbf": k_rbf, "m12": k_m12, "m32": k_m32, "m52": k_m52, "sum": k_sum}


needs_keops = pytest.mark.skipif(
    not _keops.keops_available(selected_device()), reason="KeOps does not run on the test device"
)


@pytest.mark.parametrize("name", list(kernels()))
@pytest.mark.parametrize("backend", ["dense", "chunked", pytest.param("keops", marks=needs_keops)])
def test_backends_agree_with_dense_product(name, backend):
    k = kernels()[name].double()
    X1, X2 = torch.rand(230, 3), torch.rand(170, 3)
    V = torch.randn(170, 4)
    ref = k(X1, X2).to_dense() @ V
    op = KernelOperator(k, X1, X2, backend=backend, max_memory_bytes=20_000)
    out = op @ V
    assert op.backend == backend
    assert (out - ref).abs().max() < 1e-10
    # vector right-hand side
    assert ((op @ V[:, 0]) - ref[:, 0]).abs().max() < 1e-10


@pytest.mark.parametrize("backend", ["dense", "chunked", pytest.param("keops", marks=needs_keops)])
def test_batched_kernel(backend):
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(nu=1.5, batch_shape=torch.Size([3])),
        batch_shape=torch.Size([3]),
    ).double()
    k.base_kernel.lengthscale = torch.tensor([0.2, 0.5, 1.0]).reshape(3, 1, 1)
    k.outputscale = torch.tensor([1.0, 2.0, 0.5])
    X = torch.rand(90, 2)
    V = torch.randn(3, 90, 2)
    ref = k(X).to_dense() @ V
    op = KernelOperator(k, X, backend=backend, max_memory_bytes=10_000)
    assert op.shape == (3, 90, 90)
    assert ((op @ V) - ref).abs().max() < 1e-10


@pytest.mark.parametrize("backend", ["chunked", pytest.param("keops", marks=needs_keops)])
def test_hyperparameter_gradients_match_dense(backend):
    X = torch.rand(120, 3, requires_grad=True)
    V = torch.randn(120, 2)
    grads = {}
    for b in ("dense", backend):
        k = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=3)
        ).double()
        X.grad = None
        loss = (KernelOperator(k, X, backend=b, max_memory_bytes=20_000) @ V).pow(2).sum()
        loss.backward()
        grads[b] = (
            k.base_kernel.raw_lengthscale.grad.clone(),
            k.raw_outputscale.grad.clone(),
            X.grad.clone(),
        )
    for g_d, g_b in zip(grads["dense"], grads[backend], strict=True):
        torch.testing.assert_close(g_b, g_d, rtol=1e-8, atol=1e-8)


def test_auto_picks_dense_for_small_and_non_dense_for_large():
    k = gpytorch.kernels.RBFKernel()
    assert KernelOperator(k, torch.rand(50, 2)).backend == "dense"
    big = KernelOperator(k, torch.rand(5000, 2), dense_threshold_bytes=1000)
    assert big.backend in ("keops", "chunked")


def test_unsupported_kernel_requested_keops_falls_back_to_chunked():
    k = gpytorch.kernels.PeriodicKernel().double()
    X = torch.rand(40, 1)
    op = KernelOperator(k, X, backend="keops")
    assert op.backend == "chunked"
    torch.testing.assert_close(op @ torch.ones(40, 1), k(X).to_dense() @ torch.ones(40, 1))


def test_broken_keops_warns_once_and_falls_back(monkeypatch):
    def boom(*a, **kw):
        raise RuntimeError("simulated compiler failure")

    monkeypatch.setattr(_keops, "keops_matmul", boom)
    monkeypatch.setattr(_keops, "keops_available", lambda device=None: True)
    monkeypatch.setattr(_keops, "_BROKEN", False)
    k = gpytorch.kernels.RBFKernel().double()
    X = torch.rand(30, 2)
    op = KernelOperator(k, X, backend="keops")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out1 = op @ torch.ones(30, 1)
        out2 = op @ torch.ones(30, 1)
    msgs = [str(w.message) for w in rec if "KeOps failed" in str(w.message)]
    assert len(msgs) == 1 and "simulated compiler failure" in msgs[0]
    torch.testing.assert_close(out1, k(X).to_dense() @ torch.ones(30, 1))
    torch.testing.assert_close(out2, out1)


def test_diagonal_rows_and_errors():
    k = gpytorch.kernels.RBFKernel().double()
    X = torch.rand(20, 2)
    op = KernelOperator(k, X)
    K = k(X).to_dense()
    torch.testing.assert_close(op.diagonal(), K.diagonal())
    torch.testing.assert_close(op.rows(torch.tensor([3, 7])), K[[3, 7]])
    with pytest.raises(ValueError, match="rows"):
        op @ torch.ones(19, 1)
    with pytest.raises(ValueError, match="backend"):
        KernelOperator(k, X, backend="gpu")
    with pytest.raises(ValueError, match="X2"):
        KernelOperator(k, X, torch.rand(3, 5))
    with pytest.raises(ValueError, match="square"):
        KernelOperator(k, X, torch.rand(4, 2)).diagonal()


def test_dense_cache_invalidated_by_setter_and_optimizer_step():
    k = gpytorch.kernels.RBFKernel().double()
    X = torch.rand(15, 2)
    op = KernelOperator(k, X, backend="dense")
    v = torch.ones(15, 1)
    first = op @ v
    k.lengthscale = 0.1  # setter writes through .data (no _version bump)
    torch.testing.assert_close(op @ v, k(X).to_dense() @ v)
    assert not torch.allclose(op @ v, first)
    opt = torch.optim.SGD(k.parameters(), lr=0.5)
    (op @ v).sum().backward()
    opt.step()
    with torch.no_grad():
        torch.testing.assert_close(op @ v, k(X).to_dense() @ v)
