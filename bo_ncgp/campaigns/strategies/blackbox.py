"""Strategies of black-box problems on a box (``bo-ncgp bench``), composed as surrogate x
batch rule, Trieste-style, from the parts of :mod:`~bo_ncgp.campaigns.strategies.lunar`.

Surrogates of the objective (standardised with the mean and standard deviation of the
first evaluations that return a value, fixed afterwards; inputs scaled to the unit cube):

* :class:`StreamingDualObjective`: ours, a streaming DualSVGP updated with
  :meth:`~bo_ncgp.models.DualSVGP.update` after every batch, its hyperparameters fitted by
  L-BFGS to convergence from two starts (where the last update left them and the prior's
  mode), and handed to BoTorch as a :class:`~bo_ncgp.bo.DualSVGPModel`;
* :class:`~bo_ncgp.campaigns.strategies.lunar.ExactGPReward`: BoTorch's standard, a
  ``SingleTaskGP`` refitted with ``fit_gpytorch_mll`` before every acquisition.

Batch rules (:class:`BatchRule`, ``BatchConfig`` settings of ``optimize_acqf``):

* ``"joint"``: ``LogExpectedImprovement`` for ``q = 1``, ``qLogNoisyExpectedImprovement``
  over the observed points for ``q > 1`` (one joint optimisation of the batch);
* ``"fantasy"`` / ``"fantasy-mean"``: :func:`~bo_ncgp.bo.build_fantasy_batch` (Chang et al.
  2023, Alg. 2) with LogEI, sampled or posterior-mean fantasies;
* ``"fantasy-plugin"``: sampled fantasies with the plug-in incumbent of noisy problems (the
  largest posterior mean at the observed points and the batch so far, recomputed on the
  conditioned model; ``incumbent_at`` of :func:`~bo_ncgp.bo.build_fantasy_batch`), also for
  ``q = 1``;
* ``"believer"``: the Kriging believer (:func:`~bo_ncgp.bo.fantasy.kriging_believer_batch`).

:class:`SobolSearch` draws the points of one scrambled Sobol sequence per seed.

Count-valued problems can also use :class:`CountDualBO` (ours, non-conjugate): a streaming
DualSVGP with the ``Poisson`` likelihood of the raw counts, LogEI on the latent log rate.

Constrained problems (``success`` labels, no value where infeasible) use
:class:`DualConstrainedBO` (ours: streaming DualSVGPs of the value and of the 0/1 labels,
both :class:`StreamingDualObjective`, with BoTorch's ``LogConstrainedExpectedImprovement``
and the constraint ``label > 1/2``; its docstring says why the labels get a Gaussian
likelihood) or :class:`LabelGPConstrainedBO` (refitted exact ``SingleTaskGP`` models of the
same two, the same acquisition).

Every model-based strategy logs ``fit_seconds`` (the part of the acquisition step spent
fitting the model) and, for batches of more than one point, ``min_distance`` (the smallest
distance between two points of the batch, in the unit cube).

Example:
    >>> from bo_ncgp.campaigns.strategies.registry import build_strategy
    >>> s = build_strategy("continuous", "dual", hyper_steps=5)
    >>> s.rule.rule, s.config()["hyper_steps"]
    ('joint', 5)
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from bo_ncgp.campaigns.strategies.base import History, Strategy, saved_options
from bo_ncgp.campaigns.strategies.lunar import (
    DTYPE,
    BatchConfig,
    ConstrainedBO,
    DualFantasyBatch,
    DualModelConfig,
    ExactGPReward,
    StreamingDualReward,
    UnitCubeStrategy,
    _dual,
)
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.base import Evaluation

__all__ = [
    "FEASIBILITY",
    "RULES",
    "BatchRule",
    "CountDualBO",
    "DualConstrainedBO",
    "LabelGPConstrainedBO",
    "MatchedObjectiveConfig",
    "MediumObjectiveConfig",
    "ObjectiveBO",
    "ObjectiveModelConfig",
    "SobolSearch",
    "StandardizedObjectiveConfig",
    "StreamingDualObjective",
    "WideObjectiveConfig",
    "constrained_log_ei",
    "min_distance",
    "nearest_distances",
]

#: the batch rules of :class:`BatchRule`
RULES = ("joint", "fantasy", "fantasy-mean", "fantasy-plugin", "believer")


def nearest_distances(X: np.ndarray) -> np.ndarray:
    """Euclidean distance from each row of ``X`` to its nearest other row (``inf`` for one row).

    Example:
        >>> nearest_distances(np.array([[0.0, 0.0], [0.0, 0.5], [1.0, 1.0]])).round(3).tolist()
        [0.5, 0.5, 1.118]
    """
    X = np.asarray(X, dtype=float)
    D = np.linalg.norm(X[:, None, :] - X[None, :, :], axis=-1)
    np.fill_diagonal(D, np.inf)
    return D.min(1) if len(X) else np.zeros(0)


def min_distance(X: np.ndarray) -> float:
    """Smallest Euclidean distance between two rows of ``X`` (``nan`` for one row).

    Example:
        >>> min_distance(np.array([[0.0, 0.0], [0.0, 0.5], [1.0, 1.0]]))
        0.5
    """
    if len(X) < 2:
        return float("nan")
    return float(nearest_distances(X).min())


class SobolSearch(Strategy):
    """The points of one scrambled Sobol sequence (seeded by the campaign seed) in the
    bounds, continued from the number of points evaluated so far.

    Example:
        >>> from bo_ncgp.problems.benchmarks import UnitCubeFunction
        >>> s = SobolSearch()
        >>> s.setup(UnitCubeFunction("branin"), seed=0)
        >>> h = History(np.zeros((0, 2)), np.zeros(0), np.zeros(0), None, [])
        >>> s.ask(h, 4, np.random.default_rng(0)).shape
        (4, 2)
    """

    name = "sobol"

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        engine = torch.quasirandom.SobolEngine(self.problem.dim, scramble=True, seed=self.seed)
        if history.n:
            engine.fast_forward(history.n)
        U = engine.draw(q, dtype=DTYPE).numpy()
        lo, hi = np.asarray(self.problem.bounds[0]), np.asarray(self.problem.bounds[1])
        return lo + (hi - lo) * U


@dataclass(frozen=True)
class ObjectiveModelConfig:
    """Settings of :class:`StreamingDualObjective`.

    Attributes:
        num_inducing: the most inducing points (the set grows up to it as data arrive).
        hyper_steps: the most L-BFGS iterations of a hyperparameter fit per update.
        restart: after every update, also fit the hyperparameters from the prior's mode on
            the same data and keep the fit of larger evidence (as a refitted exact GP starts
            every fit there); ``False``: only from where the last update left them.
        warm_start: also fit from where the last update left the hyperparameters; ``False``
            (with ``restart``): only from the prior's mode, as ``fit_gpytorch_mll`` refits a
            ``SingleTaskGP``.
        learn_mean: the prior mean is a constant fitted with the kernel (a ``SingleTaskGP``'s
            ``ConstantMean``), started at the initial design's mean by a fit from the prior's
            mode (the default); ``False``: the initial design's mean, fixed (the default until
            0.1.x: campaigns saved without the option ran with it, :data:`LEGACY_DEFAULTS`). A
            fixed mean at the initial design's level sits above the learned constant on
            objectives with a long tail of bad values (Levy, Ackley), so the model predicts
            too well far from the data and log EI explores there instead of refining the
            incumbent.
        standardize: the outputscale is the sample variance of every value observed so far
            and the noise prior ``LogNormal(-4 + log variance, 1)``, fixed during each fit: a
            ``SingleTaskGP``'s ``Standardize`` outcome transform (refitted every update) with
            its kernel of unit outputscale; ``False``: the outputscale is learned and the noise
            prior ``LogNormal(-4, 1)``. A learned outputscale trades off against the
            lengthscales and ends at other optima of the evidence than the refitted exact GP.

    Example:
        >>> cfg = ObjectiveModelConfig()
        >>> cfg.num_inducing, cfg.restart, cfg.warm_start, cfg.learn_mean, cfg.standardize
        (64, True, True, True, False)
    """

    #: left out of saved campaign configurations while at their defaults (:func:`saved_options`)
    OMITTED_AT_DEFAULT: ClassVar[tuple[str, ...]] = ("standardize",)
    #: options whose default changed, with the value a campaign saved without them ran with
    #: (:meth:`~bo_ncgp.campaigns.strategies.base.Strategy.read_saved_config`)
    LEGACY_DEFAULTS: ClassVar[dict[str, Any]] = {"learn_mean": False}

    num_inducing: int = 64
    hyper_steps: int = 100
    rounds: int = 3
    restart: bool = True
    warm_start: bool = True
    learn_mean: bool = True
    standardize: bool = False

    def __post_init__(self) -> None:
        if not (self.restart or self.warm_start):
            raise InputDataError(
                "ObjectiveModelConfig: restart and warm_start are both False, so no fit "
                "would start anywhere; set at least one"
            )


@dataclass(frozen=True)
class MatchedObjectiveConfig(ObjectiveModelConfig):
    """:class:`ObjectiveModelConfig` with a refitted ``SingleTaskGP``'s model: a learned
    constant mean, the outputscale and noise prior from the values' sample variance
    (``Standardize``), every fit from the priors' modes (``fit_gpytorch_mll``). The strategy
    ``dual-matched`` of the box-bounded problems.

    Example:
        >>> cfg = MatchedObjectiveConfig()
        >>> cfg.warm_start, cfg.learn_mean, cfg.standardize
        (False, True, True)
    """

    OMITTED_AT_DEFAULT: ClassVar[tuple[str, ...]] = ()

    warm_start: bool = False
    learn_mean: bool = True
    standardize: bool = True


@dataclass(frozen=True)
class StandardizedObjectiveConfig(ObjectiveModelConfig):
    """:class:`ObjectiveModelConfig` with a ``SingleTaskGP``'s outputscale and noise prior
    from the values' sample variance (``Standardize``), the fits started both from the last
    update and from the priors' modes (the larger evidence kept). The strategies
    ``dual-std`` and ``dual-std-fantasy`` of the box-bounded problems: on Levy-4 in batches
    of 4 the learned outputscale of the default model costs qLogNEI 2 s.e. against a refitted
    ``SingleTaskGP`` over 40 seeds, this model none (``experiments/chang2023/RESULTS.md``,
    Sec. 10).

    Example:
        >>> cfg = StandardizedObjectiveConfig()
        >>> cfg.warm_start, cfg.restart, cfg.learn_mean, cfg.standardize
        (True, True, True, True)
    """

    OMITTED_AT_DEFAULT: ClassVar[tuple[str, ...]] = ()

    standardize: bool = True


@dataclass(frozen=True)
class WideObjectiveConfig(ObjectiveModelConfig):
    """:class:`ObjectiveModelConfig` with up to 256 inducing points instead of 64, for long
    budgets: the strategy ``dual-fantasy-m256`` of the box-bounded problems. On the noisy
    Hartmann6 of the long suite at 1,000 evaluations, fitted on the points at once, 64 inducing
    points put 11x a refitted ``SingleTaskGP``'s noise variance into the noise and 256 points
    about the same as it; streamed through a campaign, the noise of both grows far above
    that, and the fantasy batches of both repeat points (``experiments/chang2023/RESULTS.md``,
    Sec. 10, long budget).

    Example:
        >>> WideObjectiveConfig().num_inducing
        256
    """

    num_inducing: int = 256


@dataclass(frozen=True)
class MediumObjectiveConfig(ObjectiveModelConfig):
    """:class:`ObjectiveModelConfig` with up to 128 inducing points: the middle of the sweep
    64 / 128 / 256 of the long suite (strategy ``dual-fantasy-m128``; see
    :class:`WideObjectiveConfig`).

    Example:
        >>> MediumObjectiveConfig().num_inducing
        128
    """

    num_inducing: int = 128


def _objective_kernel(
    dim: int, isotropic: bool = False, lengthscale_floor_fraction: float | None = None
):
    """BoTorch's RBF kernel with the dimension-scaled ``LogNormal`` lengthscale prior
    (``get_covar_module_with_dim_scaled_prior``), its lower bound (``2.5e-2``, or
    ``lengthscale_floor_fraction`` times the prior's mode) given a softplus transform so that
    unbounded L-BFGS respects it, lengthscales at the prior's mode; one lengthscale per
    input, or one shared by all with ``isotropic``; inside a ``ScaleKernel`` (the targets keep
    the initial design's scale)."""
    from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
    from gpytorch.constraints import GreaterThan
    from gpytorch.kernels import RBFKernel, ScaleKernel

    base = get_covar_module_with_dim_scaled_prior(dim)
    bound = float(base.raw_lengthscale_constraint.lower_bound)
    if isotropic:  # the same prior (scaled with the dimension) on one shared lengthscale
        base = RBFKernel(lengthscale_prior=base.lengthscale_prior)
    mode = float(base.lengthscale_prior.mode)
    if lengthscale_floor_fraction is not None:
        bound = lengthscale_floor_fraction * mode
    base.register_constraint("raw_lengthscale", GreaterThan(bound))
    base.lengthscale = max(mode, 1.01 * bound)
    return ScaleKernel(base).to(DTYPE)


class StreamingDualObjective(StreamingDualReward):
    """Ours: a streaming DualSVGP regression of the standardised objective (Gaussian
    likelihood with a ``LogNormal(-4, 1)`` noise prior, the kernel of
    :func:`_objective_kernel`, a learned constant prior mean with ``learn_mean``, with
    ``standardize`` the outputscale and the noise prior set from the sample variance of the
    values so far as a ``SingleTaskGP`` standardises its targets, every point in memory, the
    inducing set grown by pivoted Cholesky up to ``num_inducing`` points),
    whose hyperparameters are fitted to convergence after every update: L-BFGS on the
    model's objective (the log marginal likelihood plus log priors) from the prior's mode
    (``restart``; the constant mean from ``0``, the initial design's mean) and, with
    ``warm_start``, also from where the last update left them, keeping the fit with the
    larger objective at converged sites. ``noise_floor`` bounds the noise variance from below
    (default: the likelihood's ``1e-6``), ``lengthscale_floor_fraction`` the lengthscales, as
    a fraction of the lengthscale prior's mode (default: BoTorch's ``2.5e-2``); ``isotropic``
    shares one lengthscale among the inputs.

    Example:
        >>> s = StreamingDualObjective(ObjectiveModelConfig(num_inducing=8))
        >>> s.setup(2)
        >>> U = torch.rand(6, 2, dtype=torch.float64)
        >>> s.observe(U, U.sum(-1), torch.ones(6, dtype=torch.bool))
        >>> s.model.num_data, s.model.hyper_optimizer
        (6, 'lbfgs')
    """

    def __init__(
        self,
        config: ObjectiveModelConfig,
        noise_floor: float | None = None,
        isotropic: bool = False,
        lengthscale_floor_fraction: float | None = None,
    ) -> None:
        super().__init__(config)
        for what, floor in (
            ("noise_floor", noise_floor),
            ("lengthscale_floor_fraction", lengthscale_floor_fraction),
        ):
            if floor is not None and not (math.isfinite(floor) and floor > 0):
                raise InputDataError(
                    f"StreamingDualObjective: {what} must be a positive number, got {floor}"
                )
        #: the smallest noise variance the fits may reach (``None``: the likelihood's 1e-6)
        self.noise_floor = noise_floor
        #: one lengthscale shared by every input instead of one per input
        self.isotropic = isotropic
        #: the smallest lengthscale the fits may reach, as a fraction of the prior's mode
        #: (``None``: BoTorch's 2.5e-2)
        self.lengthscale_floor_fraction = lengthscale_floor_fraction

    def setup(self, dim: int) -> None:
        """Forget the model and the start of the hyperparameter fits."""
        self.model = None
        self._start: dict[str, Any] | None = None

    def _build(self, Z: torch.Tensor):
        from gpytorch.constraints import GreaterThan
        from gpytorch.priors import LogNormalPrior

        from bo_ncgp.likelihoods import Gaussian
        from bo_ncgp.models import DualSVGP

        floor = self.noise_floor
        noise = Gaussian(
            noise=math.exp(-4.0) if floor is None else max(math.exp(-4.0), 2.0 * floor),
            noise_prior=LogNormalPrior(-4.0, 1.0),
            noise_constraint=None if floor is None else GreaterThan(floor),
        )
        model = DualSVGP(
            _objective_kernel(Z.shape[-1], self.isotropic, self.lengthscale_floor_fraction),
            noise.to(DTYPE),
            Z[: self.config.num_inducing],
            max_inducing=self.config.num_inducing,
            memory_size=None,
            memory_cap=None,
            num_hyper_steps=self.config.hyper_steps,
            hyper_optimizer="lbfgs",
            rho=1.0,
            num_inner_steps=1,
            num_rounds=self.config.rounds,
            learn_mean_constant=self.config.learn_mean,
        )
        self._start = {
            "kernel": copy.deepcopy(model.kernel.state_dict()),
            "likelihood": copy.deepcopy(model.likelihood.state_dict()),
        }
        return model

    def observe(self, U: torch.Tensor, y: torch.Tensor, ok: torch.Tensor) -> None:
        """Update with the successful rows ``ok`` of ``(U, y)``, then keep the better of
        the two hyperparameter fits (class docstring)."""
        if not ok.any():
            return
        U, y = U[ok], y[ok]
        if self.model is None:
            self.model = self._build(U)
            self._standardize(self.model, y, start=True)
            self.model.update(U, y)
            return
        values = torch.cat([self.model.memory.y, y])
        fits = [self.model] if self.config.warm_start else []
        for m in fits:
            self._standardize(m, values, start=False)
        if self.config.restart:
            fresh = self.model.copy()
            fresh.kernel.load_state_dict(self._start["kernel"])
            fresh.likelihood.load_state_dict(self._start["likelihood"])
            if fresh.learn_mean_constant:
                fresh.mean_constant = 0.0
            self._standardize(fresh, values, start=True)
            fits.append(fresh)
        self.model = max((m.update(U, y) for m in fits), key=_evidence)

    def _standardize(self, model, values: torch.Tensor, start: bool) -> None:
        """With ``standardize``: the outputscale (not learned) and the noise prior of
        ``model`` from the sample variance of ``values`` (every value observed so far); at a
        ``start`` the noise at its prior's mode."""
        if not self.config.standardize:
            return
        var = float(values.var()) if values.numel() > 1 else 1.0
        var = var if math.isfinite(var) and var > 0 else 1.0
        model.kernel.raw_outputscale.requires_grad_(False)
        model.kernel.outputscale = var
        prior = model.likelihood.noise_prior
        with torch.no_grad():
            prior.base_dist.loc.fill_(-4.0 + math.log(var))
        if start:
            model.likelihood.noise = float(prior.mode)


def _evidence(model) -> float:
    """The model's objective at converged sites (for a Gaussian likelihood with every point
    in memory: the log marginal likelihood of its sparse GP plus the log priors)."""
    from bo_ncgp.models.dual.streaming import converge_sites

    converge_sites(model)
    with torch.no_grad():
        value = float(model.log_marginal())
    return value if math.isfinite(value) else -math.inf


class BatchRule:
    """How a batch is chosen from the objective model (module docstring).

    Args:
        rule: one of :data:`RULES`.
        config: ``optimize_acqf`` settings.

    Example:
        >>> BatchRule("believer", BatchConfig()).rule
        'believer'
    """

    def __init__(self, rule: str, config: BatchConfig) -> None:
        if rule not in RULES:
            raise InputDataError(f"unknown batch rule {rule!r} (choose from {RULES})")
        self.rule, self.config = rule, config

    def select(self, model, U: torch.Tensor, best: float, q: int) -> torch.Tensor:
        """``q`` points of the unit cube for the BoTorch ``model`` of the standardised
        objective, observed at ``U`` with incumbent ``best``."""
        from botorch.acquisition import LogExpectedImprovement, qLogNoisyExpectedImprovement
        from botorch.optim import optimize_acqf

        from bo_ncgp.bo import build_fantasy_batch

        d = U.shape[-1]
        bounds = torch.stack([torch.zeros(d, dtype=DTYPE), torch.ones(d, dtype=DTYPE)])
        opts = {"num_restarts": self.config.num_restarts, "raw_samples": self.config.raw_samples}
        plugin = self.rule == "fantasy-plugin"
        if plugin and q == 1:  # the plug-in incumbent: the best posterior mean observed
            with torch.no_grad():
                best = float(model.posterior(U).mean.max())
        if self.rule == "joint" or q == 1:
            if q == 1:
                acq = LogExpectedImprovement(model, best_f=best)
            else:
                acq = qLogNoisyExpectedImprovement(model, X_baseline=U, prune_baseline=True)
            X, _ = optimize_acqf(acq, bounds, q=q, **opts)
            return X.detach()
        fantasy = "sample" if self.rule in ("fantasy", "fantasy-plugin") else "mean"
        batch = build_fantasy_batch(
            model,
            lambda ms, incumbent: LogExpectedImprovement(ms[0], best_f=incumbent),
            q=q,
            bounds=bounds,
            fantasy=fantasy,
            best_f=None if plugin else best,  # raised to the fantasised values inside the batch
            incumbent_at=U if plugin else None,
            **opts,
        )
        return batch.X.detach()


class _UnitCube(UnitCubeStrategy):
    """:class:`UnitCubeStrategy` that also reports the smallest distance inside a batch."""

    def report(self, history: History) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.fit_seconds is not None:
            out["fit_seconds"] = self.fit_seconds
            self.fit_seconds = None
        if len(history.batches) > 1 and len(history.batches[-1]) > 1:
            out["min_distance"] = min_distance(self._unit(history.X[history.batches[-1]]).numpy())
        return out


class ObjectiveBO(_UnitCube):
    """Objective surrogate x batch rule (module docstring).

    Args:
        name: the strategy's name.
        model: DualSVGP settings (used by a streaming surrogate).
        surrogate: :class:`StreamingDualObjective`, :class:`StreamingDualReward` or
            :class:`ExactGPReward`.
        rule: the batch rule.

    Example:
        >>> s = ObjectiveBO("botorch", DualModelConfig(), ExactGPReward(),
        ...                 BatchRule("joint", BatchConfig(num_restarts=2)))
        >>> s.config()["num_restarts"], "num_inducing" in s.config()  # no DualSVGP settings
        (2, False)
    """

    def __init__(
        self,
        name: str,
        model: DualModelConfig | ObjectiveModelConfig,
        surrogate: StreamingDualReward | ExactGPReward,
        rule: BatchRule,
    ) -> None:
        self.name, self.model_config, self.surrogate, self.rule = name, model, surrogate, rule

    def report(self, history: History) -> dict[str, float]:
        """:class:`_UnitCube`'s metrics and, with a streaming surrogate, its model after the
        last update: ``noise`` (the Gaussian noise variance of the standardised values),
        ``outputscale``, ``num_inducing`` and ``mean_constant``, so that a campaign's record
        shows how the model's fit moves as the data arrive, and ``value_scale``, the standard
        deviation the values are divided by (that of the first values observed): ``noise *
        value_scale**2`` is the noise variance in the problem's units, which compares across
        runs and with models standardised otherwise."""
        out = super().report(history)
        model = getattr(self.surrogate, "model", None)
        if isinstance(self.surrogate, StreamingDualReward) and model is not None:
            with torch.no_grad():
                noise = getattr(model.likelihood, "noise", None)
                if noise is not None:
                    out["noise"] = float(noise.reshape(-1)[0])
                scale = getattr(model.kernel, "outputscale", None)
                if scale is not None:
                    out["outputscale"] = float(scale.reshape(-1)[0])
                out["num_inducing"] = float(model.num_inducing)
                out["mean_constant"] = float(torch.as_tensor(model.mean_constant).reshape(-1)[0])
            if self.y_std is not None:
                out["value_scale"] = float(self.y_std)
        return out

    def config(self) -> dict[str, Any]:
        """``{"name", **model config (streaming surrogates), **batch config}`` (the name
        stands for the surrogate and the batch rule)."""
        model = (
            saved_options(self.model_config)
            if isinstance(self.surrogate, StreamingDualReward)
            else {}
        )
        return {"name": self.name, **model, **saved_options(self.rule.config)}

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.surrogate.setup(problem.dim)
        self.U = torch.zeros(0, problem.dim, dtype=DTYPE)
        self.Y = torch.zeros(0, dtype=DTYPE)

    def observe(self, X: np.ndarray, evaluations: list[Evaluation], history: History) -> None:
        U = self._unit(X)
        vals = np.array([e.value for e in evaluations], dtype=float)
        y = self._standardise(vals)
        ok = torch.as_tensor(np.isfinite(vals))
        self.surrogate.observe(U, y, ok)
        self.U, self.Y = torch.cat([self.U, U[ok]]), torch.cat([self.Y, y[ok]])

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        if self.Y.numel() == 0:  # nothing observed yet: a random point
            return self._from_unit(torch.as_tensor(rng.random((q, self.problem.dim)), dtype=DTYPE))
        t0 = time.perf_counter()
        model = self.surrogate.botorch_model()
        self.fit_seconds = time.perf_counter() - t0
        return self._from_unit(self.rule.select(model, self.U, float(self.Y.max()), q))


class LabelGPConstrainedBO(ObjectiveBO):
    """An exact ``SingleTaskGP`` of the objective (feasible points) and one of the 0/1
    success labels (all points), both refitted before every acquisition, with BoTorch's
    ``LogConstrainedExpectedImprovement`` (constraint: label model ``> 1/2``); batches by
    the Kriging believer over both models.

    Example:
        >>> s = LabelGPConstrainedBO("botorch-labels", DualModelConfig(), ExactGPReward(),
        ...                          BatchRule("believer", BatchConfig()))
        >>> s.rule.rule
        'believer'
    """

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.U_all = torch.zeros(0, problem.dim, dtype=DTYPE)
        self.labels = torch.zeros(0, dtype=DTYPE)

    def observe(self, X: np.ndarray, evaluations: list[Evaluation], history: History) -> None:
        super().observe(X, evaluations, history)
        have = [i for i, e in enumerate(evaluations) if e.success is not None]
        lab = torch.tensor([float(bool(evaluations[i].success)) for i in have], dtype=DTYPE)
        self.U_all = torch.cat([self.U_all, self._unit(X)[have]])
        self.labels = torch.cat([self.labels, lab])

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        from botorch.acquisition.analytic import LogConstrainedExpectedImprovement
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import ModelListGP, SingleTaskGP
        from botorch.optim import optimize_acqf
        from gpytorch.mlls import ExactMarginalLogLikelihood

        from bo_ncgp.bo import build_fantasy_batch

        if self.Y.numel() < 2:  # too few feasible values for a model: a random point
            return self._from_unit(torch.as_tensor(rng.random((q, self.problem.dim)), dtype=DTYPE))
        t0 = time.perf_counter()
        objective = self.surrogate.botorch_model()
        labels = SingleTaskGP(self.U_all, self.labels.unsqueeze(-1))
        fit_gpytorch_mll(ExactMarginalLogLikelihood(labels.likelihood, labels))
        self.fit_seconds = time.perf_counter() - t0
        best = float(self.Y.max())
        d = self.problem.dim
        bounds = torch.stack([torch.zeros(d, dtype=DTYPE), torch.ones(d, dtype=DTYPE)])

        def acquisition(ms):
            return LogConstrainedExpectedImprovement(
                ModelListGP(*ms), best_f=best, objective_index=0, constraints={1: (0.5, None)}
            )

        opts = {"num_restarts": self.rule.config.num_restarts}
        opts["raw_samples"] = self.rule.config.raw_samples
        if q == 1:
            X, _ = optimize_acqf(acquisition([objective, labels]), bounds, q=1, **opts)
        else:
            X = build_fantasy_batch(
                [objective, labels], acquisition, q=q, bounds=bounds, fantasy="mean", **opts
            ).X
        return self._from_unit(X.detach())


def constrained_log_ei(objective, feasibility, best_f: float):
    """BoTorch's ``LogConstrainedExpectedImprovement`` of the objective model under the
    constraint ``latent > 0`` of a feasibility model (both BoTorch models): ``log EI(x) +
    log P(f(x) > 0)`` with ``P(f > 0) = Phi(mu / sigma)`` for a latent posterior
    ``N(mu, sigma^2)`` (for :class:`DualConstrainedBO`, ``f`` is the success label minus 1/2).

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X = torch.rand(12, 2, dtype=DTYPE)
        >>> f = SingleTaskGP(X, torch.sin(3 * X[:, :1]))
        >>> c = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)  # feasible iff u1 + u2 > 1
        >>> constrained_log_ei(f, c, best_f=0.5)(torch.rand(4, 1, 2, dtype=DTYPE)).shape
        torch.Size([4])
    """
    from botorch.acquisition.analytic import LogConstrainedExpectedImprovement
    from botorch.models.model import ModelList

    return LogConstrainedExpectedImprovement(
        ModelList(objective, feasibility),
        best_f=best_f,
        objective_index=0,
        constraints={1: (0.0, None)},
    )


#: the models and the acquisition of :class:`DualConstrainedBO` (its configuration's ``model``)
FEASIBILITY = (
    "streaming DualSVGP value + streaming Gaussian DualSVGP of the success labels minus 1/2 "
    "(the value model's kernel, priors and converged fits; a learned constant prior mean) x "
    "LogConstrainedEI (latent > 0)"
)


class DualConstrainedBO(ConstrainedBO):
    """Ours for unknown feasible regions: two streaming DualSVGPs of
    :class:`StreamingDualObjective` (converged hyperparameter fits after every update), one
    of the standardised value (feasible points only) and one of the success labels minus 1/2
    (every labelled point), with :func:`constrained_log_ei` (``log EI`` over the best
    feasible value ``+ log P(label > 1/2)``); batches by the rule of ``batch`` (as
    :class:`~bo_ncgp.campaigns.strategies.lunar.ConstrainedBO`). Until a feasible value is
    observed, points are drawn uniformly at random.

    Why a Gaussian likelihood on the labels: a feasible region is a set, so its labels
    carry no noise, and an evaluation that failed fails again. A Bernoulli (logistic or
    probit) likelihood reads agreeing labels as nearly uninformative once its latent is
    confident (a site's precision ``sigmoid'(f)`` vanishes), so its latent posterior keeps
    about the prior's spread in a region that failed many times and ``P(f > 0)`` stays at
    a few percent there; wherever the value model extrapolates a rise across the boundary
    (the constrained optimum of a function whose free optimum lies outside), ``log EI``
    outweighs it and the loop returns to failed corners and walls. With Gaussian noise
    every label shrinks the posterior variance where it lies, so ``P(label > 1/2)`` at a
    failed point falls towards 0 with the learned noise.

    Why the label noise has no floor: the labels are a step function, which a smooth GP
    cannot fit, and left free the evidence drives the noise down and the lengthscales short
    (on the Levy-4 corner: noise 0.004-0.03, lengthscales 0.025-0.32 against the prior's
    mode 0.41), so the model interpolates the labels and reverts to its constant a short
    distance from them. A floor of 0.1 on the noise variance (``noise_floor`` of
    :class:`StreamingDualObjective`) predicts feasibility better -- fitted on the first 20-40
    evaluations of this strategy's constrained-suite runs, the log loss of ``P(feasible)``
    at the next five evaluations fell on all four problems (``bo-ncgp label-model-check``)
    -- but did not choose better points: over 10 seeds, paired against the model without
    it, final regret -0.35 +- 0.30 on the Branin half-plane, -0.46 +- 0.45 on the disc,
    -0.03 +- 0.50 on the ring and +0.19 +- 0.73 on the corner. A floor on the label model's
    lengthscales instead (``label_lengthscale_floor_fraction=0.5``: half the prior's mode;
    the strategy ``dual-long-labels``) did choose better points: over 20 seeds, paired
    against the model without it, +0.04 +- 0.07 on the half-plane, -0.35 +- 0.33 on the disc
    (one stalled seed), +1.21 +- 0.28 on the ring and +1.22 +- 0.69 on the corner.

    Why the label model's prior mean is a learned constant (``learn_mean``, whatever the
    value model's setting): away from the data the posterior reverts to its prior mean, and
    a constant fitted with the kernel by the evidence sits near the share of feasible
    points, as a ``SingleTaskGP``'s ``ConstantMean`` does. A prior mean fixed at label 1/2
    leaves every region far from the data undecided; where the feasible share is small and
    the dimension high (the far regions are the cube's faces and corners, where the value
    model's ``log EI`` is largest) the loop spends its budget there.

    Args:
        name: the strategy's name.
        model: settings of both streaming models.
        batch: :class:`~bo_ncgp.campaigns.strategies.lunar.DualFantasyBatch` or
            :class:`~bo_ncgp.campaigns.strategies.lunar.KrigingBelieverBatch`.
        label_isotropic: one lengthscale shared by the label model's inputs.
        label_lengthscale_floor_fraction: the label model's smallest lengthscale, as a
            fraction of the lengthscale prior's mode (``None``: BoTorch's ``2.5e-2``).

    Example:
        >>> from bo_ncgp.campaigns.strategies.lunar import DualFantasyBatch
        >>> s = DualConstrainedBO("dual", ObjectiveModelConfig(), DualFantasyBatch(BatchConfig()))
        >>> s.config()["model"] == FEASIBILITY, s.config()["restart"]
        (True, True)
    """

    def __init__(
        self,
        name: str,
        model: ObjectiveModelConfig,
        batch: DualFantasyBatch,
        label_isotropic: bool = False,
        label_lengthscale_floor_fraction: float | None = None,
    ) -> None:
        super().__init__(name, model, StreamingDualObjective(model), batch)
        self.label_options = {
            "isotropic": label_isotropic,
            "lengthscale_floor_fraction": label_lengthscale_floor_fraction,
        }

    def config(self) -> dict[str, Any]:
        """``{"name", "model": FEASIBILITY, **model config, **batch config}``, and the
        label model's kernel options (``label_isotropic``, ``label_lengthscale_floor_fraction``)
        where they are set."""
        extra = {f"label_{k}": v for k, v in self.label_options.items() if v}
        return {"name": self.name, "model": FEASIBILITY, **super().config(), **extra}

    @staticmethod
    def label_model(
        config: ObjectiveModelConfig,
        dim: int,
        noise_floor: float | None = None,
        isotropic: bool = False,
        lengthscale_floor_fraction: float | None = None,
    ) -> StreamingDualObjective:
        """The streaming model of the success labels (class docstring): ``config`` with a
        learned constant mean, set up for ``dim`` inputs; ``noise_floor``, ``isotropic`` and
        ``lengthscale_floor_fraction`` as for :class:`StreamingDualObjective`.

        Example:
            >>> m = DualConstrainedBO.label_model(ObjectiveModelConfig(), 2)
            >>> m.config.learn_mean, m.noise_floor
            (True, None)
        """
        labels = dataclasses.replace(config, learn_mean=True)
        model = StreamingDualObjective(labels, noise_floor, isotropic, lengthscale_floor_fraction)
        model.setup(dim)
        return model

    @staticmethod
    def observe_labels(model: StreamingDualObjective, U: torch.Tensor, labels: torch.Tensor):
        """Stream the 0/1 ``labels`` at ``U`` into the label ``model`` as ``labels - 1/2``."""
        model.observe(U, labels - 0.5, torch.ones_like(labels, dtype=torch.bool))

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.feasibility = self.label_model(self.model_config, problem.dim, **self.label_options)

    def _update_classifier(self, U: torch.Tensor, labels: torch.Tensor) -> None:
        """Stream ``labels - 1/2`` at ``U`` into the feasibility model."""
        self.observe_labels(self.feasibility, U, labels)
        self.classifier = self.feasibility.model

    def _acquisition(self, reward, classifier, best: float):
        return constrained_log_ei(reward, classifier, best)


class CountDualBO(_UnitCube):
    """Ours for counts: a streaming DualSVGP of the log rate with the ``Poisson``
    likelihood, updated with the raw counts after every batch; the batch rule maximises
    (log) EI of the latent log rate over the largest posterior mean at the observed points.

    Example:
        >>> s = CountDualBO("dual-poisson", DualModelConfig(), BatchRule("joint", BatchConfig()))
        >>> s.config()["num_inducing"], s.rule.rule
        (48, 'joint')
    """

    def __init__(self, name: str, model: DualModelConfig, rule: BatchRule) -> None:
        self.name, self.model_config, self.rule = name, model, rule

    def config(self) -> dict[str, Any]:
        """``{"name", **model config, **batch config}``."""
        return {
            "name": self.name,
            **saved_options(self.model_config),
            **saved_options(self.rule.config),
        }

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.model = None
        self.U = torch.zeros(0, problem.dim, dtype=DTYPE)

    def observe(self, X: np.ndarray, evaluations: list[Evaluation], history: History) -> None:
        from bo_ncgp.likelihoods import Poisson

        U = self._unit(X)
        vals = np.array([e.value for e in evaluations], dtype=float)
        ok = torch.as_tensor(np.isfinite(vals))
        if not ok.any():
            return
        y = torch.as_tensor(vals, dtype=DTYPE)[ok]
        if self.model is None:
            self.model = _dual(self.model_config, Poisson(), U[ok])
        self.model.update(U[ok], y)
        self.U = torch.cat([self.U, U[ok]])

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        from bo_ncgp.bo import DualSVGPModel

        if self.model is None:
            return self._from_unit(torch.as_tensor(rng.random((q, self.problem.dim)), dtype=DTYPE))
        model = DualSVGPModel.from_model(self.model)
        with torch.no_grad():
            best = float(model.posterior(self.U).mean.max())
        return self._from_unit(self.rule.select(model, self.U, best, q))
