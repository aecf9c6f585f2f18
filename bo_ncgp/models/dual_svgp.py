"""Memory-based dual sparse variational GP (Chang, Verma, John, Solin & Khan, ICML 2023).

:class:`DualSVGP` is a streaming SVGP for any likelihood of :mod:`bo_ncgp.likelihoods`. Its
posterior is held in dual form (Eqs. 10-12): the inducing inputs ``Z``, a fixed Gaussian
factor ``(lam_rest, B_rest)`` summarising old data that is no longer stored (the dual pair of
``old \\ M``, Eqs. 19-20), and a memory ``M`` of past points with their individual sites
(:mod:`bo_ncgp.models.memory`). The total dual pair is

    lam = lam_rest + sum_{i in M} k_zi eta_i,     B_u = B_rest + sum_{i in M} k_zi beta_i k_zi^T

(Eq. 11), and predictions follow Eq. 10 through Cholesky factors of ``K_zz`` and
``K_zz + B_u`` (:mod:`bo_ncgp.models.dual.posterior`).

One call of :meth:`DualSVGP.update` is one step of Algorithm 1:

1. ``Z`` moves by pivoted Cholesky on ``[Z_old, X_new]`` and ``(lam_rest, B_rest)`` is
   projected with ``P = K(Z_new, Z_old) K(Z_old, Z_old)^{-1}`` (Eq. 27);
2. the memory's contributions are not part of ``(lam_rest, B_rest)`` (Eqs. 19-20 hold by
   construction) and are recomputed at the new ``Z`` and hyperparameters;
3. ``num_inner_steps`` damped natural-gradient steps (Eqs. 23-24 written on the sites, Eq. 54)
   update the sites of the new batch and of the memory from the current posterior;
4. ``num_hyper_steps`` Adam steps on Eq. 26 with the memory term scaled by ``n_old / n_M``
   (Sec. 3.4), or on the plain ELBO of Eq. 21 (``hyper_objective="elbo"``);
5. ``memory_size`` points of the new batch are sampled into the memory with probability
   proportional to the Bayesian leverage score ``h_i = beta_hat_i v_hat_i`` (Eq. 31) (or at
   random); the sites of the others are folded into ``(lam_rest, B_rest)``.

:meth:`DualSVGP.condition` adds the sites of new points at the current posterior with
``rho = 1`` (``Z`` and hyperparameters fixed), vectorised over leading batch dimensions of the
targets (fantasies) through a Woodbury block, O(n m^2 + n^3) per batch element.

Deviation from the paper's notation (documented in the issue): Eqs. 23-24 / 59-60 are applied
to the natural parameters, i.e. to the sites ``(eta_i = beta_i y_hat_i, beta_i)``, so that a
Gaussian likelihood converges in one step with ``rho = 1``. Deviation from the paper's order of
operations: the memory's sites are removed *before* the projection (they are never folded in),
so ``B_rest`` stays positive semi-definite instead of picking up the Nyström error of
``P k_old - k_new`` that Eqs. 19-20 applied after Eq. 27 would introduce.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import warnings
from collections.abc import Iterator
from typing import Any, Literal

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import NotPSDError, NumericalWarning
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.models.dual._state import ResizableModule
from bo_ncgp.models.dual.inducing import (
    check_inducing_points,
    project_dual_pair,
    select_inducing_points,
)
from bo_ncgp.models.dual.objective import dual_objective, sequential_elbo
from bo_ncgp.models.dual.posterior import (
    DualFactors,
    SiteBlock,
    dual_factors,
    dual_predict,
    site_block,
)
from bo_ncgp.models.dual.sites import damp, expected_terms, site_contributions, site_targets
from bo_ncgp.models.memory import Memory, bayesian_leverage_scores, sample_by_score

__all__ = ["DualSVGP", "fixed_hyperparameters"]

_FIXED_HYPERPARAMETERS = contextvars.ContextVar("bo_ncgp_dual_fixed_hypers", default=False)


@contextlib.contextmanager
def fixed_hyperparameters() -> Iterator[None]:
    """Within this context, DualSVGP posteriors are not differentiated with respect to the
    hyperparameters (gradients with respect to the inputs ``X`` and fantasy targets are kept).

    The base factorisation of Eq. 10 (``chol(K_zz + B_u)`` with the memory's sites, O(n_M m^2
    + m^3)) then depends on nothing that requires grad, so it is computed once and cached
    across calls instead of being rebuilt on every acquisition evaluation. The BoTorch
    adapter :class:`~bo_ncgp.bo.DualSVGPModel` uses it for ``posterior`` and conditioning,
    since acquisition optimisation only needs gradients in ``X``.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> X = torch.rand(20, 1)
        >>> m = DualSVGP(RBFKernel(), Gaussian(0.1), X[:5], num_hyper_steps=0).update(X, X[:, 0])
        >>> x = torch.rand(3, 1, requires_grad=True)
        >>> with fixed_hyperparameters():
        ...     mean, var = m.predict_f(x)  # the base factorisation is now cached
        >>> (mean + var).sum().backward()  # gradients in X still flow
        >>> x.grad.shape
        torch.Size([3, 1])
    """
    token = _FIXED_HYPERPARAMETERS.set(True)
    try:
        yield
    finally:
        _FIXED_HYPERPARAMETERS.reset(token)


class DualSVGP(ResizableModule):
    """Memory-based dual SVGP (Chang et al. 2023, Algorithm 1) for streaming data.

    Args:
        kernel: a GPyTorch kernel. For ``num_latents = C > 1`` either one kernel with
            ``batch_shape (C,)`` (one set of hyperparameters per latent) or an unbatched kernel
            shared by all latents. Priors registered on it (e.g. ``GammaPrior``) are added to
            the hyperparameter objective.
        likelihood: a :class:`bo_ncgp.likelihoods.Likelihood` (its priors are added too).
            ``Binomial`` must have a scalar ``num_trials``.
        inducing_points: ``(m, d)`` initial inducing inputs; exact duplicates are dropped
            with a warning.
        max_inducing: number of inducing points the pivoted-Cholesky updates keep (Sec. 3.4);
            default ``m``. A larger value lets ``Z`` grow from a small initial design as data
            arrives (each update picks up to ``max_inducing`` rows of ``[Z_old, X_new]``).
        memory_size: points of each new batch added to the memory (``None``: all of them).
        rho: damping of the natural-gradient steps, in ``(0, 1]``.
        num_inner_steps: damped site updates per round of :meth:`update`.
        num_hyper_steps: Adam steps on the hyperparameters per round (0: hyperparameters fixed).
        num_latents: C; defaults to ``likelihood.num_latents`` and must agree with it.
        inducing_update: ``"pivoted_cholesky"`` (Sec. 3.4) or ``"fixed"``.
        memory_selection: ``"bls"`` (Eq. 31) or ``"random"`` (ablation).
        memory_cap: optional total memory size; beyond it, points are kept by BLS-weighted (or
            random) sampling and the sites of evicted points are folded into ``B_rest``.
        hyper_objective: ``"dual"`` (Eq. 26 with the Sec. 3.4 scaling) or ``"elbo"`` (Eq. 21).
        lr: Adam learning rate of the hyperparameter steps.
        num_rounds: repetitions of (inner steps, hyperparameter steps) per update; the paper's
            Algorithm 1 is ``num_rounds = 1``.
        generator: ``torch.Generator`` for memory sampling (global RNG when ``None``).
        mean_constant: a fixed constant prior mean ``c``: ``f = c + g`` with ``g ~ GP(0, k)``
            (not trained by :meth:`update`). The dual parameters, the sites' ``eta`` and
            :meth:`inducing_posterior` describe the zero-mean part ``g``; predictions,
            :meth:`bls` and the likelihood see ``f``. Use it for a model converted from a
            GPyTorch SVGP with a ``ConstantMean`` (:meth:`from_inducing_posterior`).

    Shapes: inputs ``(..., n, d)``; for ``C = 1`` latent outputs are ``(..., n)`` (and
    ``(..., n, n)`` joint covariances); for ``C > 1`` they are ``(..., n, C)`` (and
    ``(..., C, n, n)`` joint covariances per latent; latents are independent a posteriori).

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> X = torch.rand(40, 2); y = (X[:, 0] > 0.5).double()
        >>> model = DualSVGP(gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()),
        ...                  Bernoulli(), X[:10], memory_size=5, num_hyper_steps=0)
        >>> model.update(X[:20], y[:20]).update(X[20:], y[20:]).num_data
        40
        >>> mean, var = model.predict_f(torch.rand(3, 2))
        >>> mean.shape, bool((var > 0).all())
        (torch.Size([3]), True)
    """

    _resizable = ("_Z", "_lam_rest", "_B_rest", "_cX", "_cy", "_ceta", "_cbeta")
    _optional = ("_cX", "_cy", "_ceta", "_cbeta")

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        likelihood: Likelihood,
        inducing_points: Tensor,
        *,
        memory_size: int | None = 10,
        rho: float = 1.0,
        num_inner_steps: int = 10,
        num_hyper_steps: int = 10,
        num_latents: int | None = None,
        inducing_update: Literal["pivoted_cholesky", "fixed"] = "pivoted_cholesky",
        memory_selection: Literal["bls", "random"] = "bls",
        memory_cap: int | None = None,
        hyper_objective: Literal["dual", "elbo"] = "dual",
        lr: float = 0.01,
        num_rounds: int = 1,
        generator: torch.Generator | None = None,
        max_inducing: int | None = None,
        mean_constant: float = 0.0,
    ) -> None:
        super().__init__()
        if not isinstance(kernel, gpytorch.kernels.Kernel):
            raise ValueError(f"DualSVGP: kernel must be a GPyTorch kernel, got {type(kernel)}")
        if not isinstance(likelihood, Likelihood):
            raise ValueError(
                "DualSVGP: likelihood must be a bo_ncgp.likelihoods.Likelihood, got "
                f"{type(likelihood).__name__}"
            )
        C = int(likelihood.num_latents if num_latents is None else num_latents)
        if C != likelihood.num_latents:
            raise ValueError(
                f"DualSVGP: num_latents={C} but the likelihood {likelihood.name} has "
                f"{likelihood.num_latents} latent function(s)"
            )
        kb = tuple(kernel.batch_shape)
        if kb not in ((), (C,)):
            raise ValueError(
                f"DualSVGP: kernel batch_shape must be () (shared) or ({C},) (one per latent), "
                f"got {kb}"
            )
        trials = getattr(likelihood, "num_trials", None)
        if isinstance(trials, Tensor) and trials.numel() > 1:
            raise ValueError("DualSVGP: Binomial likelihood needs a scalar num_trials")
        self._check_config(
            memory_size=memory_size,
            rho=rho,
            num_inner_steps=num_inner_steps,
            num_hyper_steps=num_hyper_steps,
            inducing_update=inducing_update,
            memory_selection=memory_selection,
            memory_cap=memory_cap,
            hyper_objective=hyper_objective,
            lr=lr,
            num_rounds=num_rounds,
        )
        Z = check_inducing_points(inducing_points).detach().clone()
        m, d = Z.shape
        c = float(mean_constant)
        if c != c or c in (float("inf"), float("-inf")):
            raise ValueError(f"DualSVGP: mean_constant must be finite, got {mean_constant}")
        self.kernel = kernel
        self.likelihood = likelihood
        self.memory_size = memory_size
        self.rho = float(rho)
        self.num_inner_steps = int(num_inner_steps)
        self.num_hyper_steps = int(num_hyper_steps)
        self.inducing_update = inducing_update
        self.memory_selection = memory_selection
        self.memory_cap = memory_cap
        self.hyper_objective = hyper_objective
        self.lr = float(lr)
        self.num_rounds = int(num_rounds)
        self.generator = generator
        if max_inducing is not None and (int(max_inducing) != max_inducing or max_inducing < 1):
            raise ValueError(f"DualSVGP: max_inducing must be a positive int, got {max_inducing}")
        self.max_inducing = m if max_inducing is None else int(max_inducing)
        self._C = C
        self._batched_kernel = len(kb) > 0
        self._shares_hyperparameters = False
        self._base_cache: tuple[tuple, DualFactors] | None = None
        self._block_cache: tuple[tuple, SiteBlock] | None = None
        self.register_buffer("_Z", Z)
        self.register_buffer("_lam_rest", Z.new_zeros(C, m))
        self.register_buffer("_B_rest", Z.new_zeros(C, m, m))
        self.register_buffer("_num_data", torch.zeros((), dtype=torch.long, device=Z.device))
        self.register_buffer("_mean_constant", Z.new_tensor(c))
        for name in self._optional:
            self.register_buffer(name, None)
        self.memory = Memory(d, C, dtype=Z.dtype, device=Z.device)

    # ------------------------------------------------------------------ config
    @staticmethod
    def _check_config(**cfg: Any) -> None:
        ms = cfg["memory_size"]
        if ms is not None and (int(ms) != ms or ms < 0):
            raise ValueError(f"DualSVGP: memory_size must be a non-negative int or None, got {ms}")
        if not 0 < cfg["rho"] <= 1:
            raise ValueError(f"DualSVGP: rho must lie in (0, 1], got {cfg['rho']}")
        for key in ("num_inner_steps", "num_hyper_steps"):
            if int(cfg[key]) != cfg[key] or cfg[key] < 0:
                raise ValueError(f"DualSVGP: {key} must be a non-negative int, got {cfg[key]}")
        if int(cfg["num_rounds"]) != cfg["num_rounds"] or cfg["num_rounds"] < 1:
            raise ValueError(f"DualSVGP: num_rounds must be >= 1, got {cfg['num_rounds']}")
        if cfg["inducing_update"] not in ("pivoted_cholesky", "fixed"):
            raise ValueError(
                "DualSVGP: inducing_update must be 'pivoted_cholesky' or 'fixed', got "
                f"{cfg['inducing_update']!r}"
            )
        if cfg["memory_selection"] not in ("bls", "random"):
            raise ValueError(
                f"DualSVGP: memory_selection must be 'bls' or 'random', got "
                f"{cfg['memory_selection']!r}"
            )
        cap = cfg["memory_cap"]
        if cap is not None and (int(cap) != cap or cap < 0):
            raise ValueError(f"DualSVGP: memory_cap must be a non-negative int or None, got {cap}")
        if cfg["hyper_objective"] not in ("dual", "elbo"):
            raise ValueError(
                f"DualSVGP: hyper_objective must be 'dual' or 'elbo', got "
                f"{cfg['hyper_objective']!r}"
            )
        if not cfg["lr"] > 0:
            raise ValueError(f"DualSVGP: lr must be positive, got {cfg['lr']}")

    def _config(self) -> dict[str, Any]:
        return {
            "memory_size": self.memory_size,
            "rho": self.rho,
            "num_inner_steps": self.num_inner_steps,
            "num_hyper_steps": self.num_hyper_steps,
            "num_latents": self._C,
            "inducing_update": self.inducing_update,
            "memory_selection": self.memory_selection,
            "memory_cap": self.memory_cap,
            "hyper_objective": self.hyper_objective,
            "lr": self.lr,
            "num_rounds": self.num_rounds,
            "mean_constant": self.mean_constant,
        }

    # -------------------------------------------------------------- properties
    @property
    def Z(self) -> Tensor:
        """``(m, d)`` current inducing inputs."""
        return self._Z

    @property
    def mean_constant(self) -> float:
        """The fixed constant prior mean ``c`` (``f = c + g``)."""
        return float(self._mean_constant)

    @property
    def num_inducing(self) -> int:
        return int(self._Z.shape[0])

    @property
    def num_latents(self) -> int:
        return self._C

    @property
    def num_data(self) -> int:
        """Number of data points seen so far (updates and conditioning)."""
        return int(self._num_data)

    @property
    def memory_inputs(self) -> Tensor:
        """``(n_M, d)`` inputs held in memory."""
        return self.memory.X

    @property
    def memory_targets(self) -> Tensor:
        """``(n_M,)`` targets held in memory."""
        return self.memory.y

    @property
    def batch_shape(self) -> torch.Size:
        """Batch shape added by :meth:`condition` with batched targets (``()`` otherwise)."""
        if self._ceta is None:
            return torch.Size()
        return torch.broadcast_shapes(self._cX.shape[:-2], self._ceta.shape[:-2])

    # ------------------------------------------------------------ state utils
    def _touch(self) -> None:
        """Drop cached factorisations (state or hyperparameters changed)."""
        self._base_cache = None
        self._block_cache = None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # states saved before ``mean_constant`` existed load as zero-mean models
        state_dict.setdefault(prefix + "_mean_constant", self._mean_constant.clone())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _on_state_loaded(self) -> None:
        self._touch()

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._touch()
        return out

    def _hyperparameters(self) -> list[Tensor]:
        return [p for p in self.parameters() if p.requires_grad]

    def _caching_allowed(self) -> bool:
        """Factorisations are cached only when no autograd graph would be kept alive in them
        (grad disabled, or nothing requires grad), so repeated backward passes stay valid."""
        if not torch.is_grad_enabled():
            return True
        if self._hyperparameters():
            return False
        return self._ceta is None or not any(
            t.requires_grad for t in (self._cX, self._ceta, self._cbeta)
        )

    def _base_key(self) -> tuple:
        """What the base factorisation depends on: the state tensors (replaced, never
        modified in place, so compared by identity) and snapshots of the hyperparameter values
        (GPyTorch setters write through ``.data``, which leaves ``_version`` unchanged)."""
        mem = self.memory
        key: list = [self._Z, self._lam_rest, self._B_rest, mem.X, mem.eta, mem.beta]
        key += [_Snapshot(p) for p in self.parameters()]
        return tuple(key)

    # ---------------------------------------------------------------- kernels
    def _latent(self, K: Tensor) -> Tensor:
        """Insert the latent dimension of a shared kernel's output with size 1: every later
        operation broadcasts it against the C latents, so shared quantities (``chol K_zz``,
        ``L_K^{-1} K_zx``) are computed once, not C times."""
        return K if self._batched_kernel else K.unsqueeze(-3)

    def _kx(self, X: Tensor) -> Tensor:
        return X.unsqueeze(-3) if self._batched_kernel else X

    def _k(self, X1: Tensor, X2: Tensor, diag: bool = False) -> Tensor:
        with gpytorch.settings.lazily_evaluate_kernels(False):  # eager: half the overhead
            K = self.kernel(X1, X2, diag=diag)
        return K if diag else K.to_dense()

    def _Kzz(self, Z: Tensor | None = None) -> Tensor:
        Z = self._Z if Z is None else Z
        return self._latent(self._k(Z, Z))

    def _Kzx(self, X: Tensor, Z: Tensor | None = None) -> Tensor:
        """``(*bx, L, m, n)``."""
        Z = self._Z if Z is None else Z
        return self._latent(self._k(Z, self._kx(X)))

    def _kxx(self, X: Tensor, full_cov: bool) -> Tensor:
        """``(*bx, L, n)`` prior variances or ``(*bx, L, n, n)`` covariance."""
        Xk = self._kx(X)
        if full_cov:
            return self._latent(self._k(Xk, Xk))
        d = self._k(Xk, Xk, diag=True)
        if self._batched_kernel:
            return d
        return d.unsqueeze(-2)

    # ------------------------------------------------------------- posterior
    def _memory_sites(self) -> tuple[Tensor, Tensor]:
        return self.memory.eta.mT, self.memory.beta.mT

    def _total_pair(self) -> tuple[Tensor, Tensor]:
        """``(lam, B_u)`` of the unconditioned posterior at the current ``Z`` (Eq. 11)."""
        lam, B = self._lam_rest, self._B_rest
        if len(self.memory):
            dl, dB = site_contributions(self._Kzx(self.memory.X), *self._memory_sites())
            lam, B = lam + dl, B + dB
        return lam, B

    def _factors(self) -> tuple[DualFactors, SiteBlock | None]:
        """Base factors (Eq. 10) and the conditioning block, cached when allowed; a model
        returned by :meth:`condition` reuses its parent's base factors."""
        fixed = _FIXED_HYPERPARAMETERS.get()
        no_grad = torch.no_grad() if fixed else contextlib.nullcontext()
        cache = fixed or self._caching_allowed()
        f = None
        if cache:
            key = self._base_key()
            if self._base_cache is not None and _same(self._base_cache[0], key):
                f = self._base_cache[1]
        if f is None:
            with no_grad:
                lam, B = self._total_pair()
                f = dual_factors(self._Kzz(), B, lam)
            if cache:
                self._base_cache = (key, f)
        if self._ceta is None:
            return f, None
        if fixed and any(t.requires_grad for t in (self._cX, self._ceta, self._cbeta)):
            # fantasies built inside an acquisition keep their gradient in X: no caching
            return f, site_block(f, self._Kzx(self._cX), self._ceta, self._cbeta)
        bkey = (f, self._cX, self._ceta, self._cbeta)
        if cache and self._block_cache is not None and _same(self._block_cache[0], bkey):
            return f, self._block_cache[1]
        with no_grad:
            block = site_block(f, self._Kzx(self._cX), self._ceta, self._cbeta)
        if cache:
            self._block_cache = (bkey, block)
        return f, block

    def _marginals(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Latent-major ``mean (*, L, n)`` and ``var (*, L, n)`` / ``cov (*, L, n, n)``."""
        f, block = self._factors()
        mean, var = dual_predict(f, self._Kzx(X), self._kxx(X, full_cov), full_cov, block)
        return mean + self._mean_constant, (var if full_cov else var.clamp_min(0))

    def _site_targets(self, y: Tensor, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Sites on ``g = f - c`` from the marginals ``N(mean, var)`` of ``f``: the likelihood
        sees ``f``; ``eta = beta * y_hat`` moves with the pseudo-output (Eq. 12)."""
        eta, beta = site_targets(self.likelihood, y, mean, var)
        return eta - beta * self._mean_constant, beta

    def _out(self, t: Tensor, matrix: bool = False) -> Tensor:
        if self._C == 1:
            return t.squeeze(-3) if matrix else t.squeeze(-2)
        return t if matrix else t.transpose(-1, -2)

    # ----------------------------------------------------------------- checks
    def _check_X(self, X: Any, name: str = "X", allow_empty: bool = False) -> Tensor:
        if not isinstance(X, Tensor):
            X = torch.as_tensor(X)
        if X.dim() < 2:
            raise ValueError(f"DualSVGP: {name} must have shape (..., n, d), got {tuple(X.shape)}")
        d = self._Z.shape[-1]
        if X.shape[-1] != d:
            raise ValueError(
                f"DualSVGP: {name} has {X.shape[-1]} input dimension(s) (shape "
                f"{tuple(X.shape)}) but the model has d={d}"
            )
        if X.shape[-2] == 0 and not allow_empty:
            raise ValueError(f"DualSVGP: {name} is an empty batch (shape {tuple(X.shape)})")
        X = X.to(dtype=self._Z.dtype, device=self._Z.device)
        if not torch.isfinite(X).all():
            raise ValueError(f"DualSVGP: {name} contains NaN or inf")
        return X

    def _check_y(self, y: Any, n: int, batched: bool) -> Tensor:
        if not isinstance(y, Tensor):
            y = torch.as_tensor(y)
        if y.dim() == 0 or (not batched and y.dim() != 1):
            raise ValueError(
                f"DualSVGP: targets must have shape {'(..., n)' if batched else '(n,)'}, got "
                f"{tuple(y.shape)}"
            )
        if y.shape[-1] != n:
            raise ValueError(
                f"DualSVGP: shape mismatch, X has {n} points but the targets have "
                f"{y.shape[-1]} (shape {tuple(y.shape)})"
            )
        self.likelihood.check_targets(y)  # NaN, labels out of range, non-integer counts
        return y.to(dtype=self._Z.dtype, device=self._Z.device)

    # ------------------------------------------------------------- prediction
    def predict_f(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Posterior of the latent function(s) at ``X`` (Eq. 10).

        Args:
            X: ``(..., n, d)`` inputs with any leading batch dimensions.
            full_cov: return the joint covariance of the ``n`` points.

        Returns:
            ``C = 1``: ``mean (..., n)`` and ``var (..., n)`` or ``cov (..., n, n)``;
            ``C > 1``: ``mean (..., n, C)`` and ``var (..., n, C)`` or ``cov (..., C, n, n)``.
            The leading shape is ``broadcast(batch_shape, X.shape[:-2])``. Differentiable with
            respect to ``X`` and the hyperparameters.
        """
        X = self._check_X(X, allow_empty=True)
        mean, var = self._marginals(X, full_cov)
        return self._out(mean), self._out(var, matrix=full_cov)

    def predict_y(self, X: Tensor) -> Tensor:
        """Predictive mean of the observations: ``E[y]`` (class-1 probability for
        ``Bernoulli``, expected counts for ``Binomial``/``Poisson``, ``(..., n, C)`` class
        probabilities for ``Softmax``)."""
        mean, var = self.predict_f(X)
        return self.likelihood.predictive_mean(mean, var)

    def bls(self, X: Tensor, y: Tensor) -> Tensor:
        """Bayesian leverage scores ``h_i = beta_hat_i v_hat_i`` (Eq. 31) under the current
        posterior; shape ``(..., n)`` (``(..., n, C)`` per latent for ``C > 1``)."""
        X = self._check_X(X)
        y = self._check_y(y, X.shape[-2], batched=True)
        mean, var = self._marginals(X)
        _, _, beta = expected_terms(self.likelihood, y, mean, var)
        return self._out(bayesian_leverage_scores(beta.clamp_min(0), var))

    def inducing_posterior(self) -> tuple[Tensor, Tensor]:
        """``(alpha_u, V_u)``: mean ``(L, m)`` and covariance ``(L, m, m)`` of ``u = g(Z)``, the
        zero-mean part of ``f(Z) = mean_constant + g(Z)``
        (Eq. 24: ``alpha_u = K_zz (K_zz + B_u)^{-1} lam``, ``V_u = K_zz (K_zz + B_u)^{-1} K_zz``)
        for an unconditioned model."""
        self._require_unconditioned("inducing_posterior")
        f, _ = self._factors()
        Kzz = self._Kzz()
        mu_v = torch.linalg.solve_triangular(f.L_A.mT, f.w.unsqueeze(-1), upper=True)
        G = torch.linalg.solve_triangular(f.L_A, Kzz, upper=False)
        return (Kzz @ mu_v).squeeze(-1), G.mT @ G

    def dual_parameters(self) -> tuple[Tensor, Tensor]:
        """``(lam, B_u)`` of the unconditioned posterior at the current ``Z`` and
        hyperparameters (Eq. 11 / the issue's natural-parameter form), ``(L, m)``,
        ``(L, m, m)``."""
        self._require_unconditioned("dual_parameters")
        return self._total_pair()

    # ------------------------------------------------------------- objectives
    def _log_prior(self) -> Tensor:
        total = self._Z.new_zeros(())
        for module in (self.kernel, self.likelihood):
            for _, mod, prior, closure, _ in module.named_priors():
                total = total + prior.log_prob(closure(mod)).sum()
        return total

    def _objective(
        self,
        Xa: Tensor,
        ya: Tensor,
        eta: Tensor,
        beta: Tensor,
        weights: Tensor,
        rest: bool,
        which: str,
        q_fixed: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """Eq. 26 (``which="dual"``) or Eq. 21 (``"elbo"``, with ``q_fixed = (m_u, L_V)``)."""
        Kzz, Kza, kaa = self._Kzz(), self._Kzx(Xa), self._kxx(Xa, False)
        if which == "elbo":
            m_u, L_V = q_fixed if q_fixed is not None else self._fixed_q()
            return sequential_elbo(
                self.likelihood, Kzz, Kza, kaa, ya, weights, m_u, L_V,
                self._lam_rest, self._B_rest, mean_offset=self._mean_constant,
            )  # fmt: skip
        return dual_objective(
            self.likelihood, Kzz, Kza, kaa, ya, eta, beta, weights,
            self._lam_rest, self._B_rest, include_rest=rest, mean_offset=self._mean_constant,
        )  # fmt: skip

    def _memory_weights(self, n_old: int) -> Tensor:
        n_M = len(self.memory)
        scale = n_old / n_M if n_M else 1.0
        return self._Z.new_full((n_M,), scale)

    def log_marginal(self, include_prior: bool = True) -> Tensor:
        """Hyperparameter objective of Eq. 26 at the current state (to be maximised).

        The memory stands for all data seen so far: its expected log likelihood is scaled by
        ``num_data / n_M`` (Sec. 3.4); the sites are held fixed while the kernel and
        likelihood hyperparameters vary, so the value is differentiable with respect to them.
        With a Gaussian likelihood, every point in memory and converged sites it equals the
        exact log marginal likelihood of the (DTC) sparse GP, which is the exact GP's when
        ``Z`` holds the data. Priors on the hyperparameters are added when ``include_prior``.
        """
        self._require_unconditioned("log_marginal")
        mem = self.memory
        eta, beta = self._memory_sites()
        weights = self._memory_weights(self.num_data)
        val = self._objective(mem.X, mem.y, eta, beta, weights, len(mem) > 0, "dual")
        return val + self._log_prior() if include_prior else val

    def elbo(self, include_prior: bool = True) -> Tensor:
        """The sequential ELBO of Eq. 21 over the memory at the current state, with
        ``q(u)`` fixed at the current posterior (differentiable in the hyperparameters)."""
        self._require_unconditioned("elbo")
        mem = self.memory
        eta, beta = self._memory_sites()
        val = self._objective(mem.X, mem.y, eta, beta, mem.y.new_ones(len(mem)), True, "elbo")
        return val + self._log_prior() if include_prior else val

    def _fixed_q(self) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            m_u, V_u = self.inducing_posterior()
            return m_u, stable_cholesky(V_u, name="V_u")

    # ----------------------------------------------------------------- update
    def update(self, X: Tensor, y: Tensor) -> DualSVGP:
        """One streaming step of Algorithm 1 on the batch ``(X (n, d), y (n,))``; returns self.

        The first call on an empty model is the batch fit.
        """
        X = self._check_X(X)
        if X.dim() != 2:
            raise ValueError(f"DualSVGP.update: X must be (n, d), got {tuple(X.shape)}")
        y = self._check_y(y, X.shape[0], batched=False)
        self._require_unbatched("update")
        X, y = X.detach(), y.detach()
        if self._shares_hyperparameters and self.num_hyper_steps > 0:
            self.kernel = copy.deepcopy(self.kernel)  # copy-on-write after condition()
            self.likelihood = copy.deepcopy(self.likelihood)
            self._shares_hyperparameters = False
        with torch.no_grad():
            if self._ceta is not None:
                self._fold_block()
            if self.inducing_update == "pivoted_cholesky":
                Z_new = select_inducing_points(
                    self.kernel, torch.cat([self._Z, X]), self.max_inducing
                )
                self.project(Z_new)
        n, n_old, n_M = X.shape[0], self.num_data, len(self.memory)
        Xa = torch.cat([self.memory.X, X])
        ya = torch.cat([self.memory.y, y])
        eta_m, beta_m = self._memory_sites()
        zeros = X.new_zeros(self._C, n)
        eta, beta = torch.cat([eta_m, zeros], -1), torch.cat([beta_m, zeros], -1)
        weights = torch.cat([self._memory_weights(n_old), X.new_ones(n)])
        for _ in range(self.num_rounds):
            eta, beta = self._inner_steps(Xa, ya, eta, beta)
            if self.num_hyper_steps > 0:
                self._hyper_steps(Xa, ya, eta, beta, weights, rest=n_M > 0)
        with torch.no_grad():
            self.memory.set_sites(eta[:, :n_M].mT, beta[:, :n_M].mT)
            self._add_to_memory(X, y, eta[:, n_M:], beta[:, n_M:])
            self._num_data = self._num_data + n
        self._touch()
        return self

    def _inner_steps(self, Xa: Tensor, ya: Tensor, eta: Tensor, beta: Tensor):
        """Damped natural-gradient steps on the sites of the active points (Eqs. 23-24, 54)."""
        with torch.no_grad():
            Kzz, Kza, kaa = self._Kzz(), self._Kzx(Xa), self._kxx(Xa, False)
            L_K = stable_cholesky(Kzz, name="K_zz")
            for _ in range(self.num_inner_steps):
                lam_s, B_s = site_contributions(Kza, eta, beta)
                f = dual_factors(Kzz, self._B_rest + B_s, self._lam_rest + lam_s, L_K=L_K)
                mean, var = dual_predict(f, Kza, kaa)
                target = self._site_targets(ya, mean + self._mean_constant, var.clamp_min(0))
                eta, beta = damp((eta, beta), target, self.rho)
        return eta, beta

    def _hyper_steps(self, Xa, ya, eta, beta, weights, rest: bool) -> None:
        """Adam on Eq. 26 (or Eq. 21) plus log priors, sites and ``Z`` fixed (Sec. 3.4)."""
        params = self._hyperparameters()
        if not params:
            return
        q_fixed = None
        if self.hyper_objective == "elbo":
            self._touch()
            q_fixed = self._fixed_q()
        opt = torch.optim.Adam(params, lr=self.lr)
        with torch.enable_grad():
            for step in range(self.num_hyper_steps):
                saved = [p.detach().clone() for p in params]
                opt.zero_grad()
                try:
                    obj = self._objective(
                        Xa, ya, eta, beta, weights, rest, self.hyper_objective, q_fixed
                    )
                    loss = -(obj + self._log_prior())
                    ok = bool(torch.isfinite(loss))
                    if ok:
                        loss.backward()
                        ok = all(torch.isfinite(p.grad).all() for p in params if p.grad is not None)
                except NotPSDError:
                    ok = False
                if ok:
                    opt.step()
                    self._project_unenforced_constraints()
                    ok = all(torch.isfinite(p).all() for p in params)
                if not ok:  # report, restore the last good hyperparameters, stop
                    with torch.no_grad():
                        for p, v in zip(params, saved, strict=True):
                            p.copy_(v)
                    warnings.warn(
                        f"DualSVGP: hyperparameter step {step + 1} gave a non-finite objective or "
                        "a non-PSD K_zz + B_u; kept the previous hyperparameters and stopped "
                        "(lower lr or rescale the data)",
                        NumericalWarning,
                        stacklevel=3,
                    )
                    break
        opt.zero_grad(set_to_none=True)
        self._touch()

    @torch.no_grad()
    def _project_unenforced_constraints(self) -> None:
        """Clamp raw parameters whose GPyTorch constraint has no transform (e.g. BoTorch's
        ``GreaterThan(2.5e-2, transform=None)`` lengthscales, meant for bounded L-BFGS) back
        into the constraint after an Adam step (projected gradient)."""
        for module in (self.kernel, self.likelihood):
            for _name, param, constraint in module.named_parameters_and_constraints():
                if constraint is None or constraint.enforced:
                    continue
                lo = constraint.lower_bound.to(param)
                hi = constraint.upper_bound.to(param)
                param.copy_(torch.maximum(torch.minimum(param, hi), lo))

    def _fold(self, X: Tensor, eta: Tensor, beta: Tensor) -> None:
        """Fold sites ``(L, n)`` at inputs ``X`` into ``(lam_rest, B_rest)`` (Eq. 11)."""
        if X.shape[-2] == 0:
            return
        dl, dB = site_contributions(self._Kzx(X), eta, beta)
        self._lam_rest = self._lam_rest + dl
        self._B_rest = self._B_rest + 0.5 * (dB + dB.mT)

    def _fold_block(self) -> None:
        self._fold(self._cX.detach(), self._ceta.detach(), self._cbeta.detach())
        for name in self._optional:
            setattr(self, name, None)
        self._touch()

    def _add_to_memory(self, X: Tensor, y: Tensor, eta: Tensor, beta: Tensor) -> None:
        """Sec. 3.5: BLS-weighted (or random) choice of memory points; fold the rest."""
        n = X.shape[0]
        k = n if self.memory_size is None else min(int(self.memory_size), n)
        self._touch()
        # the total posterior is the same whichever way points are split between the memory
        # and the folded factor, so one set of variances serves both selections
        lam_n, B_n = site_contributions(self._Kzx(X), eta, beta)
        lam, B = self._total_pair()
        f = dual_factors(self._Kzz(), B + B_n, lam + lam_n)
        need_mem = self.memory_cap is not None and len(self.memory) + k > self.memory_cap
        Xv = torch.cat([self.memory.X, X]) if need_mem else X
        _, var = dual_predict(f, self._Kzx(Xv), self._kxx(Xv, False))
        var = var.clamp_min(0)
        beta_all = torch.cat([self._memory_sites()[1], beta], -1) if need_mem else beta
        h = bayesian_leverage_scores(beta_all, var).sum(0)
        h_new = h[-n:]
        idx = sample_by_score(h_new, k, self.memory_selection, self.generator)
        keep = torch.zeros(n, dtype=torch.bool, device=X.device)
        keep[idx] = True
        self._fold(X[~keep], eta[:, ~keep], beta[:, ~keep])
        self.memory.add(X[keep], y[keep], eta[:, keep].mT, beta[:, keep].mT)
        if need_mem:
            h_mem = torch.cat([h[: len(h) - n], h_new[keep]])
            idx = sample_by_score(
                h_mem, int(self.memory_cap), self.memory_selection, self.generator
            )
            Xr, _, eta_r, beta_r = self.memory.keep(idx)
            self._fold(Xr, eta_r.mT, beta_r.mT)
        self._touch()

    # ------------------------------------------------------------- projection
    def project(self, Z_new: Tensor) -> DualSVGP:
        """Move the posterior to new inducing inputs (Eq. 27); returns self.

        The summarised factor is projected with ``P = K(Z_new, Z_old) K(Z_old, Z_old)^{-1}``;
        memory sites are re-evaluated at ``Z_new``. If ``Z_new`` contains ``Z_old`` and the
        memory is empty (or its inputs lie in ``Z_old``) the predictions do not change.
        """
        self._require_unbatched("project")
        if self._ceta is not None:
            raise ValueError("DualSVGP.project: fold conditioned points with update() first")
        Z_new = check_inducing_points(self._check_X(Z_new, "Z_new").detach(), "Z_new")
        if Z_new.dim() != 2:
            raise ValueError(f"DualSVGP.project: Z_new must be (m, d), got {tuple(Z_new.shape)}")
        with torch.no_grad():
            if Z_new.shape == self._Z.shape and torch.equal(Z_new, self._Z):
                return self
            Kzz_old = self._Kzz()
            K_on = self._Kzx(Z_new)  # K(Z_old, Z_new)
            lam, B = project_dual_pair(Kzz_old, K_on.mT, self._lam_rest, self._B_rest)
            self._Z, self._lam_rest, self._B_rest = Z_new.clone(), lam, B
        self._touch()
        return self

    # ------------------------------------------------------------ conditioning
    def condition(self, X: Tensor, Y: Tensor) -> DualSVGP:
        """A new model with the sites of ``(X, Y)`` added at the current posterior (``rho = 1``,
        ``Z`` and hyperparameters fixed); ``self`` is left untouched.

        Args:
            X: ``(n, d)`` or ``(*b, n, d)`` inputs.
            Y: ``(*b, n)`` targets; leading dimensions (e.g. fantasies x candidates) become the
                returned model's ``batch_shape = broadcast(self.batch_shape, X.shape[:-2],
                Y.shape[:-1])``.

        The returned model shares the kernel and likelihood modules with ``self`` (they are
        copied on write if it later runs hyperparameter steps). The sites are differentiable
        with respect to ``X`` and ``Y`` when those require grad (one backward pass per call,
        as for a fantasy model built inside an acquisition function); otherwise they are
        constants. Cost O(n m^2 + n^3) per batch element, no Python loop over the batch.
        """
        X = self._check_X(X)
        Y = self._check_y(Y, X.shape[-2], batched=True)
        try:
            batch = torch.broadcast_shapes(self.batch_shape, X.shape[:-2], Y.shape[:-1])
        except RuntimeError as err:
            raise ValueError(
                "DualSVGP.condition: batch shapes do not broadcast: model "
                f"{tuple(self.batch_shape)}, X {tuple(X.shape[:-2])}, Y {tuple(Y.shape[:-1])}"
            ) from err
        track = X.requires_grad or Y.requires_grad
        with torch.set_grad_enabled(torch.is_grad_enabled() and track):
            mean, var = self._marginals(X)
            eta, beta = self._site_targets(Y, mean, var)
        eta = eta.expand(*batch, *eta.shape[-2:])
        beta = beta.expand(*batch, *beta.shape[-2:])
        Yb = Y.expand(*batch, Y.shape[-1])
        new = self._sibling()
        if self._ceta is None:
            new._cX, new._cy, new._ceta, new._cbeta = X, Yb, eta, beta
        else:
            bx = torch.broadcast_shapes(self._cX.shape[:-2], X.shape[:-2])
            cat = torch.cat
            new._cX = cat(
                [self._cX.expand(*bx, *self._cX.shape[-2:]), X.expand(*bx, *X.shape[-2:])], -2
            )
            new._cy = cat([self._cy.expand(*batch, self._cy.shape[-1]), Yb], -1)
            new._ceta = cat([self._ceta.expand(*batch, *self._ceta.shape[-2:]), eta], -1)
            new._cbeta = cat([self._cbeta.expand(*batch, *self._cbeta.shape[-2:]), beta], -1)
        new._num_data = self._num_data + X.shape[-2]
        new._block_cache = None
        return new

    def _sibling(self) -> DualSVGP:
        """A new model sharing kernel, likelihood and (immutable) state tensors with self.

        State tensors are only ever replaced, never modified in place, so sharing them is
        safe; the module dictionaries (and the memory module) are copied so that assigning
        state on either model leaves the other untouched.
        """
        new = _shallow_module_copy(self)
        new._modules["memory"] = _shallow_module_copy(self.memory)
        new._shares_hyperparameters = True
        new._block_cache = None  # the base factorisation (if cached) stays valid
        return new

    def _require_unconditioned(self, what: str) -> None:
        if self._ceta is not None:
            raise ValueError(
                f"DualSVGP.{what}: not available for a model returned by condition(); call it "
                "on the model that was conditioned (or fold the points in with update())"
            )

    def _require_unbatched(self, what: str) -> None:
        if self.batch_shape:
            raise ValueError(
                f"DualSVGP.{what}: not available for a model with batch_shape "
                f"{tuple(self.batch_shape)} (a batched condition() result)"
            )

    # ------------------------------------------------------------ conversion
    @classmethod
    def from_inducing_posterior(
        cls,
        kernel: gpytorch.kernels.Kernel,
        likelihood: Likelihood,
        inducing_points: Tensor,
        mean: Tensor,
        covariance: Tensor,
        *,
        mean_constant: float = 0.0,
        num_data: int = 0,
        **kwargs: Any,
    ) -> DualSVGP:
        """A DualSVGP whose posterior is a given Gaussian ``q(u) = N(mean, covariance)``.

        The natural parameters of ``q(u) ∝ p(u) exp(u^T K^{-1} lam - u^T K^{-1} B_u K^{-1} u / 2)``
        (Eqs. 10-11 with ``K = K_zz``) follow from ``S^{-1} = K^{-1} + K^{-1} B_u K^{-1}`` and
        ``S^{-1} m = K^{-1} lam``:

            B_u = K S^{-1} K - K,        lam = K S^{-1} m.

        The result predicts the standard SVGP predictive

            q(f_*) = N(c + k_*z K^{-1} m,  k_** - k_*z K^{-1} (K - S) K^{-1} k_z*),

        and adds new points by dual conditioning (:meth:`condition`) or :meth:`update`. This
        is how a variational GP trained elsewhere (e.g. a GPyTorch ``ApproximateGP``) gets
        cheap fantasies, as Chang et al. (2023, Sec. 4.1) do on the model of Maddox et al.
        (2021). The whole ``q(u)`` becomes the folded factor ``(lam_rest, B_rest)``; the
        memory starts empty. ``B_u`` need not be positive semi-definite (a ``q(u)`` wider than
        the prior in some direction); ``K + B_u = K S^{-1} K`` always is.

        Args:
            kernel, likelihood: as in the constructor (hyperparameters of the fitted model).
            inducing_points: ``(m, d)`` inducing inputs ``Z`` (no duplicates).
            mean: ``(m,)`` mean of ``g(Z)`` (for ``C > 1`` latents ``(C, m)``).
            covariance: ``(m, m)`` (or ``(C, m, m)``) positive-definite covariance of ``g(Z)``.
            mean_constant: constant prior mean ``c``; ``mean`` is then that of ``g(Z) = f(Z) - c``
                (GPyTorch's convention for a ``ConstantMean``: its whitened ``q(u)`` is for the
                deviation from the prior mean).
            num_data: number of observations ``q(u)`` summarises (used by the memory weights
                of later :meth:`update` calls).
            **kwargs: further constructor options (``inducing_update`` defaults to
                ``"fixed"`` here, so that ``Z`` stays the fitted one).

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> from bo_ncgp.likelihoods import Bernoulli
            >>> Z = torch.linspace(0, 1, 5, dtype=torch.float64).unsqueeze(-1)
            >>> kern = RBFKernel().double()
            >>> K = kern(Z).to_dense().detach()
            >>> m_u, S_u = torch.linspace(-1, 1, 5).double(), 0.5 * K  # a q(u) tighter than p(u)
            >>> dual = DualSVGP.from_inducing_posterior(kern, Bernoulli(), Z, m_u, S_u,
            ...                                         mean_constant=-2.0, num_data=30)
            >>> alpha_u, V_u = dual.inducing_posterior()  # the same q(u) back
            >>> torch.allclose(alpha_u[0], m_u), torch.allclose(V_u[0], S_u)
            (True, True)
            >>> mean, _ = dual.predict_f(Z)  # f(Z) = c + g(Z)
            >>> torch.allclose(mean, m_u - 2.0)
            True
        """
        kwargs.setdefault("inducing_update", "fixed")
        model = cls(kernel, likelihood, inducing_points, mean_constant=mean_constant, **kwargs)
        C, m = model._C, model.num_inducing
        Z = model._Z
        mean = torch.as_tensor(mean, dtype=Z.dtype, device=Z.device).detach()
        cov = torch.as_tensor(covariance, dtype=Z.dtype, device=Z.device).detach()
        if mean.shape == (m,) and C == 1:
            mean = mean.unsqueeze(0)
        if cov.shape == (m, m) and C == 1:
            cov = cov.unsqueeze(0)
        if mean.shape != (C, m) or cov.shape != (C, m, m):
            raise ValueError(
                f"DualSVGP.from_inducing_posterior: for {m} inducing points and {C} latent(s) "
                f"mean must be ({m},) or ({C}, {m}) and covariance ({m}, {m}) or ({C}, {m}, "
                f"{m}); got {tuple(mean.shape)} and {tuple(cov.shape)}"
            )
        if not (torch.isfinite(mean).all() and torch.isfinite(cov).all()):
            raise ValueError("DualSVGP.from_inducing_posterior: mean or covariance has NaN/inf")
        if int(num_data) != num_data or num_data < 0:
            raise ValueError(
                f"DualSVGP.from_inducing_posterior: num_data must be a non-negative int, got "
                f"{num_data}"
            )
        try:
            L_S = torch.linalg.cholesky(0.5 * (cov + cov.mT))
        except RuntimeError as err:
            raise ValueError(
                "DualSVGP.from_inducing_posterior: covariance is not positive definite"
            ) from err
        with torch.no_grad():
            K = model._Kzz()  # (C, m, m)
            Sinv_K = torch.cholesky_solve(K, L_S)
            B = K @ Sinv_K - K
            lam = (Sinv_K.mT @ mean.unsqueeze(-1)).squeeze(-1)  # K S^{-1} m
            model._lam_rest, model._B_rest = lam, 0.5 * (B + B.mT)
            model._num_data = model._num_data.new_tensor(int(num_data))
        model._touch()
        return model

    # --------------------------------------------------------------- copying
    def copy(self) -> DualSVGP:
        """An independent deep copy (kernel, likelihood, state; generator state cloned)."""
        gen = None
        if self.generator is not None:
            gen = torch.Generator(device=self.generator.device)
            gen.set_state(self.generator.get_state())
        new = DualSVGP(
            copy.deepcopy(self.kernel),
            copy.deepcopy(self.likelihood),
            self._Z.detach().clone(),
            generator=gen,
            **self._config(),
        )
        new.max_inducing = self.max_inducing
        new.load_state_dict(self.state_dict())
        return new

    def extra_repr(self) -> str:
        return (
            f"num_inducing={self.num_inducing}, num_latents={self._C}, num_data={self.num_data}, "
            f"memory={len(self.memory)}, batch_shape={tuple(self.batch_shape)}"
        )


class _Snapshot:
    """A copy of a (small) hyperparameter tensor, compared by value in cache keys."""

    __slots__ = ("value",)

    def __init__(self, t: Tensor) -> None:
        self.value = t.detach().clone()


def _same(a: tuple, b: tuple) -> bool:
    """Cache keys are equal: identical objects, or equal snapshots."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, _Snapshot):
            if not (isinstance(y, _Snapshot) and torch.equal(x.value, y.value)):
                return False
        elif x is not y:
            return False
    return True


def _shallow_module_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A new module object whose attribute, buffer and submodule dictionaries are copies of
    ``module``'s (the tensors and submodules themselves are shared)."""
    new = module.__class__.__new__(module.__class__)
    new.__dict__ = module.__dict__.copy()
    new._buffers = dict(module._buffers)
    new._modules = dict(module._modules)
    new._parameters = dict(module._parameters)
    return new
