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


def _lower(*shape: int, generator: torch.Generator) -> torch.Tensor:
    A = torch.randn(*shape, shape[-1], generator=generator, dtype=torch.float64)
    return torch.linalg.cholesky(A @ A.mT + shape[-1] * torch.eye(shape[-1], dtype=A.dtype))


def test_solve_lower_folds_shared_factors_into_columns_with_broadcasting_results(monkeypatch):
    g = torch.Generator().manual_seed(0)
    calls = []
    solve = torch.linalg.solve_triangular

    def recording(L, B, **kwargs):
        calls.append((tuple(L.shape), tuple(B.shape)))
        return solve(L, B, **kwargs)

    # (L batch, B shape): fantasies x candidates x latents against shared or per-latent factors
    cases = [
        ((1,), (16, 8, 1, 6, 3)),
        ((2,), (16, 8, 2, 6, 3)),
        ((), (5, 7, 6, 2)),
        ((3, 1), (3, 4, 6, 2)),
        ((2,), (4, 1, 6, 3)),
        ((4, 2), (2, 6, 3)),
    ]
    for L_batch, B_shape in cases:
        L = _lower(*L_batch, 6, generator=g)
        B = torch.randn(*B_shape, generator=g, dtype=torch.float64)
        monkeypatch.setattr(torch.linalg, "solve_triangular", recording)
        X = solve_lower(L, B)
        monkeypatch.setattr(torch.linalg, "solve_triangular", solve)
        ref = solve(L, B, upper=False)
        assert X.shape == ref.shape
        torch.testing.assert_close(X, ref, rtol=0, atol=1e-12)
    # a shared factor is never copied per batch element: the batch moves into the columns
    assert calls[0] == ((1, 6, 6), (1, 6, 16 * 8 * 3))
    assert calls[1] == ((2, 6, 6), (2, 6, 16 * 8 * 3))
    assert calls[2] == ((6, 6), (6, 5 * 7 * 2))
    assert calls[3] == ((3, 6, 6), (3, 6, 4 * 2))
    assert calls[5] == ((4, 2, 6, 6), (2, 6, 3))  # nothing shared: broadcast as is


def test_solve_lower_folded_gradients_equal_broadcast_gradients():
    g = torch.Generator().manual_seed(1)
    L = _lower(1, 5, generator=g).requires_grad_(True)
    B = torch.randn(4, 3, 1, 5, 2, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 1, 5, 2, generator=g, dtype=torch.float64)
    gL, gB = torch.autograd.grad((solve_lower(L, B) * w).sum(), (L, B))
    ref = torch.linalg.solve_triangular(L, B, upper=False)
    rL, rB = torch.autograd.grad((ref * w).sum(), (L, B))
    torch.testing.assert_close(gL, rL, rtol=0, atol=1e-12)
    torch.testing.assert_close(gB, rB, rtol=0, atol=1e-12)
