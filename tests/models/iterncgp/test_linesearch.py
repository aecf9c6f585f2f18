"""Step-size control of the Newton steps (extension of Algorithm 1, see linesearch.py)."""

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Gaussian, Poisson, Softmax
from bo_ncgp.models.iterncgp import IterNCGP, backtracking_step, log_posterior
from tests.models.iterncgp._reference import dense_cg_model, dense_laplace


def poisson_data(n=40):
    X = torch.linspace(0, 1, n).unsqueeze(-1)
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    k.base_kernel.lengthscale = 0.15
    k.outputscale = 5.0
    y = torch.poisson(torch.exp(4.5 * torch.sin(3 * X[:, 0]) ** 2))  # counts up to ~90
    return X, y, k


def test_large_counts_converge_to_the_mode_in_few_steps():
    X, y, k = poisson_data()
    F_ref, predict = dense_laplace(k, Poisson(), X, y, 1, iters=400)
    n = X.shape[0]
    opts = dict(max_newton_steps=40, tol=1e-12)  # line search on by default for Poisson
    model = IterNCGP.exact_laplace(k, Poisson(), n, **opts).fit(X, y)
    assert model.config.line_search and model._state.converged
    assert len(model.history) <= 15 and model.history[0].step_size < 1
    torch.testing.assert_close(model.mode, F_ref[:, 0], atol=1e-6, rtol=0)
    Xs = torch.rand(5, 1)
    mean_ref, var_ref = predict(Xs)
    mean, var = model.predict_f(Xs)
    torch.testing.assert_close(mean, mean_ref[:, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(var, var_ref[:, 0], atol=1e-6, rtol=0)
    # the paper's undamped Newton overshoots (f ~ y at the first step) and creeps back
    plain = IterNCGP.exact_laplace(k, Poisson(), n, line_search=False, **opts).fit(X, y)
    assert len(plain.history) > 2 * len(model.history)


def test_backtracking_never_decreases_the_log_posterior_and_keeps_good_full_steps():
    torch.manual_seed(3)
    n = 15
    X = torch.rand(n, 1)
    K = 3 * gpytorch.kernels.RBFKernel()(X).to_dense().detach() + 1e-6 * torch.eye(n)
    rates = torch.tensor([1.0, 5.0, 50.0, 100.0])[:, None]
    y = torch.poisson(rates.expand(4, n))
    lik = Poisson()
    w = torch.zeros(4, 1, n, 1)
    # the full Newton target at f = 0: (K + W^{-1}) v = y_hat with W = 1, y_hat = y - 1
    v = torch.linalg.solve(K + torch.eye(n), (y - 1).unsqueeze(-1)).unsqueeze(1)
    Kw, Kv = K @ w, K @ v
    w_new, Kw_new, alpha = backtracking_step(lik, y, 0.0, w, Kw, v, Kv)
    psi0 = log_posterior(lik, y, 0.0, w, Kw)
    psi1 = log_posterior(lik, y, 0.0, w_new, Kw_new)
    assert bool((psi1 >= psi0).all())
    torch.testing.assert_close(Kw_new, K @ w_new)
    full = log_posterior(lik, y, 0.0, v, Kv) >= psi0
    assert bool((alpha[full] == 1).all()) and bool((alpha[~full] < 1).all())
    assert bool(full[0]) and not bool(full[-1])  # small counts: full step; large: damped


@pytest.mark.parametrize("lik", [Bernoulli(), Poisson(), Softmax(3), Gaussian(0.1)])
def test_line_search_flag_defaults(lik):
    k = gpytorch.kernels.RBFKernel()
    assert IterNCGP(k, lik).config.line_search == (not isinstance(lik, Gaussian))
    assert IterNCGP(k, lik, line_search=True).config.line_search
    assert not IterNCGP(k, lik, line_search=False).config.line_search  # the paper's Alg. 1


@pytest.mark.cpu_only  # make_gmm draws with a CPU generator on the default device
def test_saturating_softmax_is_damped_by_default_and_converges_to_the_mode():
    # 10-class Gaussian mixture, large outputscale: the logits saturate at the mode and the
    # second full Newton step would decrease the log posterior (on 1,000 points of the same
    # mixture the undamped iteration diverges); the default damps it and converges to the mode
    from experiments.tatzel.gmm import make_gmm

    C = 10
    X, y = make_gmm(5, seed=7)
    n = X.shape[0]
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5))
    k.base_kernel.lengthscale = 0.2
    k.outputscale = 20.0
    model = dense_cg_model(
        k, Softmax(C), n * C, max_newton_steps=20, recycle=False, tol=1e-8, solver_rtol=1e-11
    ).fit(X, y)
    assert model._state.converged
    assert min(h.step_size for h in model.history) < 1  # the line search was needed
    F_ref, _ = dense_laplace(k, Softmax(C), X, y, C, iters=400)
    torch.testing.assert_close(model.mode, F_ref, atol=1e-6, rtol=0)
