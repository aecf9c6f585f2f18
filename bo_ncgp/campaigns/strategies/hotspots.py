"""Strategies of the hotspot active-learning campaign (Chang et al. 2023, Sec. 4.1, Fig. 4),
composed as surrogate x acquisition (one village per step).

Surrogates (models of the latent logit prevalence of every village):

* :class:`StreamingDual` (:class:`StreamingDualConfig`): a streaming
  :class:`~bo_ncgp.models.DualSVGP` with the ``Binomial(100)`` likelihood, updated with
  :meth:`~bo_ncgp.models.DualSVGP.update` after every survey (damped site updates, a few
  hyperparameter steps). The inducing points are exactly the surveyed villages: the DualSVGP
  uses ``inducing_update="fixed"`` and, before each update, :meth:`DualSVGP.project` moves the
  posterior to ``[Z, x_new]`` (exact, since the new set contains the old one), and every point
  stays in memory (``memory_size=None``), so the sequential objective is the batch one. The
  hyperparameters are trained on the ELBO (Eq. 21), as in Maddox et al.'s hotspot script;
* :class:`RefittedSVGP` (:class:`RefittedSVGPConfig`): the loop Chang et al. ran for Fig. 4 --
  Maddox et al.'s GPyTorch SVGP with a constant mean
  (:class:`~bo_ncgp.campaigns.strategies.hotspot_models.ConstantMeanSVGP`) refitted after
  every survey and converted to a DualSVGP. Each refit is seeded by the seed and the number
  of surveyed villages, so a resumed campaign repeats the same refits;
* :class:`RefitGP` (:class:`~bo_ncgp.campaigns.strategies.hotspot_models.RefitGPConfig`): a
  GPyTorch variational GP refitted from scratch,
  conditioned on fantasies by refitting
  (:class:`~bo_ncgp.campaigns.strategies.hotspot_models.RefitVariationalGP`).

Acquisitions (which remaining village to survey next):

* :class:`DualEntropy` (:class:`EntropyConfig`): the expected reduction of the summed
  exceedance entropy (or of another registered criterion, counted by a registered gain) over
  the remaining pool under QMC fantasies and dual conditioning
  (:class:`~bo_ncgp.bo.acquisition.ThresholdEntropyReduction`, rank-one fast path);
* :class:`RandomVillage`: a uniformly random remaining village (one ``rng.choice`` over the
  remaining pool, so every random strategy of a seed surveys the same villages);
* :class:`RefitEntropy` (:class:`RefitEntropyConfig`): the same entropy reduction with the
  conditioned posteriors from refitted models, on the ``num_candidates`` villages of largest
  current exceedance entropy.

The named strategies (``entropy``, ``random``, ``refit-entropy``, ``svgp-entropy``,
``svgp-random``) are these pairs, registered in :mod:`bo_ncgp.campaigns.strategies.registry`.

After every survey :meth:`HotspotStrategy.report` logs, on the villages not yet surveyed, the
hotspot accuracy and prevalence MSE of ``sigmoid(posterior mean)``
(:meth:`~bo_ncgp.problems.hotspots.HotspotPool.metrics`), the same two scores over all villages
(``accuracy_all``, ``mse_all``), and the step's wall-clock seconds (acquisition + model
update).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.campaigns.strategies.base import History, Strategy, saved_options
from bo_ncgp.campaigns.strategies.hotspot_models import (
    DTYPE,
    ConstantMeanSVGP,
    RefitGPConfig,
    RefittedSVGPConfig,
    RefitVariationalGP,
    hotspot_kernel,
    minmax_scale,
)
from bo_ncgp.exceptions import InputDataError, NumericalWarning
from bo_ncgp.likelihoods import Binomial
from bo_ncgp.linalg._args import check_count
from bo_ncgp.problems.base import Evaluation

__all__ = [
    "DualEntropy",
    "EntropyConfig",
    "HotspotStrategy",
    "RandomVillage",
    "RefitEntropy",
    "RefitEntropyConfig",
    "RefitGP",
    "RefittedSVGP",
    "RefittedSVGPConfig",
    "StreamingDual",
    "StreamingDualConfig",
]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


# ------------------------------------------------------------------------------ configs
@dataclass(frozen=True)
class StreamingDualConfig:
    """Settings of the streaming DualSVGP surrogate (:class:`StreamingDual`).

    Attributes:
        num_inner_steps: damped natural-gradient site updates per survey (Eqs. 23-24).
        num_hyper_steps: Adam steps on the hyperparameters per survey (``0`` keeps the first
            fit's hyperparameters). The surrogate steps by Adam (``hyper_optimizer="adam"``):
            the ELBO optimum of this zero-mean model, which L-BFGS reaches, has a higher
            prevalence MSE on the CIV stream (``experiments/chang2023/drift.py``).
        lr: Adam learning rate of the per-survey hyperparameter steps.
        init_rounds, init_hyper_steps, init_lr: rounds of (inner steps, hyperparameter steps)
            and the learning rate of the first fit on the initial villages.
        hyper_objective: ``"elbo"`` (Eq. 21, Maddox et al.'s) or ``"dual"`` (Eq. 26).
        rho: damping of the site updates (undamped steps can diverge for ``Binomial(100)``).
        max_abs_logit: divergence guard: if an update leaves a surveyed village with
            ``|posterior mean logit| > max_abs_logit``, the update is redone from the previous
            model with half the damping and twice the steps (with a warning).
        constant_mean, outputscale_prior: kernel options of
            :func:`~bo_ncgp.campaigns.strategies.hotspot_models.hotspot_kernel`.
        learn_mean_constant: a learned constant prior mean ``c`` of the logit prevalence
            (``DualSVGP(learn_mean_constant=True)``, trained with the kernel
            hyperparameters, as the ``ConstantMean`` of Maddox et al.'s model), started at
            the logit of the initial villages' pooled prevalence; ``False``: zero mean.

    Example:
        >>> StreamingDualConfig(rho=0.25).rho, StreamingDualConfig().num_inner_steps
        (0.25, 20)
    """

    #: left out of saved campaign configurations while at their defaults (:func:`saved_options`)
    OMITTED_AT_DEFAULT: ClassVar[tuple[str, ...]] = ("learn_mean_constant",)

    num_inner_steps: int = 20
    num_hyper_steps: int = 5
    lr: float = 0.01
    init_rounds: int = 8
    init_hyper_steps: int = 50
    init_lr: float = 0.05
    hyper_objective: str = "elbo"
    rho: float = 0.5
    max_abs_logit: float = 25.0
    constant_mean: bool = False
    outputscale_prior: bool = True
    learn_mean_constant: bool = False


@dataclass(frozen=True)
class EntropyConfig:
    """Settings of the dual-conditioning entropy acquisition (:class:`DualEntropy`).

    Attributes:
        num_fantasies: QMC fantasies per candidate village.
        compute_dtype: ``"float32"`` (~3x faster entropy sums) or ``"float64"``.
        chunk_size: candidates per vectorised block.
        criterion: per-village uncertainty summed over the pool: a criterion registered in
            :data:`bo_ncgp.bo.acquisition.CRITERIA`; the library's is ``"exceedance"`` (entropy
            of ``P(prevalence > t)``).
        gain: how each village's entropy change counts: a gain registered in
            :data:`bo_ncgp.bo.acquisition.GAINS`; the library's is ``"reduction"`` (the plain
            decrease of the summed entropy).
        num_candidates: a prescreen for costly criteria and gains: every remaining village
            is scored by the exceedance-entropy reduction (the fused, cheapest score), and
            only the ``num_candidates`` best are scored by ``criterion`` and ``gain``, each
            against the whole pool; ``None`` scores every remaining village by ``criterion``
            and ``gain``.

    Example:
        >>> EntropyConfig().criterion, EntropyConfig().gain, EntropyConfig().num_candidates
        ('exceedance', 'reduction', None)
        >>> EntropyConfig(num_candidates=0)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: entropy: num_candidates (or None) must be ... >= 1, got 0
        >>> EntropyConfig(gain="increase")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: gain must be one of ('reduction'...), got 'increase'
        >>> EntropyConfig(compute_dtype="float16")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: entropy: compute_dtype must be one of [...]
    """

    #: left out of saved campaign configurations while at their defaults (:func:`saved_options`)
    OMITTED_AT_DEFAULT: ClassVar[tuple[str, ...]] = ("num_candidates",)

    num_fantasies: int = 16
    compute_dtype: str = "float32"
    chunk_size: int = 16
    criterion: str = "exceedance"
    gain: str = "reduction"
    num_candidates: int | None = None

    def __post_init__(self) -> None:
        from bo_ncgp.bo.acquisition import check_criterion, check_gain

        check_criterion(self.criterion)
        check_gain(self.gain)
        if self.num_candidates is not None:
            check_count(self.num_candidates, "num_candidates (or None)", "entropy", minimum=1)
        if self.compute_dtype not in _DTYPES:
            raise InputDataError(f"entropy: compute_dtype must be one of {sorted(_DTYPES)}")


@dataclass(frozen=True)
class RefitEntropyConfig:
    """Settings of the refitting entropy acquisition (:class:`RefitEntropy`).

    Attributes:
        num_candidates: remaining villages scored per step (largest current exceedance
            entropy first).
        num_fantasies: QMC fantasies per candidate.

    Example:
        >>> RefitEntropyConfig().num_candidates
        16
    """

    num_candidates: int = 16
    num_fantasies: int = 8


# ---------------------------------------------------------------------------- surrogates
class _Surrogate:
    """What every hotspot surrogate has: its ``config``, the fitted ``model`` (with
    ``predict_f``), the strategy it serves (from :meth:`setup`) and :meth:`latent`."""

    label = ""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.model = None

    def setup(self, strategy: HotspotStrategy) -> None:
        """Forget the model (a fresh or resumed run starts from no data)."""
        self.strategy = strategy
        self.model = None

    def latent(self, U: Tensor) -> Tensor:
        """Posterior mean of the latent logit prevalence at ``U``."""
        return self.model.predict_f(U)[0]


class StreamingDual(_Surrogate):
    """Streaming DualSVGP of the logit prevalence; inducing points = the surveyed villages.

    Example:
        >>> StreamingDual(StreamingDualConfig()).label
        'DualSVGP'
    """

    label = "DualSVGP"

    def __init__(self, config: StreamingDualConfig) -> None:
        super().__init__(config)
        self.retries = 0

    def fit(self, idx: np.ndarray, y: Tensor) -> None:
        """Update the model with the counts ``y`` of the newly surveyed villages ``idx``."""
        from bo_ncgp.models import DualSVGP

        c, s = self.config, self.strategy
        X = s.U[torch.as_tensor(idx)]
        if self.model is None:
            mean = 0.0
            if c.learn_mean_constant:  # the logit of the pooled prevalence, clipped
                p = float(y.sum()) / (s.num_trials * y.numel())
                p = min(max(p, 0.5 / s.num_trials), 1 - 0.5 / s.num_trials)
                mean = math.log(p) - math.log1p(-p)
            self.model = DualSVGP(
                hotspot_kernel(X.shape[-1], c.constant_mean, c.outputscale_prior),
                Binomial(s.num_trials).to(DTYPE),
                X,
                memory_size=None,
                rho=float(c.rho),
                num_inner_steps=int(c.num_inner_steps),
                num_hyper_steps=int(c.init_hyper_steps),
                inducing_update="fixed",
                hyper_objective=c.hyper_objective,
                hyper_optimizer="adam",
                lr=float(c.init_lr),
                num_rounds=int(c.init_rounds),
                mean_constant=mean,
                learn_mean_constant=bool(c.learn_mean_constant),
            )
            self.model.update(X, y)
            m = self.model
            m.num_hyper_steps, m.num_rounds, m.lr = int(c.num_hyper_steps), 1, float(c.lr)
            return
        backup = self.model.copy()
        self.model.project(torch.cat([self.model.Z, X]))  # Z = surveyed villages (exact)
        self.model.update(X, y)
        rho, steps = float(c.rho), int(c.num_inner_steps)
        while self._diverged() and rho > 1e-2:
            rho, steps = rho / 2, steps * 2
            warnings.warn(
                f"{s.name}: the site updates diverged (|logit| > {float(c.max_abs_logit)}); "
                f"redoing the update with rho={rho}, {steps} inner steps",
                NumericalWarning,
                stacklevel=3,
            )
            self.retries += 1
            self.model = backup.copy()
            self.model.rho, self.model.num_inner_steps = rho, steps
            self.model.project(torch.cat([self.model.Z, X]))
            self.model.update(X, y)
            self.model.rho, self.model.num_inner_steps = float(c.rho), int(c.num_inner_steps)

    def _diverged(self) -> bool:
        with torch.no_grad():
            mean = self.model.predict_f(self.model.memory_inputs)[0]
        return not bool(torch.isfinite(mean).all()) or float(mean.abs().max()) > float(
            self.config.max_abs_logit
        )


class RefittedSVGP(_Surrogate):
    """Constant-mean GPyTorch SVGP refitted on every surveyed village after each survey and
    converted to a DualSVGP (``model``), whose predictions are the SVGP's.

    Example:
        >>> RefittedSVGP(RefittedSVGPConfig()).label
        'GPyTorch SVGP with constant mean, refitted'
    """

    label = "GPyTorch SVGP with constant mean, refitted"

    def __init__(self, config: RefittedSVGPConfig) -> None:
        super().__init__(config)
        self.gp: ConstantMeanSVGP | None = None

    def setup(self, strategy: HotspotStrategy) -> None:
        """Forget the fits (a fresh or resumed run starts from no data)."""
        super().setup(strategy)
        self.gp = None
        self.last_loss = float("nan")
        self.refit_at = 0

    def fit(self, idx: np.ndarray, y: Tensor) -> None:
        """Refit on every surveyed village (the strategy's record, ``idx`` included), or,
        between refits (``refit_every > 1``), add ``idx`` to the converted model by a
        streaming update."""
        c, s = self.config, self.strategy
        if self.gp is not None and (len(s.observed) - self.refit_at) % int(c.refit_every):
            X = s.U[torch.as_tensor(idx)]
            self.model.project(torch.cat([self.model.Z, X]))  # exact: a superset of Z
            self.model.update(X, y)
            return
        self.refit_at = len(s.observed)
        X, counts = s.U[s.observed], s.y
        likelihood = Binomial(s.num_trials).to(DTYPE)
        gp = ConstantMeanSVGP(X, bool(c.outputscale_prior))
        if c.recycle and self.gp is not None:
            gp.kernel.load_state_dict(self.gp.kernel.state_dict())
        with torch.random.fork_rng():  # q(u)'s random initial mean, reproducible per step
            torch.manual_seed(int(s.seed) * 100_003 + len(s.observed))
            self.last_loss = gp.fit(
                X,
                counts,
                likelihood,
                float(c.beta),
                int(c.num_steps),
                float(c.lr),
                None if c.rel_tol is None else float(c.rel_tol),
            )
        self.gp = gp
        streaming = {}  # the settings of the updates between refits
        if int(c.refit_every) > 1:
            streaming = dict(
                memory_size=None, rho=0.5, num_inner_steps=20, num_hyper_steps=0,
                hyper_objective="elbo",
            )  # fmt: skip
        self.model = gp.to_dual(likelihood, num_data=len(s.observed), **streaming)


class RefitGP(_Surrogate):
    """Zero-mean GPyTorch SVGP refitted from scratch after every survey (``model`` is the
    :class:`~bo_ncgp.campaigns.strategies.hotspot_models.RefitVariationalGP`).

    Example:
        >>> RefitGP(RefitGPConfig()).label
        'GPyTorch SVGP, refitted'
    """

    label = "GPyTorch SVGP, refitted"
    config: RefitGPConfig

    def setup(self, strategy: HotspotStrategy) -> None:
        """A new, unfitted model."""
        self.strategy = strategy
        self.model = RefitVariationalGP(Binomial(strategy.num_trials).to(DTYPE), self.config)

    def fit(self, idx: np.ndarray, y: Tensor) -> None:
        """Refit on every surveyed village (the strategy's record, ``idx`` included)."""
        s = self.strategy
        self.model.fit(s.U[s.observed], s.y)


# -------------------------------------------------------------------------- acquisitions
class DualEntropy:
    """Thresholded entropy reduction with dual-conditioned QMC fantasies of the surrogate's
    DualSVGP (``surrogate.model``); the last scores are kept in ``last_scores`` (``-inf``
    for the villages not scored, with ``EntropyConfig.num_candidates``).

    Example:
        >>> DualEntropy(EntropyConfig()).last_scores is None
        True
    """

    def __init__(self, config: EntropyConfig) -> None:
        self.config = config
        self.last_scores: Tensor | None = None

    def choose(self, strategy: HotspotStrategy, history: History, rng: np.random.Generator) -> int:
        """The remaining village of largest expected entropy reduction (among the
        ``num_candidates`` of largest exceedance-entropy reduction, if set)."""
        from bo_ncgp.bo.acquisition import (
            ThresholdEntropyReduction,
            threshold_entropy_reduction,
        )

        c = self.config
        rest = strategy.remaining(history)
        acq = ThresholdEntropyReduction(
            strategy.surrogate.model,
            strategy.U[torch.as_tensor(rest)],
            strategy.threshold,
            num_fantasies=int(c.num_fantasies),
            chunk_size=int(c.chunk_size),
            compute_dtype=_DTYPES[c.compute_dtype],
            criterion=c.criterion,
            gain=c.gain,
        )
        k = c.num_candidates
        plain = c.criterion == "exceedance" and c.gain == "reduction"
        if k is None or k >= rest.size or plain:
            scores = acq.score_pool()
        else:  # prescreen by the exceedance-entropy reduction, rescore the best k
            screen = threshold_entropy_reduction(
                acq.fantasies,
                torch.arange(rest.size),
                acq.level,
                acq.num_fantasies,
                acq.shift,
                acq.chunk_size,
                compute_dtype=acq.compute_dtype,
            )
            top = torch.topk(screen, int(k)).indices
            scores = torch.full((rest.size,), -math.inf, dtype=acq.fantasies.mean.dtype)
            scores[top] = acq.score_pool(top).to(scores)
        self.last_scores = scores
        return int(rest[int(scores.argmax())])


class RandomVillage:
    """A uniformly random remaining village (the only draw from the campaign's generator).

    Example:
        >>> RandomVillage().config is None
        True
    """

    config = None

    def choose(self, strategy: HotspotStrategy, history: History, rng: np.random.Generator) -> int:
        """``rng.choice`` over the remaining villages."""
        return int(rng.choice(strategy.remaining(history)))


class RefitEntropy:
    """Entropy reduction with fantasies by refitting (:class:`RefitGP` surrogates only) on
    the ``num_candidates`` villages of largest current exceedance entropy.

    Example:
        >>> RefitEntropy(RefitEntropyConfig(num_candidates=4)).config.num_candidates
        4
    """

    def __init__(self, config: RefitEntropyConfig) -> None:
        self.config = config

    def choose(self, strategy: HotspotStrategy, history: History, rng: np.random.Generator) -> int:
        """The best of the top-entropy candidates under refitted fantasies."""
        from bo_ncgp.bo.acquisition import exceedance_entropy, predictive_quantile_fantasies

        model = strategy.surrogate.model
        rest = strategy.remaining(history)
        pool = strategy.U[torch.as_tensor(rest)]
        mean, var = model.predict_f(pool)
        h = exceedance_entropy(mean, var, strategy.level)
        k = min(int(self.config.num_candidates), rest.size)
        top = torch.topk(h, k).indices
        Y = predictive_quantile_fantasies(
            model.likelihood, mean[top], var[top], int(self.config.num_fantasies)
        )
        H = model.fantasy_entropies(pool[top], Y, pool, strategy.level)
        scores = h.sum() - H.mean(-1)
        return int(rest[int(top[int(scores.argmax())])])


# ------------------------------------------------------------------------------ strategy
class HotspotStrategy(Strategy):
    """A surrogate of the logit prevalence and an acquisition choosing one village per step.

    The strategy owns what every combination shares: the pool min-max scaled with the
    initial villages' statistics (``U``, fixed afterwards), the surveyed villages and their
    counts (``observed``, ``y``), the timings and the metrics report. Its configuration
    (:meth:`config`, checked on resume) is the name, the surrogate's label and the fields of
    the surrogate's and the acquisition's config dataclasses.

    Args:
        name: the strategy's name (campaign folders, summaries).
        surrogate: :class:`StreamingDual`, :class:`RefittedSVGP` or :class:`RefitGP`.
        acquisition: :class:`DualEntropy`, :class:`RandomVillage` or :class:`RefitEntropy`.
        model_label: the ``model`` entry of the configuration (default: the surrogate's
            label).

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import Campaign
        >>> from bo_ncgp.problems.hotspots import HotspotPool
        >>> pool = HotspotPool(np.random.default_rng(0).random((30, 2)), 0.01 * np.arange(30), 0.1)
        >>> fast = StreamingDualConfig(init_rounds=1, init_hyper_steps=0, num_hyper_steps=0)
        >>> strat = HotspotStrategy("random", StreamingDual(fast), RandomVillage())
        >>> state = Campaign(pool, strat, budget=10, batch_size=1, num_initial=8, seed=0,
        ...                  out_dir=tempfile.mkdtemp()).run(progress=False)
        >>> sorted(state["iterations"][-1]["metrics"])  # logged after every survey
        ['accuracy', 'accuracy_all', 'acquisition_seconds', 'mse', 'mse_all', 'num_remaining', ...]
        >>> surveyed = [e["point"] for e in state["evaluations"]]  # Z = the surveyed villages
        >>> torch.equal(strat.model.Z, strat.U[surveyed]), strat.config()["rho"]
        (True, 0.5)
    """

    def __init__(
        self,
        name: str,
        surrogate: StreamingDual | RefittedSVGP | RefitGP,
        acquisition: DualEntropy | RandomVillage | RefitEntropy,
        model_label: str | None = None,
    ) -> None:
        self.name = name
        self.surrogate = surrogate
        self.acquisition = acquisition
        self.model_label = surrogate.label if model_label is None else model_label

    @property
    def model(self) -> Any:
        """The surrogate's current model."""
        return self.surrogate.model

    def config(self) -> dict[str, Any]:
        """``{"name", "model", **surrogate config, **acquisition config}``."""
        out: dict[str, Any] = {"name": self.name, "model": self.model_label}
        out.update(saved_options(self.surrogate.config))
        if self.acquisition.config is not None:
            out.update(saved_options(self.acquisition.config))
        return out

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        if getattr(problem, "pool", None) is None or not hasattr(problem, "metrics"):
            raise InputDataError(f"{self.name}: needs a pool problem with metrics (HotspotPool)")
        self.threshold = float(problem.threshold)
        self.level = math.log(self.threshold) - math.log1p(-self.threshold)
        self.num_trials = int(problem.num_trials)
        self.lo = self.span = None
        self.U: Tensor | None = None  # scaled pool
        self.observed = torch.zeros(0, dtype=torch.long)  # surveyed villages
        self.y = torch.zeros(0, dtype=DTYPE)  # their counts
        self._ask_seconds = 0.0
        self._update_seconds = 0.0
        self.surrogate.setup(self)

    def remaining(self, history: History) -> np.ndarray:
        """The villages not surveyed yet (an error if none is left)."""
        rest = self.problem.remaining(history.indices)
        if rest.size == 0:
            raise RuntimeError(f"{self.name}: the pool is exhausted")
        return rest

    def scale_pool(self, X_init: np.ndarray) -> None:
        """Min-max scale the pool with the statistics of ``X_init`` (the initial villages),
        into ``U`` (fixed afterwards)."""
        self.U, self.lo, self.span = minmax_scale(self.problem.pool, np.asarray(X_init, float))

    def fit(self, idx: np.ndarray, y: Tensor) -> None:
        """Record the counts ``y`` of the surveyed villages ``idx`` and update the surrogate
        (the pool must be scaled, :meth:`scale_pool`)."""
        self.observed = torch.cat([self.observed, torch.as_tensor(idx, dtype=torch.long)])
        self.y = torch.cat([self.y, y])
        self.surrogate.fit(idx, y)

    def latent(self) -> Tensor:
        """The surrogate's posterior mean of the logit prevalence of every village."""
        return self.surrogate.latent(self.U)

    def observe(self, X: np.ndarray, evaluations: list[Evaluation], history: History) -> None:
        t0 = time.perf_counter()
        if self.U is None:  # min-max scaling with the initial villages' statistics
            self.scale_pool(X)
        idx = np.asarray(history.indices[history.n - len(evaluations) : history.n], dtype=int)
        ok = np.array([e.ok for e in evaluations], dtype=bool)
        if ok.any():
            y = torch.tensor([e.value for e in evaluations], dtype=DTYPE)[torch.as_tensor(ok)]
            self.fit(idx[ok], y)
        self._update_seconds = time.perf_counter() - t0

    def report(self, history: History) -> dict[str, float]:
        with torch.no_grad():
            prevalence = torch.sigmoid(self.latent()).cpu().numpy()
        out = self.problem.metrics(prevalence, history.indices)
        out["step_seconds"] = self._ask_seconds + self._update_seconds
        out["acquisition_seconds"] = self._ask_seconds
        out["update_seconds"] = self._update_seconds
        self._ask_seconds = 0.0
        return out

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        if q != 1:
            raise InputDataError(f"{self.name}: one village per step (batch size 1), got q={q}")
        t0 = time.perf_counter()
        idx = self.acquisition.choose(self, history, rng)
        self._ask_seconds = time.perf_counter() - t0
        return np.array([int(idx)])
