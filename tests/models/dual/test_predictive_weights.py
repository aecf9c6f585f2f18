"""The predictive weights on ``Z + X_c`` (posterior.predictive_weights): the same posterior
as the triangular solves of dual_predict, used only where the factors are cached and in
float64, and built once per cached factorisation."""

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models.dual import DualSVGP, conditioned, fixed_hyperparameters, model, posterior


def _models(likelihood, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(200, 3, generator=g, dtype=dtype)
    f = torch.sin(5 * X).sum(-1)
    y = f if isinstance(likelihood, Gaussian) else (f > f.median()).to(dtype)
    kernel = ScaleKernel(RBFKernel(ard_num_dims=3)).to(dtype)
    base = DualSVGP(kernel, likelihood, X[:25], num_hyper_steps=0).update(X, y)
    Xc = torch.rand(6, 3, generator=g, dtype=dtype)
    Xc[1] = Xc[0] + 1e-4  # a near-duplicate fantasy, as fantasy batches make
    yc = base.predict_f(Xc)[0].detach() if isinstance(likelihood, Gaussian) else y[:6]
    return base, base.condition(Xc, yc), torch.rand(5, 4, 3, generator=g, dtype=dtype)


def _solves(monkeypatch):
    for cls in (model.DualSVGP, conditioned.ConditionedDualSVGP):
        monkeypatch.setattr(cls, "_weights", lambda self, *factors: None)


def _uses_weights(m) -> bool:
    """Whether ``m``'s next posterior evaluation reads the predictive weights."""
    if isinstance(m, conditioned.ConditionedDualSVGP):
        return m._weights(*m._factors()) is not None  # (base factors, site block)
    return m._weights(m._factors()) is not None


@pytest.mark.parametrize("likelihood", [Gaussian(0.01), Bernoulli()], ids=["gauss", "bern"])
def test_weights_give_the_posterior_and_gradients_of_the_solves(likelihood, monkeypatch):
    base, cond, Xs = _models(likelihood)

    def moments():
        out = []
        with fixed_hyperparameters():
            for m in (base, cond):
                for full_cov in (False, True):
                    x = Xs.clone().requires_grad_(True)
                    mean, var = m.predict_f(x, full_cov=full_cov)
                    (grad,) = torch.autograd.grad(mean.sum() + var.sum(), x)
                    out += [mean.detach(), var.detach(), grad]
        return out

    with fixed_hyperparameters():
        assert _uses_weights(base) and _uses_weights(cond)
    assert not _uses_weights(base)  # hyperparameters with a gradient: no cached factors
    fast = moments()
    _solves(monkeypatch)
    for a, b in zip(fast, moments(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_weights_are_built_once_per_factorisation_and_again_after_an_update(monkeypatch):
    base, cond, Xs = _models(Gaussian(0.01))
    for m in (base, cond):  # (condition() cached the base model's weights already)
        m.__dict__.pop("_weights_cache", None)
    calls = []
    real = posterior.predictive_weights
    monkeypatch.setattr(posterior, "predictive_weights", lambda *a: calls.append(1) or real(*a))
    with fixed_hyperparameters():
        for _ in range(3):
            base.predict_f(Xs), cond.predict_f(Xs)
        assert len(calls) == 2  # one for the base model, one for the conditioned one
        before = base.predict_f(Xs)[0]
        base.update(Xs[0], torch.zeros(4, dtype=Xs.dtype))
        after = base.predict_f(Xs)[0]
    assert len(calls) == 3 and not torch.allclose(before, after)


def test_float32_and_batched_fantasies_and_sites_with_a_gradient_use_the_solves():
    base, _, _ = _models(Gaussian(0.01), dtype=torch.float32)
    with fixed_hyperparameters():
        assert not _uses_weights(base)
    base64, cond, _ = _models(Gaussian(0.01))
    Xc = torch.rand(2, 3, dtype=torch.float64)
    batched = base64.condition(Xc, torch.zeros(4, 2, dtype=torch.float64))  # 4 fantasies
    y = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    with fixed_hyperparameters():
        assert _uses_weights(cond) and not _uses_weights(batched)
        tracked = base64.condition(Xc, y)
        assert not _uses_weights(tracked)
        (grad,) = torch.autograd.grad(tracked.predict_f(Xc)[0].sum(), y)
    assert grad.abs().sum() > 0  # the fantasy targets' gradient flows through the solves


def test_ill_conditioned_weights_are_not_used_and_the_posterior_is_the_solves(monkeypatch):
    # every point inducing, long lengthscales, noise 1e-6: cond(K_zz) ~ 2e10, posterior
    # variances ~1e-6 near the data, where the weights' variances were off by up to 100 %
    g = torch.Generator().manual_seed(0)
    X = torch.rand(12, 2, generator=g, dtype=torch.float64)
    kernel = ScaleKernel(RBFKernel(ard_num_dims=2)).to(torch.float64)
    kernel.base_kernel.lengthscale = torch.tensor([1.5, 2.0])
    kernel.outputscale = 5.0
    m = DualSVGP(
        kernel,
        Gaussian(1e-6).to(torch.float64),
        X,
        num_hyper_steps=0,
        rho=1.0,
        num_inner_steps=1,
        memory_size=None,
        memory_cap=None,
    ).update(X, torch.sin(3 * X).sum(-1))
    Xs = X[:4] + 1e-3 * torch.randn(4, 2, generator=g, dtype=torch.float64)
    with fixed_hyperparameters(), torch.no_grad():
        f = m._factors()
        raw = posterior.predictive_weights(f)
        Kzx, kxx = m._extended_blocks(Xs, False)
        _, v_raw = posterior.weights_predict(raw, Kzx, kxx)
        _, v_solves = posterior.dual_predict(f, Kzx, kxx)
        assert ((v_raw - v_solves).abs() > 0.01 * v_solves).any()  # the unchecked weights
        assert not _uses_weights(m)
        mean, var = m.predict_f(Xs)
        cond = m.condition(Xs[:2], mean[:2])
        assert not _uses_weights(cond)
        c_mean, c_var = cond.predict_f(Xs)
    _solves(monkeypatch)
    with fixed_hyperparameters(), torch.no_grad():
        torch.testing.assert_close(m.predict_f(Xs), (mean, var), rtol=0, atol=0)
        torch.testing.assert_close(cond.predict_f(Xs), (c_mean, c_var), rtol=0, atol=0)
