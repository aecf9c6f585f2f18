"""The GPyTorch SVGP builder (bo_ncgp.models.svgp) against the compositions it replaces."""

from __future__ import annotations

import gpytorch
import pytest
import torch
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.priors import GammaPrior

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.models.svgp import SVGP


def _mvn(mean, K):
    return gpytorch.distributions.MultivariateNormal(mean, K)


class ConstantMeanRef(gpytorch.models.ApproximateGP):
    """Hotspot SVGP: learned constant mean, learned Z, Cholesky q(u)."""

    def __init__(self, kernel, Z):
        q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
        s = gpytorch.variational.VariationalStrategy(
            self, Z.detach().clone(), q, learn_inducing_locations=True
        )
        super().__init__(s)
        self.mean_module = gpytorch.means.ConstantMean()
        self.kernel = kernel
        self.to(Z)

    def forward(self, x):
        return _mvn(self.mean_module(x), self.kernel(x))


class NaturalRef(gpytorch.models.ApproximateGP):
    """Refitted hotspot SVGP: zero mean, fixed Z, natural q(u), batched."""

    def __init__(self, kernel, Z, batch_shape=()):
        d = gpytorch.variational.NaturalVariationalDistribution(
            Z.shape[-2], batch_shape=torch.Size(batch_shape)
        )
        s = gpytorch.variational.VariationalStrategy(self, Z, d, learn_inducing_locations=False)
        super().__init__(s)
        self.kernel = kernel

    def forward(self, x):
        K = self.kernel(x)
        return _mvn(x.new_zeros(K.shape[:-1]), K)


class MultitaskRef(gpytorch.models.ApproximateGP):
    """Offline / multi-class SVGP: C latents, Cholesky q(u), learned Z, jitter."""

    def __init__(self, kernel, Z, C, jitter=None):
        d = gpytorch.variational.CholeskyVariationalDistribution(
            Z.shape[-2], batch_shape=torch.Size([C])
        )
        s = gpytorch.variational.IndependentMultitaskVariationalStrategy(
            gpytorch.variational.VariationalStrategy(
                self, Z, d, learn_inducing_locations=True, jitter_val=jitter
            ),
            num_tasks=C,
        )
        super().__init__(s)
        self.mean_module = gpytorch.means.ZeroMean(batch_shape=torch.Size([C]))
        self.covar_module = kernel

    def forward(self, x):
        return _mvn(self.mean_module(x), self.covar_module(x))


def _hotspot_kernel():
    return ScaleKernel(MaternKernel(nu=1.5, ard_num_dims=2, lengthscale_prior=GammaPrior(3.0, 6.0)))


def _train(gp, X, y, steps=5):
    lik = Bernoulli()
    opt = torch.optim.Adam(gp.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        q = gp(X)
        y_ = y if q.mean.dim() == 1 else y.unsqueeze(-1).expand_as(q.mean)
        elp = lik.expected_log_prob(y_, q.mean, q.variance).sum()
        loss = -(elp - gp.variational_strategy.kl_divergence().sum()) / X.shape[0]
        loss.backward()
        opt.step()
    with torch.no_grad():
        return gp(X).mean, gp(X).variance


def _same(ref, new, X, y):
    torch.manual_seed(3)
    a = _train(ref, X, y)
    torch.manual_seed(3)
    b = _train(new, X, y)
    for u, v in zip(a, b, strict=True):
        assert torch.equal(u, v)


@pytest.fixture
def data():
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    X = torch.rand(25, 2, generator=g, dtype=torch.float64)
    return X, (X[:, 0] > 0.5).double()


def test_constant_mean_svgp_is_the_hotspot_model(data):
    X, y = data
    ref = ConstantMeanRef(_hotspot_kernel(), X[:10])
    new = SVGP(_hotspot_kernel(), X[:10], mean="constant")
    _same(ref, new, X, y)
    expected = sum(pr.log_prob(cl(m)).sum() for _, m, pr, cl, _ in new.named_priors())
    assert torch.equal(new.log_prior(), expected)
    vs = ref.variational_strategy
    with torch.no_grad():
        Z = vs.inducing_points.detach().clone()
        q = vs.variational_distribution
        L = stable_cholesky(ref.kernel(Z).to_dense(), name="K_zz")
        expected = Z, L @ q.mean, L @ q.covariance_matrix @ L.mT
    for a, b in zip(new.inducing_posterior(), expected, strict=True):
        assert torch.equal(a, b)


def test_natural_batched_svgp_is_the_refit_model(data):
    X, _ = data
    ref = NaturalRef(RBFKernel(), X[:8].clone(), batch_shape=(3,)).double()
    new = SVGP(
        RBFKernel(), X[:8], batch_shape=(3,), variational="natural", learn_inducing_locations=False
    )
    assert not new.inducing_points.requires_grad
    torch.manual_seed(1)
    a = ref(X)
    torch.manual_seed(1)
    b = new(X)
    assert a.mean.shape == (3, 25)
    assert torch.equal(a.mean, b.mean) and torch.equal(a.variance, b.variance)
    assert torch.equal(ref.variational_strategy.kl_divergence(), new.kl_divergence())


def test_multitask_svgp_is_the_offline_and_multiclass_model(data):
    X, y = data
    Z = torch.stack([X[:6], X[6:12], X[12:18]])
    kernel = lambda: RBFKernel(batch_shape=torch.Size([3])).double()  # noqa: E731
    ref = MultitaskRef(kernel(), Z.clone(), 3, jitter=1e-6).double()
    new = SVGP(kernel(), Z, num_latents=3, jitter=1e-6)
    _same(ref, new, X, y)
    assert new(X).mean.shape == (25, 3)
    Zq, m, S = new.inducing_posterior()
    assert Zq.shape == (3, 6, 2) and m.shape == (3, 6) and S.shape == (3, 6, 6)
    assert torch.equal(new.kl_divergence(), ref.variational_strategy.kl_divergence())


def test_bad_arguments():
    with pytest.raises(InputDataError, match="variational"):
        SVGP(RBFKernel(), torch.rand(4, 1), variational="diag")
    with pytest.raises(InputDataError, match="inducing_points"):
        SVGP(RBFKernel(), torch.rand(4))
    with pytest.raises(InputDataError, match="mean"):
        SVGP(RBFKernel(), torch.rand(4, 1), mean="linear")
    with pytest.raises(InputDataError, match="num_latents"):
        SVGP(RBFKernel(), torch.rand(4, 1), num_latents=0)
