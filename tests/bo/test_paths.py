"""Posterior sample paths of DualSVGPModel (Matheron's rule): their moments are the adapter's
posterior, and BoTorch's path-based acquisitions run on them."""

from __future__ import annotations

import functools

import gpytorch
import pytest
import torch
from botorch.acquisition.joint_entropy_search import qJointEntropySearch
from botorch.acquisition.thompson_sampling import PathwiseThompsonSampling
from botorch.acquisition.utils import get_optimal_samples
from botorch.models.transforms import Normalize
from botorch.optim import optimize_acqf
from botorch.sampling.pathwise import draw_matheron_paths

from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.bo.paths import dual_matheron_paths, dual_prior_paths
from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.likelihoods import Gaussian

BOUNDS = torch.tensor([[0.0, 0.0], [3.0, 3.0]], dtype=torch.float64)


def _model(num_inducing: int) -> DualSVGPModel:
    """Noisy data on [0, 3]^2 on a scale far from unit (so the outcome transform matters),
    fixed hyperparameters (lengthscale 0.3 of the normalised inputs, noise 0.05)."""
    g = torch.Generator().manual_seed(0)
    X = 3 * torch.rand(25, 2, generator=g, dtype=torch.float64)
    Y = 5 * X.sin().sum(-1, keepdim=True) + 3 + 0.3 * torch.randn(25, 1, generator=g).double()
    kernel = gpytorch.kernels.RBFKernel()
    kernel.lengthscale = 0.3
    return DualSVGPModel(
        X,
        Y,
        likelihood=Gaussian(noise=0.05),
        kernel=kernel,
        input_transform=Normalize(2, bounds=BOUNDS),
        num_inducing=num_inducing,
    )


@pytest.mark.parametrize("num_inducing", [64, 10])
def test_paths_have_the_moments_of_the_posterior(num_inducing):
    """4,000 paths at 6 test points: mean within 0.1 posterior s.d. and covariance within
    15 % (of its largest entry) of the adapter's posterior (BoTorch's own paths of a
    SingleTaskGP are off by a median 10 % at 1,024 features), with every point inducing and
    with 10 of 25 (the sparse posterior, whose Nystrom residual the prior path carries)."""
    torch.manual_seed(1)
    model = _model(num_inducing)
    Xt = 3 * torch.rand(6, 2, dtype=torch.float64)
    post = model.posterior(Xt)
    mean, cov = post.mean.squeeze(-1), post.covariance_matrix
    prior = functools.partial(dual_prior_paths, num_features=2048)
    paths = dual_matheron_paths(model, sample_shape=torch.Size([4000]), prior_sampler=prior)
    S = paths(Xt)
    assert S.shape == (4000, 6)
    sd = cov.diagonal().sqrt()
    assert ((S.mean(0) - mean).abs() / sd).max() < 0.1
    assert (torch.cov(S.T) - cov).abs().max() / cov.abs().max() < 0.15


def test_botorch_path_acquisitions_run():
    """get_optimal_samples -> qJointEntropySearch and PathwiseThompsonSampling through
    optimize_acqf, with the dispatcher's default prior sampler."""
    torch.manual_seed(0)
    model = _model(64)
    paths = draw_matheron_paths(model, sample_shape=torch.Size([3]))
    assert paths(BOUNDS.mean(0, keepdim=True)).shape == (3, 1)
    X_opt, f_opt = get_optimal_samples(model, BOUNDS, num_optima=4, raw_samples=256)
    assert X_opt.shape == (4, 2) and f_opt.shape == (4, 1)
    # the draws' maximisers lie near the function's, (pi/2, pi/2), and their maxima are
    # within a few posterior s.d. of the posterior there
    assert (X_opt - torch.pi / 2).norm(dim=-1).max() < 0.3
    post = model.posterior(X_opt)
    z = (f_opt - post.mean) / post.variance.sqrt()
    assert z.abs().max() < 5
    jes = qJointEntropySearch(model, X_opt, f_opt)
    x, value = optimize_acqf(jes, BOUNDS, q=1, num_restarts=2, raw_samples=16)
    assert ((x >= BOUNDS[0]) & (x <= BOUNDS[1])).all() and torch.isfinite(value)
    ts = PathwiseThompsonSampling(model)
    x, value = optimize_acqf(ts, BOUNDS, q=1, num_restarts=2, raw_samples=16)
    assert ((x >= BOUNDS[0]) & (x <= BOUNDS[1])).all() and torch.isfinite(value)


def test_conditioned_model_has_no_paths():
    model = _model(64)
    X = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    fantasy = model.condition_on_observations(X, torch.tensor([[2.0]], dtype=torch.float64))
    with pytest.raises(UnsupportedError, match="before conditioning"):
        draw_matheron_paths(fantasy, sample_shape=torch.Size([2]))


def test_other_update_strategies_are_refused():
    with pytest.raises(UnsupportedError, match="update_strategy"):
        dual_matheron_paths(_model(64), sample_shape=torch.Size([2]), update_strategy=object())


def test_other_adapters_get_a_clear_error():
    """The generic adapter of another model has no paths: UnsupportedError naming it,
    instead of BoTorch's missing-signature error."""
    from bo_ncgp.bo import LatentGPModel

    from .toy_models import ExactGP

    X = torch.rand(5, 2, dtype=torch.float64)
    adapter = LatentGPModel(ExactGP(X, X.sum(-1, keepdim=True)))
    with pytest.raises(UnsupportedError, match=r"implemented for DualSVGPModel.*ExactGP"):
        draw_matheron_paths(adapter, sample_shape=torch.Size([2]))
