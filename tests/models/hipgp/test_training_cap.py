"""HIP-GP's PCG cap of the training steps (``pcg_train_max_iters``): minibatch steps capped
by default, full-batch steps, predictions and conditioning converged."""

import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.linalg.toeplitz import Grid
from bo_ncgp.models.hipgp import HIPGP
from bo_ncgp.models.hipgp.interdomain import INTEGRAL
from bo_ncgp.models.hipgp.model import MINIBATCH_PCG_MAX_ITERS

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


def test_auto_leaves_line_integrals_uncapped():
    k, grid, _, _ = _problem()
    m = _model(k, grid)
    codes = torch.tensor([0, INTEGRAL, 1])
    assert m.training_cap(True, codes) is None
    assert m.training_cap(True, codes[[0, 2]]) == MINIBATCH_PCG_MAX_ITERS


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
