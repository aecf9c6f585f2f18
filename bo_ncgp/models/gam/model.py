"""Sparse variational generalised additive model (Adam, Durrande & John).

*Scalable GAM using sparse variational Gaussian processes*: the predictor is a sum of a priori
independent GPs, ``rho(x) = sum_c f_c(x[active_dims_c])``, observed through any scalar-latent
likelihood ``p(y_n | rho(x_n))`` (section 2.1). Each ``f_c`` has its own inducing inputs
``Z_c`` (section 3.2), ``q(F) = q(U) prod_c p(f_c | U_c)`` and the ELBO is Eq. 5,

    L(q) = sum_n E_{q(rho(x_n))}[log p(y_n | rho(x_n))] - KL[q(U) || p(U)],          (Eq. 5)

with the one-dimensional expectations by the likelihood's closed form or Gauss–Hermite rule
(:meth:`bo_ncgp.likelihoods.Likelihood.expected`). ``q(U)`` is one of the families of
:mod:`bo_ncgp.models.gam.variational`: ``"coupled_precision"`` (this paper, Eq. 7 and
Appendix C), ``"mean_field"`` (Saul et al. 2016) or ``"full"`` (Adam 2017). The marginal of the
sum at a point (Appendix C.1, C.3) and the posterior of each component ``f_c`` with its own
uncertainty (the ANOVA decomposition of Fig. 1) come from the same :class:`Projection`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import gpytorch
import torch
from torch import Tensor, nn

from bo_ncgp.exceptions import (
    InputDataError,
    NonFiniteError,
    NumericalWarning,
    UnsupportedError,
)
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import jittered, log_prior, solve_lower, stable_cholesky
from bo_ncgp.linalg._args import check_count, check_positive
from bo_ncgp.models._checks import check_device, check_inputs
from bo_ncgp.models.base import Callback, LatentGP, check_kernel_and_likelihood
from bo_ncgp.models.gam.components import AdditiveComponent, as_component
from bo_ncgp.models.gam.variational import FAMILIES, Projection, VariationalState
from bo_ncgp.models.training import NonFinitePolicy, minimize_adam

__all__ = ["SparseGAM"]


class SparseGAM(gpytorch.Module, LatentGP):
    """Sparse variational GAM with a mean-field, coupled-precision or full posterior.

    Args:
        components: the additive terms, each an :class:`AdditiveComponent` or a tuple
            ``(kernel, active_dims, inducing_points)``.
        likelihood: a scalar-latent likelihood of :mod:`bo_ncgp.likelihoods` (Gaussian,
            Bernoulli, Binomial, Poisson).
        posterior: ``"coupled_precision"`` (Eq. 7), ``"mean_field"`` or ``"full"``.
        whiten: parameterise ``q`` in whitened coordinates (see
            :mod:`~bo_ncgp.models.gam.variational`); ``False`` is the paper's own
            ``q(U) = N(K_UU alpha, Sigma_UU)``.
        rank: columns of ``B`` for ``"coupled_precision"`` (default ``max_c M_c``, the paper's
            ``M``). The data part of the optimal precision (Eq. 6) has rank up to ``sum_c M_c``;
            on the section-7 example (N = 5000, C = 8) ``R = M`` left the ELBO 0.012 nats/point
            below the full family with bands too wide, while ``R = 3M`` matched it
            (experiments/adam/RESULTS.md).
        jitter: relative jitter added to every ``K_{U_c U_c}`` (times its mean diagonal), part
            of the prior of ``U`` so that the KL and predictions stay consistent; default
            ``1e-8`` in float64 and ``1e-5`` in lower precision. ``0`` disables it (rescue
            jitter of :func:`~bo_ncgp.linalg.stable_cholesky` still applies, with a warning).

    Example:
        >>> from gpytorch.kernels import RBFKernel, ScaleKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> Z = torch.linspace(0, 1, 8)
        >>> comps = [(ScaleKernel(RBFKernel()), [0], Z), (ScaleKernel(RBFKernel()), [1], Z)]
        >>> gam = SparseGAM(comps, Gaussian(0.1), posterior="coupled_precision")
        >>> X = torch.rand(50, 2); y = torch.sin(6 * X[:, 0]) + X[:, 1] ** 2
        >>> _ = gam.fit(X, y, num_steps=20, lr=0.05)
        >>> mean, var = gam.predict_f(torch.rand(3, 2))
        >>> comp_mean, comp_var = gam.predict_components(torch.rand(3, 2))
        >>> comp_mean.shape
        torch.Size([3, 2])
    """

    supports_fit = True

    def __init__(
        self,
        components: Sequence[AdditiveComponent | Sequence],
        likelihood: Likelihood,
        posterior: str = "coupled_precision",
        *,
        whiten: bool = True,
        rank: int | None = None,
        jitter: float | None = None,
    ) -> None:
        super().__init__()
        if isinstance(components, (AdditiveComponent, tuple)) or len(components) == 0:
            raise InputDataError("SparseGAM: components must be a non-empty list of components")
        comps = [as_component(spec, i) for i, spec in enumerate(components)]
        Z0 = comps[0].inducing_points
        for i, comp in enumerate(comps):
            if comp.inducing_points.dtype != Z0.dtype or comp.inducing_points.device != Z0.device:
                raise InputDataError(
                    f"SparseGAM: component {i} has inducing points of dtype/device "
                    f"{comp.inducing_points.dtype}/{comp.inducing_points.device}, component 0 "
                    f"has {Z0.dtype}/{Z0.device}"
                )
        check_kernel_and_likelihood("SparseGAM", likelihood=likelihood)
        if likelihood.num_latents != 1:
            raise UnsupportedError(
                f"SparseGAM: the additive predictor is scalar; {likelihood.name} has "
                f"{likelihood.num_latents} latents per point"
            )
        if posterior not in FAMILIES:
            raise InputDataError(
                f"SparseGAM: unknown posterior {posterior!r}; use one of {sorted(FAMILIES)}"
            )
        if rank is not None and posterior != "coupled_precision":
            raise InputDataError("SparseGAM: rank only applies to posterior='coupled_precision'")
        if jitter is None:
            jitter = 1e-8 if Z0.dtype == torch.float64 else 1e-5
        self.jitter = check_positive(jitter, "jitter", "SparseGAM", allow_zero=True)
        if rank is not None:
            rank = check_count(rank, "rank", "SparseGAM", minimum=1)
        self.components = nn.ModuleList(comps)
        self.likelihood = likelihood.to(dtype=Z0.dtype, device=Z0.device)
        sizes = [c.num_inducing for c in comps]
        family_kwargs = {"whiten": whiten, "dtype": Z0.dtype, "device": Z0.device}
        if posterior == "coupled_precision":
            family_kwargs["rank"] = rank
        self.variational = FAMILIES[posterior](sizes, **family_kwargs)
        #: ELBO per data point after each Adam step of the last :meth:`fit`
        self.history: list[float] = []
        with torch.no_grad():
            self.variational.initialize_from_prior(self._kuu())

    # ------------------------------------------------------------- properties
    @property
    def posterior_type(self) -> str:
        """``"coupled_precision"``, ``"mean_field"`` or ``"full"``."""
        return self.variational.name

    @property
    def num_components(self) -> int:
        """``C``."""
        return len(self.components)

    @property
    def input_dim(self) -> int:
        """Smallest number of input columns the model accepts (``max active dim + 1``)."""
        return 1 + max(int(c.active_dims.max()) for c in self.components)

    def _ref(self) -> Tensor:
        return self.components[0].inducing_points

    # ---------------------------------------------------------------- checks
    def _check_X(self, X: Tensor, allow_empty: bool = True, matrix: bool = False) -> Tensor:
        ref = self._ref()
        if isinstance(X, Tensor):  # before input_dim, which reads the model's tensors
            check_device("SparseGAM", ref.device, X=X)
        return check_inputs(
            X,
            "SparseGAM",
            min_dims=self.input_dim,
            matrix=matrix,
            allow_empty=allow_empty,
            dtype=ref.dtype,
            device=ref.device,
        )

    def _check_data(self, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        X = self._check_X(X, allow_empty=False, matrix=True)
        y = torch.as_tensor(y, device=None if isinstance(y, Tensor) else X.device)
        check_device("SparseGAM", X.device, y=y)
        if y.dim() == 2 and y.shape[-1] == 1:
            y = y[:, 0]
        if y.dim() != 1 or y.shape[0] != X.shape[0]:
            raise InputDataError(
                f"SparseGAM: y must have shape ({X.shape[0]},) to match X {tuple(X.shape)}, got "
                f"{tuple(y.shape)}"
            )
        y = self.likelihood.check_targets(y)
        return X, y.to(dtype=X.dtype) if y.is_floating_point() else y

    # ---------------------------------------------------------------- posterior
    def _kuu(self) -> list[Tensor]:
        """``K_{U_c U_c} + jitter * mean(diag) * I`` for every component."""
        return [jittered(comp.kuu(), self.jitter) for comp in self.components]

    def prior_state(self) -> VariationalState:
        """``K_{U_c U_c}``, their Cholesky factors if needed, and the family's factorisations."""
        Kuu = self._kuu()
        chol = None
        if self.variational.needs_cholesky:
            chol = [
                stable_cholesky(K, name=f"K_uu of component {i} ({c.name})")
                for i, (K, c) in enumerate(zip(Kuu, self.components, strict=True))
            ]
        return self.variational.prepare(Kuu, chol)

    def _project(self, X: Tensor, state: VariationalState | None) -> Projection:
        state = self.prior_state() if state is None else state
        return self.variational.project(state, [c.kux(X) for c in self.components])

    @staticmethod
    def _floor(var: Tensor, prior: Tensor, what: str) -> Tensor:
        """Clamp rounding-error negatives to ``eps * prior``; warn if they were not tiny."""
        eps = torch.finfo(var.dtype).eps
        floor = eps * prior.detach().abs().clamp_min(torch.finfo(var.dtype).tiny)
        if bool((var < -1e3 * floor).any()):
            warnings.warn(
                f"SparseGAM: {what} had negative entries down to {float(var.min()):.3e}; "
                "clamped (ill-conditioned K_uu or variational parameters)",
                NumericalWarning,
                stacklevel=3,
            )
        return torch.maximum(var, floor)

    def _check_subset(self, components: Sequence[int] | None) -> list[int]:
        if components is None:
            return list(range(self.num_components))
        idx = [int(i) for i in components]
        C = self.num_components
        if not idx or len(set(idx)) != len(idx) or any(not 0 <= i < C for i in idx):
            raise InputDataError(
                f"SparseGAM: components must be distinct indices in [0, {C}), got {components}"
            )
        return idx

    def _sum_marginals(
        self,
        X: Tensor,
        state: VariationalState | None = None,
        full_cov: bool = False,
        components: Sequence[int] | None = None,
    ) -> tuple[Tensor, Tensor]:
        proj = self._project(X, state)
        comps = list(self.components)
        if components is not None:
            idx = self._check_subset(components)
            proj, comps = proj.subset(idx), [comps[i] for i in idx]
        mean = proj.sum_mean()
        if full_cov:
            return mean, proj.sum_covariance([c.kxx(X, diag=False) for c in comps])
        kxx = [comp.kxx(X) for comp in comps]
        return mean, self._floor(proj.sum_variance(kxx), sum(kxx), "variance of the sum")

    def kl(self) -> Tensor:
        """``KL[q(U) || p(U)]`` at the current parameters."""
        return self.variational.kl(self.prior_state())

    def elbo(self, X: Tensor, y: Tensor, num_data: int | None = None) -> Tensor:
        """Evidence lower bound, Eq. 5 (a scalar; not divided by ``n``).

        Args:
            X: ``(n, d)`` inputs.
            y: ``(n,)`` targets (``(n, 1)`` accepted).
            num_data: total number of data points when ``(X, y)`` is a minibatch: the
                expected log-likelihood is rescaled by ``num_data / n`` (unbiased estimate).
        """
        X, y = self._check_data(X, y)
        state = self.prior_state()
        kl = self.variational.kl(state)
        mean, var = self._sum_marginals(X, state)
        exp_log_lik = self.likelihood.expected(y, mean, var)[0].sum()
        scale = 1.0 if num_data is None else float(num_data) / X.shape[0]
        return scale * exp_log_lik - kl

    def log_prior(self) -> Tensor:
        """Sum of the log densities of the GPyTorch priors registered on hyperparameters."""
        return log_prior(self, dtype=self._ref().dtype, device=self._ref().device)

    # --------------------------------------------------------------- prediction
    def predict_f(
        self, X: Tensor, full_cov: bool = False, components: Sequence[int] | None = None
    ) -> tuple[Tensor, Tensor]:
        """Posterior of the additive predictor ``rho = sum_c f_c`` at ``X (..., n, d)``.

        Args:
            X: ``(..., n, d)`` inputs (any leading batch dimensions).
            full_cov: return the joint covariance over the ``n`` points.
            components: only sum these components (default: all), e.g. ``[c]`` for the
                posterior of ``f_c`` alone with its joint covariance.

        Returns ``(mean (..., n), var (..., n))`` or ``(mean, cov (..., n, n))``;
        differentiable with respect to ``X`` and all parameters.
        """
        X = self._check_X(X)
        return self._sum_marginals(X, None, full_cov=full_cov, components=components)

    def forward(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        return self.predict_f(X, full_cov=full_cov)

    def predict_components(self, X: Tensor, joint: bool = False) -> tuple[Tensor, Tensor]:
        """Posterior of every component ``f_c`` at ``X (..., n, d)`` (Fig. 1).

        Returns:
            ``means (..., n, C)`` and either ``vars (..., n, C)`` or, with ``joint=True``, the
            covariance between the components at the same input, ``(..., n, C, C)`` (zero off
            the diagonal for the mean-field posterior; its sum is the variance of the sum).
        """
        X = self._check_X(X)
        proj = self._project(X, None)
        means = torch.stack(proj.means, dim=-1)
        kxx = [comp.kxx(X) for comp in self.components]
        prior = torch.stack(kxx, dim=-1)
        if not joint:
            return means, self._floor(proj.component_variances(kxx), prior, "component variance")
        cov = proj.component_covariance(kxx)
        diag = cov.diagonal(dim1=-2, dim2=-1)
        floored = self._floor(diag, prior, "component variance")
        return means, cov + torch.diag_embed(floored - diag)

    # ------------------------------------------------------------- initialise
    @torch.no_grad()
    def initialize_variational(self, X: Tensor, y: Tensor, num_newton_steps: int = 3) -> None:
        """Start ``q(U)`` from Newton / natural-gradient steps taken from the prior.

        In whitened coordinates ``v`` (``U_c = L_c v_c``) with ``Phi = [L_c^{-1} K_{U_c X}]_c``
        (``MC x n``), each step evaluates ``(alpha, beta) = E_q[d log p / d rho, -d^2 log p /
        d rho^2]`` with :meth:`Likelihood.expected` and sets the joint Gaussian
        ``N(m, (I + P)^{-1})``, ``P = Phi diag(beta) Phi^T``,
        ``m = (I + P)^{-1} Phi (alpha + beta * Phi^T m_old)`` -- a natural-gradient step of size
        one, exact after one step for a Gaussian likelihood (fixed hyperparameters). Each family
        then takes its nearest member (:meth:`VariationalFamily.assign_whitened`); for the
        coupled precision that is the best rank-``R`` approximation of ``P``, i.e. of the
        optimal structure of Eq. 6. Cost ``O(n (MC)^2 + (MC)^3)`` once.

        Without it, Adam must grow ``B`` from near zero to entries of order ``sqrt(n)``, which
        takes thousands of steps.

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> from bo_ncgp.likelihoods import Gaussian
            >>> gam = SparseGAM([(RBFKernel(), [0], torch.linspace(0, 1, 5))], Gaussian(0.1))
            >>> X = torch.rand(20, 1); gam.initialize_variational(X, torch.sin(6 * X[:, 0]))
            >>> mean, var = gam.predict_f(X.detach())  # the Gaussian-optimal q(u), no training
            >>> y = torch.sin(6 * X[:, 0])  # residual power well below the signal's:
            >>> bool(((mean - y) ** 2).mean() < 0.5 * (y**2).mean()), bool((var > 0).all())
            (True, True)
        """
        X, y = self._check_data(X, y)
        if num_newton_steps < 1:
            raise InputDataError(f"num_newton_steps must be >= 1, got {num_newton_steps}")
        Kuu = self._kuu()
        chol = [stable_cholesky(K, name=f"K_uu of component {i}") for i, K in enumerate(Kuu)]
        a = [solve_lower(L, comp.kux(X)) for L, comp in zip(chol, self.components, strict=True)]
        Phi = torch.cat(a, dim=0)  # (MC, n)
        kxx = [comp.kxx(X) for comp in self.components]
        cond = sum(k - ac.square().sum(-2) for k, ac in zip(kxx, a, strict=True)).clamp_min(0)
        eye = torch.eye(Phi.shape[0], dtype=Phi.dtype, device=Phi.device)
        mean_sum = torch.zeros_like(y, dtype=Phi.dtype)
        var_sum = cond + Phi.square().sum(0)  # prior: v ~ N(0, I)
        for _ in range(num_newton_steps):
            _, alpha, beta = self.likelihood.expected(y, mean_sum, var_sum)
            if not bool(torch.isfinite(alpha).all() & torch.isfinite(beta).all()):
                raise NonFiniteError(
                    "SparseGAM.initialize_variational: the likelihood's expected gradient or "
                    f"curvature overflowed at max |mean| = {float(mean_sum.abs().max()):.3g}: "
                    "the targets are far from the zero prior mean of the additive predictor "
                    "(e.g. counts in the millions under a Poisson likelihood); rescale them"
                )
            P = (Phi * beta) @ Phi.mT
            LP = stable_cholesky(eye + P, name="I + Phi diag(beta) Phi^T")
            m = torch.cholesky_solve((Phi @ (alpha + beta * mean_sum)).unsqueeze(-1), LP)[:, 0]
            mean_sum = Phi.mT @ m
            var_sum = cond + solve_lower(LP, Phi).square().sum(0)
        self.variational.assign_whitened(m, 0.5 * (P + P.mT), chol)

    # --------------------------------------------------------------------- fit
    def fit(
        self,
        X: Tensor,
        y: Tensor,
        *,
        callback: Callback | None = None,
        num_steps: int = 1000,
        lr: float = 0.01,
        batch_size: int | None = None,
        progress: bool = False,
        generator: torch.Generator | None = None,
        init_variational: bool = True,
        refresh_every: int | None = None,
        on_nonfinite: NonFinitePolicy = "stop",
    ) -> SparseGAM:
        """Maximise the ELBO (Eq. 5, plus hyperparameter log priors) with Adam.

        All parameters with ``requires_grad`` are optimised: variational parameters, kernel
        hyperparameters, likelihood parameters, and inducing inputs if learnable (freeze any
        with ``p.requires_grad_(False)``). The steps go through
        :func:`bo_ncgp.models.training.minimize_adam` (its non-finite policy included); the ELBO
        per data point after each step's forward pass is kept in :attr:`history`.

        Args:
            X, y: ``(n, d)`` inputs and ``(n,)`` targets.
            callback: ``callback(FitStep) -> bool | None`` after every Adam step
                (``FitStep.loss`` is the negative objective per data point); ``True`` stops.
            num_steps: Adam steps.
            lr: Adam learning rate.
            batch_size: minibatch size (``None``: full batch); minibatches are drawn without
                replacement at every step and the ELBO is rescaled by ``n / batch_size``.
            progress: show a tqdm progress bar.
            generator: random generator for the minibatches.
            init_variational: first call :meth:`initialize_variational` on ``(X, y)`` (at the
                current hyperparameters). Pass ``False`` to continue from the current ``q``.
            refresh_every: every this many steps, propose :meth:`initialize_variational` at
                the current hyperparameters (a natural-gradient step from the prior, projected
                onto the family) and keep it if it raises the full-data ELBO. Hyperparameter moves
                rotate the whitened coordinates, which Adam tracks slowly; this lets ``q``
                follow. Costs one :meth:`initialize_variational` and two full-data ELBOs.
            on_nonfinite: ``"stop"`` (warn and keep the parameters before the bad step) or
                ``"raise"`` (:mod:`bo_ncgp.models.training`).

        Returns:
            ``self``.
        """
        X, y = self._check_data(X, y)
        n = X.shape[0]
        who = "SparseGAM.fit"
        num_steps = check_count(num_steps, "num_steps", who)
        if batch_size is not None:
            batch_size = check_count(batch_size, "batch_size", who, minimum=1)
        if refresh_every is not None:
            refresh_every = check_count(refresh_every, "refresh_every", who, minimum=1)
        check_positive(lr, "lr", who)
        params = [p for p in self.parameters() if p.requires_grad]
        if not params:
            raise UnsupportedError("SparseGAM.fit: no parameter requires grad")
        if init_variational:
            self.initialize_variational(X, y)

        def loss(step: int) -> Tensor:
            if batch_size is None or batch_size >= n:
                Xb, yb = X, y
            else:
                dev = "cpu" if generator is None else generator.device
                idx = torch.randperm(n, generator=generator, device=dev)[:batch_size]
                idx = idx.to(X.device)
                Xb, yb = X[idx], y[idx]
            return -(self.elbo(Xb, yb, num_data=n) + self.log_prior()) / n

        def refresh(step: int) -> None:
            if refresh_every is not None and (step + 1) % refresh_every == 0:
                # Adam's moments are kept: re-initialising them would make the next step a
                # sign step of size lr in every coordinate, far too large for a sharp q
                self._refresh_variational(X, y)

        self.train()
        losses = minimize_adam(
            params,
            loss,
            num_steps,
            lr=lr,
            model=self,
            callback=callback,
            on_nonfinite=on_nonfinite,
            after_step=refresh,
            progress=f"SparseGAM[{self.posterior_type}]" if progress else None,
            name="SparseGAM.fit",
        )
        self.eval()
        self.history = [-v for v in losses]
        return self

    @torch.no_grad()
    def _refresh_variational(self, X: Tensor, y: Tensor) -> bool:
        """Propose :meth:`initialize_variational`; keep it if the ELBO increases."""
        before = self.elbo(X, y)
        saved = {k: v.clone() for k, v in self.variational.state_dict().items()}
        self.initialize_variational(X, y)
        if bool(self.elbo(X, y) > before):
            return True
        self.variational.load_state_dict(saved)
        return False
