"""The model contract (tests/models/contract.py) on the streaming baselines."""

from __future__ import annotations

import gpytorch
import torch

from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.models.baselines import BuiStreamingSVGP, OfflineSVGP
from tests.models.contract import ModelContractTests


def _data():
    gen = torch.Generator(torch.get_default_device()).manual_seed(0)
    X = torch.rand(24, 2, dtype=torch.float64, generator=gen)
    return X, (X[:, 0] > 0.5).to(X)


def _kernel():
    return gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()


class TestBuiContract(ModelContractTests):
    def make(self):
        X, y = _data()
        return BuiStreamingSVGP(_kernel(), Bernoulli(), X[::4], num_steps=5), X, y


class TestOfflineContract(ModelContractTests):
    def make(self):
        X, y = _data()
        return OfflineSVGP(_kernel(), Bernoulli(), X[::4]), X, y

    def train(self, model, X, y, callback=None):
        return model.fit(X, y, num_steps=10, lr=0.05, callback=callback)
