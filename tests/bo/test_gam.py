"""Tests of the BoTorch adapter bo_ncgp.bo.models.SparseGAMModel."""

from __future__ import annotations

import pytest
import torch
from botorch.acquisition import qUpperConfidenceBound
from botorch.acquisition.analytic import LogExpectedImprovement
from botorch.models.transforms.input import Normalize
from botorch.models.transforms.outcome import Standardize
from botorch.optim import optimize_acqf
from gpytorch.kernels import ScaleKernel

from bo_ncgp.bo import SparseGAMModel
from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models import SparseGAM
from bo_ncgp.models.gam.anova_kernel import ANOVAKernel
from tests.bo.toy_models import check_posterior


def make_gam(lik=None, posterior="coupled_precision"):
    Z = torch.linspace(0, 1, 6)
    comps = [(ScaleKernel(ANOVAKernel()), [i], Z) for i in range(2)]
    k12 = ScaleKernel(ANOVAKernel(active_dims=[0]) * ANOVAKernel(active_dims=[1]))
    comps.append((k12, [0, 1], torch.cartesian_prod(Z[::2], Z[::2])))
    gam = SparseGAM(comps, lik or Gaussian(0.05), posterior)
    X = torch.rand(40, 2)
    f = torch.sin(5 * X[:, 0]) - (X[:, 1] - 0.5) ** 2 + X[:, 0] * X[:, 1]
    y = f + 0.1 * torch.randn(40) if lik is None else torch.bernoulli(torch.sigmoid(3 * f))
    gam.fit(X, y, num_steps=30, lr=0.05)
    return gam


@pytest.fixture(scope="module")
def gam():
    old, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)  # module scope runs before the conftest fixture
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield make_gam()
    torch.set_default_dtype(old)
    torch.set_num_threads(threads)


def test_is_latent_gp_model_and_matches_predict_f(gam):
    model = SparseGAMModel.from_model(gam)
    assert isinstance(model, LatentGPModel)
    assert model.num_outputs == 1 and model.batch_shape == torch.Size()
    check_posterior(model, torch.rand(4, 3, 2), noise=gam.likelihood.noise.detach())
    check_posterior(model, torch.rand(2))  # a single d-vector


def test_component_posterior(gam):
    X = torch.rand(5, 2)
    post = SparseGAMModel.from_model(gam, components=[2]).posterior(X)
    cm, cv = gam.predict_components(X)
    torch.testing.assert_close(post.mean[..., 0], cm[..., 2])
    torch.testing.assert_close(post.variance[..., 0], cv[..., 2])
    with pytest.raises(ValueError, match="components"):
        SparseGAMModel.from_model(gam, components=[5])


def test_transforms(gam):
    lo, hi = torch.tensor([-2.0, 10.0]), torch.tensor([2.0, 30.0])
    tf = Normalize(d=2, bounds=torch.stack([lo, hi]))
    tf.eval()
    model = SparseGAMModel.from_model(gam, input_transform=tf)
    U = torch.rand(6, 2)
    X = lo + (hi - lo) * U
    post = model.posterior(X)
    mean, var = gam.predict_f(U)
    torch.testing.assert_close(post.mean[..., 0], mean)
    torch.testing.assert_close(post.variance[..., 0], var)

    st = Standardize(m=1)
    st(torch.tensor([[1.0], [5.0], [3.0]]))  # mean 3, std 2
    st.eval()
    post = SparseGAMModel.from_model(gam, outcome_transform=st).posterior(U)
    torch.testing.assert_close(post.mean[..., 0], 3.0 + 2.0 * mean)
    torch.testing.assert_close(post.variance[..., 0], 4.0 * var)


def test_acquisition_optimisation_and_gradients(gam):
    model = SparseGAMModel.from_model(gam)
    X = torch.rand(5, 1, 2, requires_grad=True)
    val = LogExpectedImprovement(model, best_f=0.5)(X)
    val.sum().backward()
    assert torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    cand, acq = optimize_acqf(
        qUpperConfidenceBound(model, beta=2.0), bounds, q=2, num_restarts=2, raw_samples=16
    )
    assert cand.shape == (2, 2) and ((cand >= 0) & (cand <= 1)).all()
    assert torch.isfinite(acq)


def test_bernoulli_latent_posterior_and_no_noise():
    torch.manual_seed(1)
    gam = make_gam(Bernoulli(), "mean_field")
    model = SparseGAMModel.from_model(gam)
    X = torch.rand(3, 2)
    post = model.posterior(X)
    noisy = model.posterior(X, observation_noise=True)  # no Gaussian noise to add
    torch.testing.assert_close(post.variance, noisy.variance)


def test_conditioning_not_supported(gam):
    model = SparseGAMModel.from_model(gam)
    with pytest.raises(UnsupportedError, match="does not support conditioning"):
        model.condition_on_observations(torch.rand(2, 2), torch.rand(2, 1))


def test_closed_bo_loop_with_log_ei_and_refit():
    """Two rounds of fit -> optimize_acqf(LogEI) -> evaluate -> refit on the grown data."""
    torch.manual_seed(2)

    def objective(X):
        return -((X[:, 0] - 0.3) ** 2) - (X[:, 1] - 0.7) ** 2

    Z = torch.linspace(0, 1, 5)
    comps = [(ScaleKernel(ANOVAKernel()), [i], Z) for i in range(2)]
    gam = SparseGAM(comps, Gaussian(1e-3), "coupled_precision")
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    X = torch.rand(8, 2)
    Y = objective(X)
    for _ in range(2):
        st = Standardize(m=1)
        Yt = st(Y.unsqueeze(-1))[0][:, 0]
        st.eval()
        gam.fit(X, Yt, num_steps=15, lr=0.05)  # q(U) and hyperparameters warm-started
        model = SparseGAMModel.from_model(gam, outcome_transform=st)
        acq = LogExpectedImprovement(model, best_f=Y.max())
        cand, value = optimize_acqf(acq, bounds, q=1, num_restarts=2, raw_samples=32)
        assert cand.shape == (1, 2) and ((cand >= 0) & (cand <= 1)).all()
        assert torch.isfinite(value)
        torch.testing.assert_close(acq(cand.unsqueeze(0)).detach(), value.reshape(1))
        X, Y = torch.cat([X, cand]), torch.cat([Y, objective(cand)])
    assert X.shape == (10, 2) and torch.isfinite(Y).all()
