"""A BoTorch user's loop written for ``SingleTaskGP`` runs with ``DualSVGPModel`` with only the
class name swapped: ``ExactMarginalLogLikelihood(model.likelihood, model)``,
``fit_gpytorch_mll``, ``Normalize``, ``Standardize``, ``(n, 1)`` targets, LogEI and
``optimize_acqf``."""

from __future__ import annotations

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.likelihoods import _GaussianLikelihoodBase
from gpytorch.mlls import ExactMarginalLogLikelihood

from bo_ncgp.bo import DualSVGPModel, LatentGPMarginalLogLikelihood
from bo_ncgp.likelihoods import Bernoulli, Gaussian

# BoTorch's "getting started" loop (botorch.org), closed over two iterations; the model class
# is the only name that differs between the two runs
LOOP = """
import torch
from botorch.models.transforms import Normalize, Standardize
from botorch.fit import fit_gpytorch_mll
from gpytorch.mlls import ExactMarginalLogLikelihood
from botorch.acquisition import LogExpectedImprovement
from botorch.optim import optimize_acqf

train_X = torch.rand(10, 2, dtype=torch.double) * 2
Y = 1 - torch.linalg.norm(train_X - 0.5, dim=-1, keepdim=True)
Y = Y + 0.1 * torch.randn_like(Y)

for _ in range(2):
    gp = MODEL(
        train_X=train_X,
        train_Y=Y,
        input_transform=Normalize(d=2),
        outcome_transform=Standardize(m=1),
    )
    mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
    fit_gpytorch_mll(mll)

    logEI = LogExpectedImprovement(model=gp, best_f=Y.max())

    bounds = torch.stack([torch.zeros(2), torch.ones(2)]).to(torch.double)
    candidate, acq_value = optimize_acqf(
        logEI, bounds=bounds, q=1, num_restarts=5, raw_samples=20,
    )
    y = 1 - torch.linalg.norm(candidate - 0.5, dim=-1, keepdim=True)
    train_X, Y = torch.cat([train_X, candidate]), torch.cat([Y, y])
"""


def run_loop(model_class: str, import_line: str) -> dict:
    torch.manual_seed(0)
    scope: dict = {}
    exec(import_line + LOOP.replace("MODEL", model_class), scope)
    return scope


def test_the_singletaskgp_loop_runs_unchanged_with_dualsvgpmodel():
    ref = run_loop("SingleTaskGP", "from botorch.models import SingleTaskGP")
    ours = run_loop("DualSVGPModel", "from bo_ncgp.bo import DualSVGPModel")
    gp, mll = ours["gp"], ours["mll"]
    assert isinstance(gp, DualSVGPModel) and isinstance(mll, ExactMarginalLogLikelihood)
    assert not mll.training and gp.model.num_data == 11 and ours["train_X"].shape == (12, 2)
    assert gp.model.learn_mean_constant  # a learned constant mean, as SingleTaskGP's
    # the fitted models agree on the data: same mean to a fraction of the outcomes' spread
    X, Y = ref["train_X"][:-1], ref["Y"][:-1]
    with torch.no_grad():
        diff = (gp.posterior(X).mean - ref["gp"].posterior(X).mean).abs().max()
    assert diff < 0.1 * Y.std()
    assert gp.model.mean_constant == pytest.approx(float(ref["gp"].mean_module.constant), abs=0.2)


def test_the_gaussian_adapters_likelihood_is_gpytorchs_and_shares_the_noise():
    X = torch.rand(8, 2, dtype=torch.double)
    model = DualSVGPModel(X, X.sum(-1, keepdim=True), num_hyper_steps=5)
    lik = model.likelihood
    assert isinstance(lik, _GaussianLikelihoodBase) and isinstance(model.model.likelihood, Gaussian)
    lik.noise = 0.05  # as model.likelihood.noise = ... of a SingleTaskGP
    assert float(model.model.likelihood.noise) == pytest.approx(0.05)
    post = model.posterior(X[:3])
    noisy = lik(post.distribution)  # GPyTorch's marginal: the noise added
    assert torch.allclose(noisy.variance, post.variance[..., 0] + 0.05)
    # BoTorch's fantasize of a Gaussian model still conditions on sampled observations
    fant = model.fantasize(X[:2], SobolQMCNormalSampler(torch.Size([3])))
    assert fant.posterior(X[:4]).mean.shape == (3, 4, 1)


def test_latent_gp_mll_still_trains_non_gaussian_adapters():
    X = torch.rand(12, 2, dtype=torch.double)
    model = DualSVGPModel(X, (X[:, :1] > 0.5).double(), likelihood=Bernoulli(),
                          num_hyper_steps=5)  # fmt: skip
    assert isinstance(model.likelihood, Bernoulli) and not model.model.learn_mean_constant
    with pytest.raises(RuntimeError, match="Likelihood must be Gaussian"):  # GPyTorch's check
        ExactMarginalLogLikelihood(model.likelihood, model)
    mll = fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))
    assert not mll.training and model.model.num_data == 12
