"""Model-based strategies of the lunar-lander experiment (Chang et al. 2023, Sec. 4.1).

* ``fantasy-batch`` (ours): a streaming :class:`~bo_ncgp.models.DualSVGP` regression model of
  the reward and a streaming DualSVGP Bernoulli classifier of landing success; acquisition
  ``log EI(reward) + log P(success)`` (EI times the success probability); batches built by
  :func:`~bo_ncgp.bo.build_fantasy_batch` with dual conditioning of *both* models (posterior
  mean of the reward, predictive probability as a soft label).
* ``sequential``: the same with batches of one.
* ``kriging-believer``: BoTorch's exact ``SingleTaskGP`` of the reward, refitted every
  iteration, with Kriging-believer batches; the (same, streaming DualSVGP) classifier is left
  unchanged within a batch, as a classifier without cheap conditioning would be.

Inputs are scaled from ``[0, 1.2]^12`` to the unit cube; rewards are standardised with the
mean and standard deviation of the initial design (fixed afterwards, so that the streaming
model's targets keep one scale). Failed evaluations (NaN reward) are ignored by both models.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
import torch
from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
from gpytorch.kernels import ScaleKernel
from gpytorch.priors import LogNormalPrior

from bo_ncgp.bo import DualSVGPModel, build_fantasy_batch
from bo_ncgp.bo.acquisition import ConstrainedLogExpectedImprovement
from bo_ncgp.bo.fantasy import kriging_believer_batch
from bo_ncgp.campaigns.cli import LUNAR_STRATEGIES
from bo_ncgp.campaigns.strategy import History, Strategy
from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models import DualSVGP
from bo_ncgp.problems.base import Evaluation

__all__ = ["FantasyBatchStrategy", "KrigingBelieverStrategy"]

DTYPE = torch.float64


class _ModelBased(Strategy):
    """Shared pieces: scaling, the streaming success classifier, the incumbent."""

    def __init__(
        self,
        num_inducing: int = 48,
        hyper_steps: int = 50,
        lr: float = 0.05,
        num_restarts: int = 8,
        raw_samples: int = 512,
    ) -> None:
        self.num_inducing = num_inducing
        self.hyper_steps = hyper_steps
        self.lr = lr
        self.num_restarts = num_restarts
        self.raw_samples = raw_samples

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.lo = torch.as_tensor(problem.bounds[0], dtype=DTYPE)
        self.hi = torch.as_tensor(problem.bounds[1], dtype=DTYPE)
        self.classifier: DualSVGP | None = None
        self.y_mean = self.y_std = None

    def _unit(self, X: np.ndarray) -> torch.Tensor:
        return (torch.as_tensor(X, dtype=DTYPE) - self.lo) / (self.hi - self.lo)

    def _from_unit(self, U: torch.Tensor) -> np.ndarray:
        return (self.lo + U.detach() * (self.hi - self.lo)).numpy()

    def _dual(self, likelihood, Z: torch.Tensor) -> DualSVGP:
        """A DualSVGP on the first observed points whose inducing set grows (pivoted
        Cholesky, Sec. 3.4) up to ``num_inducing`` points as data arrives."""
        kernel = ScaleKernel(get_covar_module_with_dim_scaled_prior(Z.shape[-1])).to(DTYPE)
        return DualSVGP(
            kernel,
            likelihood,
            Z[: self.num_inducing],
            max_inducing=self.num_inducing,
            memory_size=None,
            num_hyper_steps=self.hyper_steps,
            lr=self.lr,
            rho=0.7,
            num_inner_steps=10,
        )

    def _observe_classifier(self, U: torch.Tensor, evs: list[Evaluation]) -> None:
        ok = [i for i, e in enumerate(evs) if e.ok]
        if not ok:
            return
        labels = torch.tensor([float(bool(evs[i].success)) for i in ok], dtype=DTYPE)
        if self.classifier is None:
            self.classifier = self._dual(Bernoulli(), U[ok])
        self.classifier.update(U[ok], labels)

    def _standardise(self, values: np.ndarray) -> torch.Tensor:
        if self.y_mean is None:  # statistics of the initial design, fixed afterwards
            v = values[np.isfinite(values)]
            self.y_mean = float(v.mean()) if v.size else 0.0
            self.y_std = float(v.std()) if v.size > 1 and v.std() > 0 else 1.0
        return torch.as_tensor((values - self.y_mean) / self.y_std, dtype=DTYPE)

    def _incumbent(self, history: History) -> float:
        ok = history.ok
        succ = ok & (history.success == 1)
        vals = history.values[succ if succ.any() else ok]
        return float((vals.max() - self.y_mean) / self.y_std)

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_inducing": self.num_inducing,
            "hyper_steps": self.hyper_steps,
            "lr": self.lr,
            "num_restarts": self.num_restarts,
            "raw_samples": self.raw_samples,
        }

    def _bounds(self) -> torch.Tensor:
        d = self.problem.dim
        return torch.stack([torch.zeros(d, dtype=DTYPE), torch.ones(d, dtype=DTYPE)])


class FantasyBatchStrategy(_ModelBased):
    """Ours: streaming DualSVGP reward + classifier, dual-conditioned fantasy batches.

    Example:
        >>> s = FantasyBatchStrategy(num_inducing=32, hyper_steps=20)
        >>> s.name, s.config()["num_inducing"]  # the config is checked on resume
        ('fantasy-batch', 32)
    """

    name = "fantasy-batch"

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.reward: DualSVGP | None = None

    def observe(self, X, evaluations, history) -> None:
        U = self._unit(X)
        vals = np.array([e.value for e in evaluations], dtype=float)
        y = self._standardise(vals)
        ok = torch.as_tensor(np.isfinite(vals))
        if ok.any():
            if self.reward is None:
                noise = Gaussian(noise=math.exp(-4.0), noise_prior=LogNormalPrior(-4.0, 1.0))
                self.reward = self._dual(noise, U[ok])
            self.reward.update(U[ok], y[ok])
        self._observe_classifier(U, evaluations)

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        best = self._incumbent(history)
        batch = build_fantasy_batch(
            [DualSVGPModel(self.reward), DualSVGPModel(self.classifier)],
            lambda ms: ConstrainedLogExpectedImprovement(ms[0], ms[1], best_f=best),
            q=q,
            bounds=self._bounds(),
            fantasy="mean",
            num_restarts=self.num_restarts,
            raw_samples=self.raw_samples,
        )
        return self._from_unit(batch.X)


class SequentialStrategy(FantasyBatchStrategy):
    """Ours without batching (the CLI runs it with ``--batch-size 1``)."""

    name = "sequential"


class KrigingBelieverStrategy(_ModelBased):
    """Exact ``SingleTaskGP`` reward (refitted each iteration) with Kriging-believer batches;
    the streaming DualSVGP classifier is not conditioned within a batch.

    Example:
        >>> KrigingBelieverStrategy().config()["name"]
        'kriging-believer'
    """

    name = "kriging-believer"

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.U = torch.zeros(0, problem.dim, dtype=DTYPE)
        self.Y = torch.zeros(0, dtype=DTYPE)

    def observe(self, X, evaluations, history) -> None:
        U = self._unit(X)
        vals = np.array([e.value for e in evaluations], dtype=float)
        y = self._standardise(vals)
        ok = torch.as_tensor(np.isfinite(vals))
        self.U = torch.cat([self.U, U[ok]])
        self.Y = torch.cat([self.Y, y[ok]])
        self._observe_classifier(U, evaluations)

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import SingleTaskGP
        from gpytorch.mlls import ExactMarginalLogLikelihood

        gp = SingleTaskGP(self.U, self.Y.unsqueeze(-1))
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
        best = self._incumbent(history)
        batch = kriging_believer_batch(
            [gp, DualSVGPModel(self.classifier)],
            lambda ms: ConstrainedLogExpectedImprovement(ms[0], ms[1], best_f=best),
            q=q,
            conditionable=[True, False],
            bounds=self._bounds(),
            num_restarts=self.num_restarts,
            raw_samples=self.raw_samples,
        )
        return self._from_unit(batch.X)


def _factory(cls):
    def make(args: argparse.Namespace) -> Strategy:
        kw = {}
        for name in ("num_inducing", "hyper_steps", "num_restarts", "raw_samples"):
            val = getattr(args, name.replace("-", "_"), None)
            if val is not None:
                kw[name] = val
        return cls(**kw)

    return make


LUNAR_STRATEGIES.update(
    {
        "fantasy-batch": _factory(FantasyBatchStrategy),
        "sequential": _factory(SequentialStrategy),
        "kriging-believer": _factory(KrigingBelieverStrategy),
    }
)
