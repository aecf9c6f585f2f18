"""Toy models with closed-form posteriors for testing the BoTorch layer."""

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.bo.base import LatentGPModel


class ExactGP(torch.nn.Module):
    """Tiny exact GP with m independent outputs sharing one RBF kernel."""

    def __init__(self, X, Y, noise=0.01):
        super().__init__()
        self.kernel = gpytorch.kernels.RBFKernel()
        self.kernel.lengthscale = 0.3
        self.X, self.Y, self.noise = X, Y, noise  # X (*b, n, d), Y (*b, n, m)

    @property
    def batch_shape(self):
        return self.Y.shape[:-2]

    def predict(self, Xs):
        K = self.kernel(self.X).to_dense() + self.noise * torch.eye(self.X.shape[-2])
        Ks = self.kernel(Xs, self.X).to_dense()
        L = torch.linalg.cholesky(K)
        A = torch.cholesky_solve(Ks.mT, L)  # (..., n, q)
        mean = A.mT @ self.Y  # (..., q, m)
        cov = self.kernel(Xs).to_dense() - Ks @ A
        m = self.Y.shape[-1]
        cov = cov.unsqueeze(-3).expand(*cov.shape[:-2], m, *cov.shape[-2:])
        return mean, cov


class ToyModel(LatentGPModel):
    def _latent_mean_cov(self, X: Tensor):
        return self.model.predict(X)

    def _observation_noise(self, X):
        return torch.tensor(self.model.noise)

    def _condition(self, X, Y, **kwargs):
        bs = torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2], self.model.X.shape[:-2])
        Xn = torch.cat(
            [self.model.X.expand(*bs, *self.model.X.shape[-2:]), X.expand(*bs, *X.shape[-2:])], -2
        )
        Yn = torch.cat(
            [self.model.Y.expand(*bs, *self.model.Y.shape[-2:]), Y.expand(*bs, *Y.shape[-2:])], -2
        )
        new = ExactGP(Xn, Yn, self.model.noise)
        new.kernel = self.model.kernel
        return new
