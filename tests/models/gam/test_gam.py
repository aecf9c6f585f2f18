"""SparseGAM: API, shapes, batching, gradients, fitting, likelihoods and bad input."""

from __future__ import annotations

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from gpytorch.priors import GammaPrior

from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax
from bo_ncgp.models import SparseGAM as LazySparseGAM
from bo_ncgp.models.gam import (
    AdditiveComponent,
    CoupledPrecisionPosterior,
    FullCovariancePosterior,
    MeanFieldPosterior,
    SparseGAM,
    VariationalFamily,
)
from bo_ncgp.models.gam.anova_kernel import ANOVAKernel
from tests.models.contract import ModelContractTests

FAMILIES = ["mean_field", "coupled_precision", "full"]


def components(M=6):
    Z = torch.linspace(0, 1, M)
    k1 = ScaleKernel(ANOVAKernel())
    k2 = ScaleKernel(RBFKernel())
    k12 = ScaleKernel(ANOVAKernel(active_dims=[0]) * ANOVAKernel(active_dims=[1]))
    Z12 = torch.cartesian_prod(torch.linspace(0, 1, 3), torch.linspace(0, 1, 3))
    return [(k1, [0], Z), (k2, [1], Z), (k12, [0, 2], Z12)]


def data(n=40, seed=0):
    g = torch.Generator(torch.get_default_device()).manual_seed(seed)
    X = torch.rand(n, 3, generator=g)
    f = torch.sin(5 * X[:, 0]) + X[:, 1] - 0.5 + X[:, 0] * X[:, 2]
    return X, f + 0.1 * torch.randn(n, generator=g), f


def perturbed_model(posterior, M=6, scale=0.2):
    """A Gaussian SparseGAM whose variational parameters are moved off the prior."""
    model = SparseGAM(components(M), Gaussian(0.1), posterior)
    with torch.no_grad():
        for p in model.variational.parameters():
            p.add_(scale * torch.randn_like(p))
    return model


def test_lazy_export_and_hierarchy():
    assert LazySparseGAM is SparseGAM
    for cls in (MeanFieldPosterior, CoupledPrecisionPosterior, FullCovariancePosterior):
        assert issubclass(cls, VariationalFamily)
    for name in FAMILIES:
        model = SparseGAM(components(), Gaussian(0.1), name)
        assert isinstance(model, torch.nn.Module)
        assert model.posterior_type == name
        assert isinstance(model.variational, VariationalFamily)


@pytest.mark.parametrize("posterior", FAMILIES)
def test_shapes_batching_and_consistency(posterior):
    model = perturbed_model(posterior)
    X = torch.rand(2, 3, 5, 4)  # extra inert column and two batch dims
    mean, var = model.predict_f(X)
    assert mean.shape == var.shape == (2, 3, 5)
    mean_c, cov = model.predict_f(X, full_cov=True)
    assert cov.shape == (2, 3, 5, 5)
    assert torch.allclose(mean_c, mean)
    assert torch.allclose(cov.diagonal(dim1=-2, dim2=-1), var, atol=1e-10)
    assert torch.allclose(cov, cov.mT)
    # batched predictions equal point-by-point ones
    for i in range(2):
        for j in range(3):
            m_ij, v_ij = model.predict_f(X[i, j])
            assert torch.allclose(m_ij, mean[i, j], atol=1e-12)
            assert torch.allclose(v_ij, var[i, j], atol=1e-12)
    cm, cv = model.predict_components(X)
    assert cm.shape == cv.shape == (2, 3, 5, 3)
    assert torch.allclose(cm.sum(-1), mean, atol=1e-12)
    _, cj = model.predict_components(X, joint=True)
    assert cj.shape == (2, 3, 5, 3, 3)
    assert torch.allclose(cj.sum((-1, -2)), var, atol=1e-10)  # var of the sum = 1^T S 1
    if posterior == "mean_field":  # no coupling between components
        off = cj - torch.diag_embed(cj.diagonal(dim1=-2, dim2=-1))
        assert off.abs().max() == 0
    assert (var > 0).all() and (cv > 0).all()


@pytest.mark.parametrize("posterior", FAMILIES)
def test_predict_f_differentiable_in_X(posterior):
    model = perturbed_model(posterior, M=4, scale=0.3)
    X = torch.rand(3, 3, requires_grad=True)

    def f(x):
        m, v = model.predict_f(x)
        _, c = model.predict_f(x, full_cov=True)
        return m, v, c

    assert torch.autograd.gradcheck(f, (X,), eps=1e-6, atol=1e-6)


def test_prior_initialisation_and_kl_zero():
    for posterior in ("mean_field", "full"):
        for whiten in (True, False):
            model = SparseGAM(components(), Gaussian(0.1), posterior, whiten=whiten)
            assert abs(float(model.kl().detach())) < 1e-6
            X = torch.rand(4, 3)
            _, var = model.predict_f(X)
            prior = sum(c.kxx(X) for c in model.components)
            assert torch.allclose(var, prior, rtol=1e-6)
    # coupled precision starts near the prior (B small and random, B = 0 is a saddle)
    model = SparseGAM(components(), Gaussian(0.1))
    assert 0 < float(model.kl().detach()) < 1e-2


def test_minibatch_elbo_is_unbiased():
    model = SparseGAM(components(), Gaussian(0.1))
    X, y, _ = data(40)
    full = model.elbo(X, y)
    parts = [model.elbo(X[i : i + 10], y[i : i + 10], num_data=40) for i in range(0, 40, 10)]
    assert torch.allclose(torch.stack(parts).mean(), full, atol=1e-10)


@pytest.mark.parametrize("posterior", FAMILIES)
def test_fit_increases_elbo_and_recovers_function(posterior):
    X, y, f = data(60)
    model = SparseGAM(components(), Gaussian(0.1), posterior)
    before = float(model.elbo(X, y).detach())
    assert model.fit(X, y, num_steps=40, lr=0.05) is model
    assert len(model.history) == 40
    after = float(model.elbo(X, y).detach())
    assert after > before
    with torch.no_grad():
        mean, _ = model.predict_f(X)
    assert torch.sqrt(((mean - f) ** 2).mean()) < 0.2


def test_fit_minibatch_and_callback():
    X, y, _ = data(60)
    model = SparseGAM(components(), Gaussian(0.1), "mean_field")
    seen = []
    g = torch.Generator(torch.get_default_device()).manual_seed(3)
    before = float(model.elbo(X, y).detach())
    model.fit(
        X,
        y,
        num_steps=30,
        lr=0.05,
        batch_size=16,
        generator=g,
        callback=lambda s: seen.append(s.step),
        init_variational=False,  # Adam alone must make progress
    )
    assert seen == list(range(30))
    assert float(model.elbo(X, y).detach()) > before


def test_log_prior_included():
    comps = components()
    comps[0][0].base_kernel.register_prior(
        "ls_prior",
        GammaPrior(2.0, 4.0),
        lambda m: m.lengthscale,
        lambda m, v: m._set_lengthscale(v),
    )
    model = SparseGAM(comps, Gaussian(0.1))
    ls = model.components[0].kernel.base_kernel.lengthscale
    expected = GammaPrior(2.0, 4.0).log_prob(ls).sum()
    assert torch.allclose(model.log_prior(), expected)


@pytest.mark.parametrize(
    "lik, make_y",
    [
        (Bernoulli(), lambda f: torch.bernoulli(torch.sigmoid(3 * f))),
        (Binomial(10), lambda f: torch.distributions.Binomial(10, logits=2 * f).sample()),
        (Poisson(), lambda f: torch.poisson(torch.exp(f + 1))),
    ],
)
def test_non_gaussian_likelihoods(lik, make_y):
    X, _, f = data(60)
    y = make_y(f)
    model = SparseGAM(components(), lik, "coupled_precision")
    # the ELBO's expectation term is the likelihood's own Gauss-Hermite/closed form
    mean, var = model.predict_f(X)
    expected = lik.expected(y, mean, var)[0].sum() - model.kl()
    assert torch.allclose(model.elbo(X, y), expected)
    before = float(model.elbo(X, y).detach())
    model.fit(X, y, num_steps=30, lr=0.05)
    assert float(model.elbo(X, y).detach()) > before
    with torch.no_grad():
        p = model.predict_y(X)
        lp = model.log_predictive(X, y)
    assert torch.isfinite(p).all() and torch.isfinite(lp).all()


def test_learnable_inducing_points_get_gradients():
    comp = AdditiveComponent(ScaleKernel(RBFKernel()), [0], torch.linspace(0, 1, 5), True)
    model = SparseGAM([comp], Gaussian(0.1), "full")
    with torch.no_grad():  # at q = p(U) the ELBO does not depend on Z
        model.variational.mean.normal_()
    X, y, _ = data(20)
    model.elbo(X, y).backward()
    assert comp.inducing_points.grad is not None and comp.inducing_points.grad.abs().sum() > 0


def test_float32_and_dtype_following():
    comps = [(ScaleKernel(RBFKernel()), [0], torch.linspace(0, 1, 5, dtype=torch.float32))]
    model = SparseGAM(comps, Gaussian(0.1))
    assert model.likelihood.raw_noise.dtype == torch.float32
    mean, var = model.predict_f(torch.rand(4, 1, dtype=torch.float64))
    assert mean.dtype == torch.float32 and var.dtype == torch.float32


# ----------------------------------------------------------------------- bad input
def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="unknown posterior"):
        SparseGAM(components(), Gaussian(0.1), "laplace")
    with pytest.raises(ValueError, match="non-empty"):
        SparseGAM([], Gaussian(0.1))
    with pytest.raises(ValueError, match="latents"):
        SparseGAM(components(), Softmax(3))
    with pytest.raises(ValueError, match="likelihood"):
        SparseGAM(components(), "gaussian")
    with pytest.raises(ValueError, match="rank"):
        SparseGAM(components(), Gaussian(0.1), "mean_field", rank=3)
    with pytest.raises(ValueError, match="component 1"):
        SparseGAM([components()[0], "not a component"], Gaussian(0.1))
    with pytest.raises(ValueError, match="inducing_points"):
        AdditiveComponent(RBFKernel(), [0, 1], torch.rand(4, 3))
    with pytest.raises(ValueError, match="distinct"):
        AdditiveComponent(RBFKernel(), [1, 1], torch.rand(4, 2))
    with pytest.raises(ValueError, match="empty"):
        AdditiveComponent(RBFKernel(), [], torch.rand(4, 1))
    with pytest.raises(ValueError, match="NaN"):
        AdditiveComponent(RBFKernel(), [0], torch.tensor([0.1, float("nan")]))
    with pytest.raises(ValueError, match="batch_shape"):
        AdditiveComponent(RBFKernel(batch_shape=torch.Size([2])), [0], torch.rand(3, 1))
    with pytest.raises(ValueError, match="jitter"):
        SparseGAM(components(), Gaussian(0.1), jitter=-1.0)


def test_bad_data():
    model = SparseGAM(components(), Gaussian(0.1))
    X, y, _ = data(10)
    with pytest.raises(ValueError, match="columns"):
        model.elbo(X[:, :2], y)
    with pytest.raises(ValueError, match="NaN"):
        model.elbo(torch.where(X > 0.5, float("nan"), X), y)
    with pytest.raises(ValueError, match="shape"):
        model.elbo(X, y[:5])
    with pytest.raises(ValueError, match="empty"):
        model.elbo(X[:0], y[:0])
    with pytest.raises(ValueError, match="NaN"):
        model.elbo(X, torch.full_like(y, float("nan")))
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        model.elbo(X.unsqueeze(0), y)
    with pytest.raises(ValueError, match=r"\(\.\.\., n, d\)"):
        model.predict_f(X[0])
    with pytest.raises(ValueError, match="labels"):
        SparseGAM(components(), Bernoulli()).elbo(X, torch.full_like(y, 2.0))
    with pytest.raises(ValueError, match="batch_size"):
        model.fit(X, y, num_steps=1, batch_size=0)
    # (n, 1) targets are accepted
    assert torch.allclose(model.elbo(X, y.unsqueeze(-1)), model.elbo(X, y))


@pytest.mark.parametrize("posterior", FAMILIES)
def test_partial_sums_of_components(posterior):
    model = perturbed_model(posterior)
    X = torch.rand(2, 5, 3)
    cm, cj = model.predict_components(X, joint=True)
    for subset in ([1], [0, 2], [2, 0, 1]):
        mean, var = model.predict_f(X, components=subset)
        idx = torch.tensor(subset)
        assert torch.allclose(mean, cm[..., idx].sum(-1), atol=1e-12)
        block = cj[..., idx[:, None], idx[None, :]]
        assert torch.allclose(var, block.sum((-1, -2)), atol=1e-10)
        _, cov = model.predict_f(X, full_cov=True, components=subset)
        assert torch.allclose(cov.diagonal(dim1=-2, dim2=-1), var, atol=1e-10)
    with pytest.raises(ValueError, match="distinct indices"):
        model.predict_f(X, components=[0, 0])
    with pytest.raises(ValueError, match="distinct indices"):
        model.predict_f(X, components=[3])


def test_coupled_precision_factor_reparameterisation():
    q = CoupledPrecisionPosterior([3, 4], rank=2)
    B = [torch.randn(3, 2), torch.randn(4, 2)]
    q.set_factors(B)
    for a, b in zip(q.factors(), B, strict=True):
        torch.testing.assert_close(a, b)
    norms = torch.cat(B).norm(dim=0)
    torch.testing.assert_close(q.log_scale.detach(), norms.log())
    raw = torch.cat(list(q.B_raw)).detach()
    torch.testing.assert_close(raw.norm(dim=0), torch.ones(2))


def test_refresh_keeps_only_improvements():
    X, y, _ = data(40)
    model = SparseGAM(components(), Gaussian(0.1), "full")
    with torch.no_grad():
        model.variational.mean.add_(0.5)
    before = model.elbo(X, y).detach()
    assert model._refresh_variational(X, y)  # the Gaussian optimum is better: kept
    assert model.elbo(X, y).detach() > before
    # at the optimum the proposal is not better: rejected, q unchanged
    with torch.no_grad():
        model.variational.mean.add_(1e-3 * torch.randn_like(model.variational.mean))
    model._refresh_variational(X, y)
    state = {k: v.clone() for k, v in model.variational.state_dict().items()}
    assert not model._refresh_variational(X, y)
    for k, v in model.variational.state_dict().items():
        assert torch.equal(v, state[k])
    hist = model.fit(X, y, num_steps=6, lr=0.01, init_variational=False, refresh_every=3).history
    assert len(hist) == 6 and all(torch.isfinite(torch.tensor(hist)))
    with pytest.raises(ValueError, match="refresh_every"):
        model.fit(X, y, num_steps=1, refresh_every=0)


class TestSparseGAMContract(ModelContractTests):
    def make(self):
        g = torch.Generator(torch.get_default_device()).manual_seed(0)
        X = torch.rand(12, 2, generator=g, dtype=torch.float64)
        y = torch.sin(5 * X[:, 0]) + X[:, 1]
        Z = torch.linspace(0, 1, 3, dtype=torch.float64)
        model = SparseGAM([(RBFKernel(), [0], Z), (RBFKernel(), [1], Z)], Gaussian(0.1))
        return model, X, y
