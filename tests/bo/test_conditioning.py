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
        ours = qNegIntegratedPosteriorVariance(DualSVGPModel.from_model(dual), mc_points=mc)(cand)
        ref = qNegIntegratedPosteriorVariance(gp, mc_points=mc)(cand)
    assert _spearman(ours, ref) > 0.8
    spread, spread_ref = (float((v.max() - v.min()) / v.abs().mean()) for v in (ours, ref))
    assert 0.5 * spread_ref < spread < 2 * spread_ref


def _multimodal_model(noise: float = 1e-3):
    """A DualSVGP (8 inducing points, half the design) on a 2-D function with four optima."""
    from botorch.utils.sampling import draw_sobol_samples

    unit = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    X = draw_sobol_samples(unit, n=16, q=1, seed=0)[:, 0]
    y = torch.sin(2 * torch.pi * X[:, 0]) * torch.sin(2 * torch.pi * X[:, 1])
    y = y.abs() + 0.3 * X[:, 0]
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    k.base_kernel.lengthscale = 0.2
    dual = DualSVGP(
        k, Gaussian(noise), X[:8], memory_size=None, num_hyper_steps=0, inducing_update="fixed",
        mean_constant=float(y.mean()),
    ).update(X, y)  # fmt: skip
    return DualSVGPModel.from_model(dual), y, unit


@pytest.mark.parametrize("fantasy", ["mean", "sample"])
def test_fantasy_batches_on_a_multimodal_acquisition_have_no_near_duplicates(fantasy):
    """LogEI on a fitted DualSVGP of a function with four optima: a batch of 4 built by
    fantasising (posterior-mean fantasies raising the incumbent, or sampled fantasies) holds no
    two points closer than 0.05 in the unit square."""
    from botorch.acquisition import LogExpectedImprovement

    from bo_ncgp.bo import build_fantasy_batch

    model, y, unit = _multimodal_model()
    seen = []

    def logei(models, best):
        seen.append(float(best))
        return LogExpectedImprovement(models[0], best_f=best)

    torch.manual_seed(0)
    batch = build_fantasy_batch(
        model, logei, q=4, bounds=unit, fantasy=fantasy, num_restarts=4, raw_samples=128,
        generator=torch.Generator().manual_seed(0), best_f=y.max(),
    )  # fmt: skip
    assert torch.pdist(batch.X).min() > 0.05
    assert seen[0] == float(y.max()) and seen == sorted(seen)  # the incumbent never drops


def test_the_incumbent_rises_to_a_fantasised_value_above_it():
    """A fantasy above the incumbent becomes the incumbent of the next step; the Kriging
    believer passes ``best_f`` on, and a bad incumbent is refused."""
    from botorch.acquisition import UpperConfidenceBound

    from bo_ncgp.bo import kriging_believer_batch
    from bo_ncgp.exceptions import InputDataError

    model, y, unit = _multimodal_model()
    seen = []

    def ucb(models, best):
        seen.append(float(best))
        return UpperConfidenceBound(models[0], beta=0.0)  # the maximiser of the mean

    batch = kriging_believer_batch(
        model, ucb, q=2, bounds=unit, num_restarts=2, raw_samples=64, best_f=y.min()
    )
    with torch.no_grad():
        first = float(model.posterior(batch.X[:1]).mean)
    assert seen == [float(y.min()), pytest.approx(first)]
    with pytest.raises(InputDataError, match="best_f must be one finite number"):
        kriging_believer_batch(model, ucb, q=1, bounds=unit, best_f=float("nan"))


@pytest.mark.parametrize("fantasy", ["mean", "sample"])
def test_the_plug_in_incumbent_is_the_best_posterior_mean_of_the_conditioned_model(fantasy):
    """With ``incumbent_at``, every step's incumbent is the largest posterior mean of the model
    the step's acquisition is built from, at the observed points and the batch's points so
    far."""
    from botorch.acquisition import LogExpectedImprovement

    from bo_ncgp.bo import build_fantasy_batch

    model, _, unit = _multimodal_model()
    X_obs = model.model.memory.X
    seen = []

    def logei(models, best):
        seen.append((models[0], float(best)))
        return LogExpectedImprovement(models[0], best_f=best)

    torch.manual_seed(0)
    batch = build_fantasy_batch(
        model, logei, q=3, bounds=unit, fantasy=fantasy, num_restarts=2, raw_samples=64,
        generator=torch.Generator().manual_seed(0), incumbent_at=X_obs,
    )  # fmt: skip
    assert len(seen) == 3
    with torch.no_grad():
        for j, (m, best) in enumerate(seen):
            at = torch.cat([X_obs, batch.X[:j]])
            assert best == pytest.approx(float(m.posterior(at).mean.max()), rel=1e-9)


def test_the_plug_in_incumbent_refuses_a_second_incumbent_and_a_bad_design():
    from botorch.acquisition import LogExpectedImprovement

    from bo_ncgp.bo import build_fantasy_batch
    from bo_ncgp.exceptions import InputDataError

    model, y, unit = _multimodal_model()

    def logei(ms, best):
        return LogExpectedImprovement(ms[0], best_f=best)

    X_obs = model.model.memory.X
    with pytest.raises(InputDataError, match="give best_f or incumbent_at, not both"):
        build_fantasy_batch(model, logei, q=1, bounds=unit, best_f=y.max(), incumbent_at=X_obs)
    with pytest.raises(InputDataError, match="incumbent_at must be a non-empty n x d tensor"):
        build_fantasy_batch(model, logei, q=1, bounds=unit, incumbent_at=X_obs[:0])


def test_gibbon_with_pending_points_runs_on_the_adapter_as_on_an_exact_gp():
    """qLowerBoundMaxValueEntropy with X_pending evaluates ``model(X)``: with Z = the data the
    adapter's values equal SingleTaskGP's (same kernel, noise, max-value samples), and a
    sequential q = 2 optimisation runs."""
    from botorch.acquisition.max_value_entropy_search import qLowerBoundMaxValueEntropy
    from botorch.optim import optimize_acqf

    g = torch.Generator().manual_seed(1)
    X = torch.rand(20, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + torch.cos(4 * X[:, 1])
    k, noise = _rbf(0.3), 1e-2
    dual = DualSVGP(
        k, Gaussian(noise), X, memory_size=None, num_hyper_steps=0, inducing_update="fixed"
    ).update(X, y)
    gp = SingleTaskGP(X, y[:, None], covar_module=k, outcome_transform=None)
    gp.likelihood.noise = noise
    gp.mean_module.constant.data.fill_(0.0)
    gp.eval()
    cands = torch.rand(200, 2, generator=g, dtype=torch.float64)
    pending = torch.rand(2, 2, generator=g, dtype=torch.float64)
    Xq = torch.rand(6, 1, 2, generator=g, dtype=torch.float64)
    vals = []
    for model in (DualSVGPModel.from_model(dual), gp):
        torch.manual_seed(0)
        acq = qLowerBoundMaxValueEntropy(model, candidate_set=cands, X_pending=pending)
        with torch.no_grad():
            vals.append(acq(Xq))
    torch.testing.assert_close(vals[0], vals[1], rtol=1e-2, atol=1e-5)
    torch.manual_seed(0)
    acq = qLowerBoundMaxValueEntropy(DualSVGPModel.from_model(dual), candidate_set=cands)
    unit = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    batch, _ = optimize_acqf(acq, unit, q=2, num_restarts=2, raw_samples=32, sequential=True)
    assert batch.shape == (2, 2) and torch.pdist(batch).min() > 1e-3
