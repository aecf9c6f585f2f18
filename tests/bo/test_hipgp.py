"""Tests of the BoTorch adapter bo_ncgp.bo.models.HIPGPModel."""

import gpytorch
import pytest
import torch
from botorch.acquisition import ExpectedImprovement, qUpperConfidenceBound
from botorch.optim import optimize_acqf

from bo_ncgp.bo import HIPGPModel
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models.hipgp import HIPGP, Grid
from tests.bo.toy_models import check_posterior


@pytest.fixture
def hip():
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=2))
    k.base_kernel.lengthscale = 0.25
    m = HIPGP(
        k,
        Grid([-0.2, -0.2], [1.2, 1.2], (16, 16)),
        likelihood=Gaussian(0.01),
        variational="full",
        pcg_tol=1e-10,
    )
    X = torch.rand(30, 2)
    y = torch.sin(4 * X[:, 0]) * torch.cos(3 * X[:, 1])
    m.natgrad_step(X, y)
    return m


def test_posterior_matches_predict_f_shapes_and_noise(hip):
    model = HIPGPModel.from_model(hip)
    X = torch.rand(4, 3, 2)
    check_posterior(model, X, noise=0.01)
    # a transformed-domain posterior: the derivative along x_0
    d = HIPGPModel.from_model(hip, op=("derivative", 0)).posterior(X[0])
    dm, dv = hip.predict_f(X[0], op=("derivative", 0))
    torch.testing.assert_close(d.mean[..., 0], dm)
    torch.testing.assert_close(d.variance[..., 0], dv)


def test_acquisition_optimisation_runs_and_gradients_flow(hip):
    model = HIPGPModel.from_model(hip)
    X = torch.rand(5, 1, 2, requires_grad=True)
    ei = ExpectedImprovement(model, best_f=0.5)
    val = ei(X)
    assert val.shape == (5,)
    (g,) = torch.autograd.grad(val.sum(), X)
    assert bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    cand, acq = optimize_acqf(
        qUpperConfidenceBound(model, beta=2.0),
        bounds,
        q=2,
        num_restarts=2,
        raw_samples=16,
        options={"maxiter": 5},
    )
    assert cand.shape == (2, 2) and bool(torch.isfinite(acq))
    assert bool(((cand >= 0) & (cand <= 1)).all())
