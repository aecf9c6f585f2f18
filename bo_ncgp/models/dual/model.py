"""Memory-based dual sparse variational GP (Chang, Verma, John, Solin & Khan, ICML 2023).

:class:`DualSVGP` is a streaming SVGP for any likelihood of :mod:`bo_ncgp.likelihoods`. Its
posterior is held in dual form (Eqs. 10-12): the inducing inputs ``Z``, a fixed Gaussian
factor ``(lam_rest, B_rest)`` summarising old data that is no longer stored (the dual pair of
``old \\ M``, Eqs. 19-20), and a memory ``M`` of past points with their individual sites
(:mod:`bo_ncgp.models.dual.memory`). The total dual pair is

    lam = lam_rest + sum_{i in M} k_zi eta_i,     B_u = B_rest + sum_{i in M} k_zi beta_i k_zi^T

(Eq. 11), and predictions follow Eq. 10 through Cholesky factors of ``K_zz`` and
``K_zz + B_u`` (:mod:`bo_ncgp.models.dual.posterior`).

One call of :meth:`DualSVGP.update` is one step of Algorithm 1
(:mod:`bo_ncgp.models.dual.streaming`):

1. ``Z`` moves by pivoted Cholesky on ``[Z_old, X_new]`` and ``(lam_rest, B_rest)`` is
   projected with ``P = K(Z_new, Z_old) K(Z_old, Z_old)^{-1}`` (Eq. 27);
2. the memory's contributions are not part of ``(lam_rest, B_rest)`` (Eqs. 19-20 hold by
   construction) and are recomputed at the new ``Z`` and hyperparameters;
3. ``num_inner_steps`` damped natural-gradient steps (Eqs. 23-24 written on the sites, Eq. 54)
   update the sites of the new batch and of the memory from the current posterior;
4. the hyperparameters maximise Eq. 26 (or the plain ELBO of Eq. 21,
   ``hyper_objective="elbo"``) with the sites fixed (with a Gaussian likelihood, Eq. 26 with
   the sites tied to the noise, which they are a function of,
   :func:`~bo_ncgp.models.dual.streaming.conjugate_sites`: the sparse GP's log marginal
   likelihood, the exact GP's when ``Z`` holds the data): by L-BFGS to convergence
   (``hyper_optimizer="lbfgs"``, at most ``num_hyper_steps`` iterations) or by
   ``num_hyper_steps`` projected Adam steps (``"adam"``); the default ``"auto"`` takes Adam
   when a parameter's constraint has no transform (BoTorch's kernels), L-BFGS otherwise. The
   summarised old data ``(lam_rest, B_rest)`` are held fixed as a Gaussian factor on
   ``u = f(Z)`` (``rest_factor="inducing"``) or as the dual pair itself (``"dual"``, Eq. 26
   as written); memory points count once
   (``memory_scaling=False``) or stand for all old data, scaled by ``n_old / n_M``
   (Sec. 3.4). Held on ``K_zz^{-1} u`` with the scaled memory, the objective's optimum runs
   away with the outputscale as data arrive (``experiments/chang2023/drift.py``);
5. ``memory_size`` points of the new batch are sampled into the memory with probability
   proportional to the Bayesian leverage score ``h_i = beta_hat_i v_hat_i`` (Eq. 31) (per
   label with ``memory_selection="bls_stratified"``; uniformly within each label with the
   default ``"random_stratified"``); the sites of
   the others are folded into ``(lam_rest, B_rest)``; beyond ``memory_cap`` points the memory
   evicts by the same rule (``"reservoir_stratified"``: as a reservoir, so that each label's
   memory stays a uniform sample of all its points offered to the memory).

:meth:`DualSVGP.condition` adds the sites of new points at the current posterior with
``rho = 1`` (hyperparameters fixed) and conditions the Eq. 10 process on them in function
space, as if ``Z`` were extended by the new inputs, vectorised over leading batch dimensions
of the targets (fantasies), O(n m^2 + n^3) per batch element; the result is a
:class:`~bo_ncgp.models.dual.conditioned.ConditionedDualSVGP`.

Constant prior mean: ``f = c + g`` with ``g ~ GP(0, k)`` and ``u = g(Z)``. A site approximates
the likelihood, a function of ``f``: its pseudo-output ``y_hat_i`` (Eq. 12) is an observation of
``f_i``, so the sites are stored on ``f``, ``t_i(f) = exp(eta_i f - beta_i f^2 / 2)`` with
``eta_i = beta_i y_hat_i``, and do not depend on ``c``. On ``g = f - c`` (with ``f_i ~= c +
k_zi^T v``, ``v = K_zz^{-1} u``) the same site is
``exp((eta_i - beta_i c) g_i - beta_i g_i^2 / 2 + kappa_i(c))``,
``kappa_i(c) = eta_i c - beta_i c^2 / 2``, so the dual pair of Eq. 11 at ``c`` is

    lam(c) = sum_i k_zi (eta_i - beta_i c) = lam_f - c s,   s = sum_i k_zi beta_i,   B_u unchanged.

The summarised old data are held as ``(lam_f, s, B_rest)`` (projected alike by Eq. 27) and the
totals ``(sum eta_i, sum beta_i)`` of their ``kappa``. Where ``T_rest`` stands for the old
data's likelihood (``memory_scaling=False``) Eq. 26 adds its log normaliser
``kappa_rest(c) = c sum eta_i - c^2 sum beta_i / 2``; the ``kappa`` of every other site cancels
between ``log Z`` and ``E_q[log t_i]``. With ``learn_mean_constant=True``, ``c`` is then a
hyperparameter of Eq. 26 (or Eq. 21) like the kernel's: for a Gaussian likelihood with every
point held as a site, Eq. 26 is ``log N(y | c 1, K + sigma^2 I)`` for every ``c`` and its
optimum the generalised-least-squares mean ``1^T A^{-1} y / 1^T A^{-1} 1``,
``A = K + sigma^2 I``, as for an exact GP with a ``ConstantMean``.

Deviation from the paper's notation: Eqs. 23-24 / 59-60 are applied to the natural
parameters, i.e. to the sites ``(eta_i = beta_i y_hat_i, beta_i)``, so that a Gaussian
likelihood converges in one step with ``rho = 1``. Deviation from the paper's order of
operations: the memory's sites are removed *before* the projection (they are never folded in),
so ``B_rest`` stays positive semi-definite instead of picking up the Nyström error of
``P k_old - k_new`` that Eqs. 19-20 applied after Eq. 27 would introduce.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import latent_block, log_prior, solve_lower, stable_cholesky
from bo_ncgp.linalg._args import check_number
from bo_ncgp.models._alias import Alias
from bo_ncgp.models._checks import check_device, check_inputs
from bo_ncgp.models.base import Callback, LatentGP
from bo_ncgp.models.dual import streaming
from bo_ncgp.models.dual._state import (
    InducingState,
    ResizableModule,
    Snapshot,
    cached_weights,
    hyperparameters_fixed,
    same_key,
    shallow_module_copy,
    tensor_places,
)
from bo_ncgp.models.dual.config import DualSVGPConfig
from bo_ncgp.models.dual.inducing import (
    check_inducing_points,
    check_latent_kernel,
    project_dual_pair,
)
from bo_ncgp.models.dual.memory import Memory, bayesian_leverage_scores
from bo_ncgp.models.dual.objective import dual_objective, sequential_elbo
from bo_ncgp.models.dual.posterior import (
    DualFactors,
    PredictiveWeights,
    SiteBlock,
    checked_weights,
    dual_factors,
    dual_predict,
    weights_predict,
)
from bo_ncgp.models.dual.sites import expected_terms, site_contributions, site_targets

if TYPE_CHECKING:
    from bo_ncgp.models.dual.conditioned import ConditionedDualSVGP
    from bo_ncgp.models.dual.pool import DualPoolFantasies

__all__ = ["DualSVGP"]


def _setting(name: str) -> property:
    """A model attribute that reads ``config.<name>`` and replaces the config on assignment
    (checked by :class:`DualSVGPConfig`)."""

    def get(self: DualSVGP) -> Any:
        return getattr(self.config, name)

    def set_(self: DualSVGP, value: Any) -> None:
        self.config = replace(self.config, **{name: value})

    return property(get, set_, doc=f"The ``{name}`` setting (:class:`DualSVGPConfig`).")


class DualSVGP(InducingState, ResizableModule, LatentGP):
    """Memory-based dual SVGP (Chang et al. 2023, Algorithm 1) for streaming data.

    Args:
        kernel: a GPyTorch kernel. For ``num_latents = C > 1`` either one kernel with
            ``batch_shape (C,)`` (one set of hyperparameters per latent) or an unbatched kernel
            shared by all latents. Priors registered on it (e.g. ``GammaPrior``) are added to
            the hyperparameter objective.
        likelihood: a :class:`bo_ncgp.likelihoods.Likelihood` (its priors are added too).
            ``Binomial`` must have a scalar ``num_trials``.
        inducing_points: ``(m, d)`` initial inducing inputs (a tensor, or an array built on
            the default device); exact duplicates are dropped with a warning.
        config: a :class:`DualSVGPConfig`; keyword ``settings`` replace its fields.
        generator: ``torch.Generator`` for memory sampling (global RNG when ``None``).
        **settings: fields of :class:`DualSVGPConfig` (``memory_size``, ``rho``,
            ``num_inner_steps``, ``num_hyper_steps``, ``num_latents``, ``inducing_update``,
            ``memory_selection``, ``memory_cap``, ``hyper_objective``, ``hyper_optimizer``,
            ``rest_factor``, ``memory_scaling``, ``lr``, ``num_rounds``, ``max_inducing``,
            ``mean_constant``, ``learn_mean_constant``), documented there; each but the last
            two is also an attribute of the model that may be reassigned. ``max_inducing``
            defaults to ``m``: a larger value lets ``Z`` grow from a small initial design as
            data arrives. With ``mean_constant = c``, ``f = c + g`` with ``g ~ GP(0, k)``
            (fixed, or trained with the hyperparameters when ``learn_mean_constant``; module
            docstring): the dual parameters and :meth:`inducing_posterior` describe ``g``; the
            sites, predictions, :meth:`bls` and the likelihood see ``f`` (a model converted
            from a GPyTorch SVGP with a ``ConstantMean``, :meth:`from_inducing_posterior`).

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

    supports_update = True
    _resizable = ("_Z", "_lam_rest", "_s_rest", "_B_rest", "_prior_var_ref")

    memory_size = _setting("memory_size")
    rho = _setting("rho")
    num_inner_steps = _setting("num_inner_steps")
    num_hyper_steps = _setting("num_hyper_steps")
    inducing_update = _setting("inducing_update")
    memory_selection = _setting("memory_selection")
    memory_cap = _setting("memory_cap")
    hyper_objective = _setting("hyper_objective")
    hyper_optimizer = _setting("hyper_optimizer")
    rest_factor = _setting("rest_factor")
    memory_scaling = _setting("memory_scaling")
    lr = _setting("lr")
    num_rounds = _setting("num_rounds")
    max_inducing = _setting("max_inducing")

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        likelihood: Likelihood,
        inducing_points: Tensor,
        *,
        config: DualSVGPConfig | None = None,
        generator: torch.Generator | None = None,
        **settings: Any,
    ) -> None:
        super().__init__()
        C = check_latent_kernel("DualSVGP", kernel, likelihood)
        cfg = DualSVGPConfig(**settings) if config is None else replace(config, **settings)
        if cfg.learn_mean_constant and C > 1:
            raise UnsupportedError(
                f"DualSVGP: learn_mean_constant=True needs a single latent function, got {C} "
                f"for the likelihood {likelihood.name} (a constant shared by the latents of a "
                "softmax cancels)"
            )
        if cfg.num_latents is not None and int(cfg.num_latents) != C:
            raise InputDataError(
                f"DualSVGP: num_latents={cfg.num_latents} but the likelihood {likelihood.name} "
                f"has {C} latent function(s)"
            )
        trials = getattr(likelihood, "num_trials", None)
        if isinstance(trials, Tensor) and trials.numel() > 1:
            raise InputDataError("DualSVGP: Binomial likelihood needs a scalar num_trials")
        if not isinstance(inducing_points, Tensor):  # lists, numpy arrays: as update's data
            inducing_points = check_inputs(inducing_points, "DualSVGP", name="inducing_points",
                                           device=torch.get_default_device())  # fmt: skip
        Z = check_inducing_points(inducing_points).detach().clone()
        m, d = Z.shape
        self.kernel = kernel
        self.likelihood = likelihood
        if generator is not None and not isinstance(generator, torch.Generator):
            raise InputDataError(
                f"DualSVGP: generator must be a torch.Generator or None, got "
                f"{type(generator).__name__}"
            )
        self.generator = generator
        self.config = replace(
            cfg, num_latents=C, max_inducing=m if cfg.max_inducing is None else cfg.max_inducing
        )
        self._C = C
        self._base_cache: tuple[tuple, DualFactors] | None = None
        self.register_buffer("_Z", Z)
        # the summarised old data on f (module docstring): lam_f = sum k eta, s = sum k beta,
        # B = sum k beta k^T, and the totals (sum eta, sum beta) of the sites folded in
        self.register_buffer("_lam_rest", Z.new_zeros(C, m))
        self.register_buffer("_s_rest", Z.new_zeros(C, m))
        self.register_buffer("_B_rest", Z.new_zeros(C, m, m))
        self.register_buffer("_rest_totals", Z.new_zeros(C, 2))
        self.register_buffer("_num_data", torch.zeros((), dtype=torch.long, device=Z.device))
        c = Z.new_tensor(cfg.mean_constant)
        if cfg.learn_mean_constant:
            self._mean_constant = torch.nn.Parameter(c)
        else:
            self.register_buffer("_mean_constant", c)
        # the largest prior variance per latent seen after an update (collapse warning)
        self._collapse_warned = False
        self._rest_anchor: Tensor | None = None  # set during hyperparameter steps
        self.register_buffer("_prior_var_ref", Z.new_zeros(0))
        # how many points of each class label the model has seen (the stratified memory)
        self.register_buffer("_label_counts", Z.new_zeros(streaming.num_label_classes(likelihood)))
        # how many points of each class (one count without labels) were offered to the memory
        # (the reservoir memory, ``memory_selection="reservoir_stratified"``)
        num_offered = max(streaming.num_label_classes(likelihood), 1)
        self.register_buffer("_offered_counts", Z.new_zeros(num_offered))
        self.memory = Memory(d, C, dtype=Z.dtype, device=Z.device)

    # -------------------------------------------------------------- properties
    @property
    def mean_constant(self) -> float:
        """The constant prior mean ``c`` (``f = c + g``): fixed, or its current learned value."""
        return float(self._mean_constant.detach())

    @mean_constant.setter
    def mean_constant(self, value: float) -> None:
        """Set a learned ``c`` (the start of its next fit; a fixed ``c`` is the
        configuration's ``mean_constant``). The sites are held on ``f`` and stay valid for
        every ``c`` (module docstring); only the cached factors are dropped.

        Example:
            >>> import torch
            >>> from gpytorch.kernels import RBFKernel
            >>> from bo_ncgp.likelihoods import Gaussian
            >>> Z = torch.rand(4, 1, dtype=torch.float64)
            >>> m = DualSVGP(RBFKernel().double(), Gaussian().double(), Z, learn_mean_constant=True)
            >>> m.mean_constant = -0.5
            >>> m.mean_constant, m.learn_mean_constant
            (-0.5, True)
        """
        if not self.learn_mean_constant:
            raise UnsupportedError(
                "DualSVGP: mean_constant can be set only when it is learned "
                "(learn_mean_constant=True); a fixed constant is the configuration's "
                f"mean_constant, {self.config.mean_constant}"
            )
        c = check_number(value, "mean_constant", "DualSVGP")
        with torch.no_grad():
            self._mean_constant.fill_(c)
        self._touch()

    @property
    def learn_mean_constant(self) -> bool:
        """Whether ``c`` is trained with the hyperparameters (:class:`DualSVGPConfig`)."""
        return self.config.learn_mean_constant

    memory_inputs: Alias[Tensor] = Alias("memory.X", "``(n_M, d)`` inputs held in memory.")
    memory_targets: Alias[Tensor] = Alias("memory.y", "``(n_M,)`` targets held in memory.")

    # ------------------------------------------------------------ state utils
    def _touch(self) -> None:
        """Drop cached factorisations (state or hyperparameters changed)."""
        self._base_cache = None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict.setdefault(prefix + "_prior_var_ref", self._prior_var_ref.new_zeros(0))
        # saved before the counts were kept: none counted (the stratified memory then shares
        # the memory equally between the labels)
        state_dict.setdefault(prefix + "_label_counts", torch.zeros_like(self._label_counts))
        # saved before the offered points were counted: the memory stands for itself
        state_dict.setdefault(prefix + "_offered_counts", torch.zeros_like(self._offered_counts))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _on_state_loaded(self) -> None:
        self._touch()

    def _apply(self, fn, *args, **kwargs):
        before = tensor_places(self)
        out = super()._apply(fn, *args, **kwargs)
        if tensor_places(self) != before:  # a no-op ``.to`` keeps the cached factors
            self._touch()
        return out

    def _hyperparameters(self) -> list[Tensor]:
        return [p for p in self.parameters() if p.requires_grad]

    def _caching_allowed(self) -> bool:
        """Factorisations are cached only when no autograd graph would be kept alive in them
        (grad disabled, or nothing requires grad), so repeated backward passes stay valid."""
        if not torch.is_grad_enabled():
            return True
        return not self._hyperparameters()

    def _base_key(self) -> tuple:
        """What the base factorisation depends on: the state tensors (replaced, never
        modified in place, so compared by identity) and snapshots of the hyperparameter values
        (GPyTorch setters write through ``.data``, which leaves ``_version`` unchanged)."""
        mem = self.memory
        key: list = [self._Z, self._lam_rest, self._s_rest, self._B_rest, mem.X, mem.eta]
        key += [mem.beta, Snapshot(self._mean_constant)]
        key += [Snapshot(p) for p in self.parameters()]
        return tuple(key)

    def _snapshot(self) -> DualSVGP:
        """A new model sharing kernel, likelihood and (immutable) state tensors with self.

        State tensors are only ever replaced, never modified in place, so sharing them is
        safe; the module dictionaries (and the memory module) are copied so that assigning
        state on either model leaves the other untouched. The cached base factorisation (if
        any) stays valid and is shared.
        """
        new = shallow_module_copy(self)
        new._modules["memory"] = shallow_module_copy(self.memory)
        return new

    # ---------------------------------------------------------------- kernels
    # a shared kernel's blocks get a latent dimension of size 1: every later operation
    # broadcasts it against the C latents, so shared quantities (``chol K_zz``,
    # ``L_K^{-1} K_zx``) are computed once, not C times
    def _Kzz(self, Z: Tensor | None = None) -> Tensor:
        """``(L', m, m)``."""
        return latent_block(self.kernel, self._Z if Z is None else Z)

    def _Kzx(self, X: Tensor, Z: Tensor | None = None) -> Tensor:
        """``(*bx, L', m, n)``."""
        return latent_block(self.kernel, self._Z if Z is None else Z, X)

    def _kxx(self, X: Tensor, full_cov: bool) -> Tensor:
        """``(*bx, L', n)`` prior variances or ``(*bx, L', n, n)`` covariance."""
        return latent_block(self.kernel, X, diag=not full_cov)

    def _prior_blocks(
        self, X: Tensor, full_cov: bool, Xc: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None, Tensor]:
        """``K(Z, X)`` (as :meth:`_Kzx`), ``K(X_c, X)`` ``(*, L', n_c, n)`` (``None``
        without ``X_c``) and the prior (co)variance at ``X`` (as :meth:`_kxx`).

        The blocks that can share one kernel call do: the rows ``Z``, an unbatched ``X_c``
        and, with ``full_cov``, ``X`` itself against the columns ``X``. An acquisition
        evaluates the posterior at a handful of points at a time, where the fixed cost of a
        GPyTorch kernel call, not its size, is what the evaluation costs; the values are
        those of the separate calls.

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> from bo_ncgp.likelihoods import Gaussian
            >>> m = DualSVGP(RBFKernel(), Gaussian(0.1), torch.rand(4, 2))
            >>> X, Xc = torch.rand(3, 1, 2), torch.rand(2, 2)
            >>> Kzx, Kcx, kxx = m._prior_blocks(X, True, Xc)
            >>> Kzx.shape, Kcx.shape, kxx.shape
            (torch.Size([3, 1, 4, 1]), torch.Size([3, 1, 2, 1]), torch.Size([3, 1, 1, 1]))
            >>> torch.allclose(Kcx, m._Kzx(X, Xc)), torch.allclose(kxx, m._kxx(X, True))
            (True, True)
        """
        if Xc is not None and Xc.dim() > 2:  # batched conditioned inputs: a call of their own
            batch = torch.broadcast_shapes(Xc.shape[:-2], X.shape[:-2])
            Xc_b, X_b = Xc.expand(*batch, *Xc.shape[-2:]), X.expand(*batch, *X.shape[-2:])
            return self._Kzx(X), latent_block(self.kernel, Xc_b, X_b), self._kxx(X, full_cov)
        m = self._Z.shape[-2]
        Kex, kxx = self._extended_blocks(X, full_cov, Xc)
        return Kex[..., :m, :], None if Xc is None else Kex[..., m:, :], kxx

    def _extended_blocks(
        self, X: Tensor, full_cov: bool, Xc: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``K(Z_e, X)`` ``(*, L', m + n_c, n)`` for the inducing set extended by an unbatched
        ``X_c`` (``Z_e = Z``, then ``X_c``) and the prior (co)variance at ``X``, from one
        kernel call (see :meth:`_prior_blocks`)."""
        rows = self._Z if Xc is None else torch.cat([self._Z, Xc], -2)
        me = rows.shape[-2]
        if full_cov:  # K(X, X) as the last rows
            rows = torch.cat([rows.expand(*X.shape[:-2], *rows.shape), X], -2)
        K = latent_block(self.kernel, rows, X)
        return K[..., :me, :], K[..., me:, :] if full_cov else self._kxx(X, False)

    # ------------------------------------------------------------- posterior
    def _memory_sites(self) -> tuple[Tensor, Tensor]:
        """The memory's sites on ``f``, ``(eta, beta)`` ``(L, n_M)``."""
        return self.memory.eta.mT, self.memory.beta.mT

    def _on_g(self, eta: Tensor, beta: Tensor) -> Tensor:
        """The first natural parameter on ``g = f - c`` of sites ``(eta, beta)`` on ``f``:
        ``eta - beta c`` (module docstring; differentiable in a learned ``c``)."""
        return eta - beta * self._mean_constant

    def _contributions(self, X: Tensor, eta: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
        """``(sum_i k_zi (eta_i - beta_i c), sum_i k_zi beta_i k_zi^T)``: Eq. 11 on ``g`` for
        sites ``(eta, beta)`` on ``f`` at inputs ``X``."""
        return site_contributions(self._Kzx(X), self._on_g(eta, beta), beta)

    def _total_pair(self) -> tuple[Tensor, Tensor]:
        """``(lam, B_u)`` of the posterior of ``g`` at the current ``Z`` (Eq. 11)."""
        lam, B = self._lam_rest - self._mean_constant * self._s_rest, self._B_rest
        if len(self.memory):
            dl, dB = self._contributions(self.memory.X, *self._memory_sites())
            lam, B = lam + dl, B + dB
        return lam, B

    def _factors(self) -> DualFactors:
        """Base factors of Eq. 10, cached when allowed (within
        :func:`~bo_ncgp.models.dual.fixed_hyperparameters`, or when nothing requires grad)."""
        fixed = hyperparameters_fixed()
        cache = fixed or self._caching_allowed()
        if cache:
            key = self._base_key()
            if self._base_cache is not None and same_key(self._base_cache[0], key):
                return self._base_cache[1]
        with torch.no_grad() if fixed else contextlib.nullcontext():
            lam, B = self._total_pair()
            f = dual_factors(self._Kzz(), B, lam)
        if cache:
            self._base_cache = (key, f)
        return f

    def _weights(self, f: DualFactors) -> PredictiveWeights | None:
        """The :class:`~bo_ncgp.models.dual.posterior.PredictiveWeights` of ``f`` when ``f``
        is the cached factorisation (nothing to differentiate), the state is float64 and the
        weights pass :func:`~bo_ncgp.models.dual.posterior.checked_weights` (their round-off
        grows with ``cond(K_zz)``); else ``None``: use the solves."""
        held = self._base_cache
        if self._Z.dtype != torch.float64 or held is None or held[1] is not f:
            return None
        return cached_weights(self, f, lambda: self._checked_weights(f))

    def _checked_weights(
        self, f: DualFactors, block: SiteBlock | None = None, Xc: Tensor | None = None
    ) -> PredictiveWeights | None:
        """:func:`~bo_ncgp.models.dual.posterior.checked_weights` of ``f`` (and the site
        ``block`` at the unbatched inputs ``Xc``), checked at ``Z`` (and ``Xc``)."""
        Ze = self._Z if Xc is None else torch.cat([self._Z, Xc], -2)
        Kee, kee = self._extended_blocks(Ze, False, Xc)
        return checked_weights(f, Kee, kee, block)

    def _marginals(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Latent-major ``mean (*, L, n)`` and ``var (*, L, n)`` / ``cov (*, L, n, n)``."""
        f = self._factors()
        weights = self._weights(f)
        if weights is not None:
            Kzx, kxx = self._extended_blocks(X, full_cov)
            mean, var = weights_predict(weights, Kzx, kxx, full_cov)
        else:
            Kzx, _, kxx = self._prior_blocks(X, full_cov)
            mean, var = dual_predict(f, Kzx, kxx, full_cov)
        return mean + self._mean_constant, (var if full_cov else var.clamp_min(0))

    def _site_targets(self, y: Tensor, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Sites on ``f`` (``eta = beta * y_hat``, Eq. 12) from the marginals
        ``N(mean, var)`` of ``f``."""
        return site_targets(self.likelihood, y, mean, var)

    def _out(self, t: Tensor, matrix: bool = False) -> Tensor:
        if self._C == 1:
            return t.squeeze(-3) if matrix else t.squeeze(-2)
        return t if matrix else t.transpose(-1, -2)

    # ----------------------------------------------------------------- checks
    def _check_X(self, X: Any, name: str = "X", allow_empty: bool = False) -> Tensor:
        d = self._Z.shape[-1]
        return check_inputs(
            X,
            "DualSVGP",
            name=name,
            dims=d,
            allow_empty=allow_empty,
            dtype=self._Z.dtype,
            device=self._Z.device,
        )

    def _check_y(self, y: Any, n: int, batched: bool) -> Tensor:
        if not isinstance(y, Tensor):
            y = torch.as_tensor(y, device=self._Z.device)
        check_device("DualSVGP", self._Z.device, targets=y)
        if y.dim() == 0 or (not batched and y.dim() != 1):
            raise InputDataError(
                f"DualSVGP: targets must have shape {'(..., n)' if batched else '(n,)'}, got "
                f"{tuple(y.shape)}"
            )
        if y.shape[-1] != n:
            raise InputDataError(
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
            Differentiable with respect to ``X`` and the hyperparameters.
        """
        X = self._check_X(X, allow_empty=True)
        mean, var = self._marginals(X, full_cov)
        return self._out(mean), self._out(var, matrix=full_cov)

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
        (Eq. 24: ``alpha_u = K_zz (K_zz + B_u)^{-1} lam``, ``V_u = K_zz (K_zz + B_u)^{-1} K_zz``).
        """
        f = self._factors()
        Kzz = self._Kzz()
        mu_v = torch.linalg.solve_triangular(f.L_A.mT, f.w.unsqueeze(-1), upper=True)
        G = solve_lower(f.L_A, Kzz)
        return (Kzz @ mu_v).squeeze(-1), G.mT @ G

    def dual_parameters(self) -> tuple[Tensor, Tensor]:
        """``(lam, B_u)`` of the posterior at the current ``Z`` and hyperparameters (Eq. 11,
        natural-parameter form), ``(L, m)``, ``(L, m, m)``."""
        return self._total_pair()

    # ------------------------------------------------------------- objectives
    def _log_prior(self) -> Tensor:
        return log_prior(self.kernel, self.likelihood, dtype=self._Z.dtype, device=self._Z.device)

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
        """Eq. 26 (``which="dual"``) or Eq. 21 (``"elbo"``, with ``q_fixed = (m_u, L_V)``) on
        the active points ``(Xa, ya)`` with their sites ``(eta, beta)`` on ``f``."""
        Kzz, Kza, kaa = self._Kzz(), self._Kzx(Xa), self._kxx(Xa, False)
        lam_r, B_r = self._rest_pair(Kzz)
        c = self._mean_constant
        if which == "elbo":
            m_u, L_V = q_fixed if q_fixed is not None else self._fixed_q()
            return sequential_elbo(
                self.likelihood, Kzz, Kza, kaa, ya, weights, m_u, L_V,
                lam_r, B_r, mean_offset=c,
            )  # fmt: skip
        out = dual_objective(
            self.likelihood, Kzz, Kza, kaa, ya, self._on_g(eta, beta), beta, weights,
            lam_r, B_r, include_rest=rest, mean_offset=c,
        )  # fmt: skip
        if not rest:  # T_rest stands for the old data's likelihood: its normaliser on f
            eta_sum, beta_sum = self._rest_totals.unbind(-1)
            out = out + (c * eta_sum - 0.5 * c.square() * beta_sum).sum()
        return out

    def _rest_factor(self, Kzz: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The summarised factor ``(lam_f, s, B_rest)`` (module docstring) at the
        hyperparameters of ``Kzz``.

        With ``rest_factor="dual"`` (Eq. 26 as written) the stored factor is held fixed. With
        ``"inducing"``, while hyperparameter steps run (``_rest_anchor`` set to the Cholesky
        factor ``L_0`` of ``K_zz`` at the hyperparameters the factor was formed under), it is
        held fixed as a Gaussian on ``u``: ``(P lam_f, P s, P B P^T)`` with
        ``P = K_zz K_0^{-1}`` (Eq. 27's projection across hyperparameters instead of inducing
        inputs), differentiable in the hyperparameters.
        """
        lam, s, B = self._lam_rest, self._s_rest, self._B_rest
        L0 = self._rest_anchor
        if L0 is None:
            return lam, s, B
        Pt = torch.cholesky_solve(Kzz.mT, L0)  # K_0^{-1} K_zz = P^T
        ls = Pt.mT @ torch.stack([lam, s], -1)
        return ls[..., 0], ls[..., 1], Pt.mT @ B @ Pt

    def _rest_pair(self, Kzz: Tensor) -> tuple[Tensor, Tensor]:
        """The summarised dual pair on ``g``, ``(lam_f - c s, B_rest)``
        (:meth:`_rest_factor`), at the hyperparameters of ``Kzz`` and the current ``c``."""
        lam, s, B = self._rest_factor(Kzz)
        return lam - self._mean_constant * s, B

    @torch.no_grad()
    def _settle_rest(self) -> None:
        """End the hyperparameter steps of ``rest_factor="inducing"``: store the summarised
        factor re-expressed at the current hyperparameters and drop the anchor."""
        if self._rest_anchor is not None:
            lam, s, B = self._rest_factor(self._Kzz())
            self._lam_rest, self._s_rest, self._B_rest = lam, s, 0.5 * (B + B.mT)
            self._rest_anchor = None
        self._touch()

    def _memory_weights(self, n_old: int) -> Tensor:
        n_M = len(self.memory)
        scale = n_old / n_M if n_M and self.memory_scaling else 1.0
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
        mem = self.memory
        eta, beta = self._memory_sites()
        weights = self._memory_weights(self.num_data)
        rest = len(mem) > 0 and self.memory_scaling
        val = self._objective(mem.X, mem.y, eta, beta, weights, rest, "dual")
        return val + self._log_prior() if include_prior else val

    def elbo(self, include_prior: bool = True) -> Tensor:
        """The sequential ELBO of Eq. 21 over the memory at the current state, with
        ``q(u)`` fixed at the current posterior (differentiable in the hyperparameters)."""
        mem = self.memory
        eta, beta = self._memory_sites()
        val = self._objective(mem.X, mem.y, eta, beta, mem.y.new_ones(len(mem)), True, "elbo")
        return val + self._log_prior() if include_prior else val

    def _fixed_q(
        self, X: Tensor | None = None, eta: Tensor | None = None, beta: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(m_u, chol V_u)`` of the posterior of ``u = g(Z)``: the stored one, or, given the
        sites ``(eta, beta)`` (on ``f``) of the active points ``X`` of an update, the summarised
        factor times those sites (the posterior the update's site steps reached, before the
        sites are stored)."""
        with torch.no_grad():
            if X is None:
                m_u, V_u = self.inducing_posterior()
                return m_u, stable_cholesky(V_u, name="V_u")
            Kzz = self._Kzz()
            lam, B = self._rest_pair(Kzz)
            dl, dB = self._contributions(X, eta, beta)
            f = dual_factors(Kzz, B + dB, lam + dl)
            mu_v = torch.linalg.solve_triangular(f.L_A.mT, f.w.unsqueeze(-1), upper=True)
            G = solve_lower(f.L_A, Kzz)
            return (Kzz @ mu_v).squeeze(-1), stable_cholesky(G.mT @ G, name="V_u")

    # ----------------------------------------------------------------- update
    def update(self, X: Tensor, y: Tensor, *, callback: Callback | None = None) -> DualSVGP:
        """One streaming step of Algorithm 1 on the batch ``(X (n, d), y (n,))``; returns self.

        The first call on an empty model is the batch fit. ``callback`` gets a
        :class:`~bo_ncgp.models.base.FitStep` after every hyperparameter step (after every
        round when there are none); returning ``True`` skips the remaining steps of this
        update (the batch is still folded into the posterior).
        """
        X = self._check_X(X)
        if X.dim() != 2:
            raise InputDataError(f"DualSVGP.update: X must be (n, d), got {tuple(X.shape)}")
        y = self._check_y(y, X.shape[0], batched=False)
        streaming.update(self, X.detach(), y.detach(), callback)
        return self

    def _project_unenforced_constraints(self) -> None:
        streaming.project_unenforced_constraints(self)

    def project(self, Z_new: Tensor) -> DualSVGP:
        """Move the posterior to new inducing inputs (Eq. 27); returns self.

        The summarised factor is projected with ``P = K(Z_new, Z_old) K(Z_old, Z_old)^{-1}``;
        memory sites are re-evaluated at ``Z_new``. If ``Z_new`` contains ``Z_old`` and the
        memory is empty (or its inputs lie in ``Z_old``) the predictions do not change.
        """
        Z_new = check_inducing_points(self._check_X(Z_new, "Z_new").detach(), "Z_new")
        if Z_new.dim() != 2:
            raise InputDataError(
                f"DualSVGP.project: Z_new must be (m, d), got {tuple(Z_new.shape)}"
            )
        with torch.no_grad():
            if Z_new.shape == self._Z.shape and torch.equal(Z_new, self._Z):
                return self
            Kzz_old = self._Kzz()
            K_on = self._Kzx(Z_new)  # K(Z_old, Z_new)
            ls = torch.stack([self._lam_rest, self._s_rest], -2)  # (L, 2, m): both as lam
            ls, B = project_dual_pair(Kzz_old, K_on.mT, ls, self._B_rest)
            self._Z, self._B_rest = Z_new.clone(), B
            self._lam_rest, self._s_rest = ls.unbind(-2)
        self._touch()
        return self

    # ------------------------------------------------------------ conditioning
    def condition(self, X: Tensor, Y: Tensor) -> ConditionedDualSVGP:
        """A new model with the sites of ``(X, Y)`` added at the current posterior (``rho = 1``,
        hyperparameters fixed) on ``f(X)`` itself: the Eq. 10 posterior conditioned in
        function space, as if it were moved unchanged to the inducing set ``Z + X`` and the
        sites added there (:mod:`~bo_ncgp.models.dual.posterior`); ``self`` is left untouched.

        Args:
            X: ``(n, d)`` or ``(*b, n, d)`` inputs.
            Y: ``(*b, n)`` targets; leading dimensions (e.g. fantasies x candidates) become the
                returned model's ``batch_shape = broadcast(X.shape[:-2], Y.shape[:-1])``.

        Returns:
            a :class:`~bo_ncgp.models.dual.conditioned.ConditionedDualSVGP` sharing the kernel
            and likelihood modules with ``self``. The sites are differentiable with respect
            to ``X`` and ``Y`` when those require grad (one backward pass per call, as for a
            fantasy model built inside an acquisition function); otherwise they are
            constants. Cost O(n m^2 + n^3) per batch element, no Python loop over the batch.
        """
        from bo_ncgp.models.dual.conditioned import ConditionedDualSVGP

        return ConditionedDualSVGP.from_model(self, X, Y)

    def pool_fantasies(self, X_pool: Tensor) -> DualPoolFantasies:
        """:class:`~bo_ncgp.models.dual.pool.DualPoolFantasies` on the pool ``X_pool (P, d)``:
        the rank-one dual conditioning of the pool marginals (single latent, unbatched)."""
        from bo_ncgp.models.dual.pool import DualPoolFantasies

        return DualPoolFantasies(self, X_pool)

    # ------------------------------------------------------------ conversion
    @classmethod
    def from_inducing_posterior(
        cls,
        kernel: gpytorch.kernels.Kernel,
        likelihood: Likelihood,
        inducing_points: Tensor,
        mean: Tensor,
        covariance: Tensor,
        **kwargs: Any,
    ) -> DualSVGP:
        """A DualSVGP whose posterior is a given Gaussian ``q(u) = N(mean, covariance)``
        (Eqs. 10-11 inverted); keywords (``mean_constant``, ``num_data``, settings) and
        details: :func:`bo_ncgp.models.dual.conversion.from_inducing_posterior`.

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> from bo_ncgp.likelihoods import Bernoulli
            >>> Z = torch.linspace(0, 1, 3).unsqueeze(-1)
            >>> dual = DualSVGP.from_inducing_posterior(RBFKernel(), Bernoulli(), Z,
            ...                                         torch.ones(3), 0.1 * torch.eye(3))
            >>> dual.num_data, dual.inducing_update  # Z stays the fitted one
            (0, 'fixed')
        """
        from bo_ncgp.models.dual.conversion import from_inducing_posterior

        return from_inducing_posterior(
            cls, kernel, likelihood, inducing_points, mean, covariance, **kwargs
        )

    # --------------------------------------------------------------- copying
    def copy(self) -> DualSVGP:
        """An independent deep copy (kernel, likelihood, state; generator state cloned)."""
        gen = None
        if self.generator is not None:
            gen = torch.Generator(device=self.generator.device)
            gen.set_state(self.generator.get_state())
        new = type(self)(
            copy.deepcopy(self.kernel),
            copy.deepcopy(self.likelihood),
            self._Z.detach().clone(),
            config=self.config,
            generator=gen,
        )
        new.load_state_dict(self.state_dict())
        return new

    def extra_repr(self) -> str:
        return (
            f"num_inducing={self.num_inducing}, num_latents={self._C}, num_data={self.num_data}, "
            f"memory={len(self.memory)}"
        )


def _constructor_signature() -> inspect.Signature:
    """``DualSVGP(kernel, likelihood, inducing_points, *, config, generator, <settings>)`` with
    the settings and their defaults taken from :class:`DualSVGPConfig` (for ``help`` and
    introspection; the keywords are passed on through ``**settings``)."""
    sig = inspect.signature(DualSVGP.__init__)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    params += [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
        for f in fields(DualSVGPConfig)
    ]
    return sig.replace(parameters=params)


DualSVGP.__init__.__signature__ = _constructor_signature()  # type: ignore[attr-defined]
