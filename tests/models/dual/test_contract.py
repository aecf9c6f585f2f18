"""The model contract (tests/models/contract.py) on the memory-based dual SVGP."""

from __future__ import annotations

import gpytorch
import torch

from bo_ncgp.likelihoods import Bernoulli, Softmax
from bo_ncgp.models.dual import DualSVGP
from tests.models.contract import ModelContractTests


class TestDualSVGPContract(ModelContractTests):
    def make(self):
        gen = torch.Generator(torch.get_default_device()).manual_seed(0)
        X = torch.rand(24, 2, dtype=torch.float64, generator=gen)
        y = (X[:, 0] > 0.5).to(X)
        kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).to(X)
        model = DualSVGP(kernel, Bernoulli(), X[::4], memory_size=4, num_hyper_steps=3)
        return model, X, y


class TestDualSVGPSoftmaxContract(ModelContractTests):
    def make(self):
        gen = torch.Generator(torch.get_default_device()).manual_seed(1)
        X = torch.rand(24, 2, dtype=torch.float64, generator=gen)
        y = (X[:, 0] * 3).floor().clamp_max(2).to(X)
        kernel = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([3])).to(X)
        model = DualSVGP(kernel, Softmax(3), X[::4], memory_size=4, num_hyper_steps=3)
        return model, X, y
