"""IterNCGP: computation-aware Laplace inference for non-conjugate GPs.

Tatzel, Wenger, Schneider & Hennig, "Accelerating Non-Conjugate Gaussian Processes By Trading
Off Computation For Uncertainty". The model runs Newton's method on the log posterior as a
sequence of GP regressions (Algorithm 1, :mod:`.newton`), each solved approximately by IterGP
(Algorithm 2, :mod:`.itergp`) with recycled, optionally compressed actions (Algorithm 3,
:mod:`.recycling`). Its posterior ``GP(m_ij, K_ij)`` (Eqs. 8-9) contains the *computational
uncertainty* of stopping the solver early: with few iterations the variance stays close to the
prior; with unit-vector actions run to ``N C`` iterations it is the exact Laplace
approximation.

Shapes (C = ``likelihood.num_latents``):

* ``fit(X, y)``: ``X`` ``(n, d)``, ``y`` ``(*b, n)`` (leading batch dimensions allowed).
* ``predict_f(X)``: ``X`` ``(..., m, d)``. Scalar likelihoods: mean ``(..., m)``, var ``(..., m)``,
  cov ``(..., m, m)``. Multi-class (C > 1): mean ``(..., m, C)``, var ``(..., m, C)`` and, with
  ``full_cov=True``, the per-class covariances ``(..., C, m, m)`` (the cross-class covariances
  that the Laplace posterior also has are returned per point by :meth:`predict_f_joint`).
  A model with batch shape ``*b`` (batched targets, fantasies) broadcasts ``*b`` against ``...``.

Multi-class models use C latent GPs that are independent a priori: a kernel without batch
shape is shared by all of them, a kernel with ``batch_shape == (C,)`` gives each its own
hyperparameters. Hyperparameters are fixed during ``fit`` (as in the paper).
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Literal, NamedTuple

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, NumericalWarning, UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Gaussian, Likelihood, Poisson, Softmax, soft_targets
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.linalg._args import check_count, check_positive
from bo_ncgp.models._checks import check_device, check_inputs, model_dtype, module_device
from bo_ncgp.models.base import Callback, LatentGP, check_kernel_and_likelihood
from bo_ncgp.models.iterncgp.belief import Belief
from bo_ncgp.models.iterncgp.newton import LaplaceState, NewtonConfig, newton_laplace
from bo_ncgp.models.iterncgp.operators import LatentKernelOperator, _check_kernel
from bo_ncgp.models.iterncgp.policies import Policy, make_policy
from bo_ncgp.models.iterncgp.problem import PseudoRegressionProblem
from bo_ncgp.models.iterncgp.recycling import ActionBuffers
from bo_ncgp.models.training import FitClock

__all__ = ["IterNCGP", "RatePrediction"]

#: what the predictive variance contains (:meth:`IterNCGP.predict_f`)
Uncertainty = Literal["combined", "mathematical"]


def _samples(num_samples: int) -> int:
    """The number of Monte-Carlo samples, checked."""
    return check_count(num_samples, "num_samples", "IterNCGP", minimum=1)


class RatePrediction(NamedTuple):
    """Monte-Carlo summary of the Poisson rate ``exp(f)`` at test inputs (Sec. C.2).

    Returned by :meth:`IterNCGP.predict_rate`; every field has the shape of the test batch.

    Example:
        >>> from bo_ncgp.likelihoods import Poisson
        >>> X = torch.linspace(0, 1, 10).unsqueeze(-1)
        >>> y = torch.tensor([1.0, 2, 2, 3, 4, 5, 6, 8, 9, 12])
        >>> model = IterNCGP(gpytorch.kernels.RBFKernel(), Poisson(), backend="dense").fit(X, y)
        >>> gen = torch.Generator().manual_seed(0)
        >>> rate = model.predict_rate(X[:3], num_samples=500, generator=gen)
        >>> rate.mean.shape, bool(((rate.lower <= rate.median) & (rate.median <= rate.upper)).all())
        (torch.Size([3]), True)
    """

    mean: Tensor
    median: Tensor
    lower: Tensor
    upper: Tensor


class IterNCGP(torch.nn.Module, LatentGP):
    """Computation-aware Laplace approximation of a GP with a non-Gaussian likelihood.

    Args:
        kernel: GPyTorch kernel (batch shape ``()`` shared, or ``(C,)`` per latent function).
        likelihood: a :mod:`bo_ncgp.likelihoods` likelihood (Bernoulli, Binomial, Poisson,
            Gaussian, Softmax(C)).
        policy: ``"cg"`` (residual actions), ``"pcg"`` (Jacobi-preconditioned residual
            actions: fewer actions to the Laplace variances on classification data),
            ``"unit_vector"`` (data order) or a
            :class:`~bo_ncgp.models.iterncgp.policies.Policy` instance (e.g.
            ``UnitVectorPolicy(permutation)``).
        max_solver_iters_per_step: IterGP iterations per Newton step (products with ``K``);
            None: until the residual tolerance is met.
        max_newton_steps: Newton steps (outer iterations).
        recycle: carry the actions ``S`` and ``T = K S`` across Newton steps (Sec. 3.3).
        compression_rank: ``R`` of the virtual solver run (Sec. 3.4; None: no compression).
        tol: outer tolerance ``delta`` on the relative change of ``f - m`` (Sec. B.2).
        solver_rtol, solver_atol: inner tolerances on ``||r_j||`` (Sec. B.2).
        backend: :class:`~bo_ncgp.linalg.KernelOperator` backend for products with ``K``.
            ``"auto"`` (default) caches the dense ``K`` (one BLAS product per solver
            iteration) when it fits in half of the available memory with the temporaries of
            its evaluation, and uses KeOps (when installed) or chunked products otherwise
            (:func:`~bo_ncgp.linalg.backend.choose_backend`; the choice is logged at debug
            level).
        mean: optional GPyTorch mean module (default: zero mean).
        line_search: damp a Newton step that would decrease the log posterior
            (:mod:`.linesearch`; an extension of the paper, whose Algorithm 1 is
            ``line_search=False``). Steps that increase it -- all steps near the mode -- are
            the paper's full steps. ``None`` (default): on for every likelihood except the
            Gaussian (whose first step is exact). Full steps overshoot for Poisson counts
            and for softmax models whose logits saturate (10-class mixture, outputscale 2:
            the undamped iteration diverges even with 50 CG iterations per step).
            Convergence is always judged on the full step.
        covariance_targets: after the Newton iteration stops, one more Newton step at its last
            iterate whose solver takes one block action for the posterior covariance
            (:class:`~bo_ncgp.models.iterncgp.policies.CovariancePolicy`): ``W K(X, Z)`` for
            this many pivot points ``Z`` of the prior kernel, with the mean's preconditioned
            residual, in one product with ``K``. It removes most of the computational
            uncertainty from the predictive variances at a fraction of the exact Laplace
            approximation's cost (``0``, default: no such step). :meth:`condition` runs
            the usual Newton steps only.

    Example:
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> X = torch.linspace(0, 1, 30).unsqueeze(-1)
        >>> y = (X[:, 0] > 0.5).double()
        >>> model = IterNCGP(gpytorch.kernels.RBFKernel(), Bernoulli(), policy="cg",
        ...                  max_solver_iters_per_step=5).fit(X, y)
        >>> p = model.predict_proba(torch.tensor([[0.1], [0.9]]))  # class-1 probabilities
        >>> bool(p[0] < 0.5 < p[1])
        True
    """

    supports_fit = True

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        likelihood: Likelihood,
        policy: str | Policy = "cg",
        max_solver_iters_per_step: int | None = 10,
        max_newton_steps: int = 20,
        recycle: bool = True,
        compression_rank: int | None = None,
        tol: float = 1e-2,
        solver_rtol: float = 1e-5,
        solver_atol: float = 1e-5,
        backend: Literal["auto", "dense", "chunked", "keops"] = "auto",
        mean: gpytorch.means.Mean | None = None,
        line_search: bool | None = None,
        covariance_targets: int = 0,
    ) -> None:
        super().__init__()
        check_kernel_and_likelihood("IterNCGP", kernel, likelihood)
        _check_kernel(kernel, likelihood.num_latents)
        who = "IterNCGP"
        if max_solver_iters_per_step is not None:
            check_count(max_solver_iters_per_step, "max_solver_iters_per_step", who)
        check_count(max_newton_steps, "max_newton_steps", who, minimum=1)
        if compression_rank is not None:
            check_count(compression_rank, "compression_rank", who)
        check_count(covariance_targets, "covariance_targets", who)
        for key, value in (
            ("tol", tol),
            ("solver_rtol", solver_rtol),
            ("solver_atol", solver_atol),
        ):
            check_positive(value, key, who, allow_zero=True)
        if backend not in ("auto", "dense", "chunked", "keops"):
            raise InputDataError(
                f"IterNCGP: unknown backend {backend!r}; use 'auto', 'dense', 'chunked' or 'keops'"
            )
        self.kernel = kernel
        self.likelihood = likelihood
        self.mean_module = mean if mean is not None else gpytorch.means.ZeroMean()
        self.policy = make_policy(policy)
        self.config = NewtonConfig(
            max_newton_steps=int(max_newton_steps),
            max_solver_iters=None
            if max_solver_iters_per_step is None
            else int(max_solver_iters_per_step),
            tol=float(tol),
            solver_atol=float(solver_atol),
            solver_rtol=float(solver_rtol),
            recycle=bool(recycle),
            compression_rank=None if compression_rank is None else int(compression_rank),
            line_search=not isinstance(likelihood, Gaussian)
            if line_search is None
            else bool(line_search),
            covariance_targets=int(covariance_targets),
        )
        self.backend = backend
        self._reset_state()

    @classmethod
    def exact_laplace(
        cls,
        kernel: gpytorch.kernels.Kernel,
        likelihood: Likelihood,
        num_data: int,
        **settings,
    ) -> IterNCGP:
        """IterNCGP set up as the exact Laplace approximation (Tatzel et al., Theorem A.2):
        unit-vector actions, ``num_data * C`` solver iterations per Newton step (the whole
        data set), solver tolerances off, dense kernel matrices; ``settings`` (other
        constructor arguments, e.g. ``max_newton_steps``, ``tol``) are passed on.

        Example:
            >>> from bo_ncgp.likelihoods import Bernoulli
            >>> X = torch.linspace(0, 1, 12).unsqueeze(-1)
            >>> y = (X[:, 0] > 0.5).double()
            >>> model = IterNCGP.exact_laplace(gpytorch.kernels.RBFKernel(), Bernoulli(), 12)
            >>> model.fit(X, y).num_solver_iters % 12, model.config.solver_rtol
            (0, 0.0)
        """
        exact = {
            "policy": "unit_vector",
            "max_solver_iters_per_step": num_data * likelihood.num_latents,
            "solver_rtol": 0.0,
            "solver_atol": 0.0,
            "backend": "dense",
        }
        return cls(kernel, likelihood, **{**exact, **settings})

    # ------------------------------------------------------------------ state
    def _reset_state(self) -> None:
        self._X: Tensor | None = None
        self._y: Tensor | None = None
        self._K: LatentKernelOperator | None = None
        self._m: Tensor | None = None
        self._state: LaplaceState | None = None
        self._belief: Belief | None = None
        self._mean_weights: Tensor | None = None
        self._fitted_policy: Policy | None = None
        self._problem: PseudoRegressionProblem | None = None
        self._exact: Tensor | None = None
        self.history: list = []
        self.num_solver_iters = 0
        self.fit_seconds = 0.0

    @property
    def train_inputs(self) -> Tensor | None:
        """The training inputs (``None`` before :meth:`fit`)."""
        return self._X

    @property
    def train_targets(self) -> Tensor | None:
        """The training targets (``None`` before :meth:`fit`)."""
        return self._y

    @property
    def batch_shape(self) -> torch.Size:
        """Batch shape of the model (fantasies), ``()`` for a plain model."""
        self._require_fit()
        return torch.broadcast_shapes(self._y.shape[:-1], self._X.shape[:-2])

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` has run."""
        return self._belief is not None

    def _require_fit(self) -> None:
        if self._belief is None:
            raise RuntimeError("IterNCGP: call fit(X, y) before predicting or conditioning")

    def _apply(self, fn, *args, **kwargs):
        """A fitted model keeps its belief with the training data: moving it to another device
        is an error (an unfitted one moves like any module)."""
        if self._X is not None:
            probe = fn(torch.empty(0, dtype=self._X.dtype, device=self._X.device))
            if probe.device != self._X.device:
                raise UnsupportedError(
                    f"IterNCGP: a fitted model stays on {self._X.device}, where its training data "
                    f"and belief are; build it on {probe.device} and fit it there"
                )
        return super()._apply(fn, *args, **kwargs)

    # ------------------------------------------------------------- validation
    def _check_inputs(self, X: Tensor, name: str = "X", train: bool = True) -> Tensor:
        dims = None if self._X is None else self._X.shape[-1]
        device = module_device(self.kernel) if self._X is None else self._X.device
        if self._X is not None:
            dtype = self._X.dtype  # the dtype of the fit
        else:  # a fit computes in the promoted dtype of the kernel and the data (lossless)
            dtype = model_dtype(self.kernel)
            if isinstance(X, Tensor) and X.is_floating_point():
                dtype = torch.promote_types(dtype, X.dtype)
        return check_inputs(
            X,
            "IterNCGP",
            name=name,
            dims=dims,
            matrix=train,
            allow_empty=not train,
            dtype=dtype,
            device=device,
        )

    def _check_targets(self, y: Tensor, X: Tensor, name: str = "y") -> Tensor:
        if not isinstance(y, Tensor):
            y = torch.as_tensor(y, device=X.device)
        check_device("IterNCGP", X.device, **{name: y})
        if y.dim() == 0 or y.shape[-1] != X.shape[-2]:
            raise InputDataError(
                f"IterNCGP: {name} must have shape (*b, n) with n = {X.shape[-2]} points (the "
                f"rows of X), got {tuple(y.shape)}"
            )
        checked = self.likelihood.check_targets(y)  # labels / counts / NaN, raises ValueError
        if isinstance(self.likelihood, Softmax):
            # class indices (long) also for integer-valued float labels (BoTorch fantasies),
            # so that conditioning a long-label model keeps long targets
            return checked.to(device=X.device)
        return y.to(device=X.device, dtype=X.dtype)

    def _prior_mean(self, X: Tensor) -> Tensor:
        """``m(X)`` as ``(..., 1|C, n)``."""
        m = self.mean_module(X.unsqueeze(-3))
        return m.to(dtype=X.dtype)

    # -------------------------------------------------------------------- fit
    def fit(self, X: Tensor, y: Tensor, *, callback: Callback | None = None) -> IterNCGP:
        """Run IterNCGP (Algorithm 1) on ``(X, y)`` from the prior mean.

        Args:
            X: ``(n, d)`` training inputs.
            y: ``(*b, n)`` targets (labels for classifiers, counts for Poisson/Binomial).
            callback: ``callback(FitStep) -> bool | None``, called after the initial belief of
                every Newton step (``info["solver_iter"] == 0``) and after every solver
                iteration, with ``info = {"newton_step": i, "solver_iter": j}``; ``FitStep.model``
                (this model) predicts with the current belief and ``FitStep.seconds`` excludes
                the time spent in callbacks. Returning True stops the fit (the model keeps the
                current belief).

        Returns:
            self.
        """
        X = self._check_inputs(X)
        y = self._check_targets(y, X)
        self._reset_state()
        self._X, self._y = X, y
        self._K = LatentKernelOperator(self.kernel, X, self.num_latents, self.backend)
        with torch.no_grad():
            self._m = self._prior_mean(X).unsqueeze(-1)  # (1|C, n, 1)
            C, n = self.num_latents, X.shape[-2]
            f0 = self._m.expand(*y.shape[:-1], C, n, 1)
            policy = copy.deepcopy(self.policy)
            self._run(f0, policy, self.config, None, callback, None)
        return self

    def _run(
        self,
        f0: Tensor,
        policy: Policy,
        config: NewtonConfig,
        buffers: ActionBuffers | None,
        callback: Callback | None,
        w0: Tensor | None,
    ) -> None:
        clock = FitClock()
        total, calls = [0], [0]

        def hook(i: int, j: int, belief: Belief, problem: PseudoRegressionProblem) -> bool:
            if j > 0:
                total[0] += 1
            self._belief, self._problem, self._exact = belief, problem, None
            self._mean_weights = belief.v  # Eq. 8 with the current v_j
            self.num_solver_iters = total[0]
            if callback is None:
                return False
            self.fit_seconds = clock.elapsed()
            calls[0] += 1
            info = {"newton_step": i, "solver_iter": j}
            return clock.notify(callback, calls[0] - 1, self, info=info)

        state = newton_laplace(
            self._K, self.likelihood, self._y, self._m, f0, policy, config, buffers, hook, w0
        )
        self._state = state
        self._belief = state.belief
        # the final iterate f = m + K w (w = v_j unless the last step was damped)
        self._mean_weights = state.w
        self._fitted_policy = policy
        self.history = state.steps
        self.num_solver_iters = total[0]
        self.fit_seconds = clock.elapsed()

    # ------------------------------------------------------------- predictions
    def _components(
        self, X: Tensor, uncertainty: Uncertainty = "combined"
    ) -> tuple[Tensor, Tensor]:
        """Mean ``(..., C, m)`` and ``A = K(X, X_train) Q`` ``(..., C, m, B)`` (``Q``: the root
        of ``C_j``, or of ``K_hat^{-1}`` for the mathematical uncertainty)."""
        self._require_fit()
        X = self._check_inputs(X, train=False)
        if uncertainty == "combined":
            root = self._belief.Q
        elif uncertainty == "mathematical":
            root = self._exact_root()
        else:
            raise InputDataError(
                f"IterNCGP: uncertainty must be 'combined' or 'mathematical', got {uncertainty!r}"
            )
        w = self._mean_weights
        batch = torch.broadcast_shapes(w.shape[:-1], root.shape[:-1])
        V = torch.cat([w.expand(*batch, 1), root.expand(*batch, root.shape[-1])], dim=-1)
        KV = self._K.cross_matmul(X, V)
        mean = self._prior_mean(X) + KV[..., 0]  # Eq. 8
        return mean, KV[..., 1:]

    def _exact_root(self) -> Tensor:
        """``L^{-T}`` with ``L L^T = K_hat(f_i) = K + W(f_i)^{-1}`` of the last Newton step:
        the root of the precision that ``C_j`` approximates (dense, O(n^3); cached)."""
        if self.num_latents != 1:
            raise UnsupportedError(
                "IterNCGP: the mathematical uncertainty alone is available for scalar "
                f"likelihoods, got {self.likelihood.name} with {self.num_latents} latents"
            )
        if self._exact is None:
            X = self._X
            eye = torch.eye(X.shape[-2], dtype=X.dtype, device=X.device).unsqueeze(0)
            # the targets were checked when the model was fitted or conditioned (relaxed ones,
            # e.g. fantasies, inside soft_targets()): W^{-1} is recomputed without a new check
            with torch.no_grad(), soft_targets():
                L = stable_cholesky(self._problem.matmul(eye), name="K + W^{-1}")
                self._exact = torch.linalg.solve_triangular(L.mT, eye, upper=True)
        return self._exact

    def _latent_var(self, X: Tensor, A: Tensor) -> Tensor:
        prior = self._K.prior_diag(X)
        var = prior - A.square().sum(-1)  # Eq. 9, diagonal
        return self._clamp_var(var, prior)

    @staticmethod
    def _clamp_var(var: Tensor, prior: Tensor) -> Tensor:
        bad = var < -1e-6 * prior.abs().clamp_min(1e-12)
        if bool(bad.any()):
            warnings.warn(
                f"IterNCGP: {int(bad.sum())} predictive variances were negative (min "
                f"{float(var.detach().min()):.3e}) from round-off and were clamped to zero",
                NumericalWarning,
                stacklevel=3,
            )
        return var.clamp_min(0)

    def _to_output(self, T: Tensor) -> Tensor:
        """``(..., C, m)`` -> ``(..., m)`` or ``(..., m, C)``."""
        return T[..., 0, :] if self.num_latents == 1 else T.transpose(-1, -2)

    def predict_f(
        self, X: Tensor, full_cov: bool = False, uncertainty: Uncertainty = "combined"
    ) -> tuple[Tensor, Tensor]:
        """Latent posterior ``GP(m_ij, K_ij)`` (Eqs. 8-9), including computational uncertainty.

        Args:
            X: ``(..., m, d)`` test inputs.
            full_cov: return the covariance matrix instead of the marginal variance.
            uncertainty: ``"combined"`` (default): mathematical plus computational
                uncertainty, ``K - K(., X) C_j K(X, .)`` (Eq. 9); ``"mathematical"``: the
                Laplace covariance of the current Newton step, ``K - K(., X) K_hat^{-1}
                K(X, .)`` with ``K_hat = K + W(f_i)^{-1}`` (Wenger et al. 2022; their
                difference is the computational uncertainty, never negative). The mean is
                Eq. 8 in both cases. ``"mathematical"`` needs a scalar likelihood and
                factorises the ``n x n`` ``K_hat`` once per model.

        Returns:
            ``(mean, var)`` or ``(mean, cov)``; shapes in the module docstring. Differentiable
            with respect to ``X`` (the solver's state is held fixed).

        Example:
            >>> from bo_ncgp.likelihoods import Bernoulli
            >>> X = torch.linspace(0, 1, 20, dtype=torch.float64).unsqueeze(-1)
            >>> model = IterNCGP(gpytorch.kernels.RBFKernel(), Bernoulli(),
            ...                  max_solver_iters_per_step=2, max_newton_steps=3)
            >>> model = model.fit(X, (X[:, 0] > 0.5).double())
            >>> _, combined = model.predict_f(X)
            >>> _, math_only = model.predict_f(X, uncertainty="mathematical")
            >>> bool((combined >= math_only - 1e-10).all()), bool((combined > math_only).any())
            (True, True)
        """
        mean, A = self._components(X, uncertainty)
        if not full_cov:
            return self._to_output(mean), self._to_output(self._latent_var(X, A))
        cov = self._K.prior_cov(X) - A @ A.mT
        if self.num_latents == 1:
            cov = cov[..., 0, :, :]
        return self._to_output(mean), cov

    def predict_f_joint(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``(..., m, C)`` and the per-point covariance across latents ``(..., m, C, C)``.

        ``Cov(f_c(x), f_c'(x)) = delta_cc' k_c(x, x) - [K_c(x, X) Q_c] [K_c'(x, X) Q_c']^T``.
        """
        mean, A = self._components(X)
        prior = self._K.prior_diag(X)  # (..., C|1, m)
        A = A.transpose(-3, -2)  # (..., m, C, B)
        cov = torch.diag_embed(prior.transpose(-1, -2).expand(*A.shape[:-1])) - A @ A.mT
        return mean.transpose(-1, -2), cov

    def predict_proba(
        self,
        X: Tensor,
        method: Literal["probit", "mc", "quadrature"] = "probit",
        num_samples: int = 512,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Predictive class probabilities.

        Args:
            X: ``(..., m, d)``.
            method: ``"probit"``: ``sigmoid(m / sqrt(1 + pi v / 8))`` (binary) or
                ``softmax(m / sqrt(1 + pi v / 8))`` (softmax, Sec. C.3; MacKay 1992);
                ``"mc"``: Monte Carlo with ``num_samples`` draws (softmax: from the joint
                per-point C x C covariance); ``"quadrature"``: Gauss-Hermite (binary only).
            num_samples: Monte-Carlo samples.
            generator: random generator for ``"mc"``.

        Returns:
            ``(..., m)`` probability of the positive class (Bernoulli) or ``(..., m, C)``.
        """
        lik = self.likelihood
        if not isinstance(lik, Bernoulli | Softmax):
            raise UnsupportedError(
                f"IterNCGP.predict_proba: needs a Bernoulli or Softmax likelihood, got "
                f"{lik.name}; use predict_y (or predict_rate for Poisson)"
            )
        if method not in ("probit", "mc", "quadrature"):
            raise InputDataError(f"IterNCGP.predict_proba: unknown method {method!r}")
        if method == "probit":
            mean, var = self.predict_f(X)
            kappa = torch.rsqrt(1 + math.pi / 8 * var)
            if isinstance(lik, Bernoulli):
                return torch.sigmoid(mean * kappa)
            return torch.softmax(mean * kappa, dim=-1)
        if method == "quadrature":
            if not isinstance(lik, Bernoulli):
                raise UnsupportedError("IterNCGP.predict_proba: 'quadrature' is for binary models")
            mean, var = self.predict_f(X)
            return lik.predictive_mean(mean, var)
        if isinstance(lik, Bernoulli):
            mean, var = self.predict_f(X)
            eps = self._normal((_samples(num_samples), *mean.shape), mean, generator)
            return torch.sigmoid(mean + var.sqrt() * eps).mean(0)
        mean, cov = self.predict_f_joint(X)
        L = stable_cholesky(cov, name="per-point latent covariance")
        eps = self._normal((_samples(num_samples), *mean.shape), mean, generator)
        f = mean + (L @ eps.unsqueeze(-1)).squeeze(-1)
        return torch.softmax(f, dim=-1).mean(0)

    @staticmethod
    def _normal(shape: tuple, like: Tensor, generator: torch.Generator | None) -> Tensor:
        dev = "cpu" if generator is None else generator.device  # draws on the generator's device
        eps = torch.randn(shape, generator=generator, dtype=like.dtype, device=dev)
        return eps.to(like.device)

    def predict_rate(
        self,
        X: Tensor,
        num_samples: int = 1000,
        level: float = 0.95,
        generator: torch.Generator | None = None,
    ) -> RatePrediction:
        """Poisson: Monte-Carlo distribution of the rate ``exp(f)`` (Sec. C.2).

        Returns the MC mean, median and central ``level`` interval, each ``(..., m)``.
        """
        if not isinstance(self.likelihood, Poisson):
            raise UnsupportedError("IterNCGP.predict_rate: needs a Poisson likelihood")
        if not 0 < level < 1:
            raise InputDataError(f"IterNCGP.predict_rate: level must be in (0, 1), got {level}")
        mean, var = self.predict_f(X)
        eps = self._normal((_samples(num_samples), *mean.shape), mean, generator)
        rate = torch.exp(mean + var.sqrt() * eps)
        q = torch.tensor(
            [0.5, (1 - level) / 2, (1 + level) / 2], dtype=rate.dtype, device=rate.device
        )
        med, lo, hi = torch.quantile(rate, q, dim=0)
        return RatePrediction(mean=rate.mean(0), median=med, lower=lo, upper=hi)

    # ------------------------------------------------------------ diagnostics
    @property
    def mode(self) -> Tensor:
        """Last Newton iterate at the training inputs: ``(*b, n)`` or ``(*b, n, C)``."""
        self._require_fit()
        return self._to_output(self._state.f[..., 0])

    @property
    def buffer_size(self) -> int:
        """Columns of the recycling buffers ``S``, ``T``."""
        self._require_fit()
        return self._state.S.shape[-1]

    def state_nbytes(self) -> int:
        """Bytes held by the solver state (``S``, ``T``, ``Q``, ``K Q``, ``v``, ``f``): O(B N C)."""
        self._require_fit()
        st, b = self._state, self._belief
        ts = [st.S, st.T, st.f, st.w, b.Q, b.KQ, b.v, b.Kv]
        return sum(t.numel() * t.element_size() for t in ts)

    # ------------------------------------------------------------ conditioning
    def condition(
        self,
        X_new: Tensor,
        y_new: Tensor,
        *,
        num_iters: int = 5,
        max_newton_steps: int = 2,
        callback: Callback | None = None,
    ) -> IterNCGP:
        """A new model that also includes ``(X_new, y_new)``, warm-started from this one.

        The new model starts from the current mode (extended to ``X_new`` by the predictive
        mean) and from this model's recycled buffers ``S``, ``T`` (extended by zero rows and
        ``K(X_new, X) S``: one cross-kernel product with ``n_new x n`` entries), then runs
        ``max_newton_steps`` Newton steps with ``num_iters`` solver iterations each (always
        recycling). ``self`` is not modified; kernel and likelihood modules are shared.

        Args:
            X_new: ``(*bx, n_new, d)``; batched inputs (BoTorch t-batches) give the new model
                batched training inputs ``(*bx, n + n_new, d)`` (dense/chunked kernel products).
            y_new: ``(*b, n_new)``; leading batch dimensions (fantasies) are vectorised: the
                new model has batch shape ``broadcast(self.batch_shape, *b, *bx)`` and its
                buffers are that many times larger.
            num_iters: solver iterations per Newton step.
            max_newton_steps: Newton steps.
            callback: as in :meth:`fit`.

        Cost: ``max_newton_steps * num_iters`` products with the ``(n + n_new)``-point kernel
        plus the cross product above, against ``J`` products of a full refit.
        """
        self._require_fit()
        X_new = self._check_inputs(X_new, "X_new", train=False)
        if X_new.shape[-2] == 0:
            raise InputDataError("IterNCGP: X_new is empty (no data points)")
        y_new = self._check_targets(y_new, X_new, "y_new")
        if X_new.dtype != self._X.dtype or X_new.device != self._X.device:
            raise InputDataError(
                "IterNCGP.condition: X_new must match the training dtype and device"
            )
        if int(num_iters) < 0 or int(max_newton_steps) < 1:
            raise InputDataError(
                "IterNCGP.condition: need num_iters >= 0 and max_newton_steps >= 1"
            )
        n, n_new, C, d = self._X.shape[-2], X_new.shape[-2], self.num_latents, X_new.shape[-1]
        try:
            batch = torch.broadcast_shapes(
                self._y.shape[:-1], y_new.shape[:-1], self._X.shape[:-2], X_new.shape[:-2]
            )
            xbatch = torch.broadcast_shapes(self._X.shape[:-2], X_new.shape[:-2])
        except RuntimeError as err:
            raise InputDataError(
                f"IterNCGP.condition: batch shapes do not broadcast: model "
                f"{tuple(self.batch_shape)}, X_new {tuple(X_new.shape)}, y_new {tuple(y_new.shape)}"
            ) from err
        new = IterNCGP(
            self.kernel,
            self.likelihood,
            policy=self.policy,
            max_solver_iters_per_step=self.config.max_solver_iters,
            max_newton_steps=self.config.max_newton_steps,
            recycle=True,
            compression_rank=self.config.compression_rank,
            tol=self.config.tol,
            solver_rtol=self.config.solver_rtol,
            solver_atol=self.config.solver_atol,
            backend=self.backend,
            mean=self.mean_module,
            line_search=self.config.line_search,
        )
        config = copy.deepcopy(new.config)
        config.max_solver_iters = int(num_iters)
        config.max_newton_steps = int(max_newton_steps)
        X_all = torch.cat([self._X.expand(*xbatch, n, d), X_new.expand(*xbatch, n_new, d)], -2)
        y_all = torch.cat([self._y.expand(*batch, n), y_new.expand(*batch, n_new)], dim=-1)
        new._X, new._y = X_all, y_all
        new._K = LatentKernelOperator(self.kernel, X_all, C, self.backend)
        with torch.no_grad():
            st = self._state
            new._m = self._prior_mean(X_all).unsqueeze(-1)
            # warm start: f at the new inputs = predictive mean; T rows = K(X_new, X) S
            V = torch.cat([st.w.expand(*st.S.shape[:-1], 1), st.S], dim=-1)
            KV = self._K.cross_matmul(X_new, V)
            f_new = self._prior_mean(X_new).unsqueeze(-1) + KV[..., :1]
            f0 = torch.cat(
                [st.f.expand(*batch, C, n, 1), f_new.expand(*batch, C, n_new, 1)], dim=-2
            )
            B = st.S.shape[-1]
            S0 = torch.cat(
                [st.S.expand(*batch, C, n, B), st.S.new_zeros(*batch, C, n_new, B)], dim=-2
            )
            T0 = torch.cat(
                [st.T.expand(*batch, C, n, B), KV[..., 1:].expand(*batch, C, n_new, B)], dim=-2
            )
            w0 = torch.cat(
                [st.w.expand(*batch, C, n, 1), st.w.new_zeros(*batch, C, n_new, 1)], dim=-2
            )
            base = self._fitted_policy if self._fitted_policy is not None else self.policy
            policy = base.extend(n, n_new)
            new._run(f0, policy, config, ActionBuffers(S0, T0), callback, w0)
        return new
