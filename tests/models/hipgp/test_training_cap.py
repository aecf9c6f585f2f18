"""HIP-GP's PCG cap of the training steps (``pcg_train_max_iters``): minibatch steps capped
by default, full-batch steps, predictions and conditioning converged."""

import copy
import math
import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.linalg.toeplitz import Grid
from bo_ncgp.models.hipgp import HIPGP
from bo_ncgp.models.hipgp.interdomain import INTEGRAL, cross_covariance
from bo_ncgp.models.hipgp.model import MINIBATCH_PCG_MAX_ITERS, minibatch_start_tol
from bo_ncgp.models.hipgp.whitening import interpolation_guess

D = torch.float64


def _problem(n=200, seed=0):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5)).to(D)
    k.base_kernel.lengthscale = 0.25
    k.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=D)
    y = torch.sin(4 * X[:, 0]) * torch.cos(3 * X[:, 1]) + 0.1 * torch.randn(n, generator=g, dtype=D)
    grid = Grid(torch.full((2,), -0.05, dtype=D), torch.full((2,), 1.05, dtype=D), (12, 12))
    return k, grid, X, y


def _model(k, grid, **kw):
    m = HIPGP(k, grid, likelihood=Gaussian(noise=0.01), embedding_factor=4, **kw)
    m.likelihood.requires_grad_(False)
    return m


def _fit(m, X, y, **kw):
    its: list[int] = []
    m.fit(X, y, generator=torch.Generator().manual_seed(1),
          callback=lambda s: its.append(m.last_pcg_iterations), **kw)  # fmt: skip
    return its


def test_minibatch_fit_caps_its_solves_and_predictions_converge():
    k, grid, X, y = _problem(n=120)
    m = _model(k, grid)
    its = _fit(m, X, y, batch_size=40, num_epochs=2)
    assert its and max(its) <= MINIBATCH_PCG_MAX_ITERS
    assert m.pcg_cap() is None  # the cap lives only inside the training steps
    with torch.no_grad():
        m.predict_f(X[:20])
    assert m.last_pcg_iterations > 3 * MINIBATCH_PCG_MAX_ITERS  # a converged solve
    # the same fit with converged training solves: the posterior mean moves by < 1 %
    ref = _model(k, grid, pcg_train_max_iters=None)
    its_ref = _fit(ref, X, y, batch_size=40, num_epochs=2)
    assert its_ref[0] > 3 * MINIBATCH_PCG_MAX_ITERS
    with torch.no_grad():
        a, b = m.predict_f(X)[0], ref.predict_f(X)[0]
    assert float((a - b).norm() / b.norm()) < 1e-2


def test_full_batch_fit_and_steps_stay_converged():
    k, grid, X, y = _problem(n=60)
    m = _model(k, grid)
    its = _fit(m, X, y)  # one batch: the step jumps to the optimum
    assert its[0] > 3 * MINIBATCH_PCG_MAX_ITERS
    m.natgrad_step(X, y)
    assert m.last_pcg_iterations > 3 * MINIBATCH_PCG_MAX_ITERS
    m.natgrad_step(X[:20], y[:20], num_data=60, lr=0.1)  # a minibatch step
    assert m.last_pcg_iterations <= MINIBATCH_PCG_MAX_ITERS


def test_an_explicit_training_cap_and_the_cap_on_every_solve():
    k, grid, X, y = _problem(n=60)
    m = _model(k, grid, pcg_train_max_iters=5)
    assert max(_fit(m, X, y)) <= 5  # an int caps full-batch steps too
    m = _model(k, grid, pcg_max_iters=2)  # never above pcg_max_iters
    assert (m.training_cap(True), m.training_cap(False)) == (2, 2)
    m = _model(k, grid, pcg_train_max_iters=0)  # no solve in training
    _fit(m, X, y, batch_size=20)
    assert m.last_pcg_iterations == 0
    with torch.no_grad():
        m.predict_f(X[:5])
    assert m.last_pcg_iterations > 0


def test_minibatch_fit_caps_line_integral_solves_from_their_guess():
    k, grid, X, _ = _problem(n=120)
    X = 0.05 + 0.95 * X  # lines from the origin, a corner of the grid's domain
    codes = torch.full((120,), INTEGRAL)
    with torch.no_grad():  # integrals of a draw-free smooth field: exact targets
        f = lambda P: torch.sin(4 * P[:, 0]) * torch.cos(3 * P[:, 1])  # noqa: E731
        t = torch.linspace(0, 1, 401, dtype=D)[:, None, None]
        y = torch.trapezoid(f((t * X).reshape(-1, 2)).reshape(401, -1), dx=1 / 400, dim=0)
        y = y * X.norm(dim=-1)
    m, ref = _model(k, grid), _model(k, grid, pcg_train_max_iters=None)
    its = [_fit(mm, X, y, op=codes, batch_size=40, num_epochs=2) for mm in (m, ref)]
    assert max(its[0]) <= MINIBATCH_PCG_MAX_ITERS < its[1][0]
    with torch.no_grad():
        a, b = m.predict_f(X, op="integral")[0], ref.predict_f(X, op="integral")[0]
    assert float((a - b).norm() / b.norm()) < 1e-2


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"pcg_train_max_iters": "fast"}, "pcg_train_max_iters must be 'auto', None or a count"),
        ({"pcg_train_max_iters": -1}, "pcg_train_max_iters"),
        ({"pcg_train_max_iters": 0, "pcg_initial_guess": "zero"}, "pcg_train_max_iters=0"),
    ],
)
def test_bad_training_caps_are_refused(kw, match):
    k, grid, _, _ = _problem(n=5)
    with warnings.catch_warnings(), pytest.raises(InputDataError, match=match):
        warnings.simplefilter("ignore")
        _model(k, grid, **kw)


def _smooth_problem(spacings, n=200, side=24, seed=0):
    """Matern-5/2 ``spacings`` grid spacings long on a ``side x side`` grid."""
    grid = Grid(torch.full((2,), -0.02, dtype=D), torch.full((2,), 1.02, dtype=D), (side, side))
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5)).to(D)
    k.base_kernel.lengthscale = spacings * float(grid.spacing[0])
    k.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=D)
    y = torch.sin(4 * X[:, 0]) * torch.cos(3 * X[:, 1]) + 0.1 * torch.randn(n, generator=g, dtype=D)
    return k, grid, X, y


def _step(k, grid, X, y, tol=1e-3, **kw):
    m = HIPGP(k, grid, likelihood=Gaussian(noise=0.01), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long kernels clamp a little of the embedding
        m.natgrad_step(X[:50], y[:50], num_data=X.shape[0], lr=0.5, tol=tol, max_iters=5000)
    return m


def test_auto_keeps_a_good_start_without_iterations():
    k, grid, X, y = _smooth_problem(spacings=6.0)
    m = _step(k, grid, X, y, tol=1e-12)
    assert m.last_pcg_iterations == 0
    assert m.last_kept_starts == 50
    # the step of k_n = R^T W_n (no solve; here from the sparse weights), to the mean
    # solve's tolerance
    ref = _step(k, grid, X, y, tol=1e-12, pcg_train_max_iters=0)
    assert ref._last_pcg_solution.layout == torch.sparse_csr
    assert torch.allclose(m.q.mean, ref.q.mean, rtol=0, atol=1e-9)


def test_auto_solves_rows_whose_start_is_poor():
    k, grid, X, y = _smooth_problem(spacings=1.0)
    m = _step(k, grid, X, y)
    assert m.last_pcg_iterations == MINIBATCH_PCG_MAX_ITERS
    assert m.last_kept_starts < 50
    # every row ends within the tolerance; the starts alone do not
    w = _model(k, grid, pcg_max_iters=MINIBATCH_PCG_MAX_ITERS).whitener()
    codes = torch.zeros(X.shape[0], dtype=torch.long)
    b = cross_covariance(k, grid.points(), X, codes).mT
    W = interpolation_guess(X, grid, codes)
    tol = 0.05
    with torch.no_grad():
        rows = w.whiten(b, x0=W, start_tol=tol)
        ref = w.root_t_mv(w.embedding.solve(b, tol=1e-11)[0])

    def err(K):
        return (K - ref).norm(dim=-1) / ref.norm(dim=-1)

    assert 0 < int(w.last_accepted.sum()) < X.shape[0]
    assert float(err(rows).max()) < tol < float(err(w.root_t_mv(W)).max())


@pytest.mark.parametrize("spacings", [1.0, 3.0, 6.0])
def test_the_start_error_estimate_tracks_the_error_of_the_rows(spacings):
    k, grid, X, _ = _smooth_problem(spacings, n=40)
    m = _model(k, grid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = m.whitener()
    codes = torch.zeros(40, dtype=torch.long)
    b = cross_covariance(k, grid.points(), X, codes).mT
    W = interpolation_guess(X, grid, codes)
    KW = w.embedding.kuu_mv(W)
    est = w.start_errors(W, b - KW, KW)
    x = w.embedding.solve(b, tol=1e-11)[0]
    true = (w.root_t_mv(W - x)).norm(dim=-1) / w.root_t_mv(x).norm(dim=-1)
    ratio = float(est.median() / true.median())
    assert 0.8 < ratio < 1.5


def test_minibatch_start_tol_and_where_it_applies():
    assert minibatch_start_tol(100, 100) == 0.0
    assert minibatch_start_tol(1, 10**9) == pytest.approx(1.0)
    k, grid, _, _ = _problem()
    m = _model(k, grid)
    assert m.training_start_tol(50, 200) == pytest.approx((1 / 50 - 1 / 200) ** 0.5)
    # smaller steps average more minibatches: a tighter tolerance
    assert m.training_start_tol(50, 200, lr=0.1) == pytest.approx(
        (0.1 / 1.9) ** 0.5 * (1 / 50 - 1 / 200) ** 0.5
    )
    assert m.training_start_tol(200, 200) is None  # full batch: solve
    assert _model(k, grid, pcg_train_max_iters=3).training_start_tol(50, 200) is None
    with pytest.raises(InputDataError, match="batch_size"):
        minibatch_start_tol(0, 10)


def test_the_mean_step_over_the_factor_of_the_rows_is_the_dense_step():
    k, grid, X, _ = _smooth_problem(spacings=3.0, n=60, side=12)
    m = _model(k, grid)
    w = m.whitener()
    codes = torch.zeros(60, dtype=torch.long)
    Xs = interpolation_guess(X, grid, codes)
    K = w.root_t_mv(Xs)
    a, b = torch.randn(60, dtype=D), torch.rand(60, dtype=D) + 0.5
    q1, q2 = copy.deepcopy(m.q), copy.deepcopy(m.q)
    q1.natgrad_step(K, a, b, 3.0, 0.3, tol=1e-12)
    q2.natgrad_step(K, a, b, 3.0, 0.3, tol=1e-12, factor=(Xs, w.root_mv, w.root_t_mv))
    assert torch.allclose(q1.mean, q2.mean, rtol=1e-8, atol=1e-10)


def test_minibatch_fit_with_learned_hyperparameters_through_kept_and_solved_rows():
    k, grid, X, y = _smooth_problem(spacings=2.0, n=120, side=16)
    k.requires_grad_(True)
    m = HIPGP(k, grid, likelihood=Gaussian(noise=0.01))
    m.likelihood.requires_grad_(False)
    kept: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(X, y, batch_size=30, num_epochs=2, learn_hyperparameters=True, hyper_lr=0.05,
              generator=torch.Generator().manual_seed(1),
              callback=lambda s: kept.append(m.last_kept_starts))  # fmt: skip
    assert any(0 < c < 30 for c in kept)  # steps with kept and with solved rows
    assert len(m.history) == 8 and all(math.isfinite(h) for h in m.history)
    assert float(k.base_kernel.lengthscale) != pytest.approx(2.0 * float(grid.spacing[0]))
