"""Sparse-GP blocks of bo_ncgp.linalg.sparse_gp."""

from __future__ import annotations

import gpytorch
import torch

from bo_ncgp.linalg import jittered, latent_block, log_prior, solve_lower, whitened_kl


def test_latent_block_shared_and_batched():
    X1, X2 = torch.rand(5, 2), torch.rand(3, 2)
    shared = gpytorch.kernels.RBFKernel()
    K = latent_block(shared, X1, X2)
    assert K.shape == (1, 5, 3)
    torch.testing.assert_close(K[0], shared(X1, X2).to_dense())
    batched = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([2]))
    batched.lengthscale = torch.tensor([[[0.3]], [[1.0]]])
    K = latent_block(batched, X1)
    assert K.shape == (2, 5, 5)
    assert latent_block(batched, X1, diag=True).shape == (2, 5)
    torch.testing.assert_close(K.diagonal(dim1=-2, dim2=-1), latent_block(batched, X1, diag=True))


def test_jitter_solve_and_kl_against_torch_distributions():
    torch.manual_seed(0)
    A = torch.randn(2, 4, 4, dtype=torch.float64)
    K = A @ A.mT
    assert torch.equal(jittered(K, 0.0), K)
    Kj = jittered(K, 1e-3)
    torch.testing.assert_close(
        (Kj - K).diagonal(dim1=-2, dim2=-1),
        1e-3 * K.diagonal(dim1=-2, dim2=-1).mean(-1, True).expand(2, 4),
    )
    L = torch.linalg.cholesky(Kj)
    B = torch.randn(2, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(L @ solve_lower(L, B), B)
    m = torch.randn(2, 4, dtype=torch.float64)
    q = torch.distributions.MultivariateNormal(m, scale_tril=L)
    p = torch.distributions.MultivariateNormal(
        torch.zeros(4, dtype=torch.float64), torch.eye(4, dtype=torch.float64)
    )
    torch.testing.assert_close(whitened_kl(m, L), torch.distributions.kl_divergence(q, p))
    torch.testing.assert_close(whitened_kl(m, -L), whitened_kl(m, L))  # sign of the diagonal


def test_log_prior_sums_registered_priors():
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.RBFKernel(lengthscale_prior=gpytorch.priors.GammaPrior(3.0, 6.0)),
        outputscale_prior=gpytorch.priors.GammaPrior(2.0, 0.15),
    ).double()
    expected = gpytorch.priors.GammaPrior(3.0, 6.0).log_prob(k.base_kernel.lengthscale).sum()
    expected = expected + gpytorch.priors.GammaPrior(2.0, 0.15).log_prob(k.outputscale).sum()
    lp = log_prior(k)
    assert lp.dtype == torch.float64
    torch.testing.assert_close(lp, expected.to(lp))
    assert float(log_prior(gpytorch.kernels.RBFKernel())) == 0.0


def test_log_prior_of_several_modules_in_order():
    k = gpytorch.kernels.RBFKernel(lengthscale_prior=gpytorch.priors.GammaPrior(3.0, 6.0))
    lik = gpytorch.likelihoods.GaussianLikelihood(noise_prior=gpytorch.priors.GammaPrior(1.1, 0.05))
    total = torch.zeros(())
    for module in (k, lik):
        for _, mod, prior, closure, _ in module.named_priors():
            total = total + prior.log_prob(closure(mod)).sum()
    assert torch.equal(log_prior(k, lik), total)
