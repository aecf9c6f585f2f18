"""The adapters as BoTorch models built from data: a SingleTaskGP user's loop runs with them."""

import warnings

import numpy as np
import pytest
import torch
from botorch.acquisition import LogExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from gpytorch.kernels import MaternKernel, RBFKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

from bo_ncgp.bo import DualSVGPModel, IterNCGPModel, LatentGPMarginalLogLikelihood
from bo_ncgp.exceptions import InputDataError, InputDataWarning, UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models import DualSVGP

BOUNDS = torch.tensor([[-2.0, 0.0], [3.0, 10.0]], dtype=torch.float64)


def f(X):
    return -((X[:, :1] - 0.5) ** 2) - 0.05 * (X[:, 1:] - 4.0) ** 2 + 0.1 * torch.sin(3 * X[:, :1])


def data(n=12, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = BOUNDS[0] + (BOUNDS[1] - BOUNDS[0]) * torch.rand(n, 2, generator=g, dtype=torch.float64)
    return X.to(dtype), f(X).to(dtype)


def botorch_loop(build, mll_class, train_X, train_Y, iterations=2):
    """A SingleTaskGP user's loop: build, fit, LogEI, optimize_acqf, condition, rebuild."""
    bounds = BOUNDS.to(train_X)
    for _ in range(iterations):
        model = build(
            train_X,
            train_Y,
            input_transform=Normalize(d=2),
            outcome_transform=Standardize(m=1),
        )
        fit_gpytorch_mll(mll_class(model.likelihood, model))
        acq = LogExpectedImprovement(model, best_f=train_Y.max())
        x, _ = optimize_acqf(acq, bounds, q=1, num_restarts=2, raw_samples=32)
        y = f(x.double()).to(train_Y)
        fantasy = model.condition_on_observations(x, y)
        assert fantasy.posterior(x).mean.shape == (1, 1)
        train_X, train_Y = torch.cat([train_X, x]), torch.cat([train_Y, y])
    return model, train_X, train_Y


def test_a_singletaskgp_loop_runs_with_dualsvgpmodel_and_learns_the_data():
    X, Y = data()
    ref, Xr, Yr = botorch_loop(SingleTaskGP, ExactMarginalLogLikelihood, X, Y)
    model, Xd, Yd = botorch_loop(DualSVGPModel, LatentGPMarginalLogLikelihood, X, Y)
    assert Xd.shape == (14, 2) and bool(((Xd >= BOUNDS[0]) & (Xd <= BOUNDS[1])).all())
    Xd, Yd, Xr, Yr = Xd[:-1], Yd[:-1], Xr[:-1], Yr[:-1]  # the data of the last models
    # the transforms were trained on the data, as SingleTaskGP's are
    assert torch.allclose(model.input_transform.mins, Xd.min(0).values)
    assert torch.allclose(model.outcome_transform.means, Yd.mean(0))
    # and the fitted model interpolates its (noise-free) data about as well as SingleTaskGP
    err = (model.posterior(Xd).mean - Yd).abs().max()
    err_ref = (ref.posterior(Xr).mean - Yr).abs().max()
    assert err < max(5 * err_ref, 0.05 * Yd.std())


def test_fit_gpytorch_mll_trains_the_hyperparameters_by_the_models_own_training():
    X, Y = data()
    model = DualSVGPModel(X, Y, kernel=MaternKernel(nu=2.5, ard_num_dims=2), num_hyper_steps=50)
    before = model.model.kernel.lengthscale.detach().clone()
    assert model.model.num_data == 12  # streamed in with the initial hyperparameters
    mll = fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))
    assert not mll.training and model.model.num_data == 12
    assert not torch.allclose(model.model.kernel.lengthscale, before)


def test_outcome_transform_defaults_to_standardize_for_a_gaussian_likelihood_only():
    X, Y = data()
    assert isinstance(DualSVGPModel(X, Y).outcome_transform, Standardize)
    labels = (Y > Y.median()).double()
    clf = DualSVGPModel(X, labels, Bernoulli(), num_hyper_steps=0)
    assert not hasattr(clf, "outcome_transform")
    assert clf.posterior(X).mean.shape == (12, 1)


def test_targets_of_shape_n_and_n_by_1_give_the_same_model():
    X, Y = data()
    a = DualSVGPModel(X, Y, num_hyper_steps=0).posterior(X).mean
    b = DualSVGPModel(X, Y[:, 0], num_hyper_steps=0).posterior(X).mean
    assert torch.equal(a, b)
    with pytest.raises(InputDataError, match=r"train_Y must have shape \(n, 1\)"):
        DualSVGPModel(X, Y.repeat(1, 2))


def test_float32_data_gives_one_warning_and_runs_in_float64():
    X, Y = data(dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, *_ = botorch_loop(DualSVGPModel, LatentGPMarginalLogLikelihood, X, Y, 1)
    relevant = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert len(relevant) == 1, [str(w.message) for w in relevant]
    assert relevant[0].category is InputDataWarning and "float64" in str(relevant[0].message)
    assert model.model.Z.dtype == torch.float64


def test_a_model_where_data_is_expected_names_from_model():
    dual = DualSVGP(RBFKernel(), Gaussian(), torch.rand(3, 2))
    with pytest.raises(InputDataError, match=r"DualSVGPModel\.from_model\(model\)"):
        DualSVGPModel(dual, torch.zeros(3, 1))


def test_a_bo_ncgp_model_handed_to_botorch_names_its_adapter():
    dual = DualSVGP(RBFKernel(), Gaussian(), torch.rand(3, 2))
    with pytest.raises(UnsupportedError, match=r"bo_ncgp\.bo\.DualSVGPModel\.from_model"):
        LogExpectedImprovement(dual, best_f=0.0)


def test_predicting_before_any_data_warns_once():
    model = DualSVGPModel.from_model(DualSVGP(RBFKernel(), Gaussian(), torch.rand(3, 2)))
    with pytest.warns(UserWarning, match="has seen no data"):
        model.posterior(torch.rand(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.posterior(torch.rand(2, 2))  # once per adapter


def test_fit_of_an_adapter_around_a_model_says_how_to_train_it():
    X, Y = data()
    dual = DualSVGP(RBFKernel(), Gaussian(), X[:4]).update(X, Y[:, 0])
    model = DualSVGPModel.from_model(dual)
    with pytest.raises(UnsupportedError, match=r"from_model.*holds no training data"):
        fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))


def test_streaming_update_equals_a_model_built_on_all_data_without_hyperparameter_steps():
    X, Y = data(16)
    tf = {"input_transform": Normalize(2, bounds=BOUNDS), "outcome_transform": None}
    streamed = DualSVGPModel(X[:10], Y[:10], num_hyper_steps=0, **tf).update(X[10:], Y[10:])
    tf = {"input_transform": Normalize(2, bounds=BOUNDS), "outcome_transform": None}
    batch = DualSVGPModel(X, Y, num_hyper_steps=0, **tf)
    U = torch.rand(5, 2, dtype=torch.float64) * 5
    torch.testing.assert_close(streamed.posterior(U).mean, batch.posterior(U).mean)


def test_numpy_inducing_points_are_accepted_like_numpy_data():
    Z = np.random.default_rng(0).random((4, 2))
    dual = DualSVGP(RBFKernel(), Gaussian(), Z)
    assert torch.equal(dual.Z, torch.as_tensor(Z))


def test_iterncgp_adapter_is_built_from_data_too():
    X, Y = data()
    model = IterNCGPModel(X, (Y > Y.median()).double(), Bernoulli(), condition_iters=2)
    fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))
    assert model.posterior(X[:3]).mean.shape == (3, 1)


def test_ax_passes_known_noise_which_is_refused_by_name():
    X, Y = data()
    with pytest.raises(UnsupportedError, match="train_Yvar"):
        DualSVGPModel(X, Y, train_Yvar=torch.full_like(Y, 0.1))


def test_acquisition_to_candidates_changes_no_tensor_of_the_model():
    """BoTorch's analytic acquisitions call ``self.to(X)`` on every evaluation: with the
    model already there nothing is moved or copied (the cached factorisation survives), and
    float32 candidates leave a float64 model's tensors bit for bit as they were."""
    X, Y = data()
    model = DualSVGPModel(X, Y, num_hyper_steps=0)
    acqf = LogExpectedImprovement(model, best_f=Y.max())
    acqf(X[:3].unsqueeze(1))
    tensors = {n: t for n, t in model.named_parameters()} | dict(model.named_buffers())
    copies = {n: t.clone() for n, t in tensors.items()}
    cache = model.model._base_cache
    assert cache is not None
    for cand in (X[:3], X[:3].float()):
        acqf(cand.unsqueeze(1))
        now = {n: t for n, t in model.named_parameters()} | dict(model.named_buffers())
        assert all(now[n] is tensors[n] for n in tensors)
        assert all(torch.equal(now[n], copies[n]) for n in tensors)
        assert model.model._base_cache is cache
    model.float()  # the adapter keeps the dtype it announced, without a float32 round trip
    assert torch.equal(model.model.Z, copies["model._Z"]) and model.model.Z.dtype == X.dtype


def test_the_tensor_walk_behind_self_to_is_kept_until_the_model_changes(monkeypatch):
    """``self.to(X)`` on every evaluation walks the module tree once, not every time; a
    real conversion, or another wrapped model, walks it again and converts."""
    import bo_ncgp.bo.base as adapter_base

    X, Y = data()
    dual = DualSVGP(RBFKernel(), Gaussian(0.01), X[:6], num_hyper_steps=0).update(X, Y[:, 0])
    model = DualSVGPModel.from_model(dual)
    walks = []
    real = adapter_base.tensor_kinds
    monkeypatch.setattr(adapter_base, "tensor_kinds", lambda m: walks.append(1) or real(m))
    acqf = LogExpectedImprovement(model, best_f=Y.max())
    for _ in range(4):
        acqf(X[:3].unsqueeze(1))
    assert len(walks) == 1
    model.float()  # a real conversion (no dtype announced for an adapter from a model)
    assert len(walks) == 1 and model.model.Z.dtype == torch.float32  # the kept walk said so
    acqf(X[:3].unsqueeze(1))  # float64 candidates: walked again, and moved back
    assert len(walks) == 2 and model.model.Z.dtype == torch.float64
    model.model = DualSVGP(RBFKernel(), Gaussian(0.01), X[:6].float(), num_hyper_steps=0)
    acqf(X[:3].unsqueeze(1))  # another wrapped model: walked again, and converted
    assert len(walks) == 3 and model.model.Z.dtype == torch.float64
