import copy
import re

import gpytorch
import pytest
import torch

from bo_ncgp.linalg import KernelOperator, _keops
from tests.conftest import selected_device

pytestmark = pytest.mark.skipif(
    not _keops.keops_available(selected_device()), reason="KeOps does not run on the test device"
)

BATCH = torch.Size([2])


def ard_kernel(name: str, batch_shape: torch.Size = BATCH[:0]) -> gpytorch.kernels.Kernel:
    """A scaled kernel with ARD lengthscales that differ between batch members."""
    if name == "rbf":
        base = gpytorch.kernels.RBFKernel(ard_num_dims=3, batch_shape=batch_shape)
    else:
        nu = {"m12": 0.5, "m32": 1.5, "m52": 2.5}[name]
        base = gpytorch.kernels.MaternKernel(nu=nu, ard_num_dims=3, batch_shape=batch_shape)
    k = gpytorch.kernels.ScaleKernel(base, batch_shape=batch_shape)
    ell = torch.tensor([0.3, 0.7, 1.4]).expand(*batch_shape, 1, 3)
    base.lengthscale = ell * torch.linspace(1.0, 1.5, batch_shape.numel() or 1).reshape(
        *batch_shape, 1, 1
    )
    k.outputscale = torch.full(batch_shape, 1.7)
    return k


@pytest.mark.parametrize("name", ["rbf", "m12", "m32", "m52"])
def test_per_pair_formula_reads_no_scaling_constants(name):
    """The lengthscale and sqrt(2 nu) are applied once per point, in torch: the per-pair
    formula reads only the offset of the square root (Materns); Matern-5/2 reads GPyTorch's
    constants (sqrt(5), 5/3, -sqrt(5)), the form KeOps runs fastest."""
    LazyTensor = _keops._import_keops()
    k = ard_kernel(name).base_kernel.double()
    X = torch.rand(5, 3, dtype=torch.float64)
    ((K, scale),) = _keops._formula(k, X, X, LazyTensor)
    assert scale is None
    params = set(re.findall(r"Var\((\d+),1,2\)", K.formula))
    assert len(params) == {"rbf": 0, "m12": 1, "m32": 1, "m52": 4}[name], K.formula


# each kernel's batched formula compiles on first use: only Matern-5/2 in the default suite
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) for n in ("rbf", "m12", "m32")] + ["m52"]
)
def test_batched_ard_products_equal_dense_in_float64(name):
    k = ard_kernel(name, BATCH).double()
    X1 = torch.rand(2, 150, 3, dtype=torch.float64)
    X2 = torch.rand(2, 110, 3, dtype=torch.float64)
    V = torch.randn(2, 110, 3, dtype=torch.float64)
    with torch.no_grad():
        ref = k(X1, X2).to_dense() @ V
        out = KernelOperator(k, X1, X2, backend="keops") @ V
    assert (out - ref).abs().max() < 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rbf", "m12", "m32", "m52"])
def test_batched_ard_products_equal_dense_in_float32(name):
    k64 = ard_kernel(name, BATCH).double()
    k = copy.deepcopy(k64).float()
    X = torch.rand(2, 150, 3, dtype=torch.float32)
    V = torch.randn(2, 150, 2, dtype=torch.float32)
    with torch.no_grad():
        ref = k64(X.double()).to_dense() @ V.double()
        out = KernelOperator(k, X, backend="keops") @ V
    assert out.dtype == torch.float32
    assert ((out.double() - ref).abs().max() / ref.abs().max()) < 1e-5
