"""Tests of experiments.chang2023.maddox_acquisition (Maddox et al.'s hotspot acquisition)."""

from __future__ import annotations

import math

import pytest
import torch

from bo_ncgp.bo.acquisition import (
    CRITERIA,
    ThresholdEntropyReduction,
    exceedance_entropy,
    threshold_entropy_reduction,
)
from experiments.chang2023.maddox_acquisition import (
    _bilinear,
    clamped_gain,
    maddox_acquisition,
    spiked_entropy,
)
from tests.bo.test_pool import LEVEL, binomial_model, brute_force_after  # noqa: F401 (fixture)


def test_importing_registers_the_spiked_criterion():
    assert CRITERIA["spiked"] is spiked_entropy


def _spiked_by_dense_quadrature(mean: float, var: float, level: float) -> float:
    """``E[h(sigmoid f) 1(f > level)]`` by the trapezoid rule on 400,001 points."""
    sd = math.sqrt(var)
    lo, hi = max(level, mean - 14 * sd), mean + 14 * sd
    if lo >= hi:
        return 0.0
    f = torch.linspace(lo, hi, 400_001)
    p = torch.sigmoid(f)
    h = -(torch.special.xlogy(p, p) + torch.special.xlogy(1 - p, 1 - p))
    density = torch.exp(-0.5 * ((f - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
    return float(torch.trapezoid(h * density, f))


def test_spiked_entropy_equals_dense_quadrature():
    level = math.log(0.1 / 0.9)
    g = torch.Generator().manual_seed(0)
    points = [(m, v) for m in (-8.0, -4.0, -2.2, -1.0, 0.0, 1.5, 4.0, 10.0)
              for v in (1e-4, 0.01, 0.25, 1.0, 4.0, 25.0)]  # fmt: skip
    points += [
        (float(torch.empty(()).uniform_(-10, 10, generator=g)),
         float(torch.empty(()).uniform_(-8, 4.5, generator=g).exp()))
        for _ in range(40)
    ]  # fmt: skip
    mean = torch.tensor([m for m, _ in points])
    var = torch.tensor([v for _, v in points])
    got = spiked_entropy(mean, var, level)  # table lookup
    want = torch.tensor([_spiked_by_dense_quadrature(m, v, level) for m, v in points])
    assert (got - want).abs().max() < 5e-4  # nats, ~0.1 % of the largest values
    # the certain limit: h(sigmoid(mean)) above the level, 0 below
    mean = torch.tensor([-3.0, -1.0, 0.5])
    p = torch.sigmoid(mean)
    want = -(p * p.log() + (1 - p) * torch.log1p(-p)) * (mean > level)
    assert torch.allclose(spiked_entropy(mean, torch.full((3,), 1e-7), level), want, atol=1e-3)
    # float32 inputs use the same (converted) table
    got32 = spiked_entropy(mean.float(), torch.full((3,), 0.5).float(), level)
    assert got32.dtype == torch.float32
    assert torch.allclose(
        got32.double(), spiked_entropy(mean, torch.full((3,), 0.5), level), atol=1e-6
    )


def test_table_lookup_is_exact_on_a_bilinear_table_up_to_its_edges():
    table = torch.arange(12.0).reshape(3, 4)  # 4 i + j, at x = 1 + 0.5 i, y = -1 + 2 j
    x = torch.tensor([1.0, 1.25, 2.0, 2.0, 9.0, -5.0])  # the upper edge, then clamped inputs
    y = torch.tensor([-1.0, 2.0, 5.0, 4.0, 99.0, -9.0])
    i = ((x - 1) / 0.5).clamp(0, 2)
    j = ((y + 1) / 2).clamp(0, 3)
    for dtype in (torch.float64, torch.float32):
        got = _bilinear(table.to(dtype), x.to(dtype), 1.0, 0.5, y.to(dtype), -1.0, 2.0)
        assert torch.allclose(got, (4 * i + j).to(dtype))


def test_spiked_scores_equal_the_brute_force_reduction(binomial_model):  # noqa: F811
    model = binomial_model
    pool = torch.rand(30, 2)
    acq = ThresholdEntropyReduction(model, pool, threshold=0.2, num_fantasies=6, criterion="spiked")
    (mean, var), (mean_ref, var_ref) = brute_force_after(model, pool)
    H0 = spiked_entropy(mean, var, LEVEL).sum()
    ref = H0 - spiked_entropy(mean_ref, var_ref.clamp_min(0), LEVEL).sum(-1).mean(-1)
    scores = acq.score_pool()
    assert torch.allclose(scores, ref, atol=1e-10)
    assert acq.entropy() == pytest.approx(float(H0))
    assert scores.max() > 1e-3
    # a different criterion ranks the pool differently, but both reward information
    plain = ThresholdEntropyReduction(model, pool, threshold=0.2, num_fantasies=6).score_pool()
    assert not torch.allclose(scores, plain)
    w = torch.rand(30)
    weighted = threshold_entropy_reduction(
        acq.fantasies, torch.arange(30), LEVEL, 6, pool_weights=w, criterion="spiked",
        chunk_size=7,
    )  # fmt: skip
    H0w = (spiked_entropy(mean, var, LEVEL) * w).sum()
    refw = H0w - (spiked_entropy(mean_ref, var_ref.clamp_min(0), LEVEL) * w).sum(-1).mean(-1)
    assert torch.allclose(weighted, refw, atol=1e-10)
    f32 = ThresholdEntropyReduction(
        model, pool, 0.2, num_fantasies=6, criterion="spiked", compute_dtype=torch.float32
    ).score_pool()
    assert (f32 - scores).abs().max() < 1e-3 * max(1.0, float(scores.abs().max()))


@pytest.mark.parametrize("criterion", ["exceedance", "spiked"])
def test_clamped_scores_count_only_per_village_decreases(binomial_model, criterion):  # noqa: F811
    model = binomial_model
    pool = torch.rand(30, 2)
    acq = ThresholdEntropyReduction(
        model, pool, threshold=0.2, num_fantasies=6, criterion=criterion, gain=clamped_gain
    )
    per_point = spiked_entropy if criterion == "spiked" else exceedance_entropy
    (mean, var), (mean_ref, var_ref) = brute_force_after(model, pool)
    change = per_point(mean, var, LEVEL) - per_point(mean_ref, var_ref.clamp_min(0), LEVEL)
    ref = change.clamp_min(0).sum(-1).mean(-1)  # (candidates,)
    scores = acq.score_pool()
    assert torch.allclose(scores, ref, atol=1e-10)
    # entropy increases exist here, so clamping changes the scores (the check can fail)
    assert (change < -1e-6).any()
    plain = change.sum(-1).mean(-1)
    assert (scores > plain + 1e-6).any() and (scores >= plain - 1e-10).all()
    w = torch.rand(30)
    weighted = threshold_entropy_reduction(
        acq.fantasies, torch.arange(30), LEVEL, 6, pool_weights=w, criterion=criterion,
        chunk_size=7, gain=clamped_gain,
    )  # fmt: skip
    assert torch.allclose(weighted, (change.clamp_min(0) * w).sum(-1).mean(-1), atol=1e-10)
    if criterion == "spiked":  # Maddox et al.'s acquisition in one call
        maddox = maddox_acquisition(model, pool, 0.2, num_fantasies=6).score_pool()
        assert torch.equal(maddox, scores)
