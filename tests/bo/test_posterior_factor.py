"""One factorisation per posterior of the BoTorch adapter: the posterior built from the factor
of the covariance equals the one built from the dense covariance (means, covariances, samples
from fixed base samples, acquisition values)."""

import gpytorch
import pytest
import torch
from botorch.acquisition import qKnowledgeGradient
from botorch.acquisition.analytic import LogExpectedImprovement
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal

from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models import DualSVGP
from tests.bo.toy_models import ExactGP


def _dense_distribution(mean, cov, independent, m, prior_scale=None):
    """The posterior from the dense covariance (GPyTorch factorises it itself)."""
    if m == 1:
        return MultivariateNormal(mean[..., 0], cov)
    if independent:
        mvns = [MultivariateNormal(mean[..., i], cov[..., i, :, :]) for i in range(m)]
        return MultitaskMultivariateNormal.from_independent_mvns(mvns)
    return MultitaskMultivariateNormal(mean, cov, interleaved=False)


@pytest.fixture
def dense_path(monkeypatch):
    """Switch the adapter to the dense-covariance reference inside a ``with``."""

    class Dense:
        def __enter__(self):
            monkeypatch.setattr(LatentGPModel, "_distribution", staticmethod(_dense_distribution))

        def __exit__(self, *exc):
            monkeypatch.undo()

    return Dense()


def _graph_nodes(t):
    """Names of the autograd nodes behind ``t`` (linear_operator's generic product is
    ``MatmulBackward``)."""
    seen, todo, names = set(), [t.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        todo.extend(f for f, _ in node.next_functions)
    return names


def _dual(n=40, m=12, d=2):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, d, generator=g)
    y = torch.sin(5 * X[:, 0]) + X[:, 1] + 0.05 * torch.randn(n, generator=g)
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    dual = DualSVGP(k, Gaussian(0.01), X[:m], memory_size=None, num_hyper_steps=0)
    return DualSVGPModel.from_model(dual.update(X, y)), X, y


def _models():
    X = torch.rand(12, 2)
    Y = torch.stack([torch.sin(5 * X[:, 0] + i) for i in range(3)], -1)
    return {
        "dual": _dual()[0],
        "exact, 3 independent outputs": LatentGPModel(ExactGP(X, Y), num_outputs=3),
    }


@pytest.mark.parametrize("name", ["dual", "exact, 3 independent outputs"])
@pytest.mark.parametrize("shape", [(5, 1, 2), (3, 4, 2), (6, 2)])
def test_posterior_from_the_factor_equals_the_dense_posterior(name, shape, dense_path):
    model = _models()[name]
    X = torch.rand(*shape)
    for noise in (False, True):
        post = model.posterior(X, observation_noise=noise)
        base = torch.randn(7, *post.base_sample_shape)
        with dense_path:
            ref = model.posterior(X, observation_noise=noise)
        torch.testing.assert_close(post.mean, ref.mean, rtol=0, atol=1e-10)
        torch.testing.assert_close(post.variance, ref.variance, rtol=0, atol=1e-10)
        cov, cov_ref = post.distribution.covariance_matrix, ref.distribution.covariance_matrix
        torch.testing.assert_close(cov, cov_ref, rtol=0, atol=1e-10)
        samples = post.rsample_from_base_samples(torch.Size([7]), base)
        samples_ref = ref.rsample_from_base_samples(torch.Size([7]), base)
        torch.testing.assert_close(samples, samples_ref, rtol=0, atol=1e-10)


def test_acquisition_values_and_gradients_equal_the_dense_path(dense_path):
    model, X, y = _dual()
    Xq = torch.rand(8, 1, 2, requires_grad=True)
    Xq4 = torch.rand(8, 4, 2, requires_grad=True)

    def values():
        ei = LogExpectedImprovement(model, best_f=y.max())(Xq)
        sampler = SobolQMCNormalSampler(torch.Size([32]), seed=0)
        nei = qLogNoisyExpectedImprovement(model, X_baseline=X[:10], sampler=sampler)(Xq4)
        grads = torch.autograd.grad(ei.sum() + nei.sum(), (Xq, Xq4))
        return ei, nei, *grads

    new = values()
    with dense_path:
        ref = values()
    for a, b in zip(new, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-10)


def _count_factorisations(monkeypatch) -> list[str]:
    """The names of the ``torch.linalg`` Cholesky calls made from now on."""
    calls: list[str] = []
    for name in ("cholesky", "cholesky_ex"):
        real = getattr(torch.linalg, name)
        monkeypatch.setattr(
            torch.linalg,
            name,
            lambda A, *a, _f=real, _n=name, **k: calls.append(_n) or _f(A, *a, **k),
        )
    return calls


def test_one_factorisation_per_posterior_and_its_samples(monkeypatch):
    model = _models()["exact, 3 independent outputs"]
    X = torch.rand(5, 4, 2)
    model.posterior(X)  # warm-up (lazy imports)
    calls = _count_factorisations(monkeypatch)
    monkeypatch.setattr(ExactGP, "predict", lambda self, Xs: _fixed_predict(self, Xs))
    post = model.posterior(X)
    _ = post.variance, post.mean
    assert calls == []  # moments only: no factorisation
    base = torch.randn(3, *post.base_sample_shape)
    post.rsample_from_base_samples(torch.Size([3]), base)
    post.rsample_from_base_samples(torch.Size([3]), base)
    post.distribution.log_prob(post.distribution.mean)
    assert calls == ["cholesky_ex"]


def _fixed_predict(self, Xs):
    """The toy GP's predictive moments without its own training-data Cholesky."""
    Ks = self.kernel(Xs).to_dense()
    cov = Ks + 0.1 * torch.eye(Xs.shape[-2])
    m = self.Y.shape[-1]
    mean = Xs[..., :1].expand(*Xs.shape[:-1], m)
    return mean, cov.unsqueeze(-3).expand(*cov.shape[:-2], m, *cov.shape[-2:])


def test_knowledge_gradient_on_the_dual_adapter_equals_the_dense_path(dense_path):
    model, _, _ = _dual()
    kg = qKnowledgeGradient(model, num_fantasies=4)
    Xkg = torch.rand(3, 1 + 4, 2)
    value = kg(Xkg)
    with dense_path:
        ref = kg(Xkg)
    torch.testing.assert_close(value, ref, rtol=0, atol=1e-10)


def test_variances_are_the_models_own_and_samples_are_plain_products():
    """The variances are the diagonal of the wrapped model's covariance (bit for bit), and
    the samples ``mean + L eps`` are differentiated by autograd's matmul."""
    from bo_ncgp.models.dual import fixed_hyperparameters

    model, _, _ = _dual()
    X = torch.rand(6, 3, 2, dtype=torch.float64, requires_grad=True)
    post = model.posterior(X)
    with fixed_hyperparameters():
        mean, cov = model.model.predict_f(X, full_cov=True)
    assert torch.equal(post.variance[..., 0], cov.diagonal(dim1=-2, dim2=-1))
    base = torch.randn(5, *post.base_sample_shape, dtype=torch.float64)
    samples = post.rsample_from_base_samples(torch.Size([5]), base)
    L = torch.linalg.cholesky(cov)
    ref = mean + (L @ base.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(samples[..., 0], ref, rtol=0, atol=1e-12)
    assert "MatmulBackward" not in _graph_nodes(samples)
    grad = torch.autograd.grad(samples.sum(), X)[0]
    grad_ref = torch.autograd.grad(ref.sum(), X)[0]
    torch.testing.assert_close(grad, grad_ref, rtol=0, atol=1e-10)


def test_a_standardized_posterior_is_factorised_once(monkeypatch):
    """With BoTorch's ``Standardize`` the untransformed posterior is sampled from one
    factorisation of the scaled covariance."""
    from botorch.models.transforms import Standardize

    model, _, _ = _dual()
    st = Standardize(m=1)
    st(torch.randn(20, 1))
    adapter = DualSVGPModel.from_model(model.model, outcome_transform=st.eval())
    X = torch.rand(4, 3, 2, requires_grad=True)
    adapter.posterior(X).rsample(torch.Size([2]))  # warm-up (lazy imports)
    calls = _count_factorisations(monkeypatch)
    post = adapter.posterior(X)
    _ = post.mean, post.variance
    assert calls == []
    base = torch.randn(2, *post.base_sample_shape)
    samples = post.rsample_from_base_samples(torch.Size([2]), base)
    assert len(calls) == 1
    # the scaled Gaussian: mean + s (f_mean + L eps), variances s^2 var, plain products
    raw = model.posterior(X)
    L = torch.linalg.cholesky(raw.distribution.covariance_matrix)
    ref = raw.mean[..., 0] + (L @ base.unsqueeze(-1)).squeeze(-1)
    ref = st.means[..., 0] + st.stdvs[..., 0] * ref
    torch.testing.assert_close(samples[..., 0], ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(post.variance, st.stdvs**2 * raw.variance)
    assert "MatmulBackward" not in _graph_nodes(samples)
