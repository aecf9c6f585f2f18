"""Tests of bo_ncgp.models.dual.pool: the rank-one pool fantasies of the dual SVGP equal the
generic path through condition (Chang et al. 2023, Sec. 4.1)."""

from __future__ import annotations

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Binomial, Softmax
from bo_ncgp.models.base import PoolFantasies
from bo_ncgp.models.dual import DualPoolFantasies, DualSVGP

DT = torch.float64


def _data(n: int = 30, seed: int = 0):
    gen = torch.Generator(torch.get_default_device()).manual_seed(seed)
    X = torch.rand(n, 2, dtype=DT, generator=gen)
    return X, gen


def _binomial(kernel):
    X, gen = _data()
    y = torch.binomial(torch.full((30,), 10.0, dtype=DT), torch.sigmoid(3 * X[:, 0] - 1.5), gen)
    model = DualSVGP(kernel.to(DT), Binomial(10).to(DT), X[::3], num_hyper_steps=0)
    return model.update(X, y)


@pytest.mark.parametrize(
    "kernel",
    [
        lambda: gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()),
        lambda: gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(batch_shape=torch.Size([1])), batch_shape=torch.Size([1])
        ),
    ],
    ids=["unbatched", "batch_shape_1"],
)
def test_rank_one_pool_fantasies_equal_the_generic_path(kernel):
    model = _binomial(kernel())
    pool = torch.rand(
        25, 2, dtype=DT, generator=torch.Generator(torch.get_default_device()).manual_seed(1)
    )
    fast = model.pool_fantasies(pool)
    assert isinstance(fast, DualPoolFantasies)
    generic = PoolFantasies(model, pool)
    torch.testing.assert_close(fast.mean, generic.mean, atol=1e-10, rtol=0)
    index = torch.tensor([0, 7, 24])
    Y = torch.tensor([[0.0, 4.0, 10.0], [2.0, 5.0, 9.0], [1.0, 1.0, 3.0]], dtype=DT)
    mean, var = fast.conditioned(index, Y)
    ref_mean, ref_var = generic.conditioned(index, Y)
    assert mean.shape == (3, 3, 25) == ref_mean.shape
    torch.testing.assert_close(mean, ref_mean, atol=1e-10, rtol=0)
    torch.testing.assert_close(var, ref_var, atol=1e-10, rtol=0)
    outside = torch.rand(4, 2, dtype=DT)
    C = fast.cross(outside)
    m_c, v_c = model.predict_f(outside)
    mean_o, _ = fast.conditioned_at(C, m_c, v_c, Y[:1].expand(4, 3))
    ref, _ = model.condition(outside[1:2], Y[0, 2:3]).predict_f(pool)
    torch.testing.assert_close(mean_o[1, 2], ref.detach(), atol=1e-10, rtol=0)


def test_bernoulli_pool_fantasies_equal_the_generic_path():
    X, _ = _data(seed=2)
    y = (X[:, 0] > 0.5).to(DT)
    model = DualSVGP(gpytorch.kernels.RBFKernel().to(DT), Bernoulli(), X[::3], num_hyper_steps=0)
    model.update(X, y)
    fast, generic = model.pool_fantasies(X), PoolFantasies(model, X)
    Y = torch.tensor([[0.0, 1.0]] * 5, dtype=DT)
    pairs = zip(
        fast.conditioned(torch.arange(5), Y), generic.conditioned(torch.arange(5), Y), strict=True
    )
    for a, b in pairs:
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def test_multi_latent_and_conditioned_models_are_unsupported_or_generic():
    X, _ = _data()
    y = (X[:, 0] * 3).floor().clamp_max(2).to(DT)
    model = DualSVGP(gpytorch.kernels.RBFKernel().to(DT), Softmax(3), X[::3], num_hyper_steps=0)
    model.update(X, y)
    with pytest.raises(UnsupportedError, match="single-latent"):
        model.pool_fantasies(X)
    binom = _binomial(gpytorch.kernels.RBFKernel())
    cond = binom.condition(X[:1], torch.tensor([3.0], dtype=DT))
    fant = cond.pool_fantasies(X)  # the generic path through condition
    assert type(fant) is PoolFantasies
    with pytest.raises(UnsupportedError, match="unconditioned"):
        DualPoolFantasies(cond, X)
