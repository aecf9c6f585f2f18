"""Conditioning through the BoTorch adapter: fantasy-based acquisitions rank candidates as
with an exact GP of the same hyperparameters, and fantasy batches spread."""

from __future__ import annotations

import gpytorch
import pytest
import torch
from botorch.acquisition.active_learning import qNegIntegratedPosteriorVariance
from botorch.models import SingleTaskGP

from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models import DualSVGP


def _rbf(lengthscale: float) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = 1.0
    return k


def _spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = (v.argsort().argsort().to(torch.float64) for v in (a, b))
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


@pytest.mark.parametrize("num_inducing", [30, 24])
def test_qnipv_ranks_candidates_as_with_an_exact_gp(num_inducing):
    """qNegIntegratedPosteriorVariance over 30 candidates: DualSVGPModel (Z = the data, or 24
    of the 30 points) and SingleTaskGP with the same kernel and noise rank the candidates
    alike (Spearman > 0.8) and spread them alike."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + torch.cos(4 * X[:, 1])
    noise = 1e-2
    k = _rbf(0.15)
    dual = DualSVGP(
        k, Gaussian(noise), X[:num_inducing], memory_size=None, num_hyper_steps=0,
        inducing_update="fixed",
    ).update(X, y)  # fmt: skip
    gp = SingleTaskGP(X, y[:, None], covar_module=k)
    gp.likelihood.noise = noise
    gp.mean_module.constant.data.fill_(0.0)
    gp.eval()
    mc = torch.rand(128, 2, generator=g, dtype=torch.float64)
    cand = torch.rand(30, 1, 2, generator=g, dtype=torch.float64)
    with torch.no_grad():
        ours = qNegIntegratedPosteriorVariance(DualSVGPModel(dual), mc_points=mc)(cand)
        ref = qNegIntegratedPosteriorVariance(gp, mc_points=mc)(cand)
    assert _spearman(ours, ref) > 0.8
    spread, spread_ref = (float((v.max() - v.min()) / v.abs().mean()) for v in (ours, ref))
    assert 0.5 * spread_ref < spread < 2 * spread_ref
