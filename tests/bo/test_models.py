"""DualSVGPModel in BoTorch loops: shapes, values, acquisitions, fantasies."""

import gpytorch
import pytest
import torch
from botorch.acquisition import (
    LogExpectedImprovement,
    UpperConfidenceBound,
    qLogNoisyExpectedImprovement,
    qNegIntegratedPosteriorVariance,
)
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler

from bo_ncgp.bo import DualSVGPModel, build_fantasy_batch
from bo_ncgp.bo.acquisition import ConstrainedLogExpectedImprovement
from bo_ncgp.likelihoods import Bernoulli, Gaussian, Softmax
from bo_ncgp.models import DualSVGP

BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


def kernel(batch=()):
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(nu=2.5, batch_shape=torch.Size(batch)),
        batch_shape=torch.Size(batch),
    )
    k.base_kernel.lengthscale = 0.3
    return k


def data(n=30):
    X = torch.rand(n, 2)
    f = torch.sin(6 * X[:, 0]) + torch.cos(4 * X[:, 1])
    return X, f


def regression():
    X, f = data()
    dual = DualSVGP(kernel(), Gaussian(0.01), X[:15], memory_size=None, num_hyper_steps=0)
    return DualSVGPModel(dual.update(X, f)), X, f


def classifier():
    X, f = data()
    dual = DualSVGP(
        kernel(),
        Bernoulli(),
        X[:15],
        memory_size=None,
        num_hyper_steps=0,
        rho=0.5,
        num_inner_steps=20,
    )
    return DualSVGPModel(dual.update(X, (f > 0.3).double())), X


@pytest.mark.parametrize("shape", [(2,), (5, 2), (3, 4, 2)])
def test_posterior_equals_predict_f(shape):
    model, _, _ = regression()
    X = torch.rand(*shape)
    post = model.posterior(X)
    Xb = X.unsqueeze(0) if X.dim() == 1 else X
    mean, cov = model.model.predict_f(Xb, full_cov=True)
    _, var = model.model.predict_f(Xb)
    torch.testing.assert_close(post.mean[..., 0], mean)
    torch.testing.assert_close(post.variance[..., 0], var)
    C = post.distribution.covariance_matrix
    torch.testing.assert_close(C, cov)
    assert torch.linalg.eigvalsh(C).min() > -1e-9  # joint covariance PSD
    noisy = model.posterior(X, observation_noise=True)
    torch.testing.assert_close(
        noisy.variance - post.variance, torch.full_like(post.variance, 0.01), rtol=1e-6, atol=1e-8
    )


def test_softmax_multi_output_shapes():
    X, f = data(40)
    y = torch.bucketize(f, torch.tensor([-0.5, 0.5]))
    dual = DualSVGP(
        kernel((3,)),
        Softmax(3),
        X[:15],
        memory_size=None,
        num_hyper_steps=0,
        rho=0.5,
        num_inner_steps=10,
    )
    model = DualSVGPModel(dual.update(X, y))
    assert model.num_outputs == 3
    post = model.posterior(torch.rand(4, 5, 2))
    assert post.mean.shape == (4, 5, 3)
    mean, var = dual.predict_f(torch.rand(4, 5, 2))
    assert mean.shape == (4, 5, 3) and var.shape == (4, 5, 3)
    sub = model.subset_output([1])
    Xq = torch.rand(6, 2)
    torch.testing.assert_close(sub.posterior(Xq).mean, model.posterior(Xq).mean[..., 1:2])
    fm = model.fantasize(torch.rand(2, 2), SobolQMCNormalSampler(torch.Size([4])))
    assert fm.posterior(Xq).mean.shape == (4, 6, 3)


@pytest.mark.parametrize("acq_name", ["logei", "qlognei", "ucb"])
def test_optimize_acqf_on_dual_model(acq_name):
    model, X, f = regression()
    q = 1 if acq_name != "qlognei" else 2
    if acq_name == "logei":
        acq = LogExpectedImprovement(model, best_f=f.max())
    elif acq_name == "ucb":
        acq = UpperConfidenceBound(model, beta=2.0)
    else:
        acq = qLogNoisyExpectedImprovement(
            model, X_baseline=X, sampler=SobolQMCNormalSampler(torch.Size([32]))
        )
    Xr = torch.rand(4, q, 2, requires_grad=True)
    acq(Xr).sum().backward()
    assert torch.isfinite(Xr.grad).all() and Xr.grad.abs().sum() > 0
    cand, _ = optimize_acqf(acq, BOUNDS, q=q, num_restarts=3, raw_samples=32)
    assert cand.shape == (q, 2)
    assert ((cand >= 0) & (cand <= 1)).all()


def test_fantasize_and_condition_on_observations():
    model, _, _ = regression()
    Xf = torch.rand(3, 2)
    fm = model.fantasize(Xf, SobolQMCNormalSampler(torch.Size([8])))
    assert fm.batch_shape == torch.Size([8])
    Xt = torch.rand(5, 2)
    assert fm.posterior(Xt).mean.shape == (8, 5, 1)
    Y = torch.randn(3, 1)
    cond = model.condition_on_observations(Xf, Y)
    own = model.model.condition(Xf, Y[:, 0])
    mean, var = own.predict_f(Xt)
    torch.testing.assert_close(cond.posterior(Xt).mean[..., 0], mean)
    torch.testing.assert_close(cond.posterior(Xt).variance[..., 0], var)
    assert model.model.num_data == 30  # untouched


def test_qnipv_on_classifier():
    model, _ = classifier()
    mc = torch.rand(64, 2)
    acq = qNegIntegratedPosteriorVariance(model, mc_points=mc)
    X = torch.rand(5, 1, 2)
    vals = acq(X)
    assert vals.shape == (5,) and torch.isfinite(vals).all()
    base = -model.posterior(mc).variance.mean()
    assert (vals >= base - 1e-9).all()  # conditioning never increases the variance
    cand, _ = optimize_acqf(acq, BOUNDS, q=1, num_restarts=2, raw_samples=16)
    assert cand.shape == (1, 2)


def test_fantasy_batch_through_classifier_soft_labels():
    reg, _, f = regression()
    clf, _ = classifier()
    batch = build_fantasy_batch(
        [reg, clf],
        lambda ms: ConstrainedLogExpectedImprovement(ms[0], ms[1], best_f=f.max()),
        q=3,
        bounds=BOUNDS,
        num_restarts=3,
        raw_samples=64,
    )
    assert batch.X.shape == (3, 2)
    assert torch.cdist(batch.X, batch.X).add(torch.eye(3)).min() > 1e-4
    final_clf = batch.models[1].model
    assert final_clf.num_data == 33  # conditioned on three soft labels
