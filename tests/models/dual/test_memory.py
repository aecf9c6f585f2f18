"""Tests of bo_ncgp.models.dual.memory: the memory store and Bayesian-leverage-score sampling."""

from __future__ import annotations

import pytest
import torch

from bo_ncgp.models.dual.memory import Memory, bayesian_leverage_scores, sample_by_score


def test_bls_is_eq_31():
    beta, var = torch.rand(3, 5), torch.rand(3, 5)
    assert torch.equal(bayesian_leverage_scores(beta, var), beta * var)


def test_sample_by_score_edge_cases_and_validation():
    s = torch.tensor([0.2, 0.1, 0.7])
    assert torch.equal(sample_by_score(s, 5), torch.arange(3))
    assert sample_by_score(s, 0).numel() == 0
    with pytest.raises(ValueError, match="bls' or 'random"):
        sample_by_score(s, 1, method="best")
    # zero-score points are only drawn once the positive ones are exhausted
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    for _ in range(20):
        idx = sample_by_score(torch.tensor([0.0, 5.0, 0.0, 1.0]), 2, generator=g)
        assert idx.tolist() == [1, 3]
    # all-zero scores fall back to uniform sampling
    assert sample_by_score(torch.zeros(4), 2, generator=g).shape == (2,)


def test_bls_sampling_frequencies_follow_the_scores_and_random_is_uniform():
    g = torch.Generator(torch.get_default_device()).manual_seed(1)
    scores = torch.tensor([1.0, 3.0, 6.0])
    counts = torch.zeros(3)
    rand_counts = torch.zeros(3)
    for _ in range(1500):
        counts[sample_by_score(scores, 1, generator=g)] += 1
        rand_counts[sample_by_score(scores, 1, method="random", generator=g)] += 1
    freq = counts / counts.sum()
    assert torch.allclose(freq, scores / scores.sum(), atol=0.05)
    assert torch.allclose(rand_counts / 1500, torch.full((3,), 1 / 3), atol=0.05)


def test_memory_add_keep_sites_and_state_dict_resize():
    mem = Memory(dim=2, num_latents=3)
    X, y = torch.rand(5, 2), torch.arange(5.0)
    mem.add(X, y, torch.randn(5, 3), torch.rand(5, 3))
    assert len(mem) == 5 and torch.equal(mem.inputs, X) and torch.equal(mem.targets, y)
    _, yr, eta_r, _ = mem.keep(torch.tensor([1, 3]))
    assert len(mem) == 2 and yr.tolist() == [0.0, 2.0, 4.0] and eta_r.shape == (3, 3)
    assert mem.targets.tolist() == [1.0, 3.0]
    mem.set_sites(torch.zeros(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="expected sites"):
        mem.set_sites(torch.zeros(3, 3), torch.ones(3, 3))
    fresh = Memory(dim=2, num_latents=3)
    fresh.load_state_dict(mem.state_dict())
    assert len(fresh) == 2 and torch.equal(fresh.X, mem.X) and torch.equal(fresh.beta, mem.beta)
