"""expected_log_prob / expected_diagonal agree with expected() for every likelihood."""

from __future__ import annotations

import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax


@pytest.mark.parametrize(
    "lik, y",
    [
        (Gaussian(0.3), torch.tensor([0.2, -1.0, 2.0])),
        (Bernoulli(), torch.tensor([1.0, 0.0, 1.0])),
        (Binomial(10), torch.tensor([3.0, 0.0, 10.0])),
        (Poisson(), torch.tensor([0.0, 4.0, 1.0])),
    ],
)
def test_scalar_likelihoods(lik, y):
    mean, var = torch.randn(2, 3), torch.rand(2, 3)
    elp, alpha, beta = lik.expected(y, mean, var)
    torch.testing.assert_close(lik.expected_log_prob(y, mean, var), elp)
    for a, b in zip(lik.expected_diagonal(y, mean, var), (elp, alpha, beta), strict=True):
        torch.testing.assert_close(a, b)


def test_softmax_diagonal_and_log_prob_match_full_expectation():
    lik = Softmax(4, num_samples=256)
    y = torch.tensor([0, 3, 1])
    mean, var = torch.randn(5, 3, 4), torch.rand(5, 3, 4)
    elp, alpha, beta = lik.expected(y, mean, var)
    e2, a2, b2 = lik.expected_diagonal(y, mean, var)
    torch.testing.assert_close(e2, elp)
    torch.testing.assert_close(a2, alpha)
    torch.testing.assert_close(b2, beta.diagonal(dim1=-2, dim2=-1))
    torch.testing.assert_close(lik.expected_log_prob(y, mean, var), elp)
    # differentiable in mean and var
    m = mean.clone().requires_grad_(True)
    lik.expected_log_prob(y, m, var).sum().backward()
    assert torch.isfinite(m.grad).all() and m.grad.abs().sum() > 0
