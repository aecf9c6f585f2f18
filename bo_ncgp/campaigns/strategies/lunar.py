"""Constrained batch-BO strategies of the lunar-lander problem (Chang et al. 2023, Sec. 4.1),
composed as reward surrogate x batch rule, with a streaming success classifier.

Every strategy models the landing success with a streaming :class:`~bo_ncgp.models.DualSVGP`
Bernoulli classifier and maximises ``log EI(reward) + log P(success)`` (EI times the success
probability, :class:`~bo_ncgp.bo.acquisition.ConstrainedLogExpectedImprovement`) over the unit
cube. Reward surrogates:

* :class:`StreamingDualReward`: a streaming DualSVGP regression model of the reward whose
  inducing set grows by pivoted Cholesky (Sec. 3.4) up to ``num_inducing`` points;
* :class:`ExactGPReward`: BoTorch's exact ``SingleTaskGP``, refitted at every acquisition.

Batch rules (:func:`~bo_ncgp.bo.build_fantasy_batch`):

* :class:`DualFantasyBatch`: both models are conditioned on each fantasy by dual conditioning;
  the fantasies are posterior means (the predictive probability as a soft label for the
  classifier), as Chang et al.'s Algorithm 2 writes them (``y_i = E[f(x_i)]``);
* :class:`SampledFantasyBatch`: the same with fantasies sampled from the current models (a
  reward with its observation noise, a sampled success label), as their Sec. 4.1 describes
  them ("sampling the corresponding y_i from the current model");
* :class:`KrigingBelieverBatch`: only the reward model is conditioned (Kriging believer); the
  classifier is left unchanged within a batch, as a classifier without cheap conditioning
  would be.

Named strategies (registered in :mod:`bo_ncgp.campaigns.strategies.registry`):
``fantasy-batch`` (ours) = streaming DualSVGP reward x dual fantasy batch;
``fantasy-batch-sampled`` = the same with sampled fantasies; ``sequential`` = the same, meant
for batches of one; ``kriging-believer`` = exact GP x Kriging believer; ``dual`` = the
constrained suite's models and acquisition
(:class:`~bo_ncgp.campaigns.strategies.blackbox.DualConstrainedBO`) with dual fantasy batches.

Inputs are scaled from the problem's box to the unit cube; rewards are standardised with the
mean and standard deviation of the first evaluations that return a value (the initial design,
unless all of it failed; fixed afterwards, so that the streaming model's targets keep one
scale). Failed evaluations (NaN reward) are ignored by the reward
model; the classifier learns from every evaluation with a success label (a problem with
unknown feasibility labels the points where it returns no value as failures). Until a value
is observed, points are drawn uniformly at random.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bo_ncgp.campaigns.strategies.base import History, Strategy, saved_options
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.models import DualSVGP
from bo_ncgp.problems.base import Evaluation

__all__ = [
    "BatchConfig",
    "ConstrainedBO",
    "DualFantasyBatch",
    "DualModelConfig",
    "ExactGPReward",
    "KrigingBelieverBatch",
    "SampledFantasyBatch",
    "StreamingDualReward",
    "UnitCubeStrategy",
]

DTYPE = torch.float64


@dataclass(frozen=True)
class DualModelConfig:
    """Settings of the streaming DualSVGP models (the reward model of
    :class:`StreamingDualReward` and every strategy's success classifier).

    Attributes:
        num_inducing: the most inducing points (the set grows up to it as data arrives).
        hyper_steps: Adam steps on the hyperparameters per model update.
        lr: Adam learning rate.

    Example:
        >>> DualModelConfig().num_inducing
        48
    """

    num_inducing: int = 48
    hyper_steps: int = 50
    lr: float = 0.05


@dataclass(frozen=True)
class BatchConfig:
    """Settings of BoTorch's ``optimize_acqf`` for each point of a batch.

    Example:
        >>> BatchConfig(num_restarts=2).num_restarts, BatchConfig().raw_samples
        (2, 512)
    """

    num_restarts: int = 8
    raw_samples: int = 512


def _dual(config: DualModelConfig, likelihood, Z: torch.Tensor) -> DualSVGP:
    """A DualSVGP on the first observed points whose inducing set grows (pivoted Cholesky,
    Sec. 3.4) up to ``num_inducing`` points as data arrives."""
    from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
    from gpytorch.kernels import ScaleKernel

    kernel = ScaleKernel(get_covar_module_with_dim_scaled_prior(Z.shape[-1])).to(DTYPE)
    return DualSVGP(
        kernel,
        likelihood.to(DTYPE),  # its priors too: an update must not depend on an earlier prediction
        Z[: config.num_inducing],
        max_inducing=config.num_inducing,
        memory_size=None,
        num_hyper_steps=config.hyper_steps,
        lr=config.lr,
        hyper_optimizer="adam",  # BoTorch's lengthscale bound has no transform: projected Adam
        rho=0.7,
        num_inner_steps=10,
    )


# ---------------------------------------------------------------------- reward models
class StreamingDualReward:
    """Streaming DualSVGP regression of the standardised reward (Gaussian likelihood with a
    ``LogNormal(-4, 1)`` noise prior).

    Example:
        >>> StreamingDualReward(DualModelConfig()).model is None
        True
    """

    def __init__(self, config: DualModelConfig) -> None:
        self.config = config
        self.model: DualSVGP | None = None

    def setup(self, dim: int) -> None:
        """Forget the model."""
        self.model = None

    def observe(self, U: torch.Tensor, y: torch.Tensor, ok: torch.Tensor) -> None:
        """Update with the successful rows ``ok`` of ``(U, y)``."""
        from gpytorch.priors import LogNormalPrior

        from bo_ncgp.likelihoods import Gaussian

        if ok.any():
            if self.model is None:
                noise = Gaussian(noise=math.exp(-4.0), noise_prior=LogNormalPrior(-4.0, 1.0))
                self.model = _dual(self.config, noise, U[ok])
            self.model.update(U[ok], y[ok])

    def botorch_model(self):
        """The model as a BoTorch model."""
        from bo_ncgp.bo import DualSVGPModel

        return DualSVGPModel.from_model(self.model)


class ExactGPReward:
    """BoTorch's exact ``SingleTaskGP`` of the standardised reward, refitted (marginal
    likelihood) every time :meth:`botorch_model` is called.

    Example:
        >>> r = ExactGPReward()
        >>> r.setup(3)
        >>> tuple(r.U.shape)
        (0, 3)
    """

    config = None

    def setup(self, dim: int) -> None:
        """No data yet."""
        self.U = torch.zeros(0, dim, dtype=DTYPE)
        self.Y = torch.zeros(0, dtype=DTYPE)

    def observe(self, U: torch.Tensor, y: torch.Tensor, ok: torch.Tensor) -> None:
        """Append the successful rows ``ok`` of ``(U, y)``."""
        self.U = torch.cat([self.U, U[ok]])
        self.Y = torch.cat([self.Y, y[ok]])

    def botorch_model(self):
        """A ``SingleTaskGP`` fitted on all data."""
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import SingleTaskGP
        from gpytorch.mlls import ExactMarginalLogLikelihood

        gp = SingleTaskGP(self.U, self.Y.unsqueeze(-1))
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
        return gp


# ------------------------------------------------------------------------ batch rules
class DualFantasyBatch:
    """Batches built by dual conditioning of the reward model and the classifier.

    Example:
        >>> DualFantasyBatch(BatchConfig()).config.raw_samples
        512
    """

    #: which of (reward model, classifier) are conditioned on the fantasies (``None``: both)
    condition: tuple[bool, bool] | None = None
    #: the fantasies: ``"mean"`` (posterior means, soft labels) or ``"sample"`` (draws)
    fantasy: str = "mean"

    def __init__(self, config: BatchConfig) -> None:
        self.config = config

    def wrap(self, classifier):
        """The BoTorch model of the DualSVGP ``classifier``."""
        from bo_ncgp.bo import DualSVGPModel

        return DualSVGPModel.from_model(classifier)

    def build(self, reward, classifier, acquisition_factory, q: int, bounds: torch.Tensor):
        """A ``q``-point :class:`~bo_ncgp.bo.fantasy.FantasyBatch` with the rule's
        fantasies (:attr:`fantasy`; :func:`~bo_ncgp.bo.build_fantasy_batch`) of the value
        model and the classifier as :meth:`wrap` hands it to BoTorch; sampled fantasies draw
        from torch's global generator, which the campaign runner seeds before every step."""
        from bo_ncgp.bo import build_fantasy_batch

        return build_fantasy_batch(
            [reward, self.wrap(classifier)],
            acquisition_factory,
            q=q,
            bounds=bounds,
            fantasy=self.fantasy,
            condition=self.condition,
            num_restarts=self.config.num_restarts,
            raw_samples=self.config.raw_samples,
        )


class SampledFantasyBatch(DualFantasyBatch):
    """Dual fantasy batches whose fantasies are drawn from the current models: the reward
    from its predictive distribution with the observation noise, the success label from the
    classifier's predictive probability (Chang et al. 2023, Sec. 4.1: "sampling the
    corresponding y_i from the current model"; their Algorithm 2 writes the posterior mean,
    :class:`DualFantasyBatch`).

    Example:
        >>> SampledFantasyBatch(BatchConfig()).fantasy, DualFantasyBatch.fantasy
        ('sample', 'mean')
    """

    fantasy = "sample"


class KrigingBelieverBatch(DualFantasyBatch):
    """Kriging-believer batches (:func:`~bo_ncgp.bo.fantasy.kriging_believer_batch`): the
    reward model conditioned on posterior-mean fantasies, the classifier unchanged.

    Example:
        >>> KrigingBelieverBatch(BatchConfig()).condition
        (True, False)
    """

    condition = (True, False)


# --------------------------------------------------------------------------- strategy
class UnitCubeStrategy(Strategy):
    """A strategy whose models see the problem's box scaled to the unit cube and values
    standardised by the statistics of the first evaluations with a finite value (fixed
    afterwards); it logs the fit time
    of its last acquisition step in ``fit_seconds``.

    Example:
        >>> import numpy as np
        >>> from types import SimpleNamespace
        >>> s = UnitCubeStrategy()
        >>> s.setup(SimpleNamespace(name="box", bounds=np.array([[0.0], [2.0]])), seed=0)
        >>> s._unit(np.array([[1.0]])).tolist(), s._from_unit(s._unit(np.array([[1.5]]))).tolist()
        ([[0.5]], [[1.5]])
        >>> s._standardise(np.array([np.nan])).tolist()  # no value yet: nothing fixed
        [nan]
        >>> s._standardise(np.array([1.0, 3.0])).tolist()  # mean 2, std 1
        [-1.0, 1.0]
    """

    name = "unit-cube"

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        if problem.bounds is None:
            raise InputDataError(
                f"{self.name} needs a problem with bounds, {problem.name} has none"
            )
        self.lo = torch.as_tensor(problem.bounds[0], dtype=DTYPE)
        self.hi = torch.as_tensor(problem.bounds[1], dtype=DTYPE)
        self.y_mean = self.y_std = None
        self.fit_seconds: float | None = None

    def _unit(self, X: np.ndarray) -> torch.Tensor:
        return (torch.as_tensor(X, dtype=DTYPE) - self.lo) / (self.hi - self.lo)

    def _from_unit(self, U: torch.Tensor) -> np.ndarray:
        return (self.lo + U.detach() * (self.hi - self.lo)).cpu().numpy()

    def _standardise(self, values: np.ndarray) -> torch.Tensor:
        v = values[np.isfinite(values)]
        if self.y_mean is None and v.size:  # the first finite values fix the statistics
            self.y_mean = float(v.mean())
            self.y_std = float(v.std()) if v.size > 1 and v.std() > 0 else 1.0
        if self.y_mean is None:  # nothing to standardise yet
            return torch.as_tensor(values, dtype=DTYPE)
        return torch.as_tensor((values - self.y_mean) / self.y_std, dtype=DTYPE)


class ConstrainedBO(UnitCubeStrategy):
    """Reward surrogate x batch rule, with a streaming DualSVGP success classifier.

    Args:
        name: the strategy's name.
        model: settings of the streaming DualSVGP models (the classifier always; the reward
            model when ``reward`` is a :class:`StreamingDualReward`).
        reward: :class:`StreamingDualReward` or :class:`ExactGPReward`.
        batch: :class:`DualFantasyBatch` or :class:`KrigingBelieverBatch`.

    Its configuration (:meth:`config`, checked on resume) is the name and the fields of
    ``model`` and of the batch rule's config.

    Example:
        >>> cfg = DualModelConfig(num_inducing=32)
        >>> s = ConstrainedBO("fantasy-batch", cfg, StreamingDualReward(cfg),
        ...                   DualFantasyBatch(BatchConfig()))
        >>> s.config()["num_inducing"], s.config()["raw_samples"]
        (32, 512)
    """

    def __init__(
        self,
        name: str,
        model: DualModelConfig,
        reward: StreamingDualReward | ExactGPReward,
        batch: DualFantasyBatch | KrigingBelieverBatch,
    ) -> None:
        self.name = name
        self.model_config = model
        self.reward_model = reward
        self.batch = batch

    def config(self) -> dict[str, Any]:
        """``{"name", **model config, **batch config}``, and ``"fantasy"`` for a batch rule
        whose fantasies are not posterior means (campaigns saved before the option resume)."""
        out = {
            "name": self.name,
            **saved_options(self.model_config),
            **saved_options(self.batch.config),
        }
        if self.batch.fantasy != DualFantasyBatch.fantasy:
            out["fantasy"] = self.batch.fantasy
        return out

    @property
    def reward(self) -> DualSVGP | None:
        """The streaming reward model (``None`` for other reward surrogates)."""
        return getattr(self.reward_model, "model", None)

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.classifier: DualSVGP | None = None
        self.reward_model.setup(problem.dim)

    def _incumbent(self, history: History) -> float:
        ok = history.ok
        succ = ok & (history.success == 1)
        vals = history.values[succ if succ.any() else ok]
        return float((vals.max() - self.y_mean) / self.y_std)

    def report(self, history: History) -> dict[str, float]:
        """``fit_seconds``: the refit of the reward model inside the last acquisition step
        (a streaming model is updated in :meth:`observe` instead)."""
        if self.fit_seconds is None:
            return {}
        out, self.fit_seconds = {"fit_seconds": self.fit_seconds}, None
        return out

    def observe(self, X: np.ndarray, evaluations: list[Evaluation], history: History) -> None:
        U = self._unit(X)
        vals = np.array([e.value for e in evaluations], dtype=float)
        y = self._standardise(vals)
        self.reward_model.observe(U, y, torch.as_tensor(np.isfinite(vals)))
        # every labelled evaluation trains the classifier, failed ones too (no value there)
        ok = [i for i, e in enumerate(evaluations) if e.success is not None]
        if not ok:
            return
        labels = torch.tensor([float(bool(evaluations[i].success)) for i in ok], dtype=DTYPE)
        self._update_classifier(U[ok], labels)

    def _update_classifier(self, U: torch.Tensor, labels: torch.Tensor) -> None:
        """Stream the labelled points ``(U, labels)`` into the success classifier (a
        Bernoulli DualSVGP built on the first of them)."""
        if self.classifier is None:
            from bo_ncgp.likelihoods import Bernoulli

            self.classifier = _dual(self.model_config, Bernoulli(), U)
        self.classifier.update(U, labels)

    def _acquisition(self, reward, classifier, best: float):
        """The acquisition of one point from the reward model and the classifier (BoTorch
        models): ``log EI(reward) + log P(success)``."""
        from bo_ncgp.bo.acquisition import ConstrainedLogExpectedImprovement

        return ConstrainedLogExpectedImprovement(reward, classifier, best_f=best)

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        if not history.ok.any() or self.classifier is None:  # no value to model yet
            return self._from_unit(torch.as_tensor(rng.random((q, self.problem.dim)), dtype=DTYPE))
        t0 = time.perf_counter()
        reward = self.reward_model.botorch_model()
        self.fit_seconds = time.perf_counter() - t0
        best = self._incumbent(history)
        d = self.problem.dim
        bounds = torch.stack([torch.zeros(d, dtype=DTYPE), torch.ones(d, dtype=DTYPE)])
        batch = self.batch.build(
            reward,
            self.classifier,
            lambda ms: self._acquisition(ms[0], ms[1], best),
            q,
            bounds,
        )
        return self._from_unit(batch.X)
