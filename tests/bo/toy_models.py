"""A toy exact GP with a closed-form posterior for testing the BoTorch layer."""

import gpytorch
import torch

from bo_ncgp.likelihoods import Gaussian


class ExactGP(torch.nn.Module):
    """Tiny exact GP with m independent outputs sharing one RBF kernel, with the model
    contract's ``predict_f(X, full_cov=True)`` and ``condition(X, y)``."""

    def __init__(self, X, Y, noise=0.01):
        super().__init__()
        self.kernel = gpytorch.kernels.RBFKernel()
        self.kernel.lengthscale = 0.3
        self.X, self.Y, self.noise = X, Y, noise  # X (*b, n, d), Y (*b, n, m)
        self.likelihood = Gaussian(noise)

    @property
    def num_latents(self):
        return self.Y.shape[-1]

    @property
    def batch_shape(self):
        return self.Y.shape[:-2]

    def predict(self, Xs):
        """Mean ``(..., q, m)`` and covariance ``(..., m, q, q)``."""
        K = self.kernel(self.X).to_dense() + self.noise * torch.eye(self.X.shape[-2])
        Ks = self.kernel(Xs, self.X).to_dense()
        L = torch.linalg.cholesky(K)
        A = torch.cholesky_solve(Ks.mT, L)  # (..., n, q)
        mean = A.mT @ self.Y  # (..., q, m)
        cov = self.kernel(Xs).to_dense() - Ks @ A
        m = self.Y.shape[-1]
        cov = cov.unsqueeze(-3).expand(*cov.shape[:-2], m, *cov.shape[-2:])
        return mean, cov

    def predict_f(self, Xs, full_cov=False):
        mean, cov = self.predict(Xs)
        if not full_cov:
            cov = cov.diagonal(dim1=-2, dim2=-1).mT  # (..., q, m)
        return (
            (mean[..., 0], cov[..., 0, :, :] if full_cov else cov[..., 0])
            if (self.num_latents == 1)
            else (mean, cov)
        )

    def condition(self, X, y):
        Y = y.unsqueeze(-1)
        bs = torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2], self.X.shape[:-2])
        Xn = torch.cat([self.X.expand(*bs, *self.X.shape[-2:]), X.expand(*bs, *X.shape[-2:])], -2)
        Yn = torch.cat([self.Y.expand(*bs, *self.Y.shape[-2:]), Y.expand(*bs, *Y.shape[-2:])], -2)
        new = ExactGP(Xn, Yn, self.noise)
        new.kernel = self.kernel
        return new


def check_posterior(adapter, X, noise=None, rtol=None, atol=None, **options):
    """``adapter.posterior(X)`` is the wrapped model's ``predict_f(X, full_cov=True,
    **options)`` (one output), plus ``noise`` with ``observation_noise=True``; returns it."""
    post = adapter.posterior(X)
    Xb = X.unsqueeze(0) if X.dim() == 1 else X
    mean, cov = adapter.model.predict_f(Xb, full_cov=True, **options)
    assert post.mean.shape == post.variance.shape == (*Xb.shape[:-1], 1)
    torch.testing.assert_close(post.mean[..., 0], mean)
    torch.testing.assert_close(post.distribution.covariance_matrix, cov)
    if noise is not None:
        noisy = adapter.posterior(X, observation_noise=True).variance - post.variance
        expected = torch.as_tensor(noise, dtype=X.dtype).expand_as(post.variance)
        torch.testing.assert_close(noisy, expected, rtol=rtol, atol=atol)
    return post


def distinct_batch(models, acquisition, q=3, num_restarts=4, min_distance=1e-3):
    """:func:`bo_ncgp.bo.build_fantasy_batch` over the unit square, checked to give ``q``
    distinct points."""
    from bo_ncgp.bo import build_fantasy_batch

    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    batch = build_fantasy_batch(
        models, acquisition, q=q, bounds=bounds, num_restarts=num_restarts, raw_samples=64
    )
    assert batch.X.shape == (q, 2)
    assert torch.cdist(batch.X, batch.X).add(torch.eye(q)).min() > min_distance
    return batch
