"""Textbook limits of IterNCGP (Tatzel et al., Sec. 3.2, Theorem A.2).

* unit-vector actions run to N*C iterations reproduce the exact Laplace approximation
  computed by dense Newton + Cholesky (mode, predictive mean and variance);
* unit-vector actions on a permutation with k*C iterations per step and no recycling are the
  subset-of-data Laplace approximation on the first k points;
* a Gaussian likelihood needs one Newton step and gives the exact GP regression posterior.
"""

import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax
from bo_ncgp.models.iterncgp import IterNCGP, UnitVectorPolicy
from tests.models.iterncgp._reference import dense_cg_model, dense_laplace, rbf


def exact_solver_model(k, lik, policy, iters_per_step, recycle):
    """IterNCGP run to the Laplace mode with solver tolerances off (budget by iterations)."""
    return dense_cg_model(k, lik, iters_per_step, policy=policy, recycle=recycle)


def problem(name, n):
    X = torch.rand(n, 2)
    if name == "bernoulli":
        k, lik, C = rbf(3.0), Bernoulli(), 1
        f = torch.sin(6 * X[:, 0]) * 2
        y = torch.bernoulli(torch.sigmoid(f))
    elif name == "poisson":
        k, lik, C = rbf(1.0, 0.4), Poisson(), 1
        y = torch.poisson(torch.exp(1.0 + torch.sin(5 * X[:, 0])))
    elif name == "binomial":
        k, lik, C = rbf(2.0), Binomial(10), 1
        y = torch.distributions.Binomial(10, torch.sigmoid(2 * X[:, 1] - 1)).sample()
    elif name == "softmax_shared":
        k, lik, C = rbf(3.0), Softmax(3), 3
        y = torch.randint(0, 3, (n,))
    else:  # softmax with one kernel per class (different hyperparameters)
        C = 3
        k = rbf(batch_shape=torch.Size([C]))
        k.base_kernel.lengthscale = torch.tensor([0.2, 0.4, 0.7]).reshape(C, 1, 1)
        k.outputscale = torch.tensor([1.0, 3.0, 2.0])
        lik = Softmax(C)
        y = torch.randint(0, C, (n,))
    return X, y, k, lik, C


CASES = [
    ("bernoulli", 50),
    ("poisson", 50),
    ("binomial", 30),
    ("softmax_shared", 25),
    ("softmax_batched", 25),
]


@pytest.mark.parametrize("recycle", [False, True])
@pytest.mark.parametrize("name,n", CASES)
def test_unit_vector_full_rank_equals_dense_laplace(name, n, recycle):
    n = n if recycle else (3 * n) // 5  # without recycling every Newton step costs n C products
    X, y, k, lik, C = problem(name, n)
    Xs = torch.rand(9, 2)
    F_ref, predict = dense_laplace(k, lik, X, y, C)
    mean_ref, var_ref = predict(Xs)
    model = exact_solver_model(k, lik, "unit_vector", n * C, recycle).fit(X, y)
    assert model._state.converged
    mode, (mean, var) = model.mode, model.predict_f(Xs)
    if C == 1:
        mode, mean, var = mode[:, None], mean[:, None], var[:, None]
    torch.testing.assert_close(mode, F_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(mean, mean_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(var, var_ref, atol=1e-6, rtol=0)
    if recycle:  # every direction is used once: later steps run on the recycled belief only
        assert model.num_solver_iters == n * C


@pytest.mark.parametrize("policy", ["cg", "pcg"])
@pytest.mark.parametrize("name", ["softmax_batched", "bernoulli", "poisson"])
def test_cg_converges_to_the_same_mode(name, policy):
    X, y, k, lik, C = problem(name, 35)
    F_ref, predict = dense_laplace(k, lik, X, y, C)
    model = dense_cg_model(k, lik, 200, policy=policy, solver_rtol=1e-13).fit(X, y)
    mean_ref = predict(X[:5])[0]
    if C == 1:
        F_ref, mean_ref = F_ref[:, 0], mean_ref[:, 0]
    assert model._state.converged
    torch.testing.assert_close(model.mode, F_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(model.predict_f(X[:5])[0], mean_ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "name,n", [("bernoulli", 40), ("softmax_shared", 20), ("softmax_batched", 20)]
)
def test_covariance_step_on_every_point_equals_dense_laplace(name, n):
    # W K(X, X) spans the whole (projected) space: the covariance step's solve is exact
    X, y, k, lik, C = problem(name, n)
    Xs = torch.rand(9, 2)
    _, predict = dense_laplace(k, lik, X, y, C)
    mean_ref, var_ref = predict(Xs)
    # 5 solver iterations per Newton step: the mode converges, the variances alone would not
    model = dense_cg_model(k, lik, 5, policy="pcg", covariance_targets=n).fit(X, y)
    assert model._state.converged and model.history[-1].solver_iters == 1  # one block action
    mean, var = model.predict_f(Xs)
    if C == 1:
        mean, var = mean[:, None], var[:, None]
    torch.testing.assert_close(mean, mean_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(var, var_ref, atol=1e-6, rtol=0)
    without = dense_cg_model(k, lik, 5, policy="pcg").fit(X, y).predict_f(Xs)[1]
    assert float((without - var_ref.squeeze(-1)).max()) > 1e-4


@pytest.mark.parametrize("name", ["bernoulli", "softmax_shared"])
def test_covariance_step_with_batched_targets_equals_dense_laplace_per_target(name):
    X, y0, k, lik, C = problem(name, 15)
    y = torch.stack([y0, y0.flip(0)])  # two target vectors: a batch of two models
    Xs = torch.rand(4, 2)
    model = dense_cg_model(k, lik, 5, policy="pcg", covariance_targets=15).fit(X, y)
    mean, var = model.predict_f(Xs)
    for b in range(2):
        mean_ref, var_ref = dense_laplace(k, lik, X, y[b], C)[1](Xs)
        if C == 1:
            mean_ref, var_ref = mean_ref[:, 0], var_ref[:, 0]
        torch.testing.assert_close(mean[b], mean_ref, atol=1e-6, rtol=0)
        torch.testing.assert_close(var[b], var_ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name,n", [("bernoulli", 50), ("softmax_batched", 30)])
def test_unit_vector_permutation_is_subset_of_data(name, n):
    X, y, k, lik, C = problem(name, n)
    perm = torch.randperm(n)
    sub = perm[:12]
    _, predict = dense_laplace(k, lik, X[sub], y[sub], C)
    model = exact_solver_model(k, lik, UnitVectorPolicy(perm), 12 * C, False).fit(X, y)
    Xs = torch.rand(6, 2)
    mean_ref, var_ref = predict(Xs)
    mean, var = model.predict_f(Xs)
    if C == 1:
        mean, var = mean[:, None], var[:, None]
    torch.testing.assert_close(mean, mean_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(var, var_ref, atol=1e-6, rtol=0)


def test_gaussian_likelihood_is_exact_gp_regression_in_one_newton_step():
    # Theorem A.2: the pseudo targets are y and the noise is sigma^2, whatever f_0 is
    n = 50
    X = torch.rand(n, 1)
    y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(n)
    k, lik = rbf(1.0, 0.2), Gaussian(noise=0.05)
    Xs = torch.rand(7, 1)
    Khat = k(X).to_dense() + 0.05 * torch.eye(n)
    L = torch.linalg.cholesky(Khat)
    Ks = k(Xs, X).to_dense()
    mean_ref = Ks @ torch.cholesky_solve(y[:, None], L)[:, 0]
    V = torch.linalg.solve_triangular(L, Ks.mT, upper=False)
    var_ref = k(Xs, diag=True) - V.square().sum(0)
    model = dense_cg_model(k, lik, n, max_newton_steps=5, tol=1e-10, solver_rtol=1e-12).fit(X, y)
    mean, var = model.predict_f(Xs)
    torch.testing.assert_close(mean, mean_ref, atol=1e-8, rtol=0)
    # CG stops when the mean is exact; the variance is exact only on the Krylov space
    assert bool((var >= var_ref - 1e-10).all())
    assert model.history[1].solver_iters <= 1  # the second step has nothing left to do
    exact = IterNCGP.exact_laplace(k, lik, n, max_newton_steps=1).fit(X, y)
    torch.testing.assert_close(exact.predict_f(Xs)[1], var_ref, atol=1e-8, rtol=0)
