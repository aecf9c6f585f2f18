"""BoTorch ``Model`` adapters of the bo_ncgp models that need more than
:class:`~bo_ncgp.bo.base.LatentGPModel`.

Each adapter is built from data as BoTorch's ``SingleTaskGP`` is --
``Adapter(train_X, train_Y, likelihood, ..., input_transform=..., outcome_transform=...)``,
trained by ``fit_gpytorch_mll`` on a
:class:`~bo_ncgp.bo.base.LatentGPMarginalLogLikelihood` (a Gaussian :class:`DualSVGPModel`
also on ``ExactMarginalLogLikelihood(model.likelihood, model)``, the ``SingleTaskGP`` loop
unchanged) -- or around an existing trained model, ``Adapter.from_model(model, **options)``.
They change only what differs for one model:

* :class:`DualSVGPModel` -- posteriors and conditioning inside
  :func:`~bo_ncgp.models.dual.fixed_hyperparameters` (dual conditioning, Chang et al.
  2023, Sec. 3.3: the new sites are added at the current posterior with ``rho = 1`` and
  condition it on ``f(X)`` in function space; O(n m^2 + n^3) per batch element, vectorised
  over fantasies); the streaming
  :meth:`DualSVGPModel.update`;
* :class:`IterNCGPModel` -- the number of recycled solver iterations of each conditioning;
* :class:`HIPGPModel` -- the observation operator of the posterior (value, derivative, line
  integral; Wu et al. 2022);
* :class:`SparseGAMModel` -- the subset of additive components whose sum is exposed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import gpytorch
import torch
from botorch.models.transforms.outcome import Standardize
from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
from botorch.utils.types import DEFAULT, _DefaultType
from gpytorch.constraints import GreaterThan
from gpytorch.likelihoods import _GaussianLikelihoodBase
from gpytorch.likelihoods.noise_models import Noise
from gpytorch.models import GP
from gpytorch.priors import LogNormalPrior
from linear_operator.operators import DiagLinearOperator
from torch import Tensor
from torch.nn import Module

from bo_ncgp.bo import paths as _paths  # noqa: F401  (BoTorch's pathwise sampling of the adapters)
from bo_ncgp.bo.base import LatentGPModel, training_data
from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.likelihoods import Gaussian, Likelihood
from bo_ncgp.linalg._args import check_positive
from bo_ncgp.models.dual import DualSVGP, fixed_hyperparameters

__all__ = [
    "DualSVGPModel",
    "GaussianLikelihoodView",
    "HIPGPModel",
    "IterNCGPModel",
    "SparseGAMModel",
]


def _check_data_argument(who: str, train_X: Any) -> None:
    """A model passed where the constructor expects ``train_X``: name :meth:`from_model`."""
    if isinstance(train_X, Module):
        raise InputDataError(
            f"{who}(train_X, train_Y, ...) builds the model from data; to wrap an existing "
            f"{type(train_X).__name__}, use {who}.from_model(model)"
        )


def _default_likelihood() -> Gaussian:
    """Gaussian likelihood with the noise prior of BoTorch's ``SingleTaskGP`` (log-normal,
    mode near 0.01 on standardised outcomes; noise at least 1e-4)."""
    prior = LogNormalPrior(loc=-4.0, scale=1.0)
    return Gaussian(float(prior.mode), noise_constraint=GreaterThan(1e-4), noise_prior=prior)


def _default_kernel(d: int, likelihood: Likelihood) -> gpytorch.kernels.Kernel:
    """``SingleTaskGP``'s kernel (RBF, ARD, dimension-scaled log-normal lengthscale prior);
    scaled by an outputscale for non-Gaussian likelihoods, whose latent scale is not set by
    standardised outcomes."""
    kernel = get_covar_module_with_dim_scaled_prior(ard_num_dims=d)
    if isinstance(likelihood, Gaussian):
        return kernel
    return gpytorch.kernels.ScaleKernel(kernel)


def _outcome_transform(
    outcome_transform: Module | _DefaultType | None, likelihood: Likelihood
) -> Module | None:
    """``DEFAULT``: ``Standardize(1)`` for a Gaussian likelihood (as ``SingleTaskGP``), none
    for likelihoods whose targets are labels or counts."""
    if outcome_transform is not DEFAULT:
        return outcome_transform
    return Standardize(m=1) if isinstance(likelihood, Gaussian) else None


def _data(
    who: str,
    train_X: Any,
    train_Y: Any,
    train_Yvar: Any,
    likelihood: Likelihood | None,
    input_transform: Module | None,
    outcome_transform: Module | _DefaultType | None,
) -> tuple[Tensor, Tensor, Likelihood, Module | None]:
    """What every adapter built from data starts with: the checked, transformed ``(X, y)``
    (:func:`~bo_ncgp.bo.base.training_data`), the likelihood (default
    :func:`_default_likelihood`) and the outcome transform (:func:`_outcome_transform`)."""
    _check_data_argument(who, train_X)
    likelihood = _default_likelihood() if likelihood is None else likelihood
    outcome_transform = _outcome_transform(outcome_transform, likelihood)
    X, y = training_data(who, train_X, train_Y, train_Yvar, input_transform, outcome_transform)
    return X, y, likelihood, outcome_transform


class _SharedNoise(Noise):
    """GPyTorch's homoskedastic noise model reading the noise of a bo_ncgp
    :class:`~bo_ncgp.likelihoods.Gaussian` (the same parameter, not a copy)."""

    def __init__(self, gaussian: Gaussian) -> None:
        super().__init__()
        self.gaussian = gaussian

    def forward(self, *params: Any, shape: torch.Size | None = None, **kwargs: Any):
        if "noise" in kwargs:
            return DiagLinearOperator(kwargs["noise"])
        if shape is None:
            p = params[0] if torch.is_tensor(params[0]) else params[0][0]
            shape = p.shape if p.dim() == 1 else p.shape[:-1]
        return DiagLinearOperator(self.gaussian.noise.expand(shape))


class GaussianLikelihoodView(_GaussianLikelihoodBase):
    """GPyTorch's Gaussian likelihood on top of a bo_ncgp
    :class:`~bo_ncgp.likelihoods.Gaussian`: what ``model.likelihood`` of a Gaussian
    :class:`DualSVGPModel` is, so that BoTorch code written for ``SingleTaskGP`` -- e.g.
    ``ExactMarginalLogLikelihood(model.likelihood, model)``, ``model.likelihood.noise`` --
    runs unchanged. It shares the noise parameter (reading and setting ``noise`` act on the
    bo_ncgp likelihood); ``likelihood(mvn)`` adds the noise as GPyTorch's does.

    Args:
        gaussian: the bo_ncgp Gaussian likelihood of the wrapped model.

    Example:
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> lik = Gaussian(0.1)
        >>> view = GaussianLikelihoodView(lik)
        >>> view.noise = 0.2
        >>> round(float(lik.noise), 6), view.gaussian is lik
        (0.2, True)
    """

    def __init__(self, gaussian: Gaussian) -> None:
        super().__init__(noise_covar=_SharedNoise(gaussian))

    @property
    def gaussian(self) -> Gaussian:
        """The bo_ncgp likelihood whose noise this view reads and sets."""
        return self.noise_covar.gaussian

    @property
    def noise(self) -> Tensor:
        """The noise variance (of :attr:`gaussian`)."""
        return self.gaussian.noise

    @noise.setter
    def noise(self, value: float | Tensor) -> None:
        self.gaussian.noise = value


class DualSVGPModel(LatentGPModel, GP):
    """BoTorch model of a :class:`~bo_ncgp.models.DualSVGP` (Chang et al. 2023), built from
    data as ``SingleTaskGP`` is.

    The constructor transforms the data (``input_transform`` applied, ``outcome_transform``
    trained, as ``SingleTaskGP`` does), builds a DualSVGP and streams the data in with the
    initial hyperparameters (its posterior is then usable, as an unfitted ``SingleTaskGP``'s
    is). ``fit_gpytorch_mll(mll)`` trains the hyperparameters: a fresh DualSVGP (warm-started
    from the current hyperparameters and mean) takes all data in one :meth:`DualSVGP.update`
    with ``num_hyper_steps`` steps per round. ``mll`` is a training handle naming the model:
    ``ExactMarginalLogLikelihood(model.likelihood, model)`` as for a ``SingleTaskGP`` (a
    Gaussian adapter is a GPyTorch ``GP`` whose ``likelihood`` is a GPyTorch Gaussian
    likelihood, :class:`GaussianLikelihoodView`), or
    :class:`~bo_ncgp.bo.LatentGPMarginalLogLikelihood` for any likelihood; it is not
    evaluated. New observations then stream in with :meth:`update` (the fast path, no
    refit).

    Posteriors and conditioning run inside :func:`~bo_ncgp.models.dual.fixed_hyperparameters`:
    differentiable in ``X`` (and in fantasy inputs), not in the hyperparameters, so the
    O(n_M m^2) base factorisation is computed once per model instead of once per
    acquisition evaluation.

    Args:
        train_X: ``(n, d)`` training inputs.
        train_Y: ``(n, 1)`` (or ``(n,)``) targets: values, labels or counts, as the likelihood
            needs.
        likelihood: a :class:`bo_ncgp.likelihoods.Likelihood` (default: Gaussian with
            ``SingleTaskGP``'s noise prior).
        kernel: a GPyTorch kernel on the transformed inputs (default: ``SingleTaskGP``'s
            RBF kernel; with an outputscale for non-Gaussian likelihoods).
        inducing_points: ``(m, d)`` initial inducing inputs in the transformed space (default:
            the first ``num_inducing`` transformed training inputs).
        input_transform: a BoTorch input transform, e.g. ``Normalize(d)``.
        outcome_transform: a BoTorch outcome transform (default: ``Standardize(1)`` for a
            Gaussian likelihood, none otherwise; ``None`` for none).
        train_Yvar: not supported (the likelihood models the noise); accepted as ``None`` so
            that BoTorch's and Ax's ``construct_inputs`` can pass it.
        num_inducing: the most inducing points (``max_inducing``); with ``n <= num_inducing``
            every input is one, and a Gaussian model equals the exact GP.
        memory_size, num_hyper_steps, lr, ``**settings``: fields of
            :class:`~bo_ncgp.models.dual.DualSVGPConfig` (every point kept in memory; 100 Adam
            steps of learning rate 0.05 per round when fitted). ``learn_mean_constant``
            defaults to ``True`` for a Gaussian likelihood (a constant prior mean trained with
            the hyperparameters, as ``SingleTaskGP``'s ``ConstantMean``) and to ``False``
            otherwise.

    Data of another dtype than float64 is cast with one warning. ``from_model(dual)``
    wraps an existing DualSVGP instead (trained by its own ``update``).

    Example:
        >>> from botorch.fit import fit_gpytorch_mll
        >>> from botorch.models.transforms import Normalize
        >>> from gpytorch.mlls import ExactMarginalLogLikelihood
        >>> X = 5 * torch.rand(12, 2, dtype=torch.float64)
        >>> Y = X.sin().sum(-1, keepdim=True)
        >>> model = DualSVGPModel(X, Y, input_transform=Normalize(2), num_hyper_steps=10)
        >>> _ = fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        >>> model.posterior(X[:3]).mean.shape
        torch.Size([3, 1])
        >>> model.update(X[:2] + 0.1, Y[:2]).model.num_data  # stream two more points in
        14
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        likelihood: Likelihood | None = None,
        kernel: gpytorch.kernels.Kernel | None = None,
        inducing_points: Tensor | None = None,
        input_transform: Module | None = None,
        outcome_transform: Module | _DefaultType | None = DEFAULT,
        train_Yvar: Tensor | None = None,
        *,
        num_inducing: int = 64,
        memory_size: int | None = None,
        num_hyper_steps: int = 100,
        lr: float = 0.05,
        generator: torch.Generator | None = None,
        **settings: Any,
    ) -> None:
        X, y, likelihood, outcome_transform = _data(
            "DualSVGPModel",
            train_X,
            train_Y,
            train_Yvar,
            likelihood,
            input_transform,
            outcome_transform,
        )
        kernel = _default_kernel(X.shape[-1], likelihood) if kernel is None else kernel
        kernel, likelihood = kernel.to(X), likelihood.to(X)
        settings.setdefault("learn_mean_constant", isinstance(likelihood, Gaussian))
        Z = X[:num_inducing] if inducing_points is None else inducing_points
        dual = DualSVGP(
            kernel,
            likelihood,
            Z,
            generator=generator,
            memory_size=memory_size,
            num_hyper_steps=num_hyper_steps,
            lr=lr,
            max_inducing=num_inducing,
            **settings,
        )
        initial = (dual.config, dual.Z.clone())
        super().__init__(
            _stream_in(dual, X, y, num_hyper_steps=0),
            input_transform=input_transform,
            outcome_transform=outcome_transform,
        )
        self._initial = initial
        self.train_data = (X, y)
        self._data_dtype = X.dtype

    def _context(self) -> contextlib.AbstractContextManager:
        # acquisitions need gradients in X only: keep the base factorisation cached
        return fixed_hyperparameters()

    def _prior_scale(self, X: Tensor) -> Tensor | None:
        """The largest prior variance of the (conditioned) DualSVGP's latent at each batch of
        ``X``: near-noise-free data leave posterior covariances whose round-off is of that
        order, far above their own entries."""
        dual = getattr(self.model, "base", self.model)  # a ConditionedDualSVGP's base model
        with torch.no_grad():
            kxx = dual._kxx(X, False)  # (..., L', q)
        return kxx.amax(dim=(-2, -1))

    @property
    def likelihood(self) -> Module | None:
        """The wrapped model's likelihood; for a Gaussian one, GPyTorch's face of it
        (:class:`GaussianLikelihoodView`, sharing its noise), as ``SingleTaskGP.likelihood``."""
        lik = getattr(self.model, "likelihood", None)
        return GaussianLikelihoodView(lik) if isinstance(lik, Gaussian) else lik

    def _fit_model(self, X: Tensor, y: Tensor) -> Module:
        config, Z = self._initial
        dual = DualSVGP(
            self.model.kernel,
            self.model.likelihood,
            Z,
            config=config,
            generator=self.model.generator,
            mean_constant=self.model.mean_constant,  # warm-started, as the hyperparameters
        )
        return _stream_in(dual, X, y, num_hyper_steps=config.num_hyper_steps)

    def update(self, X: Tensor, Y: Tensor) -> DualSVGPModel:
        """Stream new observations into the DualSVGP (one :meth:`DualSVGP.update`, no refit);
        returns ``self``.

        Args:
            X: ``(n, d)`` inputs in the original space (transformed by the fitted
                ``input_transform``).
            Y: ``(n, 1)`` (or ``(n,)``) observations in the original outcome space
                (transformed by the fitted ``outcome_transform``, which is not retrained).
        """
        self.eval()  # transforms keep the coefficients learned on the training data
        X_tf = self.transform_inputs(X)
        Y = Y if isinstance(Y, Tensor) else torch.as_tensor(Y, device=X_tf.device)
        Y = Y.unsqueeze(-1) if Y.dim() == 1 else Y
        if Y.dim() != 2 or Y.shape[-1] != 1:
            raise InputDataError(
                f"DualSVGPModel.update: Y must have shape (n, 1), got {tuple(Y.shape)}"
            )
        Y = Y.to(X_tf)
        if hasattr(self, "outcome_transform"):
            Y, _ = self.outcome_transform(Y=Y, X=X_tf)
        self.model.update(X_tf, Y[..., 0])
        if self.train_data is not None:
            X0, y0 = self.train_data
            self.train_data = (torch.cat([X0, X_tf.detach()]), torch.cat([y0, Y[..., 0].detach()]))
        self._empty_warned = False
        return self


def _stream_in(dual: DualSVGP, X: Tensor, y: Tensor, num_hyper_steps: int) -> DualSVGP:
    """``dual.update(X, y)`` with ``num_hyper_steps`` hyperparameter steps per round (the
    model's own setting is restored afterwards)."""
    steps = dual.num_hyper_steps
    dual.num_hyper_steps = num_hyper_steps
    try:
        dual.update(X, y)
    finally:
        dual.num_hyper_steps = steps
    return dual


class IterNCGPModel(LatentGPModel):
    """BoTorch model of an :class:`~bo_ncgp.models.IterNCGP` (Tatzel et al.), built from data
    as ``SingleTaskGP`` is.

    The posterior includes IterNCGP's computational uncertainty (the uncertainty from
    stopping the solver early), so acquisitions see it. ``condition_on_observations`` adds
    the points and runs ``condition_iters`` warm-started, recycled solver iterations
    (:meth:`IterNCGP.condition`). IterNCGP keeps its hyperparameters fixed (as in the
    paper): the constructor computes the posterior on the data, and ``fit_gpytorch_mll``
    recomputes it (after hyperparameters were set by hand, for example).

    Args:
        train_X, train_Y, input_transform, outcome_transform, train_Yvar: as for
            :class:`DualSVGPModel`.
        likelihood: a bo_ncgp likelihood (default: Gaussian with ``SingleTaskGP``'s noise
            prior).
        kernel: a GPyTorch kernel (default: ``SingleTaskGP``'s, see :class:`DualSVGPModel`).
        condition_iters: solver iterations per Newton step of each conditioning (None: the
            default of :meth:`IterNCGP.condition`).
        uncertainty: what the posterior's covariance contains: ``"combined"`` (default;
            mathematical plus computational uncertainty, Eq. 9) or ``"mathematical"`` (the
            Laplace covariance of the current Newton step alone, for ablations);
            :meth:`IterNCGP.predict_f`.
        **model_options: keywords of :class:`~bo_ncgp.models.IterNCGP` (``policy``,
            ``max_newton_steps``, ...).

    ``from_model(iterncgp, condition_iters=...)`` wraps a fitted IterNCGP instead.

    Example:
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> X = torch.rand(12, 2, dtype=torch.float64)
        >>> model = IterNCGPModel(X, (X[:, :1] > 0.5).double(), Bernoulli(), condition_iters=3)
        >>> model.condition_on_observations(X[:2], torch.ones(2, 1)).posterior(X).mean.shape
        torch.Size([12, 1])
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        likelihood: Likelihood | None = None,
        kernel: gpytorch.kernels.Kernel | None = None,
        input_transform: Module | None = None,
        outcome_transform: Module | _DefaultType | None = DEFAULT,
        train_Yvar: Tensor | None = None,
        *,
        condition_iters: int | None = None,
        uncertainty: str = "combined",
        **model_options: Any,
    ) -> None:
        from bo_ncgp.models import IterNCGP

        X, y, likelihood, outcome_transform = _data(
            "IterNCGPModel",
            train_X,
            train_Y,
            train_Yvar,
            likelihood,
            input_transform,
            outcome_transform,
        )
        kernel = _default_kernel(X.shape[-1], likelihood) if kernel is None else kernel
        model = IterNCGP(kernel.to(X), likelihood.to(X), **model_options).fit(X, y)
        super().__init__(
            model, input_transform=input_transform, outcome_transform=outcome_transform
        )
        self._configure(condition_iters, uncertainty)
        self.train_data = (X, y)
        self._data_dtype = X.dtype

    def _configure(self, condition_iters: int | None = None, uncertainty: str = "combined") -> None:
        if uncertainty not in ("combined", "mathematical"):
            raise InputDataError(
                f"IterNCGPModel: uncertainty must be 'combined' or 'mathematical', got "
                f"{uncertainty!r}"
            )
        self.condition_iters = condition_iters
        self.uncertainty = uncertainty

    def _predict_options(self) -> dict[str, Any]:
        return {"uncertainty": self.uncertainty}

    def _condition_options(self) -> dict[str, Any]:
        return {} if self.condition_iters is None else {"num_iters": self.condition_iters}


class HIPGPModel(LatentGPModel):
    """BoTorch ``Model`` of a :class:`~bo_ncgp.models.HIPGP` (Wu et al. 2022), built from data
    on a grid.

    The constructor runs HIP-GP's natural-gradient fit with the initial hyperparameters;
    ``fit_gpytorch_mll`` refits with ``learn_hyperparameters=True``.

    Args:
        train_X, train_Y, input_transform, outcome_transform, train_Yvar: as for
            :class:`DualSVGPModel` (the grid lives in the transformed input space).
        kernel: a stationary GPyTorch kernel.
        grid: the inducing :class:`~bo_ncgp.models.hipgp.Grid` (or its arguments).
        likelihood: a bo_ncgp likelihood (default: HIP-GP's Gaussian).
        op: observation operator of the posterior (``"value"``, ``"integral"``,
            ``("derivative", d)``); acquisition functions then see ``L rho``.
        pcg_tol: relative residual tolerance of the posterior's PCG solves (``None``: the
            model's ``pcg_tol``). Tighter than training's default: an acquisition optimiser
            compares values with gradients, and a posterior from solves stopped at ``1e-6``
            moves in steps of that size as the iteration count changes with ``X`` (finite
            differences then disagree with the exact gradients by percents).
        fit_options: keywords of :meth:`HIPGP.fit` (``num_epochs``, ``hyper_lr``, ...).
        **model_options: keywords of :class:`~bo_ncgp.models.HIPGP`.

    ``from_model(hipgp, op=...)`` wraps a fitted HIP-GP instead.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.models.hipgp import Grid
        >>> k = gpytorch.kernels.MaternKernel(nu=2.5)
        >>> k.lengthscale = 0.2  # well inside the grid's domain: no circulant clamping
        >>> X = torch.rand(20, 1, dtype=torch.float64)
        >>> model = HIPGPModel(X, X.sin(), k, Grid([0.0], [1.0], (32,)), outcome_transform=None)
        >>> model.posterior(torch.rand(5, 2, 1, dtype=torch.float64)).mean.shape
        torch.Size([5, 2, 1])
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        kernel: gpytorch.kernels.Kernel,
        grid: Any,
        likelihood: Likelihood | None = None,
        input_transform: Module | None = None,
        outcome_transform: Module | _DefaultType | None = DEFAULT,
        train_Yvar: Tensor | None = None,
        *,
        op: str | tuple | None = None,
        pcg_tol: float | None = 1e-10,
        fit_options: dict[str, Any] | None = None,
        **model_options: Any,
    ) -> None:
        from bo_ncgp.models import HIPGP

        _check_data_argument("HIPGPModel", train_X)
        outcome_transform = _outcome_transform(outcome_transform, likelihood or Gaussian())
        X, y = training_data(
            "HIPGPModel", train_X, train_Y, train_Yvar, input_transform, outcome_transform
        )
        if likelihood is not None:
            likelihood = likelihood.to(X)
        model = HIPGP(kernel.to(X), grid, likelihood, **model_options)
        self_fit = dict(fit_options or {})
        super().__init__(
            model.fit(X, y, **self_fit),
            1,
            input_transform=input_transform,
            outcome_transform=outcome_transform,
        )
        self._configure(op, pcg_tol)
        self.fit_options = self_fit
        self.train_data = (X, y)
        self._data_dtype = X.dtype

    def _configure(self, op: str | tuple | None = None, pcg_tol: float | None = 1e-10) -> None:
        self.op = op
        self.pcg_tol = None if pcg_tol is None else check_positive(pcg_tol, "pcg_tol", "HIPGPModel")

    def _context(self) -> contextlib.AbstractContextManager:
        return _pcg_tolerance(self.model, self.pcg_tol)

    def _fit_model(self, X: Tensor, y: Tensor) -> Module:
        return self.model.fit(X, y, **{"learn_hyperparameters": True, **self.fit_options})

    def _predict_options(self) -> dict[str, Any]:
        return {"op": self.op}

    def _condition_options(self) -> dict[str, Any]:
        # fantasies and conditioned observations are of the posterior's L rho
        return {"op": self.op}


@contextlib.contextmanager
def _pcg_tolerance(model: Module, tol: float | None) -> Iterator[None]:
    """``model.pcg_tol`` lowered to ``tol`` for the duration (never raised)."""
    old = model.pcg_tol
    if tol is not None and tol < old:
        model.pcg_tol = tol
    try:
        yield
    finally:
        model.pcg_tol = old


class SparseGAMModel(LatentGPModel):
    """BoTorch ``Model`` of a :class:`~bo_ncgp.models.SparseGAM` (Adam, Durrande & John): the
    posterior of the additive predictor ``rho = sum_c f_c`` or of a partial sum.

    Built from data, the model is trained (variational parameters and hyperparameters
    together) by ``fit_gpytorch_mll``; its posterior before that is an
    :class:`UnsupportedError`.

    Args:
        train_X, train_Y, input_transform, outcome_transform, train_Yvar: as for
            :class:`DualSVGPModel`.
        structure: the additive components, the first argument of
            :class:`~bo_ncgp.models.SparseGAM` (``(kernel, dims, inducing_points)`` triples
            or :class:`~bo_ncgp.models.gam.AdditiveComponent` objects).
        likelihood: a bo_ncgp likelihood (default: Gaussian with ``SingleTaskGP``'s noise
            prior).
        components: indices of the components whose sum the posterior describes (default:
            all, i.e. the full predictor). ``[c]`` exposes one ANOVA term ``f_c`` to an
            acquisition function, e.g. to explore one input group of an additive model.
        fit_options: keywords of :meth:`SparseGAM.fit` (``num_steps``, ``lr``, ...).
        **model_options: keywords of :class:`~bo_ncgp.models.SparseGAM`.

    ``from_model(gam, components=...)`` wraps a fitted SparseGAM instead. Conditioning on
    new observations is not supported (a sparse GAM has no cheap update of ``q(U)``; refit
    instead).

    Example:
        >>> from botorch.fit import fit_gpytorch_mll
        >>> from gpytorch.kernels import RBFKernel, ScaleKernel
        >>> from bo_ncgp.bo import LatentGPMarginalLogLikelihood
        >>> Z = torch.linspace(0, 1, 6, dtype=torch.float64)
        >>> X = torch.rand(30, 2, dtype=torch.float64)
        >>> model = SparseGAMModel(X, X.sin().sum(-1, keepdim=True),
        ...                        [(ScaleKernel(RBFKernel()), [i], Z) for i in range(2)],
        ...                        components=[1], fit_options={"num_steps": 10})
        >>> _ = fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))
        >>> model.posterior(torch.rand(4, 3, 2, dtype=torch.float64)).mean.shape
        torch.Size([4, 3, 1])
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        structure: Sequence[Any],
        likelihood: Likelihood | None = None,
        input_transform: Module | None = None,
        outcome_transform: Module | _DefaultType | None = DEFAULT,
        train_Yvar: Tensor | None = None,
        *,
        components: Sequence[int] | None = None,
        fit_options: dict[str, Any] | None = None,
        **model_options: Any,
    ) -> None:
        from bo_ncgp.models import SparseGAM

        X, y, likelihood, outcome_transform = _data(
            "SparseGAMModel",
            train_X,
            train_Y,
            train_Yvar,
            likelihood,
            input_transform,
            outcome_transform,
        )
        model = SparseGAM(structure, likelihood, **model_options).to(X)
        super().__init__(
            model, 1, input_transform=input_transform, outcome_transform=outcome_transform
        )
        self._configure(components)
        self.fit_options = dict(fit_options or {})
        self.train_data = (X, y)
        self._data_dtype = X.dtype
        self._unfitted = True

    def _configure(self, components: Sequence[int] | None = None) -> None:
        self.components = None if components is None else self.model._check_subset(components)

    def _fit_model(self, X: Tensor, y: Tensor) -> Module:
        model = self.model.fit(X, y, **self.fit_options)
        self._unfitted = False
        return model

    def _predict_options(self) -> dict[str, Any]:
        if getattr(self, "_unfitted", False):
            raise UnsupportedError(
                "SparseGAMModel: the model was built from data but not trained; call "
                "fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model)) first"
            )
        return {"components": self.components}
