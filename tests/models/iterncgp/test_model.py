"""IterNCGP's public API: shapes, gradients, predictive probabilities, callbacks,
conditioning (fantasies), dtypes and input validation."""

import math

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Gaussian, Poisson, Softmax
from bo_ncgp.models import IterNCGP
from bo_ncgp.models import training as training_module
from bo_ncgp.models.iterncgp import UnitVectorPolicy
from tests.conftest import selected_device
from tests.models.contract import ModelContractTests
from tests.models.iterncgp._reference import dense_laplace, rbf


def binary_data(n=40, d=2):
    X = torch.rand(n, d)
    y = (torch.sin(5 * X[:, 0]) + 0.3 * torch.randn(n) > 0).double()
    return X, y


def softmax_data(n=40, C=3):
    X = torch.rand(n, 2)
    y = torch.randint(0, C, (n,))
    return X, y


def fitted_binary(**kw):
    X, y = binary_data()
    opts = dict(max_solver_iters_per_step=6, max_newton_steps=5, backend="dense")
    opts.update(kw)
    return IterNCGP(rbf(), Bernoulli(), **opts).fit(X, y), X, y


def fitted_softmax(batched=True, **kw):
    X, y = softmax_data()
    C = 3
    k = rbf(batch_shape=torch.Size([C]) if batched else torch.Size())
    opts = dict(max_solver_iters_per_step=6, max_newton_steps=5, backend="dense")
    opts.update(kw)
    return IterNCGP(k, Softmax(C), **opts).fit(X, y), X, y


# ---------------------------------------------------------------------- shapes
def test_binary_shapes_and_batched_inputs():
    model, _, _ = fitted_binary()
    mean, var = model.predict_f(torch.rand(7, 2))
    assert mean.shape == var.shape == (7,)
    mean, cov = model.predict_f(torch.rand(4, 3, 5, 2), full_cov=True)
    assert mean.shape == (4, 3, 5) and cov.shape == (4, 3, 5, 5)
    Xs = torch.rand(2, 5, 2)
    m1, v1 = model.predict_f(Xs)
    m2, c2 = model.predict_f(Xs, full_cov=True)
    torch.testing.assert_close(m1, m2)
    torch.testing.assert_close(v1, c2.diagonal(dim1=-2, dim2=-1))
    torch.testing.assert_close(m1[1], model.predict_f(Xs[1])[0])  # batches are independent
    assert bool((torch.linalg.eigvalsh(c2) > -1e-10).all())
    assert model.mode.shape == (40,)


@pytest.mark.parametrize("batched", [False, True])
def test_softmax_shapes_and_joint_covariance(batched):
    model, _, _ = fitted_softmax(batched)
    Xs = torch.rand(6, 2)
    mean, var = model.predict_f(Xs)
    assert mean.shape == var.shape == (6, 3)
    mean_c, cov = model.predict_f(Xs, full_cov=True)
    torch.testing.assert_close(mean_c, mean)
    assert cov.shape == (3, 6, 6)
    torch.testing.assert_close(cov.diagonal(dim1=-2, dim2=-1).mT, var)
    mean_j, cov_j = model.predict_f_joint(Xs)
    torch.testing.assert_close(mean_j, mean)
    assert cov_j.shape == (6, 3, 3)
    torch.testing.assert_close(cov_j.diagonal(dim1=-2, dim2=-1), var)
    torch.testing.assert_close(cov_j, cov_j.mT)
    assert bool((torch.linalg.eigvalsh(cov_j) > -1e-10).all())
    mean_b, var_b = model.predict_f(torch.rand(2, 4, 6, 2))
    assert mean_b.shape == var_b.shape == (2, 4, 6, 3)


def test_far_from_data_the_posterior_is_the_prior():
    mean_module = gpytorch.means.ConstantMean()
    mean_module.constant.data.fill_(0.7)
    X, y = binary_data()
    model = IterNCGP(
        rbf(outputscale=2.0, lengthscale=0.1), Bernoulli(), mean=mean_module, backend="dense"
    ).fit(X, y)
    mean, var = model.predict_f(torch.full((3, 2), 50.0))
    torch.testing.assert_close(mean, torch.full((3,), 0.7))
    torch.testing.assert_close(var, torch.full((3,), 2.0))


def test_predictions_are_differentiable_in_the_inputs():
    model, _, _ = fitted_binary()
    Xs = torch.rand(3, 2, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: model.predict_f(x), (Xs,))
    smodel, _, _ = fitted_softmax()
    assert torch.autograd.gradcheck(lambda x: smodel.predict_f(x), (Xs,))
    assert torch.autograd.gradcheck(lambda x: smodel.predict_proba(x), (Xs,))


# ------------------------------------------------------------ predictive laws
def test_predict_proba_probit_mc_and_quadrature():
    model, _, _ = fitted_binary()
    Xs = torch.rand(20, 2)
    mean, var = model.predict_f(Xs)
    probit = model.predict_proba(Xs)
    torch.testing.assert_close(probit, torch.sigmoid(mean / torch.sqrt(1 + math.pi * var / 8)))
    quad = model.predict_proba(Xs, method="quadrature")
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    mc = model.predict_proba(Xs, method="mc", num_samples=20000, generator=g)
    assert float((mc - quad).abs().max()) < 0.01  # 20000 samples: sd < 0.0036
    assert float((probit - quad).abs().max()) < 0.02  # MacKay's probit approximation


def test_softmax_predict_proba_mc_uses_the_joint_covariance():
    model, _, _ = fitted_softmax(max_solver_iters_per_step=20)
    Xs = torch.rand(8, 2)
    probit = model.predict_proba(Xs)
    torch.testing.assert_close(probit.sum(-1), torch.ones(8))
    mean, cov = model.predict_f_joint(Xs)
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    mc = model.predict_proba(Xs, method="mc", num_samples=20000, generator=g)
    f = torch.distributions.MultivariateNormal(mean, cov + 1e-9 * torch.eye(3)).sample((40000,))
    ref = torch.softmax(f, -1).mean(0)
    assert float((mc - ref).abs().max()) < 0.01


def test_poisson_rate_by_monte_carlo():
    X = torch.linspace(0, 1, 40).unsqueeze(-1)
    y = torch.poisson(torch.exp(1 + torch.sin(6 * X[:, 0])))
    model = IterNCGP(rbf(1.0, 0.2), Poisson(), backend="dense").fit(X, y)
    Xs = torch.rand(5, 1)
    mean, var = model.predict_f(Xs)
    rate = model.predict_rate(
        Xs, num_samples=40000, generator=torch.Generator(torch.get_default_device()).manual_seed(0)
    )
    torch.testing.assert_close(rate.median, torch.exp(mean), rtol=0.03, atol=0)
    torch.testing.assert_close(rate.mean, torch.exp(mean + var / 2), rtol=0.03, atol=0)
    assert bool((rate.lower < rate.median).all() and (rate.median < rate.upper).all())
    with pytest.raises(ValueError, match="predict_proba"):
        model.predict_proba(Xs)
    torch.testing.assert_close(model.predict_y(Xs), torch.exp(mean + var / 2))


# ------------------------------------------------------------------ callbacks
def test_callback_signature_excludes_its_own_time_and_can_stop(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(training_module.time, "perf_counter", lambda: now[0])
    calls = []

    def callback(step):
        i, j = step.info["newton_step"], step.info["solver_iter"]
        calls.append((i, j, step.seconds, step.model.num_solver_iters, step.step))
        now[0] += 100.0  # an expensive callback
        return i == 1 and j == 2

    X, y = binary_data()
    model = IterNCGP(
        rbf(),
        Bernoulli(),
        max_solver_iters_per_step=4,
        max_newton_steps=5,
        tol=0.0,
        backend="dense",
    )
    model.fit(X, y, callback=callback)
    assert calls[0][:2] == (0, 0) and calls[-1][:2] == (1, 2)
    assert all(c[2] == 0.0 for c in calls)  # the fake clock only moved inside callbacks
    assert [c[3] for c in calls] == [0, 1, 2, 3, 4, 4, 5, 6]
    assert [c[4] for c in calls] == list(range(8))
    assert model.num_solver_iters == 6
    model.predict_f(X[:2])  # the interrupted model predicts with its current belief


# ------------------------------------------------------------------ condition
def test_condition_exact_limit_and_self_untouched():
    X, y = binary_data(30)
    X_new, y_new = torch.rand(6, 2), torch.tensor([1.0, 0, 1, 1, 0, 0])
    k, lik = rbf(), Bernoulli()
    model = IterNCGP.exact_laplace(k, lik, 30, max_newton_steps=40, tol=1e-12).fit(X, y)
    before = [t.clone() for t in (model._belief.v, model._belief.Q, model._state.S, model.mode)]
    new = model.condition(X_new, y_new, num_iters=6, max_newton_steps=30)
    after = (model._belief.v, model._belief.Q, model._state.S, model.mode)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert model.train_inputs.shape == (30, 2) and new.train_inputs.shape == (36, 2)
    F_ref, predict = dense_laplace(k, lik, torch.cat([X, X_new]), torch.cat([y, y_new]), 1)
    Xs = torch.rand(5, 2)
    mean_ref, var_ref = predict(Xs)
    mean, var = new.predict_f(Xs)
    torch.testing.assert_close(new.mode, F_ref[:, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(mean, mean_ref[:, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(var, var_ref[:, 0], atol=1e-6, rtol=0)
    # only the new directions needed new products with K
    assert new.num_solver_iters == 6


def test_condition_with_cg_is_close_to_a_refit():
    X, y = softmax_data(60)
    X_new, y_new = torch.rand(3, 2), torch.tensor([0, 2, 1])
    k, lik = rbf(), Softmax(3)
    opts = dict(max_solver_iters_per_step=40, max_newton_steps=20, tol=1e-8, backend="dense")
    model = IterNCGP(k, lik, **opts).fit(X, y)
    new = model.condition(X_new, y_new, num_iters=10, max_newton_steps=3)
    refit = IterNCGP(k, lik, **opts).fit(torch.cat([X, X_new]), torch.cat([y, y_new]))
    Xs = torch.rand(10, 2)
    torch.testing.assert_close(new.predict_f(Xs)[0], refit.predict_f(Xs)[0], atol=1e-3, rtol=0)
    assert new.num_solver_iters <= 30


@pytest.mark.parametrize("lik_name", ["bernoulli", "softmax"])
def test_condition_on_fantasy_batch_equals_separate_conditions(lik_name):
    if lik_name == "bernoulli":
        model, _, _ = fitted_binary()
        y_new = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    else:
        model, _, _ = fitted_softmax()
        y_new = torch.tensor([[0, 1], [2, 2], [1, 0]])
    X_new = torch.rand(2, 2)
    fant = model.condition(X_new, y_new, num_iters=4)
    assert fant.batch_shape == (3,)
    Xs = torch.rand(5, 2)
    mean, var = fant.predict_f(Xs)
    for b in range(3):
        single = model.condition(X_new, y_new[b], num_iters=4)
        m_b, v_b = single.predict_f(Xs)
        torch.testing.assert_close(mean[b], m_b, atol=1e-8, rtol=1e-6)
        torch.testing.assert_close(var[b], v_b, atol=1e-8, rtol=1e-6)
    # BoTorch-style broadcasting: X (batch, 1, q, d) against the fantasy dimension
    mean_bc, _ = fant.predict_f(torch.rand(4, 1, 5, 2))
    assert mean_bc.shape[:3] == (4, 3, 5)


# -------------------------------------------------------------- dtype / device
def test_float32_matches_float64():
    X, y = binary_data()
    Xs = torch.rand(5, 2)
    opts = dict(max_solver_iters_per_step=10, max_newton_steps=6, backend="dense")
    m64 = IterNCGP(rbf(), Bernoulli(), **opts).fit(X, y)
    k32 = rbf().float()
    m32 = IterNCGP(k32, Bernoulli(), **opts).fit(X.float(), y.float())
    mean, var = m32.predict_f(Xs.float())
    assert mean.dtype == var.dtype == torch.float32
    torch.testing.assert_close(mean.double(), m64.predict_f(Xs)[0], atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(var.double(), m64.predict_f(Xs)[1], atol=1e-3, rtol=1e-3)


def test_gaussian_and_binomial_likelihoods_run():
    from bo_ncgp.likelihoods import Binomial

    X = torch.rand(30, 1)
    IterNCGP(rbf(), Gaussian(0.1), backend="dense").fit(X, torch.sin(X[:, 0]))
    m = IterNCGP(rbf(), Binomial(5), backend="dense").fit(X, torch.randint(0, 6, (30,)))
    assert m.predict_y(X[:3]).shape == (3,)


# ----------------------------------------------------------------- bad input
def test_bad_input_raises_clear_errors():
    X, y = binary_data(10)
    model = IterNCGP(rbf(), Bernoulli(), backend="dense")
    with pytest.raises(RuntimeError, match="fit"):
        model.predict_f(X)
    with pytest.raises(ValueError, match="NaN"):
        model.fit(torch.where(X > 0.5, float("nan"), X), y)
    with pytest.raises(ValueError, match=r"labels must be in \{0, 1\}"):
        model.fit(X, y + 1)
    with pytest.raises(ValueError, match="shape"):
        model.fit(X, y[:-1])
    with pytest.raises(ValueError, match="empty"):
        model.fit(X[:0], y[:0])
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        model.fit(X[:, 0], y)
    with pytest.raises(ValueError, match="NaN"):
        model.fit(X, torch.where(y > 0, float("nan"), y))
    with pytest.raises(ValueError, match="out of range"):
        IterNCGP(rbf(), Softmax(3)).fit(X, torch.full((10,), 3))
    with pytest.raises(ValueError, match="batch_shape"):
        IterNCGP(rbf(batch_shape=torch.Size([2])), Softmax(3))
    with pytest.raises(ValueError, match="unknown policy"):
        IterNCGP(rbf(), Bernoulli(), policy="lanczos")
    with pytest.raises(ValueError, match="compression_rank"):
        IterNCGP(rbf(), Bernoulli(), compression_rank=-1)
    with pytest.raises(ValueError, match="backend"):
        IterNCGP(rbf(), Bernoulli(), backend="gpu")
    with pytest.raises(ValueError, match="likelihood"):
        IterNCGP(rbf(), torch.nn.Identity())
    model.fit(X, y)
    with pytest.raises(ValueError, match="input dimensions"):
        model.predict_f(torch.rand(3, 5))
    with pytest.raises(ValueError, match="NaN"):
        model.predict_f(torch.full((3, 2), float("inf")))
    with pytest.raises(ValueError, match="y_new"):
        model.condition(torch.rand(2, 2), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="labels"):
        model.condition(torch.rand(2, 2), torch.tensor([1.0, 3.0]))
    with pytest.raises(ValueError, match="permutation"):
        IterNCGP(rbf(), Bernoulli(), policy=UnitVectorPolicy(torch.tensor([0, 0, 1]))).fit(X, y)


def test_condition_on_batched_inputs_equals_separate_conditions():
    # BoTorch t-batches: X_new (b, q, d) with fantasies y_new (nf, b, q)
    model, _, _ = fitted_softmax(batched=False)
    X_new = torch.rand(2, 3, 2)
    y_new = torch.randint(0, 3, (4, 2, 3))
    fant = model.condition(X_new, y_new, num_iters=3)
    assert fant.batch_shape == (4, 2) and fant.train_inputs.shape == (2, 43, 2)
    Xs = torch.rand(5, 2)
    mean, var = fant.predict_f(Xs)
    assert mean.shape == (4, 2, 5, 3)
    for f_idx, b_idx in [(0, 0), (3, 1)]:
        single = model.condition(X_new[b_idx], y_new[f_idx, b_idx], num_iters=3)
        m_s, v_s = single.predict_f(Xs)
        torch.testing.assert_close(mean[f_idx, b_idx], m_s, atol=1e-8, rtol=1e-6)
        torch.testing.assert_close(var[f_idx, b_idx], v_s, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("batched", [False, True])
def test_backends_agree(batched):
    X, y = softmax_data(30)
    k = rbf(batch_shape=torch.Size([3]) if batched else None)
    Xs, X_new = torch.rand(7, 2), torch.rand(2, 1, 2)
    out = {}
    for backend in ("dense", "chunked", "auto"):
        m = IterNCGP(
            k, Softmax(3), max_solver_iters_per_step=4, max_newton_steps=3, backend=backend
        ).fit(X, y)
        out[backend] = (m.predict_f(Xs), m.predict_f(Xs[None].expand(2, 7, 2)))
        fant = m.condition(X_new, torch.tensor([[0], [2]]), num_iters=2)
        out[backend] += (fant.predict_f(Xs),)
    for backend in ("chunked", "auto"):
        for a, b in zip(out[backend], out["dense"], strict=True):
            torch.testing.assert_close(a[0], b[0])
            torch.testing.assert_close(a[1], b[1])


@pytest.mark.slow
@pytest.mark.keops
@pytest.mark.parametrize("batched", [False, True])
def test_keops_backend_matches_dense(batched):
    from bo_ncgp.linalg._keops import keops_available

    if not keops_available(selected_device()):
        pytest.skip("KeOps does not run on the test device")
    X, y = softmax_data(60)
    k = rbf(batch_shape=torch.Size([3]) if batched else None)
    Xs = torch.rand(7, 2)
    out = {}
    for backend in ("dense", "keops"):
        m = IterNCGP(
            k, Softmax(3), max_solver_iters_per_step=5, max_newton_steps=3, backend=backend
        ).fit(X, y)
        assert m._K.op.backend == backend
        out[backend] = m.predict_f(Xs)
    torch.testing.assert_close(out["keops"][0], out["dense"][0])
    torch.testing.assert_close(out["keops"][1], out["dense"][1])


class TestIterNCGPContract(ModelContractTests):
    def make(self):
        X, y = binary_data(20)
        return IterNCGP(rbf(), Bernoulli(), max_solver_iters_per_step=4, backend="dense"), X, y


def test_pool_fantasies_through_condition():
    model, _, _ = fitted_binary()
    pool = torch.rand(7, 2)
    fant = model.pool_fantasies(pool)
    Y = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    mean, var = fant.conditioned(torch.tensor([0, 4]), Y)
    assert mean.shape == var.shape == (2, 2, 7)
    ref, ref_var = model.condition(pool[4:5], Y[1, :1]).predict_f(pool)
    torch.testing.assert_close(mean[1, 0], ref)
    torch.testing.assert_close(var[1, 0], ref_var)
