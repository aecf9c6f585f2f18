"""The BoTorch model of any bo_ncgp model: :class:`LatentGPModel`.

:class:`LatentGPModel` turns a bo_ncgp model (the contract of
:class:`bo_ncgp.models.base.LatentGP`: ``predict_f(X, full_cov=True)`` returns the joint
Gaussian over the latent function(s) at a batch of points, ``condition(X, y)`` conditions on
new observations) into a :class:`botorch.models.model.Model`: it handles BoTorch's input
shapes (``d``, ``q x d``, ``batch x q x d``), input and outcome transforms,
``output_indices``, ``observation_noise`` and ``posterior_transform``, and builds the
:class:`~botorch.posteriors.gpytorch.GPyTorchPosterior`. It also implements
:meth:`~LatentGPModel.condition_on_observations` and ``fantasize`` on top of the wrapped
model's own conditioning (soft targets for non-Gaussian likelihoods, Chang et al. 2023,
Algorithm 2).

Per-model subclasses (:mod:`bo_ncgp.bo.models`) change only what differs: extra arguments of
``predict_f`` (:meth:`~LatentGPModel._predict_options`) or ``condition``
(:meth:`~LatentGPModel._condition_options`), a context every posterior and conditioning
runs in (:meth:`~LatentGPModel._context`), and how the wrapped model is built from training
data and trained (BoTorch's ``Model(train_X, train_Y, ...)`` constructors and
``fit_gpytorch_mll``, through :meth:`~LatentGPModel.custom_fit` and
:class:`LatentGPMarginalLogLikelihood`).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import FantasizeMixin, Model
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.sampling import MCSampler
from botorch.utils.datasets import SupervisedDataset
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.mlls import MarginalLogLikelihood
from linear_operator.operators import (
    BlockDiagLinearOperator,
    DenseLinearOperator,
    LinearOperator,
    RootLinearOperator,
    TriangularLinearOperator,
    to_dense,
)
from torch import Tensor
from torch.nn import Module

from bo_ncgp.exceptions import InputDataError, InputDataWarning, UnsupportedError
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.likelihoods.settings import soft_targets
from bo_ncgp.linalg import psd_jitter
from bo_ncgp.models._checks import check_device, check_inputs, check_real_tensor

__all__ = ["LatentGPMarginalLogLikelihood", "LatentGPModel", "training_data"]


class LatentGPModel(Model, FantasizeMixin):
    """BoTorch ``Model`` around a bo_ncgp model with a Gaussian latent posterior.

    ``posterior(X)`` is the joint Gaussian over the *latent* function(s) at ``X`` (``q x q``
    covariance per latent; ``C`` independent outputs for a softmax model), differentiable in
    ``X`` for ``optimize_acqf``. ``observation_noise=True`` adds the noise variance of a
    Gaussian likelihood; other likelihoods have no additive Gaussian noise on the latent
    scale, so the latent posterior is returned unchanged (acquisitions that need the
    observation distribution are in :mod:`bo_ncgp.bo.acquisition`).

    ``fantasize`` for a non-Gaussian likelihood draws latent samples ``f`` with the sampler
    and conditions on ``E[y | f]`` (``sigmoid(f)`` for Bernoulli, ``N sigmoid(f)`` for
    Binomial, ``exp(f)`` for Poisson) as relaxed targets (see
    :func:`bo_ncgp.likelihoods.soft_targets`), or on ``argmax f`` for the softmax; for a
    Gaussian likelihood it is BoTorch's own ``fantasize``.

    Args:
        model: the wrapped bo_ncgp model (a ``torch.nn.Module`` with ``predict_f``).
        num_outputs: number of latent outputs ``m`` (default: the model's ``num_latents``,
            ``C`` for a softmax classifier).
        input_transform: optional BoTorch input transform (applied in :meth:`posterior`
            and :meth:`condition_on_observations`; the wrapped model lives in the
            transformed space).
        outcome_transform: optional BoTorch outcome transform (the wrapped model lives in
            the transformed outcome space; posteriors are untransformed).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models import IterNCGP
        >>> X = torch.rand(10, 2)
        >>> gp = IterNCGP(RBFKernel(), Gaussian(0.1)).fit(X, X.sum(-1))
        >>> post = LatentGPModel(gp).posterior(torch.rand(4, 3, 2))  # batch x q x d
        >>> post.mean.shape, post.distribution.covariance_matrix.shape
        (torch.Size([4, 3, 1]), torch.Size([4, 3, 3]))
    """

    #: one outcome per adapter: several outcomes are a ``ModelList`` of adapters (read by Ax)
    _supports_batched_models = False

    def __init__(
        self,
        model: Module,
        num_outputs: int | None = None,
        *,
        input_transform: Module | None = None,
        outcome_transform: Module | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        if num_outputs is None:
            lik = getattr(model, "likelihood", None)
            num_outputs = getattr(model, "num_latents", getattr(lik, "num_latents", 1))
        self._num_outputs = int(num_outputs)
        if input_transform is not None:
            self.input_transform = input_transform
        if outcome_transform is not None:
            self.outcome_transform = outcome_transform
        #: ``(X, y)`` the wrapped model is trained on by :meth:`custom_fit`, in the transformed
        #: spaces (``None`` for an adapter built around an existing model)
        self.train_data: tuple[Tensor, Tensor] | None = None
        self._empty_warned = False

    # ------------------------------------------------------------- construction
    @classmethod
    def from_model(
        cls,
        model: Module,
        *,
        input_transform: Module | None = None,
        outcome_transform: Module | None = None,
        **options: Any,
    ) -> LatentGPModel:
        """The adapter around an existing (trained) bo_ncgp model.

        The model lives in the transformed spaces: it must have been trained on
        ``input_transform(X)`` and ``outcome_transform(Y)``. It is trained by its own methods
        (``fit``, ``update``), not by ``fit_gpytorch_mll``.

        Args:
            model: the bo_ncgp model.
            input_transform, outcome_transform: optional BoTorch transforms (their
                coefficients already set, e.g. ``Normalize(d, bounds=...)``).
            **options: the adapter's options (``num_outputs`` of :class:`LatentGPModel`;
                ``op`` of :class:`~bo_ncgp.bo.models.HIPGPModel`, ...).

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> from bo_ncgp.likelihoods import Gaussian
            >>> from bo_ncgp.models import IterNCGP
            >>> X = torch.rand(10, 2)
            >>> gp = IterNCGP(RBFKernel(), Gaussian(0.1)).fit(X, X.sum(-1))
            >>> LatentGPModel.from_model(gp).posterior(X[:3]).mean.shape
            torch.Size([3, 1])
        """
        new = cls.__new__(cls)
        LatentGPModel.__init__(
            new, model, input_transform=input_transform, outcome_transform=outcome_transform
        )
        new._configure(**options)
        return new

    def _configure(self, num_outputs: int | None = None) -> None:
        """Set the adapter's own options (:meth:`from_model`'s ``**options``)."""
        if num_outputs is not None:
            self._num_outputs = int(num_outputs)

    @classmethod
    def construct_inputs(cls, training_data: SupervisedDataset, **options: Any) -> dict[str, Any]:
        """Keyword arguments of the constructor from a BoTorch ``SupervisedDataset``:
        ``train_X``, ``train_Y`` (and ``train_Yvar`` when the data set has one) plus
        ``options`` (the model options of Ax's ``ModelConfig``), passed on unchanged.

        Example:
            >>> from botorch.utils.datasets import SupervisedDataset
            >>> data = SupervisedDataset(torch.rand(4, 2), torch.rand(4, 1),
            ...                          feature_names=["a", "b"], outcome_names=["y"])
            >>> sorted(LatentGPModel.construct_inputs(data, num_inducing=8))
            ['num_inducing', 'train_X', 'train_Y']
        """
        if not isinstance(training_data, SupervisedDataset):
            raise InputDataError(
                f"{cls.__name__}.construct_inputs: training_data must be a BoTorch "
                f"SupervisedDataset, got {type(training_data).__name__}"
            )
        inputs: dict[str, Any] = {"train_X": training_data.X, "train_Y": training_data.Y}
        if training_data.Yvar is not None:
            inputs["train_Yvar"] = training_data.Yvar
        return {**inputs, **options}

    # ------------------------------------------------------------------ training
    def _fit_model(self, X: Tensor, y: Tensor) -> Module:
        """The wrapped model trained on transformed ``X (n, d)`` and ``y (n,)`` (by the
        model's own ``fit``; subclasses with another training override this)."""
        if not getattr(self.model, "supports_fit", False):
            raise UnsupportedError(
                f"{type(self).__name__}: {type(self.model).__name__} has no fit(X, y); train it "
                "with its own methods"
            )
        return self.model.fit(X, y)

    def custom_fit(
        self,
        mll: MarginalLogLikelihood | None = None,
        closure: Any = None,
        optimizer: Any = None,
        **kwargs: Any,
    ) -> MarginalLogLikelihood | None:
        """Train the wrapped model's hyperparameters on :attr:`train_data` by the model's own
        training; BoTorch's ``fit_gpytorch_mll(mll)`` calls this for any ``mll`` whose
        ``model`` is this adapter (e.g. :class:`LatentGPMarginalLogLikelihood`).

        BoTorch's closure and optimizer cannot drive the model's own training: passing either
        is an :class:`UnsupportedError`; other keywords of ``fit_gpytorch_mll`` are ignored,
        as BoTorch's fit routines ignore unexpected keywords.

        Returns:
            ``mll`` in evaluation mode.
        """
        who = type(self).__name__
        if closure is not None or optimizer is not None:
            raise UnsupportedError(
                f"{who} is trained by {type(self.model).__name__}'s own training; "
                "fit_gpytorch_mll's closure and optimizer cannot be used with it"
            )
        if self.train_data is None:
            raise UnsupportedError(
                f"{who} was built around an existing {type(self.model).__name__} (from_model) "
                "and holds no training data: train that model itself (fit/update), or build the "
                f"adapter from data, {who}(train_X, train_Y, ...)"
            )
        self.model = self._fit_model(*self.train_data)
        self.eval()
        return None if mll is None else mll.eval()

    def transform_inputs(self, X: Tensor, input_transform: Module | None = None) -> Tensor:
        """BoTorch's ``transform_inputs``, then (for an adapter built from data) a cast to
        the wrapped model's dtype, announced once at construction."""
        X = super().transform_inputs(X, input_transform=input_transform)
        dtype = getattr(self, "_data_dtype", None)
        return X if dtype is None or X.dtype == dtype else X.to(dtype)

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> LatentGPModel:
        """``Module._apply``; an adapter built from data keeps its floating tensors in the
        dtype it announced at construction (BoTorch's analytic acquisitions call
        ``self.to(X)`` with the candidates, which would move a model fitted in float64 to
        float32 candidates' dtype); devices move as usual. A call that would change no
        tensor (``self.to(X)`` with ``X`` where the model already is, on every acquisition
        evaluation) returns at once (:func:`changes_nothing`), so the wrapped model keeps its
        cached factorisations and no module tree is walked twice."""
        dtype = getattr(self, "_data_dtype", None)
        if dtype is not None:
            convert = fn

            def fn(t: Tensor) -> Tensor:  # keep the dtype; a dtype-only change is none
                out = convert(t)
                if not t.is_floating_point() or out.dtype == t.dtype:
                    return out
                return t if out.device == t.device else out.to(t.dtype)

        if changes_nothing(self, fn, kinds=self._tensor_kinds()):
            return self
        self.__dict__.pop("_kinds_cache", None)
        return super()._apply(fn, *args, **kwargs)

    def _tensor_kinds(self) -> set[tuple]:
        """:func:`tensor_kinds` of this adapter, kept while the wrapped model is the same
        object and its first parameter has not moved (a walk of the module tree costs about
        as much as the posterior evaluation that ``self.to(X)`` precedes). A real
        ``_apply`` drops it."""
        first = next(self.parameters(), None)
        key = (self.model, None if first is None else (first.device, first.dtype))
        held = self.__dict__.get("_kinds_cache")
        if held is not None and held[0][0] is key[0] and held[0][1] == key[1]:
            return held[1]
        kinds = tensor_kinds(self)
        self.__dict__["_kinds_cache"] = (key, kinds)
        return kinds

    def _warn_if_empty(self) -> None:
        """One warning per adapter when the wrapped model has seen no data: its posterior is
        the prior, which is almost never what an acquisition should see."""
        if self._empty_warned or getattr(self.model, "num_data", None) != 0:
            return
        self._empty_warned = True
        warnings.warn(
            f"{type(self).__name__}: the wrapped {type(self.model).__name__} has seen no data "
            "(num_data=0), so its posterior is the prior; train it first (update(X, y) or "
            f"fit), or build the adapter from data: {type(self).__name__}(train_X, train_Y, ...)",
            UserWarning,
            stacklevel=3,
        )

    # ---------------------------------------------------------- what subclasses change
    def _context(self) -> contextlib.AbstractContextManager:
        """Context every posterior and conditioning of the wrapped model runs in."""
        return contextlib.nullcontext()

    def _predict_options(self) -> dict[str, Any]:
        """Extra keyword arguments of the wrapped model's ``predict_f``."""
        return {}

    def _condition_options(self) -> dict[str, Any]:
        """Extra keyword arguments of the wrapped model's ``condition``."""
        return {}

    def _latent_mean_cov(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Latent mean ``(..., q, m)`` and covariance ``(..., m, q, q)`` or
        ``(..., m q, m q)`` at input-transformed ``X`` of shape ``(..., q, d)``."""
        with self._context():
            mean, cov = self.model.predict_f(X, full_cov=True, **self._predict_options())
        if self.num_outputs == 1:
            return mean.unsqueeze(-1), cov
        return mean, cov  # (..., q, C), (..., C, q, q)

    def _prior_scale(self, X: Tensor) -> Tensor | None:
        """The largest prior variance of the latent function at each batch of input-transformed
        ``X`` ``(..., q, d)``, shape ``(...,)``: the scale of the round-off of a posterior
        covariance there (:func:`_joint_factor`); ``None`` where the model does not give it."""
        return None

    def _observation_noise(self, X: Tensor) -> Tensor | None:
        """Observation noise variance, broadcastable to ``(..., q, m)``: the noise of a
        :class:`~bo_ncgp.likelihoods.Gaussian` likelihood, else ``None`` (then
        ``observation_noise=True`` returns the latent)."""
        lik = getattr(self.model, "likelihood", None)
        return lik.noise.detach().to(X) if isinstance(lik, Gaussian) else None

    def _condition(self, X: Tensor, Y: Tensor, **kwargs: Any) -> Module:
        """Wrapped model conditioned on transformed ``X (..., n, d)`` and ``Y (..., n, 1)``."""
        if not callable(getattr(self.model, "condition", None)):
            raise UnsupportedError(
                f"{type(self).__name__}: {type(self.model).__name__} does not support "
                "conditioning (condition_on_observations, fantasize)"
            )
        if Y.dim() < 2 or Y.shape[-1] != 1:
            raise InputDataError(
                f"{type(self).__name__}: Y must have shape (..., n, 1) (one observation column; "
                f"class labels for a softmax model), got {tuple(Y.shape)}"
            )
        dtype = getattr(self, "_data_dtype", None)
        if dtype is not None and Y.dtype != dtype:  # announced at construction
            Y = Y.to(dtype)
        with self._context():
            return self.model.condition(X, Y[..., 0], **self._condition_options())

    # --------------------------------------------------------------- properties
    @property
    def likelihood(self) -> Module | None:
        """The wrapped model's likelihood (BoTorch's ``fantasize`` inspects it)."""
        return getattr(self.model, "likelihood", None)

    def _set_transformed_inputs(self) -> None:
        """No-op: the wrapped model already stores its data in the transformed space."""

    def _revert_to_original_inputs(self) -> None:
        """No-op (see :meth:`_set_transformed_inputs`)."""

    @property
    def num_outputs(self) -> int:
        return self._num_outputs

    def subset_output(self, idcs: list[int]) -> LatentGPModel:
        """A view of this model restricted to the outputs ``idcs`` (posterior only)."""
        idcs = _output_indices(idcs, self.num_outputs, "subset_output")
        if idcs == list(range(self.num_outputs)):
            return self
        return _OutputSubset(self, idcs)

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size(getattr(self.model, "batch_shape", torch.Size()))

    # ---------------------------------------------------------------- posterior
    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> GPyTorchPosterior:
        """Joint Gaussian posterior of the latent function(s) at ``X``.

        Args:
            X: ``d``, ``q x d`` or ``batch x q x d`` inputs (original space).
            output_indices: subset of the ``m`` outputs.
            observation_noise: ``True`` adds the model's Gaussian noise (only for Gaussian
                likelihoods; for other likelihoods the latent posterior is returned
                unchanged), or a tensor ``(..., q, m)`` of noise variances to add.
            posterior_transform: applied last, as ``posterior_transform(posterior, X=X)``.

        Returns:
            A :class:`GPyTorchPosterior` with event shape ``q x m``.
        """
        if any(mod.training for mod in self.modules()):  # eval() is a no-op otherwise
            self.eval()
        self._warn_if_empty()
        if output_indices is not None:
            output_indices = _output_indices(
                output_indices, self.num_outputs, f"{type(self).__name__}.posterior"
            )
        if X.dim() == 1:
            X = X.unsqueeze(0)
        X_tf = self.transform_inputs(X)
        mean, cov = self._latent_mean_cov(X_tf)
        q, m = mean.shape[-2], mean.shape[-1]
        if m != self.num_outputs:
            raise InputDataError(
                f"{type(self).__name__}: the wrapped model has {m} latent outputs, but "
                f"num_outputs={self.num_outputs}"
            )
        if m == 1 and cov.dim() == mean.dim() + 1:
            cov = cov.squeeze(-3)  # (..., 1, q, q) -> (..., q, q)
        # round-off can leave tiny negative variances near observed points: lift the diagonal
        # to a floor instead of letting GPyTorch warn and lift it later
        diag = cov.diagonal(dim1=-2, dim2=-1)
        floor = 1e-10 if cov.dtype == torch.float64 else 1e-6
        if bool((diag < floor).any()):
            cov = cov + torch.diag_embed((floor - diag).clamp_min(0).detach())
        # independent outputs: (..., m, q, q); joint: (..., m q, m q) in output-major order
        independent = m == 1 or (cov.dim() == mean.dim() + 1 and cov.shape[-3] == m)
        noise = None
        if isinstance(observation_noise, Tensor):
            check_device(type(self).__name__, mean.device, observation_noise=observation_noise)
            noise = observation_noise
        elif observation_noise:
            noise = self._observation_noise(X_tf)
        if noise is not None:
            noise = torch.as_tensor(noise, dtype=mean.dtype, device=mean.device)
            noise = noise.expand(*mean.shape[:-2], q, m).transpose(-1, -2)  # (..., m, q)
            if m == 1:
                cov = cov + torch.diag_embed(noise[..., 0, :])
            elif independent:
                cov = cov + torch.diag_embed(noise)
            else:
                cov = cov + torch.diag_embed(noise.reshape(*noise.shape[:-2], m * q))
        if output_indices is not None:
            idx = list(output_indices)
            mean = mean[..., idx]
            if m > 1 and independent:
                cov = cov[..., idx, :, :]
                if len(idx) == 1:
                    cov = cov.squeeze(-3)
            elif m > 1:
                blocks = cov.reshape(*cov.shape[:-2], m, q, m, q)[..., idx, :, :, :][..., idx, :]
                cov = blocks.reshape(*cov.shape[:-2], len(idx) * q, len(idx) * q)
            m = len(idx)
        # the round-off scale is read only where the plain factorisation fails: computed then
        scale = partial(self._prior_scale, X_tf) if m == 1 and self.num_outputs == 1 else None
        posterior = GPyTorchPosterior(self._distribution(mean, cov, independent, m, scale))
        if hasattr(self, "outcome_transform"):
            posterior = self.outcome_transform.untransform_posterior(posterior, X=X)
        if posterior_transform is not None:
            posterior = posterior_transform(posterior, X=X)
        return posterior

    def forward(self, X: Tensor) -> MultivariateNormal:
        """The posterior distribution of the latent function(s) at ``X`` (original space),
        ``self.posterior(X).distribution``: what ``model(X)`` gives for a GPyTorch model in
        eval mode, read by BoTorch's GIBBON (``qLowerBoundMaxValueEntropy``) for ``q > 1``.

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> from bo_ncgp.likelihoods import Gaussian
            >>> from bo_ncgp.models import IterNCGP
            >>> X = torch.rand(10, 2)
            >>> model = LatentGPModel(IterNCGP(RBFKernel(), Gaussian(0.1)).fit(X, X.sum(-1)))
            >>> model(torch.rand(4, 3, 2)).lazy_covariance_matrix.shape
            torch.Size([4, 3, 3])
        """
        return self.posterior(X).distribution

    @staticmethod
    def _distribution(
        mean: Tensor,
        cov: Tensor,
        independent: bool,
        m: int,
        prior_scale: Tensor | Callable[[], Tensor | None] | None = None,
    ):
        """The Gaussian of ``mean`` and the dense covariance ``cov`` held as a
        :class:`_JointCovariance` (with the ``prior_scale`` of a single output, or the
        function that gives it when first needed): variances
        read its diagonal; samples and log densities use its one Cholesky factor, computed
        when first needed."""
        cov = _JointCovariance(cov, prior_scale if m == 1 else None)
        if m == 1:
            return _LatentMVN(mean[..., 0], cov)
        if independent:  # (..., m, q, q) blocks, output-major as from_independent_mvns
            cov = BlockDiagLinearOperator(cov, block_dim=-3)
        return MultitaskMultivariateNormal(mean, cov, interleaved=False)

    # ---------------------------------------------------------------- fantasies
    def fantasy_targets(
        self, X: Tensor, mode: str = "mean", generator: torch.Generator | None = None
    ) -> Tensor:
        """Fantasised observations at ``X`` (original space), shape ``(..., n, 1)``.

        ``mode="mean"``: Gaussian likelihood -> posterior mean of ``f`` (Kriging believer,
        Chang et al. Alg. 2); other likelihoods -> the predictive mean ``E[y | x]`` as a *soft*
        target (probability of class 1, expected count, rate; condition on it inside
        :func:`bo_ncgp.likelihoods.soft_targets`); softmax -> the most probable label.
        ``mode="sample"``: ``f ~ q(f(x))`` then ``y ~ p(y | f)`` (hard labels / counts).
        """
        if mode not in ("mean", "sample"):
            raise InputDataError(f"fantasy mode must be 'mean' or 'sample', got {mode!r}")
        lik = getattr(self.model, "likelihood", None)  # bo_ncgp's, not a GPyTorch view
        post = self.posterior(X)
        mean, var = post.mean, post.variance
        if lik is None or isinstance(lik, Gaussian):
            if mode == "mean":
                return mean
            eps = _standard_normal(mean, generator)
            noisy = self.posterior(X, observation_noise=True).variance
            return mean + noisy.sqrt() * eps
        if self.num_outputs > 1:  # softmax: (..., n, C) -> labels (..., n, 1)
            if mode == "mean":
                return lik.predictive_mean(mean, var).argmax(-1, keepdim=True).to(mean.dtype)
            eps = _standard_normal(mean, generator)
            return lik.sample(mean + var.sqrt() * eps, generator).unsqueeze(-1).to(mean.dtype)
        if mode == "mean":
            return lik.predictive_mean(mean[..., 0], var[..., 0]).unsqueeze(-1)
        eps = _standard_normal(mean, generator)
        return lik.sample(mean + var.sqrt() * eps, generator)

    def condition_on_observations(self, X: Tensor, Y: Tensor, **kwargs: Any) -> LatentGPModel:
        """A new adapter around the wrapped model conditioned on ``(X, Y)``.

        Args:
            X: ``batch_shape x n' x d`` inputs (original space).
            Y: ``batch_shape' x n' x m`` observations (original outcome space), e.g. the
                ``num_fantasies x batch x n' x m`` samples produced by ``fantasize``.
        """
        if any(t.training for t in self._transforms()):
            self.eval()  # transforms in eval mode: applied, never refitted to the fantasies
        X_tf = self.transform_inputs(X)
        Yvar = kwargs.pop("noise", None)
        if hasattr(self, "outcome_transform"):
            Y, _ = self.outcome_transform(Y=Y, Yvar=Yvar, X=X_tf)
        new_model = self._condition(X_tf, Y, **kwargs)
        return self._rewrap(new_model)

    def fantasize(
        self,
        X: Tensor,
        sampler: MCSampler,
        observation_noise: Tensor | None = None,
        **kwargs: Any,
    ) -> Model:
        """Fantasy model conditioned on sampled observations at ``X`` (see the class doc)."""
        lik = getattr(self.model, "likelihood", None)  # bo_ncgp's, not a GPyTorch view
        if lik is None or isinstance(lik, Gaussian):
            return super().fantasize(X, sampler, observation_noise=observation_noise, **kwargs)
        f = sampler(self.posterior(X))  # sample_shape x batch x n x m
        if self.num_outputs > 1:
            Y = f.argmax(-1, keepdim=True).to(f.dtype)
            return self.condition_on_observations(X, Y.detach())
        Y = lik.conditional_mean(f[..., 0]).unsqueeze(-1)
        with soft_targets():
            return self.condition_on_observations(X, Y.detach())

    def _transforms(self) -> list[Module]:
        """The input and outcome transforms this adapter holds."""
        names = ("input_transform", "outcome_transform")
        return [self._modules[n] for n in names if self._modules.get(n) is not None]

    def _rewrap(self, new_model: Module) -> LatentGPModel:
        """Shallow copy of this adapter around ``new_model``: the transforms are shared (in
        eval mode they are applied, never changed, by posteriors and conditioning), so a
        conditioned adapter costs no more than the wrapped model's conditioning."""
        new = copy.copy(self)
        new._modules = dict(self._modules)
        new._parameters = dict(self._parameters)
        new._buffers = dict(self._buffers)
        new._modules["model"] = new_model
        return new


class LatentGPMarginalLogLikelihood(MarginalLogLikelihood):
    """The "marginal log likelihood" handed to BoTorch's ``fit_gpytorch_mll`` for an adapter
    built from data: ``fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood,
    model))`` trains the wrapped model by its own training (:meth:`LatentGPModel.custom_fit`),
    in place of GPyTorch's ``ExactMarginalLogLikelihood`` of a ``SingleTaskGP`` (which
    accepts only GPyTorch's Gaussian likelihoods and exact GPs).

    It is a training handle, not an objective: calling it is an :class:`UnsupportedError`.

    Args:
        likelihood: the adapter's likelihood (``model.likelihood``).
        model: a :class:`LatentGPModel`.

    Example:
        >>> from botorch.fit import fit_gpytorch_mll
        >>> from bo_ncgp.bo import DualSVGPModel
        >>> X = torch.rand(8, 2, dtype=torch.float64)
        >>> model = DualSVGPModel(X, X.sum(-1, keepdim=True), num_hyper_steps=5)
        >>> mll = fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))
        >>> mll.training, model.model.num_data
        (False, 8)
    """

    def __init__(self, likelihood: Module | None, model: LatentGPModel) -> None:
        if not isinstance(model, LatentGPModel):
            raise InputDataError(
                "LatentGPMarginalLogLikelihood: model must be a bo_ncgp BoTorch adapter "
                f"(LatentGPModel, DualSVGPModel, ...), got {type(model).__name__}"
            )
        Module.__init__(self)  # GPyTorch's check (an ExactGP or ApproximateGP) does not apply
        self.likelihood = likelihood
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        raise UnsupportedError(
            "LatentGPMarginalLogLikelihood is a training handle for fit_gpytorch_mll(mll); it "
            "is not evaluated"
        )


def training_data(
    who: str,
    train_X: Tensor,
    train_Y: Tensor,
    train_Yvar: Tensor | None = None,
    input_transform: Module | None = None,
    outcome_transform: Module | None = None,
) -> tuple[Tensor, Tensor]:
    """``(X, y)`` for training a wrapped model, from BoTorch's ``train_X (n, d)`` and
    ``train_Y (n, 1)`` (or ``(n,)``), as ``SingleTaskGP`` does: ``input_transform`` is applied
    (learning its coefficients, e.g. ``Normalize``'s bounds, if it learns them) and
    ``outcome_transform`` is trained on ``train_Y``; ``y`` is the transformed column, ``(n,)``.

    Data is computed in ``float64``: ``float32`` (or integer) data is cast with one
    :class:`~bo_ncgp.exceptions.InputDataWarning` (the models' Cholesky factorisations and
    the acquisition optimisers are unreliable in single precision); the adapter then casts
    later inputs silently and keeps its tensors in ``float64`` when moved (``.to``).
    ``train_Yvar`` (known observation noise) is an :class:`UnsupportedError`: the likelihood
    models the noise.

    Example:
        >>> from botorch.models.transforms import Normalize, Standardize
        >>> X = 10 * torch.rand(6, 2, dtype=torch.float64)
        >>> X_tf, y = training_data("Model", X, X[:, :1], None, Normalize(2), Standardize(1))
        >>> float(X_tf.min()), float(X_tf.max()), y.shape, abs(float(y.mean())) < 1e-12
        (0.0, 1.0, torch.Size([6]), True)
    """
    if train_Yvar is not None:
        raise UnsupportedError(
            f"{who}: train_Yvar (known observation noise) is not supported; the likelihood "
            "models the noise (pass train_X and train_Y only)"
        )
    device = train_X.device if isinstance(train_X, Tensor) else None
    X = check_inputs(train_X, who, name="train_X", matrix=True, allow_empty=False, device=device)
    Y = check_real_tensor(
        train_Y if isinstance(train_Y, Tensor) else torch.as_tensor(train_Y, device=X.device),
        "train_Y",
        who,
    )
    if (Y.dim() == 2 and Y.shape[-1] != 1) or Y.dim() not in (1, 2):
        raise InputDataError(
            f"{who}: train_Y must have shape (n, 1) (one outcome; a ModelListGP of adapters "
            f"models several), got {tuple(Y.shape)}"
        )
    if Y.shape[0] != X.shape[0]:
        raise InputDataError(
            f"{who}: train_X has {X.shape[0]} points but train_Y has {Y.shape[0]} rows"
        )
    check_device(who, X.device, train_Y=Y)
    Y = Y.reshape(-1, 1)
    if X.dtype != torch.float64 or Y.dtype != torch.float64:
        kinds = sorted({str(X.dtype), str(Y.dtype)} - {"torch.float64"})
        warnings.warn(
            f"{who}: the training data has dtype {', '.join(kinds)}, the model computes in "
            "torch.float64 (single precision makes its Cholesky factorisations and BoTorch's "
            "acquisition optimisation unreliable); the data and every later input are cast to "
            "torch.float64 (pass float64 data, e.g. train_X.double(), to avoid the cast)",
            InputDataWarning,
            stacklevel=3,
        )
        X, Y = X.to(torch.float64), Y.to(torch.float64)
    with torch.no_grad():
        if input_transform is not None:
            input_transform.to(X)
            X = input_transform(X)
        if outcome_transform is not None:
            outcome_transform.train()
            Y, _ = outcome_transform(Y=Y, X=X)
    return X.detach(), Y[..., 0].detach()


def _output_indices(indices: Any, num_outputs: int, who: str) -> list[int]:
    """``indices`` as a list of distinct output indices in ``[0, num_outputs)``, else
    :class:`InputDataError` naming them."""
    try:
        idx = [int(i) for i in indices]
        ok = all(i == j for i, j in zip(idx, indices, strict=True))  # no fractional indices
    except (TypeError, ValueError):
        ok = False
    if not ok or not idx or len(set(idx)) != len(idx) or any(not 0 <= i < num_outputs for i in idx):
        raise InputDataError(
            f"{who}: output indices must be distinct integers in [0, {num_outputs}), got "
            f"{indices!r}"
        )
    return idx


class _OutputSubset(LatentGPModel):
    """``subset_output`` view: the parent's posterior restricted to some outputs."""

    def __init__(self, parent: LatentGPModel, idcs: list[int]) -> None:
        super().__init__(parent.model, len(idcs))
        self._parent_ref = (parent,)  # not a submodule: the parent owns the transforms
        self._idcs = idcs

    @property
    def batch_shape(self) -> torch.Size:
        return self._parent_ref[0].batch_shape

    def posterior(
        self, X, output_indices=None, observation_noise=False, posterior_transform=None, **kwargs
    ):
        if output_indices is not None:
            output_indices = _output_indices(output_indices, len(self._idcs), "subset posterior")
        idx = self._idcs if output_indices is None else [self._idcs[i] for i in output_indices]
        return self._parent_ref[0].posterior(X, idx, observation_noise, posterior_transform)

    def _latent_mean_cov(self, X):  # pragma: no cover - posterior is overridden
        raise NotImplementedError


def _joint_factor(
    cov: Tensor, prior_scale: Tensor | Callable[[], Tensor | None] | None = None
) -> Tensor:
    """Lower Cholesky factor of a posterior covariance ``(..., q, q)``, the one factorisation
    of a posterior.

    Approximate posteriors (round-off, or approximations of ``K_uu`` such as HIP-GP's clamped
    circulant embedding) can give a joint covariance that is slightly indefinite. Only when
    the plain factorisation fails, the failing batch entries get the escalating jitter of
    :func:`bo_ncgp.linalg.psd_jitter` (not differentiated; one ``NumericalWarning``); when
    even the largest of those does not help, a shift by twice the smallest eigenvalue's
    deficit where that is within 1e-2 of the largest variance, or of ``prior_scale`` ``(...,)``
    (the largest prior variance at the points, where the model gives it: the scale of the
    round-off; another warning; a function giving it is called only then), else
    ``NotPSDError``.

    Example:
        >>> cov = torch.tensor([[4.0, 2.0], [2.0, 2.0]])
        >>> _joint_factor(cov)
        tensor([[2., 0.],
                [1., 1.]])
    """
    L, info = torch.linalg.cholesky_ex(cov)
    # a NaN or inf below the diagonal of L reaches a later diagonal entry: the diagonal is
    # enough to check (a NaN covariance goes on to psd_jitter's error)
    ok = not bool((info > 0).any()) and bool(torch.isfinite(L.diagonal(dim1=-2, dim2=-1)).all())
    if cov.shape[-1] == 0 or ok:
        return L
    # round-off of a posterior covariance is of the order of the *prior* variance times the
    # conditioning, which near-noise-free data can put far above the posterior's own variances
    # (measured: variances 1e-7 to 8e-7 at 58 observed points, smallest eigenvalue -3.8e-10,
    # so that 1e-3 of the mean variance was still too little): a deficit up to 1e-2 of the
    # largest variance is shifted away
    if callable(prior_scale):
        prior_scale = prior_scale()
    jitter = psd_jitter(
        cov.detach(),
        max_tries=8,
        name="posterior joint covariance",
        eigen_tolerance=1e-2,
        eigen_scale=prior_scale,
    )
    eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
    return torch.linalg.cholesky(cov + jitter[..., None, None] * eye)


class _JointCovariance(DenseLinearOperator):
    """A posterior covariance ``(..., q, q)`` held dense, with its lower Cholesky factor
    computed on first use and kept: the one factorisation of a posterior.

    Variances read the diagonal of the dense matrix (the wrapped model's own numbers);
    samples (``root_decomposition``), log densities and solves (``cholesky``) use the factor
    of :func:`_joint_factor` (escalating jitter, with one ``NumericalWarning``, only where
    the plain factorisation fails), so a posterior that is never sampled is never
    factorised. The root multiplies base samples as a plain tensor product.

    Args:
        tsr: the symmetric covariance ``(..., q, q)``.
        prior_scale: the largest prior variance of each matrix ``(...,)`` (the scale of its
            round-off, :func:`_joint_factor`), or a function giving it (or ``None``), called
            once where it is first read: only a factorisation that fails reads it, so an
            acquisition that reads variances alone never computes it.

    Example:
        >>> cov = _JointCovariance(torch.tensor([[4.0, 2.0], [2.0, 2.0]]))
        >>> cov.diagonal()
        tensor([4., 2.])
        >>> cov.root_decomposition().root.to_dense()
        tensor([[2., 0.],
                [1., 1.]])
    """

    def __init__(
        self, tsr: Tensor, prior_scale: Tensor | Callable[[], Tensor | None] | None = None
    ) -> None:
        super().__init__(tsr)
        self._factor: Tensor | None = None
        self._prior_scale = prior_scale

    @property
    def prior_scale(self) -> Tensor | None:
        """The largest prior variance of each matrix ``(...,)``, if known
        (:func:`_joint_factor`); a function given for it is called here, once."""
        return self._read_prior_scale()

    def _read_prior_scale(self) -> Tensor | None:
        if callable(self._prior_scale):
            self._prior_scale = self._prior_scale()
        return self._prior_scale

    def factor(self) -> Tensor:
        """The lower Cholesky factor ``(..., q, q)`` (computed once)."""
        if self._factor is None:
            self._factor = _joint_factor(self.tensor, self._read_prior_scale)
        return self._factor

    def _cholesky(self, upper: bool = False) -> TriangularLinearOperator:
        L = self.factor()
        return TriangularLinearOperator(L.mT if upper else L, upper=upper)

    def root_decomposition(self, method: str | None = None) -> RootLinearOperator:
        return RootLinearOperator(_FactorRoot(self.factor()))


class _LatentMVN(MultivariateNormal):
    """GPyTorch's ``MultivariateNormal`` whose covariance is always a
    :class:`_JointCovariance`: a Gaussian derived from it as ``mvn.__class__(mean, cov)``
    (BoTorch's ``Standardize.untransform_posterior`` passes the lazy product ``D K D``) holds
    that covariance dense and is factorised once, on first use, like the adapter's own.

    Example:
        >>> mvn = _LatentMVN(torch.zeros(2), _JointCovariance(torch.eye(2)))
        >>> from linear_operator.operators import DiagLinearOperator
        >>> D = DiagLinearOperator(torch.tensor([2.0, 3.0]))
        >>> scaled = mvn.__class__(mvn.mean, D @ mvn.lazy_covariance_matrix @ D)
        >>> type(scaled.lazy_covariance_matrix).__name__, scaled.variance
        ('_JointCovariance', tensor([4., 9.]))
    """

    def __init__(
        self, mean: Tensor, covariance_matrix: Tensor | LinearOperator, validate_args: bool = False
    ) -> None:
        if not isinstance(covariance_matrix, _JointCovariance):
            covariance_matrix = _JointCovariance(to_dense(covariance_matrix))
        super().__init__(mean, covariance_matrix, validate_args=validate_args)


class _FactorRoot(DenseLinearOperator):
    """The factor of a :class:`_JointCovariance` as the root of its decomposition: products
    with tensors (the reparameterised samples) are plain ``torch.matmul``, differentiated by
    autograd, not by linear_operator's generic ``Matmul`` function."""

    def matmul(self, other: Tensor | LinearOperator) -> Tensor | LinearOperator:
        if isinstance(other, Tensor):
            return torch.matmul(self.tensor, other)
        return super().matmul(other)


def _standard_normal(like: Tensor, generator: torch.Generator | None) -> Tensor:
    """Standard-normal draws shaped like ``like``, drawn on the generator's device."""
    dev = like.device if generator is None else generator.device
    eps = torch.randn(like.shape, generator=generator, dtype=like.dtype, device=dev)
    return eps.to(like.device)


def _tensors_of(module: Module) -> Any:
    """Every tensor a ``Module._apply`` of ``module`` (or its own ``_apply`` override) may
    convert: parameters, buffers, tensors held as plain attributes of its submodules (a
    conditioned model's data) and those of the grids among them (HIP-GP's bounds)."""
    from bo_ncgp.linalg.toeplitz import Grid

    for m in module.modules():
        yield from (t for t in m._parameters.values() if t is not None)
        yield from (t for t in m._buffers.values() if t is not None)
        for v in vars(m).values():
            if isinstance(v, Tensor):
                yield v
            elif isinstance(v, Grid):
                yield from (w for w in vars(v).values() if isinstance(w, Tensor))


def tensor_kinds(module: Module) -> set[tuple]:
    """The ``(device, dtype, number of dimensions)`` of the tensors of ``module`` (those a
    ``Module._apply`` may convert), which decide what ``.to``, ``.double``, ``.cpu`` and the
    like do to them.

    Example:
        >>> sorted(d for _, _, d in tensor_kinds(torch.nn.Linear(2, 1)))  # weight, bias
        [1, 2]
    """
    return {(t.device, t.dtype, t.dim()) for t in _tensors_of(module)}


def changes_nothing(module: Module, fn: Any, kinds: set[tuple] | None = None) -> bool:
    """Whether the tensor map ``fn`` of a ``Module._apply`` returns every tensor of
    ``module`` unchanged: ``fn`` is tried on one small probe per (device, dtype, number of
    dimensions) the module's tensors have, which decide what ``.to``, ``.double``, ``.cpu``
    and the like do, and must return the probe itself without sharing its memory.
    ``kinds``: :func:`tensor_kinds` of ``module`` if already known.

    Example:
        >>> lin = torch.nn.Linear(2, 1, dtype=torch.float32)
        >>> changes_nothing(lin, lambda t: t.to(torch.float32))
        True
        >>> changes_nothing(lin, lambda t: t.to(torch.float64))
        False
        >>> changes_nothing(lin, lambda t: t.share_memory_())  # a side effect is a change
        False
    """
    if kinds is None:
        kinds = tensor_kinds(module)
    with torch.no_grad():
        for device, dtype, dim in kinds:
            probe = torch.zeros((2,) * dim, device=device, dtype=dtype)
            shared = probe.is_shared()
            if fn(probe) is not probe or probe.is_shared() != shared:
                return False
    return True
