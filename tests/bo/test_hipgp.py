"""Tests of the BoTorch adapter bo_ncgp.bo.models.HIPGPModel."""

import gpytorch
import pytest
import torch
from botorch.acquisition import (
    ExpectedImprovement,
    qKnowledgeGradient,
    qNegIntegratedPosteriorVariance,
    qUpperConfidenceBound,
)
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler

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


def fitted_1d(**options):
    torch.manual_seed(0)
    k = gpytorch.kernels.MaternKernel(nu=2.5)
    k.lengthscale = 0.2
    hip = HIPGP(k, Grid([0.0], [1.0], (32,)), **options)
    X = torch.rand(20, 1)
    return hip.fit(X, torch.sin(6 * X[:, 0]), learn_hyperparameters=True, num_epochs=2)


@pytest.mark.parametrize("x0", [0.37, 0.61])
def test_posterior_gradients_in_x_match_finite_differences(x0):
    model = HIPGPModel.from_model(fitted_1d(pcg_tol=1e-10))

    def moments(x):
        post = model.posterior(x)
        return post.mean.sum(), post.variance.sum()

    grads = []
    for i in range(2):
        x = torch.tensor([[x0]], requires_grad=True)
        grads.append(torch.autograd.grad(moments(x)[i], x)[0].item())
    h = 1e-5
    up, down = moments(torch.tensor([[x0 + h]])), moments(torch.tensor([[x0 - h]]))
    fds = [((a - b) / (2 * h)).item() for a, b in zip(up, down, strict=True)]
    # the PCG solves (to 1e-10) leave ~1e-11 of noise in each moment: ~1e-6 in the
    # difference quotients, a few 1e-5 of the variance's gradient
    assert grads == pytest.approx(fds, rel=1e-4)


def test_the_adapter_and_a_trained_hipgp_deep_copy():
    import copy

    model = HIPGPModel.from_model(fitted_1d())
    X = torch.rand(4, 1, requires_grad=True)
    model.posterior(X).mean.sum().backward()  # caches a whitener with an autograd graph
    twin = copy.deepcopy(model)
    U = torch.rand(5, 1)
    torch.testing.assert_close(twin.posterior(U).mean, model.posterior(U).mean)
    assert twin.model.kernel is not model.model.kernel


def test_float32_data_under_a_float64_default_is_cast_and_fits():
    torch.manual_seed(0)
    X = torch.rand(20, 1)
    y = torch.sin(6 * X[:, 0])
    k = gpytorch.kernels.MaternKernel(nu=2.5)
    hip = HIPGP(k, Grid([0.0], [1.0], (32,)))
    torch.manual_seed(1)
    with pytest.warns(UserWarning, match="float32"):
        hip.fit(X.float(), y.float(), learn_hyperparameters=True)
    ref = HIPGP(gpytorch.kernels.MaternKernel(nu=2.5), Grid([0.0], [1.0], (32,)))
    torch.manual_seed(1)
    ref.fit(X.float().double(), y.float().double(), learn_hyperparameters=True)
    torch.testing.assert_close(hip.predict_f(X)[0], ref.predict_f(X)[0])


def test_hipgp_adapter_is_built_from_data_and_fitted_by_fit_gpytorch_mll():
    from botorch.fit import fit_gpytorch_mll

    from bo_ncgp.bo import LatentGPMarginalLogLikelihood

    torch.manual_seed(0)
    X = torch.rand(20, 1)
    k = gpytorch.kernels.MaternKernel(nu=2.5)
    k.lengthscale = 0.2  # well inside the grid's domain: no circulant clamping
    model = HIPGPModel(X, torch.sin(6 * X), k, Grid([0.0], [1.0], (32,)))
    before = k.lengthscale.detach().clone()
    fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))
    assert not torch.equal(k.lengthscale, before)  # hyperparameters learned
    assert model.posterior(X[:3]).mean.shape == (3, 1)


def test_condition_on_observations_and_fantasize_condition_the_hipgp(hip):
    model = HIPGPModel.from_model(hip)
    Xc, Yc = torch.rand(2, 2), torch.randn(2, 1)
    cond = model.condition_on_observations(Xc, Yc)
    Xt = torch.rand(3, 2)
    ref = hip.condition(Xc, Yc[:, 0]).predict_f(Xt, full_cov=True)
    post = cond.posterior(Xt)
    torch.testing.assert_close(post.mean[..., 0], ref[0])
    torch.testing.assert_close(post.distribution.covariance_matrix, ref[1], atol=1e-9, rtol=0)
    # derivative observations through an adapter whose posterior is the derivative
    deriv = HIPGPModel.from_model(hip, op=("derivative", 1)).condition_on_observations(Xc, Yc)
    ref_d = hip.condition(Xc, Yc[:, 0], op=("derivative", 1)).predict_f(Xt, op=("derivative", 1))
    torch.testing.assert_close(deriv.posterior(Xt).mean[..., 0], ref_d[0])
    fant = model.fantasize(torch.rand(4, 1, 2), SobolQMCNormalSampler(torch.Size([3])))
    assert fant.batch_shape == (3, 4)
    assert fant.posterior(torch.rand(4, 5, 2)).mean.shape == (3, 4, 5, 1)


def test_qnipv_and_qkg_run_with_hipgp(hip):
    model = HIPGPModel.from_model(hip)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    nipv = qNegIntegratedPosteriorVariance(model, mc_points=torch.rand(32, 2))
    cand, val = optimize_acqf(
        nipv, bounds, q=1, num_restarts=2, raw_samples=8, options={"maxiter": 5}
    )
    assert cand.shape == (1, 2) and bool(torch.isfinite(val))
    # observing at the candidate lowers the integrated variance below observing nowhere new
    before = -hip.predict_f(nipv.mc_points)[1].mean()
    assert float(val) > float(before)
    kg = qKnowledgeGradient(model, num_fantasies=4)
    X = torch.rand(2, 1 + 4, 2, requires_grad=True)  # q = 1 plus 4 fantasy solutions
    out = kg(X)
    (g,) = torch.autograd.grad(out.sum(), X)
    assert out.shape == (2,) and bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0
