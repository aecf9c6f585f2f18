"""Dual conditioning of the memory-based dual SVGP on (fantasy) observations (Chang et al.
2023, Sec. 3.3 and Sec. 4.1).

:class:`ConditionedDualSVGP` is what :meth:`DualSVGP.condition
<bo_ncgp.models.dual.DualSVGP.condition>` returns: the unconditioned model (its dual pair,
memory, ``Z`` and hyperparameters, shared and fixed) plus the sites ``(eta_i, beta_i)`` of the
conditioned points, computed at the posterior they were added to with ``rho = 1`` (Eqs. 7-8,
12). The sites condition the unconditioned model's posterior process ``GP(mu, Sigma)`` of
Eq. 10 (Nystrom residual included) on ``f(X_c)`` by Gaussian conditioning in function space
(:func:`~bo_ncgp.models.dual.posterior.site_block`): the posterior of the inducing set
extended by the conditioned inputs, so a fantasy at a new point removes the variance there
that an exact update of that posterior removes. Built on the cached base factorisation,
vectorised over leading batch dimensions (fantasies x candidates): O(n m^2 + n^3) per batch
element.

Example:
    >>> import torch
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> from bo_ncgp.models.dual import DualSVGP
    >>> X = torch.rand(20, 1); y = (X[:, 0] > 0.5).double()
    >>> model = DualSVGP(RBFKernel(), Bernoulli(), X[:5], num_hyper_steps=0).update(X, y)
    >>> cond = model.condition(torch.rand(3, 2, 1), torch.ones(3, 2))  # 3 fantasies of 2 points
    >>> type(cond).__name__, cond.batch_shape, cond.num_data
    ('ConditionedDualSVGP', torch.Size([3]), 22)
    >>> cond.predict_f(torch.rand(4, 1))[0].shape
    torch.Size([3, 4])
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.models._alias import Alias
from bo_ncgp.models.base import Callback, LatentGP
from bo_ncgp.models.dual._state import (
    cached_weights,
    hyperparameters_fixed,
    same_key,
    tensor_places,
)
from bo_ncgp.models.dual.posterior import (
    DualFactors,
    PredictiveWeights,
    SiteBlock,
    dual_predict,
    site_block,
    weights_predict,
)

if TYPE_CHECKING:
    import gpytorch

    from bo_ncgp.likelihoods import Likelihood
    from bo_ncgp.models.dual.memory import Memory
    from bo_ncgp.models.dual.model import DualSVGP

__all__ = ["ConditionedDualSVGP"]


class ConditionedDualSVGP(torch.nn.Module, LatentGP):
    """A :class:`~bo_ncgp.models.dual.DualSVGP` conditioned on observations by dual
    conditioning (sites added at ``rho = 1`` on ``f(X_c)``, hyperparameters fixed; module
    docstring).

    Built by :meth:`DualSVGP.condition <bo_ncgp.models.dual.DualSVGP.condition>` (or
    :meth:`from_model`); :meth:`condition` on it conditions further (the sites are
    concatenated). It has no streaming update: fold observations in with ``update`` on the
    unconditioned model.

    Args:
        base: the unconditioned model (a snapshot of its state; kernel and likelihood shared).
        X: ``(*bx, n, d)`` conditioned inputs.
        y: ``(*b, n)`` conditioned targets.
        eta, beta: ``(*b, L, n)`` their sites on ``f`` (Eq. 12, ``eta = beta * y_hat``; on
            ``g = f - mean_constant`` the first is ``eta - beta * mean_constant``).
        num_data: data points seen by ``base`` plus the conditioned ones.

    Example:
        >>> import torch
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> X = torch.rand(10, 1)
        >>> model = DualSVGP(RBFKernel(), Gaussian(0.1), X[:4], num_hyper_steps=0)
        >>> cond = model.update(X, X[:, 0]).condition(X[:2] + 0.1, torch.zeros(2))
        >>> cond.condition(X[:1], torch.ones(1)).num_data  # conditions further
        13
        >>> cond.supports_update  # update the model that was conditioned instead
        False
    """

    def __init__(
        self, base: DualSVGP, X: Tensor, y: Tensor, eta: Tensor, beta: Tensor, num_data: int
    ) -> None:
        super().__init__()
        self.base = base
        self.register_buffer("_X", X)
        self.register_buffer("_y", y)
        self.register_buffer("_eta", eta)
        self.register_buffer("_beta", beta)
        self._num_data = int(num_data)
        self._block_cache: tuple[tuple, SiteBlock] | None = None

    @classmethod
    def from_model(cls, model: DualSVGP | ConditionedDualSVGP, X: Tensor, Y: Tensor):
        """``model`` conditioned on ``(X (*bx, n, d), Y (*b, n))``: the sites of the new points
        at ``model``'s posterior (Eqs. 7-8, 12 with ``rho = 1``), appended to ``model``'s
        conditioned sites if it has any.

        The leading dimensions become ``batch_shape = broadcast(model.batch_shape,
        X.shape[:-2], Y.shape[:-1])``.
        """
        base = model.base if isinstance(model, ConditionedDualSVGP) else model
        X = base._check_X(X)
        Y = base._check_y(Y, X.shape[-2], batched=True)
        try:
            batch = torch.broadcast_shapes(model.batch_shape, X.shape[:-2], Y.shape[:-1])
        except RuntimeError as err:
            raise InputDataError(
                "DualSVGP.condition: batch shapes do not broadcast: model "
                f"{tuple(model.batch_shape)}, X {tuple(X.shape[:-2])}, Y {tuple(Y.shape[:-1])}"
            ) from err
        track = X.requires_grad or Y.requires_grad
        with torch.set_grad_enabled(torch.is_grad_enabled() and track):
            mean, var = model._marginals(X)
            eta, beta = base._site_targets(Y, mean, var)
        eta = eta.expand(*batch, *eta.shape[-2:])
        beta = beta.expand(*batch, *beta.shape[-2:])
        Yb = Y.expand(*batch, Y.shape[-1])
        num_data = model.num_data + X.shape[-2]
        if not isinstance(model, ConditionedDualSVGP):
            return cls(base._snapshot(), X, Yb, eta, beta, num_data)
        bx = torch.broadcast_shapes(model._X.shape[:-2], X.shape[:-2])
        cat = torch.cat
        Xn = cat([model._X.expand(*bx, *model._X.shape[-2:]), X.expand(*bx, *X.shape[-2:])], -2)
        yn = cat([model._y.expand(*batch, model._y.shape[-1]), Yb], -1)
        etan = cat([model._eta.expand(*batch, *model._eta.shape[-2:]), eta], -1)
        betan = cat([model._beta.expand(*batch, *model._beta.shape[-2:]), beta], -1)
        return cls(base, Xn, yn, etan, betan, num_data)

    # -------------------------------------------------------------- properties
    kernel: Alias[gpytorch.kernels.Kernel] = Alias(
        "base.kernel", "The (shared) kernel of the unconditioned model."
    )
    likelihood: Alias[Likelihood] = Alias(
        "base.likelihood", "The (shared) likelihood of the unconditioned model."
    )
    num_latents: Alias[int] = Alias(
        "base.num_latents", "Number of latent functions ``C`` (the unconditioned model's)."
    )
    Z: Alias[Tensor] = Alias("base.Z", "``(m, d)`` inducing inputs (the unconditioned model's).")
    mean_constant: Alias[float] = Alias(
        "base.mean_constant", "The constant prior mean ``c`` (the unconditioned model's)."
    )
    memory: Alias[Memory] = Alias(
        "base.memory",
        "The unconditioned model's memory (:class:`~bo_ncgp.models.dual.memory.Memory`).",
    )
    memory_inputs: Alias[Tensor] = Alias(
        "base.memory_inputs", "``(n_M, d)`` inputs held in the unconditioned model's memory."
    )
    memory_targets: Alias[Tensor] = Alias(
        "base.memory_targets", "``(n_M,)`` targets held in the unconditioned model's memory."
    )
    conditioned_inputs: Alias[Tensor] = Alias("_X", "``(*bx, n, d)`` the conditioned inputs.")
    conditioned_targets: Alias[Tensor] = Alias("_y", "``(*b, n)`` the conditioned targets.")

    @property
    def batch_shape(self) -> torch.Size:
        """Leading batch dimensions of the conditioned targets and inputs."""
        return torch.broadcast_shapes(self._X.shape[:-2], self._eta.shape[:-2])

    @property
    def num_data(self) -> int:
        """Data points of the unconditioned model plus the conditioned points."""
        return self._num_data

    # ------------------------------------------------------------- posterior
    def _apply(self, fn, *args, **kwargs):
        before = tensor_places(self)
        out = super()._apply(fn, *args, **kwargs)
        if tensor_places(self) != before:  # a no-op ``.to`` keeps the cached block
            self._block_cache = None
        return out

    def _sites_require_grad(self) -> bool:
        return any(t.requires_grad for t in (self._X, self._eta, self._beta))

    def _caching_allowed(self) -> bool:
        """As :meth:`DualSVGP._caching_allowed`, and the sites must not require grad."""
        if not torch.is_grad_enabled():
            return True
        if self.base._hyperparameters():
            return False
        return not self._sites_require_grad()

    def _block(self, f: DualFactors) -> SiteBlock:
        base = self.base
        eta = base._on_g(self._eta, self._beta)
        Kzc, _, kcc = base._prior_blocks(self._X, True)
        return site_block(f, Kzc, kcc, eta, self._beta)

    def _factors(self) -> tuple[DualFactors, SiteBlock]:
        """The base model's factors (Eq. 10) and the block of the conditioned sites (the
        conditioned process of :mod:`~bo_ncgp.models.dual.posterior`), cached when allowed."""
        base = self.base
        fixed = hyperparameters_fixed()
        cache = fixed or self._caching_allowed()
        f = base._factors()
        if fixed and self._sites_require_grad():
            # fantasies built inside an acquisition keep their gradient in X: no caching
            return f, self._block(f)
        key = (f, self._X, self._eta, self._beta)
        if cache and self._block_cache is not None and same_key(self._block_cache[0], key):
            return f, self._block_cache[1]
        with torch.no_grad() if fixed else contextlib.nullcontext():
            block = self._block(f)
        if cache:
            self._block_cache = (key, block)
        return f, block

    def _weights(self, f: DualFactors, block: SiteBlock) -> PredictiveWeights | None:
        """The :class:`~bo_ncgp.models.dual.posterior.PredictiveWeights` on ``Z + X_c`` of
        ``(f, block)`` when both are the cached ones (as for the base model) and the sites
        are unbatched (one ``(m + n_c)^2`` matrix, not one per fantasy); else ``None``."""
        if self._X.dim() > 2 or self._eta.dim() > 2 or self.base._weights(f) is None:
            return None
        held = self._block_cache
        if held is None or held[1] is not block:
            return None
        return cached_weights(self, block, lambda: self.base._checked_weights(f, block, self._X))

    def _marginals(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Latent-major ``mean (*, L, n)`` and ``var (*, L, n)`` / ``cov (*, L, n, n)``."""
        base = self.base
        f, block = self._factors()
        weights = self._weights(f, block)
        if weights is not None:
            Kex, kxx = base._extended_blocks(X, full_cov, self._X)
            mean, var = weights_predict(weights, Kex, kxx, full_cov)
        else:
            Kzx, Kcx, kxx = base._prior_blocks(X, full_cov, self._X)
            mean, var = dual_predict(f, Kzx, kxx, full_cov, block, Kcx)
        return mean + base._mean_constant, (var if full_cov else var.clamp_min(0))

    def predict_f(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Posterior of the latent function(s) at ``X`` (Eq. 10 with the conditioned sites).

        Shapes as :meth:`DualSVGP.predict_f <bo_ncgp.models.dual.DualSVGP.predict_f>`, with
        leading shape ``broadcast(batch_shape, X.shape[:-2])``.
        """
        X = self.base._check_X(X, allow_empty=True)
        mean, var = self._marginals(X, full_cov)
        return self.base._out(mean), self.base._out(var, matrix=full_cov)

    def condition(self, X: Tensor, Y: Tensor) -> ConditionedDualSVGP:
        """This model further conditioned on ``(X, Y)`` (sites concatenated; batch shapes
        broadcast)."""
        return ConditionedDualSVGP.from_model(self, X, Y)

    def update(
        self, X: Tensor, y: Tensor, *, callback: Callback | None = None
    ) -> ConditionedDualSVGP:
        """Not available: the conditioned sites are fantasies on a fixed posterior."""
        raise UnsupportedError(
            "ConditionedDualSVGP: update is not available for a model returned by "
            "condition(); call update on the model that was conditioned"
        )

    def extra_repr(self) -> str:
        return f"num_conditioned={self._X.shape[-2]}, batch_shape={tuple(self.batch_shape)}"
