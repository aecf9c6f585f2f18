"""DualSVGPModel and IterNCGPModel in BoTorch loops: shapes, values, acquisitions, fantasies."""

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

from bo_ncgp.bo import DualSVGPModel, IterNCGPModel
from bo_ncgp.bo.acquisition import ConstrainedLogExpectedImprovement
from bo_ncgp.likelihoods import Bernoulli, Gaussian, Poisson, Softmax, soft_targets
from bo_ncgp.models import DualSVGP, IterNCGP
from tests.bo.toy_models import check_posterior, distinct_batch

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
    return DualSVGPModel.from_model(dual.update(X, f)), X, f


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
    return DualSVGPModel.from_model(dual.update(X, (f > 0.3).double())), X


@pytest.mark.parametrize("shape", [(2,), (5, 2), (3, 4, 2)])
def test_posterior_equals_predict_f(shape):
    model, _, _ = regression()
    X = torch.rand(*shape)
    post = check_posterior(model, X, noise=0.01, rtol=1e-6, atol=1e-8)
    _, var = model.model.predict_f(X.unsqueeze(0) if X.dim() == 1 else X)
    torch.testing.assert_close(post.variance[..., 0], var)
    assert torch.linalg.eigvalsh(post.distribution.covariance_matrix).min() > -1e-9  # PSD


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
    model = DualSVGPModel.from_model(dual.update(X, y))
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
    batch = distinct_batch(
        [reg, clf],
        lambda ms: ConstrainedLogExpectedImprovement(ms[0], ms[1], best_f=f.max()),
        num_restarts=3,
        min_distance=1e-4,
    )
    final_clf = batch.models[1].model
    assert final_clf.num_data == 33  # conditioned on three soft labels


# ------------------------------------------------------------------ IterNCGPModel
def iterncgp(lik_name, n=30, condition_iters=3):
    """A small IterNCGP-CG (few solver iterations: the posterior carries computational
    uncertainty) wrapped for BoTorch."""
    X, f = data(n)
    if lik_name == "bernoulli":
        lik, y = Bernoulli(), (f > 0.3).double()
    elif lik_name == "poisson":
        lik, y = Poisson(), torch.poisson(torch.exp(f))
    else:
        lik, y = Softmax(3), torch.bucketize(f, torch.tensor([-0.5, 0.5]))
    model = IterNCGP(
        kernel(), lik, policy="cg", max_solver_iters_per_step=4, max_newton_steps=6, backend="dense"
    ).fit(X, y)
    return IterNCGPModel.from_model(model, condition_iters=condition_iters), X, y


@pytest.mark.parametrize("lik_name", ["bernoulli", "poisson"])
@pytest.mark.parametrize("shape", [(2,), (5, 2), (3, 4, 2)])
def test_iterncgp_posterior_equals_predict_f(lik_name, shape):
    model, _, _ = iterncgp(lik_name)
    assert model.num_outputs == 1 and model.batch_shape == torch.Size()
    X = torch.rand(*shape)
    post = model.posterior(X)
    Xb = X.unsqueeze(0) if X.dim() == 1 else X
    mean, cov = model.model.predict_f(Xb, full_cov=True)
    _, var = model.model.predict_f(Xb)
    assert post.mean.shape == (*Xb.shape[:-1], 1)
    torch.testing.assert_close(post.mean[..., 0], mean)
    torch.testing.assert_close(post.variance[..., 0], var)
    torch.testing.assert_close(post.distribution.covariance_matrix, cov)
    assert torch.linalg.eigvalsh(cov).min() > -1e-9
    # Eq. 9: the posterior variance (with computational uncertainty) lies below the prior
    prior = model.model.kernel(Xb, diag=True)
    assert bool((var <= prior + 1e-12).all()) and bool((var > 0).all())
    # no Gaussian noise on the latent scale: observation_noise=True changes nothing
    torch.testing.assert_close(model.posterior(X, observation_noise=True).variance, post.variance)


@pytest.mark.parametrize("lik_name", ["bernoulli", "poisson"])
def test_iterncgp_condition_on_observations_is_iterncgp_condition(lik_name):
    model, X, y = iterncgp(lik_name)
    Xf = torch.rand(3, 2)
    Y = (
        torch.tensor([[1.0], [0.0], [1.0]])
        if lik_name == "bernoulli"
        else torch.tensor([[2.0], [0.0], [5.0]])
    )
    cond = model.condition_on_observations(Xf, Y)
    assert isinstance(cond, IterNCGPModel) and cond.model is not model.model
    own = model.model.condition(Xf, Y[:, 0], num_iters=3)
    Xt = torch.rand(6, 2)
    mean, var = own.predict_f(Xt)
    torch.testing.assert_close(cond.posterior(Xt).mean[..., 0], mean)
    torch.testing.assert_close(cond.posterior(Xt).variance[..., 0], var)
    assert cond.model.train_inputs.shape == (33, 2)
    torch.testing.assert_close(cond.model.train_targets[-3:], Y[:, 0])
    assert model.model.train_inputs.shape == (30, 2)  # untouched
    # the warm start lands near a refit on all points (same solver budget per Newton step),
    # much nearer than the model without the new points
    refit = IterNCGP(
        kernel(), model.model.likelihood, max_solver_iters_per_step=4, backend="dense"
    ).fit(torch.cat([X, Xf]), torch.cat([y, Y[:, 0]]))
    Xe = torch.cat([Xt, Xf])
    ref = refit.predict_f(Xe)[0]
    dev_cond = (cond.posterior(Xe).mean[..., 0] - ref).abs().max()
    dev_base = (model.posterior(Xe).mean[..., 0] - ref).abs().max()
    assert dev_cond < 0.05 < dev_base


@pytest.mark.parametrize("lik_name", ["bernoulli", "poisson"])
def test_iterncgp_fantasize_is_a_batch_of_conditions_on_soft_targets(lik_name):
    model, _, _ = iterncgp(lik_name)
    Xf, Xt = torch.rand(2, 2), torch.rand(6, 2)
    fm = model.fantasize(Xf, SobolQMCNormalSampler(torch.Size([4]), seed=1))
    assert fm.batch_shape == torch.Size([4])
    post = fm.posterior(Xt)
    assert post.mean.shape == (4, 6, 1) and torch.isfinite(post.variance).all()
    targets = fm.model.train_targets[..., -2:]  # E[y | f] at the sampled latents
    lik = model.model.likelihood
    assert targets.shape == (4, 2)
    assert bool((targets >= 0).all()) and (lik_name == "poisson" or bool((targets <= 1).all()))
    assert targets.unique().numel() > 2  # soft (relaxed) targets, not labels
    with soft_targets():
        one = model.model.condition(Xf, targets[1], num_iters=3)
    mean, var = one.predict_f(Xt)
    torch.testing.assert_close(post.mean[1, :, 0], mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(post.variance[1, :, 0], var, atol=1e-6, rtol=1e-5)
    # t-batches of candidate sets (as in qNIPV / one-shot KG): batch shape (fantasies, b)
    fb = model.fantasize(torch.rand(5, 2, 2), SobolQMCNormalSampler(torch.Size([3])))
    assert fb.batch_shape == torch.Size([3, 5])
    assert fb.posterior(torch.rand(5, 6, 2)).mean.shape == (3, 5, 6, 1)
    assert lik is fm.model.likelihood


def test_iterncgp_softmax_shapes_and_fantasies():
    model, _, _ = iterncgp("softmax", n=40)
    assert model.num_outputs == 3
    Xt = torch.rand(4, 5, 2)
    post = model.posterior(Xt)
    mean, var = model.model.predict_f(Xt)
    torch.testing.assert_close(post.mean, mean)
    torch.testing.assert_close(post.variance, var)
    fm = model.fantasize(torch.rand(2, 2), SobolQMCNormalSampler(torch.Size([4])))
    assert fm.batch_shape == torch.Size([4])
    assert fm.posterior(torch.rand(6, 2)).mean.shape == (4, 6, 3)
    labels = fm.model.train_targets[..., -2:]
    assert labels.dtype == torch.long and bool(((labels >= 0) & (labels < 3)).all())


def test_iterncgp_acquisitions_are_differentiable_and_optimisable():
    model, _, _ = iterncgp("bernoulli")
    acq = UpperConfidenceBound(model, beta=2.0)
    Xr = torch.rand(4, 1, 2, requires_grad=True)
    acq(Xr).sum().backward()
    assert torch.isfinite(Xr.grad).all() and Xr.grad.abs().sum() > 0
    cand, _ = optimize_acqf(acq, BOUNDS, q=1, num_restarts=2, raw_samples=16)
    assert cand.shape == (1, 2) and ((cand >= 0) & (cand <= 1)).all()
    nipv = qNegIntegratedPosteriorVariance(model, mc_points=torch.rand(32, 2))
    vals = nipv(torch.rand(3, 1, 2))
    assert vals.shape == (3,) and torch.isfinite(vals).all()
