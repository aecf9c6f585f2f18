"""Tests of DualSVGP's learned constant prior mean (``learn_mean_constant=True``): the exact-GP
limit (the generalised-least-squares mean, GPyTorch's ExactGP with a ConstantMean), the gradient
of Eq. 26 in ``c``, the sites' meaning when ``c`` moves (memory, summarised factor,
conditioning, conversion, state dicts) and a stream with an offset."""

from __future__ import annotations

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Gaussian, Softmax
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.dual import DualSVGPConfig
from bo_ncgp.models.dual.diagnostics import hyperparameters

DT = torch.float64
S2 = 0.05


def matern(lengthscale: float = 0.4, outputscale: float = 1.5) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5)).to(DT)
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k


def frozen(module: torch.nn.Module) -> torch.nn.Module:
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def data(n: int = 12, seed: int = 0, offset: float = 3.0):
    g = torch.Generator(torch.get_default_device()).manual_seed(seed)
    X = torch.rand(n, 1, generator=g, dtype=DT)
    y = torch.sin(6 * X[:, 0]) + offset + 0.1 * torch.randn(n, generator=g, dtype=DT)
    return X, y


def dense(kernel, A, B=None) -> torch.Tensor:
    with torch.no_grad():
        return kernel(A, A if B is None else B).to_dense()


def exact(kernel, X, y, c, Xs):
    """Posterior mean and variance at ``Xs`` of the exact GP with prior mean ``c``."""
    A = dense(kernel, X) + S2 * torch.eye(len(X), dtype=DT)
    Ks, Kss = dense(kernel, Xs, X), dense(kernel, Xs)
    mean = c + Ks @ torch.linalg.solve(A, y - c)
    return mean, (Kss - Ks @ torch.linalg.solve(A, Ks.T)).diagonal()


def gls_mean(kernel, X, y) -> float:
    """``1^T A^{-1} y / 1^T A^{-1} 1``: the optimum of ``log N(y | c 1, A)`` in ``c``."""
    A = dense(kernel, X) + S2 * torch.eye(len(X), dtype=DT)
    one = torch.ones_like(y)
    return float(one @ torch.linalg.solve(A, y) / (one @ torch.linalg.solve(A, one)))


def model_at(X, *, kernel=None, lik=None, **kw) -> DualSVGP:
    opts = dict(memory_size=None, num_inner_steps=1, num_hyper_steps=0, inducing_update="fixed")
    opts.update(kw)
    kernel = matern() if kernel is None else kernel
    lik = Gaussian(S2).to(DT) if lik is None else lik
    return DualSVGP(kernel, lik, X, learn_mean_constant=True, **opts)


def set_c(model: DualSVGP, c: float) -> None:
    model.mean_constant = c


# ------------------------------------------------------------------ exact-GP limit
def test_learned_mean_is_the_gls_mean_and_the_posterior_the_exact_gp():
    """Gaussian likelihood, Z = X, kernel and noise fixed: ``c`` converges to the GLS mean in
    one update, and the posterior and Eq. 26 are the exact GP's with that prior mean."""
    X, y = data()
    kernel = frozen(matern())
    model = model_at(X, kernel=kernel, lik=frozen(Gaussian(S2).to(DT)), num_hyper_steps=50)
    model.update(X, y)
    c = gls_mean(kernel, X, y)
    assert model.mean_constant == pytest.approx(c, abs=1e-6)
    Xs = torch.linspace(0, 1, 9, dtype=DT).unsqueeze(-1)
    ref_mean, ref_var = exact(kernel, X, y, model.mean_constant, Xs)
    mean, var = model.predict_f(Xs)
    assert torch.allclose(mean, ref_mean, atol=1e-8) and torch.allclose(var, ref_var, atol=1e-8)
    A = dense(kernel, X) + S2 * torch.eye(len(X), dtype=DT)
    mvn = torch.distributions.MultivariateNormal(torch.full_like(y, model.mean_constant), A)
    assert float(model.log_marginal(include_prior=False).detach()) == pytest.approx(
        float(mvn.log_prob(y)), abs=1e-8
    )


def test_learned_mean_matches_gpytorch_exact_gp_with_a_constant_mean():
    """All hyperparameters learned (rounds of converged sites and L-BFGS on Eq. 26): the
    optimum of GPyTorch's ExactGP + ConstantMean fitted on its exact marginal likelihood."""
    X = torch.linspace(0, 1, 10, dtype=DT).unsqueeze(-1)
    noise = torch.randn(10, dtype=DT, generator=torch.Generator().manual_seed(0))
    y = 3.0 + torch.sin(6 * X[:, 0]) + 0.1 * noise

    class ExactGP(gpytorch.models.ExactGP):
        def __init__(self):
            lik = gpytorch.likelihoods.GaussianLikelihood(
                noise_constraint=gpytorch.constraints.GreaterThan(1e-6)
            )
            super().__init__(X, y, lik)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    gp = ExactGP().to(DT)
    gp.likelihood.noise = 0.1
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(gp.likelihood, gp)
    gp.train()
    opt = torch.optim.LBFGS(gp.parameters(), max_iter=300, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-10, tolerance_change=1e-14)  # fmt: skip

    def closure():
        opt.zero_grad()
        loss = -mll(gp(X), y)
        loss.backward()
        return loss

    opt.step(closure)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).to(DT)
    model = model_at(X, kernel=kernel, lik=Gaussian(0.1).to(DT), num_hyper_steps=300,
                     num_rounds=20)  # fmt: skip
    model.update(X, y)
    assert model.mean_constant == pytest.approx(float(gp.mean_module.constant), abs=2e-3)
    assert float(kernel.outputscale) == pytest.approx(float(gp.covar_module.outputscale), rel=2e-3)
    assert float(kernel.base_kernel.lengthscale) == pytest.approx(
        float(gp.covar_module.base_kernel.lengthscale), rel=2e-3
    )
    assert float(model.likelihood.noise) == pytest.approx(float(gp.likelihood.noise), rel=5e-3)
    gp.eval()
    Xs = torch.linspace(-0.1, 1.1, 13, dtype=DT).unsqueeze(-1)
    with torch.no_grad():
        ref = gp(Xs).mean
    assert torch.allclose(model.predict_f(Xs)[0], ref, atol=2e-3)


# ----------------------------------------------------------------- gradient in c
@pytest.mark.parametrize("lik", ["gaussian", "bernoulli"])
def test_objective_gradient_in_the_mean_matches_finite_differences(lik):
    """d Eq. 26 / dc by autograd equals central differences, with data in the memory and in
    the summarised factor (its normaliser ``kappa_rest(c)`` included); for a Gaussian
    likelihood with every point a site at Z = X it is ``1^T A^{-1} (y - c 1)``."""
    X, y = data(16)
    if lik == "bernoulli":
        y, likelihood = (y > 3.0).to(DT), Bernoulli()
    else:
        likelihood = Gaussian(S2).to(DT)
    kernel = matern()
    model = model_at(X, kernel=kernel, lik=likelihood, memory_size=3, num_inner_steps=5)
    model.update(X[:8], y[:8]).update(X[8:], y[8:])  # 10 points folded, 6 in memory
    assert len(model.memory) == 6 and model._rest_totals.abs().sum() > 0
    set_c(model, 0.7)
    obj = model.log_marginal(include_prior=False)
    (grad,) = torch.autograd.grad(obj, [model._mean_constant])
    h, vals = 1e-5, []
    for c in (0.7 + h, 0.7 - h):
        set_c(model, c)
        with torch.no_grad():
            vals.append(float(model.log_marginal(include_prior=False)))
    assert float(grad) == pytest.approx((vals[0] - vals[1]) / (2 * h), rel=1e-6, abs=1e-7)
    if lik == "gaussian":  # every point's site is its exact likelihood: the exact gradient
        A = dense(kernel, X) + S2 * torch.eye(len(X), dtype=DT)
        one = torch.ones_like(y)
        assert float(grad) == pytest.approx(float(one @ torch.linalg.solve(A, y - 0.7)), rel=1e-6)


# ------------------------------------------------- the sites keep their meaning
@pytest.mark.parametrize("memory_size", [None, 0, 4])
def test_moving_c_is_the_exact_gp_with_the_new_prior_mean(memory_size):
    """Sites are stored on ``f``: after ``c`` moves, memory and summarised factor alike give the
    exact GP posterior with the new prior mean (a wholesale shift of the posterior would not)."""
    X, y = data()
    kernel = matern()
    model = model_at(X, kernel=kernel, memory_size=memory_size).update(X, y)
    Xs = torch.linspace(0, 1, 7, dtype=DT).unsqueeze(-1)
    for c in (0.0, 2.0, -1.5):
        set_c(model, c)
        mean, var = model.predict_f(Xs)
        ref_mean, ref_var = exact(kernel, X, y, c, Xs)
        assert torch.allclose(mean, ref_mean, atol=1e-7), c
        assert torch.allclose(var, ref_var, atol=1e-7)
    # projected to other inducing inputs (Eq. 27 moves s with lam): still the exact GP
    Z2 = torch.cat([X, torch.linspace(0.05, 0.95, 3, dtype=DT).unsqueeze(-1)])
    model.project(Z2)
    set_c(model, 0.5)
    assert torch.allclose(model.predict_f(Xs)[0], exact(kernel, X, y, 0.5, Xs)[0], atol=1e-6)


def test_conditioning_and_conversion_follow_a_learned_mean():
    X, y = data(14)
    kernel = matern()
    model = model_at(X[:10], kernel=kernel).update(X[:10], y[:10])
    Xs = torch.linspace(0, 1, 7, dtype=DT).unsqueeze(-1)
    cond = model.condition(X[10:], y[10:])
    set_c(model, 2.5)  # the conditioned model shares c with the model it was built from
    assert cond.mean_constant == 2.5
    assert torch.allclose(cond.predict_f(Xs)[0], exact(kernel, X, y, 2.5, Xs)[0], atol=1e-7)
    # a converted exact posterior of g(Z) at c0 holds its factor on f(Z): moving c is exact
    c0, Z = 1.0, X[:10]
    A = dense(kernel, Z) + S2 * torch.eye(10, dtype=DT)
    K = dense(kernel, Z)
    m_u, S_u = K @ torch.linalg.solve(A, y[:10] - c0), K - K @ torch.linalg.solve(A, K)
    conv = DualSVGP.from_inducing_posterior(kernel, Gaussian(S2).to(DT), Z, m_u, S_u,
                                            mean_constant=c0, learn_mean_constant=True)  # fmt: skip
    assert torch.allclose(conv.predict_f(Xs)[0], exact(kernel, Z, y[:10], c0, Xs)[0], atol=1e-7)
    set_c(conv, 3.0)
    assert torch.allclose(conv.predict_f(Xs)[0], exact(kernel, Z, y[:10], 3.0, Xs)[0], atol=1e-6)


def test_learned_mean_survives_copy_and_state_dict():
    X, y = data()
    model = model_at(X, num_hyper_steps=20).update(X, y)
    assert model.learn_mean_constant and model.mean_constant != 0.0
    assert "mean_constant" in hyperparameters(model)
    assert any(p is model._mean_constant for p in model.parameters())
    Xs = torch.rand(5, 1, dtype=DT)
    twin = model.copy()
    assert twin.mean_constant == model.mean_constant and twin.learn_mean_constant
    assert torch.allclose(twin.predict_f(Xs)[0], model.predict_f(Xs)[0])
    fixed = DualSVGP(matern(), Gaussian(S2).to(DT), X, inducing_update="fixed")
    fixed.load_state_dict(model.state_dict())  # a learned state into a fixed-mean model
    assert fixed.mean_constant == model.mean_constant and not fixed.learn_mean_constant
    assert all(p is not fixed._mean_constant for p in fixed.parameters())
    assert torch.allclose(fixed.predict_f(Xs)[0], model.predict_f(Xs)[0])


# ------------------------------------------------------------------ streaming
def test_learned_mean_converges_on_a_stream_with_an_offset():
    """Twelve batches of a stream around 5: the learned ``c`` ends near the offline GLS mean
    and the predictions near the exact GP's; the fixed zero mean is further off."""
    X, y = data(120, seed=3, offset=5.0)
    kernel = frozen(matern(0.2, 1.0))
    opts = dict(memory_size=4, num_inner_steps=3, inducing_update="pivoted_cholesky")
    Z0 = X[:10]
    learned = DualSVGP(kernel, frozen(Gaussian(S2).to(DT)), Z0, learn_mean_constant=True,
                       num_hyper_steps=30, max_inducing=25, **opts)  # fmt: skip
    fixed = DualSVGP(kernel, frozen(Gaussian(S2).to(DT)), Z0, num_hyper_steps=30,
                     max_inducing=25, **opts)  # fmt: skip
    for i in range(0, 120, 10):
        learned.update(X[i : i + 10], y[i : i + 10])
        fixed.update(X[i : i + 10], y[i : i + 10])
    c = gls_mean(kernel, X, y)
    assert learned.mean_constant == pytest.approx(c, abs=0.1)
    Xs = torch.linspace(-0.3, 1.3, 33, dtype=DT).unsqueeze(-1)  # also away from the data
    ref, _ = exact(kernel, X, y, c, Xs)
    err_learned = (learned.predict_f(Xs)[0] - ref).abs().max()
    err_fixed = (fixed.predict_f(Xs)[0] - ref).abs().max()
    assert err_learned < 0.1 and err_fixed > 4 * err_learned


# ------------------------------------------------------------------ settings
def test_learn_mean_constant_checks():
    with pytest.raises(ValueError, match="learn_mean_constant must be True or False, got 1"):
        DualSVGPConfig(learn_mean_constant=1)
    kernel = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([3]))
    with pytest.raises(UnsupportedError, match="single latent function, got 3"):
        DualSVGP(kernel, Softmax(3), torch.rand(4, 1), learn_mean_constant=True)
    fixed = DualSVGP(matern(), Gaussian(S2).to(DT), torch.rand(4, 1, dtype=DT))
    assert not fixed.learn_mean_constant and "mean_constant" not in hyperparameters(fixed)
    with pytest.raises(UnsupportedError, match=r"only when it is learned.*mean_constant, 0\.0"):
        fixed.mean_constant = 1.0
    learned = model_at(torch.rand(4, 1, dtype=DT))
    with pytest.raises(ValueError, match="mean_constant must be a finite number, got nan"):
        learned.mean_constant = float("nan")
    assert learned.mean_constant == 0.0
