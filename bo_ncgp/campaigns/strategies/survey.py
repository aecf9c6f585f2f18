"""Strategies of the magnetometer survey campaign
(:class:`~bo_ncgp.problems.survey.MagnetometerSurvey`): a field model x an acquisition, one
location per step.

Field models (a GP of the standardised field norm on a grid of inducing points covering the
pool and the test locations; hyperparameters learned once and then fixed):

* :class:`HIPGPField` -- HIP-GP (Wu et al. 2022; FFT whitening, block-independent
  ``q``) fitted on the initial design by natural-gradient epochs, then *conditioned* on every
  later survey (:meth:`HIPGP.condition <bo_ncgp.models.HIPGP.condition>`: exact Gaussian
  conditioning of its posterior GP, no refit). The whitened rows of the pool and test
  locations are computed once (:meth:`HIPGP.remember_rows
  <bo_ncgp.models.HIPGP.remember_rows>`), so a step costs dense algebra in the number of
  surveys, not PCG solves;
* :class:`SVGPField` -- the SVGP loop: the same grid with Cholesky whitening
  (``whitening="cholesky"``, a full-rank ``q``), ``q`` refitted after every survey on all
  surveyed locations (one natural-gradient step with ``lr = 1``, the exact optimum for the
  Gaussian likelihood).

The hyperparameters (Matern lengthscale, outputscale, noise) are the type-II maximum
likelihood of an exact GP on the initial design (BoTorch's ``fit_gpytorch_mll``), on targets
standardised with the initial design's mean and standard deviation; both models of a seed
use the same ones, and no later step changes them, so the steps are cheap.

Acquisitions: :class:`MaxVariance` (the remaining location of largest posterior variance of
the field, uncertainty sampling) and :class:`RandomLocation` (uniformly random).

After every step :meth:`SurveyStrategy.report` logs the test RMSE and MAE of the posterior
mean (:meth:`~bo_ncgp.problems.survey.MagnetometerSurvey.metrics`) and the step's seconds
(``acquisition_seconds``, ``update_seconds``: conditioning or refitting).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.campaigns.strategies.base import History, Strategy, saved_options
from bo_ncgp.exceptions import InputDataError, NumericalWarning
from bo_ncgp.problems.base import Evaluation

__all__ = [
    "FieldModelConfig",
    "HIPGPField",
    "MaxVariance",
    "RandomLocation",
    "SVGPField",
    "SurveyStrategy",
    "learn_hyperparameters",
]

DTYPE = torch.float64


@dataclass(frozen=True)
class FieldModelConfig:
    """Settings of the field models.

    Attributes:
        grid_size: inducing points per axis of the grid (``grid_size ** 2`` in all).
        padding: how far (m) the grid extends beyond the pool and test locations.
        nu: smoothness of the Matern kernel (0.5, 1.5 or 2.5).
        natgrad_epochs: full-batch natural-gradient epochs of HIP-GP's block ``q`` on the
            initial design.
        block: block size per axis of HIP-GP's ``q`` (Eq. 23).
        embedding_factor: circulant embedding factor of HIP-GP's FFT whitening; doubled
            when the embedding of the learned kernel is not positive semi-definite (a
            lengthscale long against the grid).
        pcg_tol: relative tolerance of HIP-GP's PCG solves.

    Example:
        >>> FieldModelConfig().grid_size, FieldModelConfig(nu=1.5).nu
        (32, 1.5)
        >>> FieldModelConfig(nu=2.0)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: survey: nu must be 0.5, 1.5 or 2.5, got 2.0
    """

    grid_size: int = 32
    padding: float = 0.5
    nu: float = 2.5
    natgrad_epochs: int = 10
    block: int = 2
    embedding_factor: int = 2
    pcg_tol: float = 1e-6

    def __post_init__(self) -> None:
        if self.nu not in (0.5, 1.5, 2.5):
            raise InputDataError(f"survey: nu must be 0.5, 1.5 or 2.5, got {self.nu}")
        for name in ("grid_size", "natgrad_epochs", "block", "embedding_factor"):
            val = getattr(self, name)
            if int(val) != val or val < 1:
                raise InputDataError(f"survey: {name} must be a positive int, got {val}")
        if not (np.isfinite(self.padding) and self.padding >= 0):
            raise InputDataError(f"survey: padding must be >= 0, got {self.padding}")
        if not (np.isfinite(self.pcg_tol) and self.pcg_tol > 0):
            raise InputDataError(f"survey: pcg_tol must be positive, got {self.pcg_tol}")


def learn_hyperparameters(X: Tensor, y: Tensor, nu: float = 2.5) -> tuple[Any, float]:
    """Type-II maximum likelihood of an exact zero-mean GP with a scaled Matern-``nu`` kernel
    on ``(X, y)`` (BoTorch's ``fit_gpytorch_mll``): the fitted kernel and noise variance.

    Example:
        >>> X = torch.rand(20, 2, dtype=torch.float64)
        >>> kernel, noise = learn_hyperparameters(X, torch.sin(4 * X[:, 0]))
        >>> type(kernel.base_kernel).__name__, 0 < noise < 1
        ('MaternKernel', True)
    """
    import gpytorch
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP

    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=nu)).to(X)
    gp = SingleTaskGP(
        X,
        y.reshape(-1, 1),
        covar_module=kernel,
        mean_module=gpytorch.means.ZeroMean(),
        outcome_transform=None,
    )
    fit_gpytorch_mll(gpytorch.mlls.ExactMarginalLogLikelihood(gp.likelihood, gp))
    for p in kernel.parameters():
        p.requires_grad_(False)
    return kernel, float(gp.likelihood.noise.detach().reshape(-1)[0])


# --------------------------------------------------------------------------- field models
class _FieldModel:
    """A field model of the strategy: :meth:`start` on the initial design, :meth:`add` after
    every later survey, :meth:`predict` (latent mean and variance, standardised units)."""

    label = ""
    whitening = "fft"
    variational = "block"

    def __init__(self, config: FieldModelConfig) -> None:
        self.config = config
        self.base = None

    def _build(self, kernel, noise: float, grid, factor: int | None = None) -> Any:
        from bo_ncgp.likelihoods import Gaussian
        from bo_ncgp.models import HIPGP

        c = self.config
        return HIPGP(
            kernel,
            grid,
            likelihood=Gaussian(noise=noise).to(DTYPE),
            whitening=self.whitening,
            variational=self.variational,
            block_shape=(int(c.block),) * grid.dim if self.variational == "block" else None,
            embedding_factor=int(c.embedding_factor if factor is None else factor),
            pcg_tol=float(c.pcg_tol),
        )

    def predict(self, X: Tensor) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            return self.model.predict_f(X)


class HIPGPField(_FieldModel):
    """HIP-GP fitted on the initial design, then conditioned on the later surveys.

    Example:
        >>> HIPGPField(FieldModelConfig()).label
        'HIP-GP (FFT whitening), conditioned'
    """

    label = "HIP-GP (FFT whitening), conditioned"

    def start(self, X: Tensor, y: Tensor, kernel, noise: float, grid, known: Tensor) -> None:
        """Fit ``q`` on the initial design; remember the rows of the ``known`` locations."""
        self.base = self._embedded(kernel, noise, grid)
        with torch.no_grad():
            self.base.fit(X, y, num_epochs=int(self.config.natgrad_epochs))
        self.base.remember_rows(known)
        self.model = self.base
        self.X_new, self.y_new = X[:0], y[:0]

    def _embedded(self, kernel, noise: float, grid) -> Any:
        """The HIP-GP with the smallest embedding factor of ``embedding_factor``,
        ``2 embedding_factor`` whose circulant embedding of the learned kernel is positive
        semi-definite (negative eigenvalues beyond 1e-6 of the spectral mass make ``R R^T``
        differ from ``K_uu`` and the posterior covariance indefinite); the larger one, with
        its warning, if neither is."""
        first = int(self.config.embedding_factor)
        for factor in (first, 2 * first):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NumericalWarning)
                model = self._build(kernel, noise, grid, factor)
                with torch.no_grad():
                    fraction = model.whitener().embedding.clamped_fraction
            if fraction <= 1e-6:
                break
        if fraction > 1e-6:
            model = self._build(kernel, noise, grid, 2 * first)  # warns
        self.embedding_factor = factor
        return model

    def add(self, X: Tensor, y: Tensor) -> None:
        """Condition the initial fit on every survey since (no refit)."""
        self.X_new, self.y_new = torch.cat([self.X_new, X]), torch.cat([self.y_new, y])
        with torch.no_grad():
            self.model = self.base.condition(self.X_new, self.y_new)


class SVGPField(_FieldModel):
    """Cholesky-whitened SVGP on the same grid, ``q`` refitted on all surveys every step.

    Example:
        >>> SVGPField(FieldModelConfig()).label
        'SVGP (Cholesky whitening), refitted'
    """

    label = "SVGP (Cholesky whitening), refitted"
    whitening = "cholesky"
    variational = "full"

    def start(self, X: Tensor, y: Tensor, kernel, noise: float, grid, known: Tensor) -> None:
        """The exact ``q`` of the initial design; remember the rows of ``known``."""
        self.base = self._build(kernel, noise, grid)
        self.X_all, self.y_all = X, y
        with torch.no_grad():
            self.base.natgrad_step(X, y)
        self.base.remember_rows(known)
        self.model = self.base

    def add(self, X: Tensor, y: Tensor) -> None:
        """Refit ``q`` on every survey so far (the exact optimum: one step, ``lr = 1``)."""
        self.X_all, self.y_all = torch.cat([self.X_all, X]), torch.cat([self.y_all, y])
        with torch.no_grad():
            self.base.q.reset()
            self.base.natgrad_step(self.X_all, self.y_all)


# -------------------------------------------------------------------------- acquisitions
class MaxVariance:
    """The remaining location of largest posterior variance of the field.

    Example:
        >>> MaxVariance().config is None
        True
    """

    config = None

    def choose(self, strategy: SurveyStrategy, rest: np.ndarray, rng: np.random.Generator) -> int:
        """``argmax`` of the latent variance over the remaining pool."""
        _, var = strategy.field.predict(strategy.pool[torch.as_tensor(rest)])
        return int(rest[int(var.argmax())])


class RandomLocation:
    """A uniformly random remaining location.

    Example:
        >>> RandomLocation().config is None
        True
    """

    config = None

    def choose(self, strategy: SurveyStrategy, rest: np.ndarray, rng: np.random.Generator) -> int:
        """``rng.choice`` over the remaining pool."""
        return int(rng.choice(rest))


# ------------------------------------------------------------------------------ strategy
class SurveyStrategy(Strategy):
    """A field model and an acquisition choosing one survey location per step.

    Args:
        name: the strategy's name (campaign folders, summaries).
        field: :class:`HIPGPField` or :class:`SVGPField`.
        acquisition: :class:`MaxVariance` or :class:`RandomLocation`.

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import Campaign
        >>> from bo_ncgp.problems.survey import MagnetometerSurvey
        >>> rng = np.random.default_rng(0)
        >>> X = 2 * rng.random((60, 2)); y = np.sin(2 * X[:, 0]) + X[:, 1]
        >>> survey = MagnetometerSurvey(X[:40], y[:40], X[40:], y[40:])
        >>> small = FieldModelConfig(grid_size=8, natgrad_epochs=2)
        >>> strat = SurveyStrategy("hip-variance", HIPGPField(small), MaxVariance())
        >>> state = Campaign(survey, strat, budget=12, batch_size=1, num_initial=10, seed=0,
        ...                  out_dir=tempfile.mkdtemp()).run(progress=False)
        >>> sorted(state["iterations"][-1]["metrics"])
        ['acquisition_seconds', 'mae', 'rmse', 'step_seconds', 'update_seconds']
        >>> strat.field.model.num_conditioned  # the two surveys after the initial design
        2
    """

    def __init__(
        self,
        name: str,
        field: HIPGPField | SVGPField,
        acquisition: MaxVariance | RandomLocation,
    ) -> None:
        self.name = name
        self.field = field
        self.acquisition = acquisition

    def config(self) -> dict[str, Any]:
        """``{"name", "model", **field model config}``."""
        out: dict[str, Any] = {"name": self.name, "model": self.field.label}
        out.update(saved_options(self.field.config))
        return out

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        if getattr(problem, "pool", None) is None or not hasattr(problem, "test_X"):
            raise InputDataError(f"{self.name}: needs a survey problem (MagnetometerSurvey)")
        self.pool = torch.as_tensor(problem.pool_X, dtype=DTYPE)
        self.test = torch.as_tensor(problem.test_X, dtype=DTYPE)
        self.started = False
        self.shift = self.scale = 0.0
        self._ask_seconds = self._update_seconds = 0.0
        self.kernel = None

    def _grid(self):
        from bo_ncgp.models.hipgp import Grid

        both = torch.cat([self.pool, self.test])
        pad = float(self.field.config.padding)
        n = int(self.field.config.grid_size)
        lo, hi = both.min(0).values - pad, both.max(0).values + pad
        return Grid(lo, hi, (n,) * both.shape[-1], dtype=DTYPE)

    def observe(self, X: np.ndarray, evaluations: list[Evaluation], history: History) -> None:
        t0 = time.perf_counter()
        idx = np.asarray(history.indices[history.n - len(evaluations) : history.n], dtype=int)
        ok = np.array([e.ok for e in evaluations], dtype=bool)
        if ok.any():
            y = torch.tensor([e.value for e in evaluations], dtype=DTYPE)[torch.as_tensor(ok)]
            Xs = self.pool[torch.as_tensor(idx[ok])]
            if not self.started:
                self.shift = float(y.mean())
                self.scale = float(y.std()) if y.numel() > 1 and float(y.std()) > 0 else 1.0
                ys = (y - self.shift) / self.scale
                kernel, noise = learn_hyperparameters(Xs, ys, float(self.field.config.nu))
                self.kernel, self.noise = kernel, noise
                known = torch.cat([self.pool, self.test])
                self.field.start(Xs, ys, kernel, noise, self._grid(), known)
                self.started = True
            else:
                self.field.add(Xs, (y - self.shift) / self.scale)
        self._update_seconds = time.perf_counter() - t0

    def report(self, history: History) -> dict[str, float]:
        mean, _ = self.field.predict(self.test)
        out = self.problem.metrics((mean * self.scale + self.shift).cpu().numpy())
        out["step_seconds"] = self._ask_seconds + self._update_seconds
        out["acquisition_seconds"] = self._ask_seconds
        out["update_seconds"] = self._update_seconds
        self._ask_seconds = 0.0
        return out

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        if q != 1:
            raise InputDataError(f"{self.name}: one location per step (batch size 1), got q={q}")
        t0 = time.perf_counter()
        rest = self.problem.remaining(history.indices)
        if rest.size == 0:
            raise RuntimeError(f"{self.name}: the pool is exhausted")
        idx = self.acquisition.choose(self, rest, rng)
        self._ask_seconds = time.perf_counter() - t0
        return np.array([int(idx)])
