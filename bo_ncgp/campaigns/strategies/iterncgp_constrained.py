"""Constrained BO with an IterNCGP feasibility classifier (Tatzel et al., Sec. 5: IterNCGP's
computational uncertainty inside a decision loop).

:class:`IterNCGPConstrainedBO` is :class:`~bo_ncgp.campaigns.strategies.lunar.ConstrainedBO`
(the streaming DualSVGP value model, constrained log EI ``log EI(value) + log P(feasible)``,
:class:`~bo_ncgp.bo.acquisition.ConstrainedLogExpectedImprovement`) with the DualSVGP
Bernoulli classifier replaced by an :class:`~bo_ncgp.models.IterNCGP` Bernoulli classifier:

* the first labelled batch (the initial design) is fitted from the prior mean with
  ``solver_iters`` CG iterations per Newton step;
* every later batch is added by :meth:`IterNCGP.condition`, warm-started from the previous
  solve: the Newton iterate ``f`` (extended to the new points by the predictive mean), its
  representer weights ``w``, and the recycled action buffers ``S`` and ``T = K S`` (extended by
  zero rows and the cross products ``K(X_new, X) S``; Sec. 3.3), so that the old actions enter
  the first Newton step's virtual solver run (Algorithm 3) and only ``solver_iters`` new
  products with ``K`` are spent per Newton step;
* ``P(feasible | x) = sigmoid(kappa(s^2) mu)`` (probit approximation) from IterNCGP's latent
  posterior ``GP(m_ij, K_ij)`` (Eqs. 8-9), whose variance ``s^2`` is the *combined*
  mathematical and computational variance, the paper's predictive. With
  ``uncertainty="mathematical"`` (the ablation ``dual-iterncgp-math``) the computational part
  is dropped: ``s^2`` is the Laplace variance of the last Newton step,
  ``k(x, x) - k(x, X) (K + W^{-1})^{-1} k(X, x)``, at the same mean.

IterNCGP keeps its kernel hyperparameters fixed (as in the paper): BoTorch's dimension-scaled
RBF lengthscale prior at its mode (``0.29`` in 2-D, ``0.50`` in 6-D, on the unit cube) and
``outputscale`` (latent prior variance) from :class:`IterNCGPClassifierConfig`.

Every step logs ``classifier_solver_iters`` (products with ``K`` in the last classifier
update), ``classifier_rank`` (columns of the root of ``C_j``) and
``computational_share``: the computational part of the latent variance at the point chosen,
``(s^2_combined - s^2_math) / s^2_combined`` (0 where the solver has resolved that direction).

Example:
    >>> from bo_ncgp.campaigns.strategies.registry import build_strategy
    >>> s = build_strategy("constrained", "dual-iterncgp", solver_iters=3)
    >>> s.config()["solver_iters"], s.config()["uncertainty"]
    (3, 'combined')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bo_ncgp.campaigns.strategies.base import History, saved_options
from bo_ncgp.campaigns.strategies.lunar import (
    DTYPE,
    BatchConfig,
    ConstrainedBO,
    DualFantasyBatch,
    DualModelConfig,
    StreamingDualReward,
)
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg._args import check_count, check_positive

__all__ = [
    "IterNCGPClassifierConfig",
    "IterNCGPConstrainedBO",
    "IterNCGPFantasyBatch",
    "MathematicalClassifierConfig",
]

_UNCERTAINTIES = ("combined", "mathematical")


@dataclass(frozen=True)
class IterNCGPClassifierConfig:
    """Settings of the IterNCGP feasibility classifier.

    Attributes:
        solver_iters: IterGP (CG) iterations per Newton step, in the fit and in every
            conditioning: the computational budget that leaves computational uncertainty.
        fit_newton_steps: Newton steps of the fit on the first labelled batch.
        condition_newton_steps: Newton steps of every later conditioning.
        compression_rank: ``R`` of the virtual solver run (Sec. 3.4): the recycled actions are
            compressed to the ``R`` directions of largest uncertainty reduction before every
            Newton step, so ``C_j`` has rank at most ``R + solver_iters`` however many points
            were labelled. The memory and computation budget that leaves computational
            uncertainty: without it, one CG action per labelled point makes ``C_j`` the exact
            ``K_hat^{-1}`` on these small data sets (rank ``n``) and the computational
            variance vanishes.
        outputscale: prior variance of the latent function (fixed).
        uncertainty: ``"combined"`` (mathematical + computational variance in P(feasible))
            or ``"mathematical"`` (the computational part dropped; ablation).

    Example:
        >>> IterNCGPClassifierConfig().solver_iters, IterNCGPClassifierConfig().uncertainty
        (2, 'combined')
    """

    solver_iters: int = 2
    fit_newton_steps: int = 10
    condition_newton_steps: int = 2
    compression_rank: int = 8
    outputscale: float = 4.0
    uncertainty: str = "combined"

    def __post_init__(self) -> None:
        who = "IterNCGPClassifierConfig"
        check_count(self.solver_iters, "solver_iters", who, minimum=1)
        check_count(self.fit_newton_steps, "fit_newton_steps", who, minimum=1)
        check_count(self.condition_newton_steps, "condition_newton_steps", who, minimum=1)
        check_count(self.compression_rank, "compression_rank", who, minimum=1)
        check_positive(self.outputscale, "outputscale", who)
        if self.uncertainty not in _UNCERTAINTIES:
            raise InputDataError(
                f"{who}: uncertainty must be one of {_UNCERTAINTIES}, got {self.uncertainty!r}"
            )


@dataclass(frozen=True)
class MathematicalClassifierConfig(IterNCGPClassifierConfig):
    """:class:`IterNCGPClassifierConfig` of the ablation: P(feasible) from the mathematical
    (Laplace) variance alone, the computational part dropped.

    Example:
        >>> MathematicalClassifierConfig().uncertainty
        'mathematical'
    """

    uncertainty: str = "mathematical"


class IterNCGPFantasyBatch(DualFantasyBatch):
    """:class:`~bo_ncgp.campaigns.strategies.lunar.DualFantasyBatch` with the classifier
    wrapped as an :class:`~bo_ncgp.bo.IterNCGPModel` (its posterior with the configured
    uncertainty; fantasies of a batch conditioned by :meth:`IterNCGP.condition`).

    Example:
        >>> IterNCGPFantasyBatch(BatchConfig(), IterNCGPClassifierConfig()).classifier.solver_iters
        2
    """

    def __init__(self, config: BatchConfig, classifier: IterNCGPClassifierConfig) -> None:
        super().__init__(config)
        self.classifier = classifier

    def wrap(self, classifier):
        """The BoTorch model of the IterNCGP ``classifier``."""
        from bo_ncgp.bo import IterNCGPModel

        return IterNCGPModel.from_model(
            classifier,
            condition_iters=self.classifier.solver_iters,
            uncertainty=self.classifier.uncertainty,
        )


class IterNCGPConstrainedBO(ConstrainedBO):
    """Streaming DualSVGP value model x IterNCGP feasibility classifier x constrained log EI
    (module docstring).

    Args:
        name: the strategy's name.
        model: settings of the streaming DualSVGP value model.
        classifier: settings of the IterNCGP classifier.
        batch: ``optimize_acqf`` settings.

    Example:
        >>> s = IterNCGPConstrainedBO("dual-iterncgp", DualModelConfig(),
        ...                           IterNCGPClassifierConfig(uncertainty="mathematical"),
        ...                           BatchConfig(num_restarts=2))
        >>> s.config()["uncertainty"], s.config()["num_restarts"]
        ('mathematical', 2)
    """

    def __init__(
        self,
        name: str,
        model: DualModelConfig,
        classifier: IterNCGPClassifierConfig,
        batch: BatchConfig,
    ) -> None:
        super().__init__(
            name, model, StreamingDualReward(model), IterNCGPFantasyBatch(batch, classifier)
        )
        self.classifier_config = classifier

    def config(self) -> dict[str, Any]:
        """``{"name", **value model config, **classifier config, **batch config}``."""
        return {**super().config(), **saved_options(self.classifier_config)}

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self._diagnostics: dict[str, float] = {}

    def _kernel(self, dim: int):
        from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
        from gpytorch.kernels import ScaleKernel

        kernel = ScaleKernel(get_covar_module_with_dim_scaled_prior(ard_num_dims=dim)).to(DTYPE)
        kernel.outputscale = self.classifier_config.outputscale
        return kernel.requires_grad_(False)  # fixed hyperparameters

    def _update_classifier(self, U: torch.Tensor, labels: torch.Tensor) -> None:
        """Fit the classifier on the first labelled points ``U`` (0/1 ``labels``), condition
        it on later ones (warm start from the previous solve)."""
        from bo_ncgp.likelihoods import Bernoulli
        from bo_ncgp.models import IterNCGP

        cfg = self.classifier_config
        if self.classifier is None:
            self.classifier = IterNCGP(
                self._kernel(U.shape[-1]),
                Bernoulli(),
                policy="cg",
                max_solver_iters_per_step=cfg.solver_iters,
                max_newton_steps=cfg.fit_newton_steps,
                compression_rank=cfg.compression_rank,
                backend="dense",
            ).fit(U, labels)
        else:  # warm start: recycled actions, mode and weights of the previous solve
            self.classifier = self.classifier.condition(
                U,
                labels,
                num_iters=cfg.solver_iters,
                max_newton_steps=cfg.condition_newton_steps,
            )
        self._diagnostics["classifier_solver_iters"] = float(self.classifier.num_solver_iters)
        self._diagnostics["classifier_rank"] = float(self.classifier._belief.rank)

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        X = super().ask(history, q, rng)
        if self.classifier is not None and history.ok.any():
            U = self._unit(X)
            with torch.no_grad():
                _, combined = self.classifier.predict_f(U)
                _, math = self.classifier.predict_f(U, uncertainty="mathematical")
            share = (combined - math).clamp_min(0) / combined.clamp_min(1e-12)
            self._diagnostics["computational_share"] = float(share.mean())
        return X

    def report(self, history: History) -> dict[str, float]:
        """``fit_seconds`` (the value model's refit inside the acquisition step, if any) and
        the classifier diagnostics of the module docstring."""
        out = {**super().report(history), **self._diagnostics}
        self._diagnostics = {}
        return out
