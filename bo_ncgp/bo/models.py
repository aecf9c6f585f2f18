"""BoTorch ``Model`` adapters for :class:`~bo_ncgp.models.DualSVGP` and
:class:`~bo_ncgp.models.IterNCGP`.

Both are :class:`~bo_ncgp.bo.base.LatentGPModel` subclasses: ``posterior(X)`` is the joint
Gaussian over the *latent* function(s) at ``X`` (``q x q`` covariance per latent; ``C``
independent outputs for a softmax model), differentiable in ``X`` for ``optimize_acqf``.

``observation_noise=True`` adds the noise variance for a Gaussian likelihood. For the other
likelihoods there is no additive Gaussian noise on the latent scale, so the latent posterior
is returned unchanged (acquisitions that need the observation distribution -- probabilities,
entropies -- are in :mod:`bo_ncgp.bo.acquisition`).

Conditioning and fantasies:

* :class:`DualSVGPModel` conditions through :meth:`DualSVGP.condition` (dual conditioning,
  Chang et al. 2023, Sec. 3.3: the new sites are added at the current posterior with
  ``rho = 1``; O(n m^2 + n^3) per batch element, vectorised over fantasies).
* ``fantasize`` for a non-Gaussian likelihood draws latent samples ``f`` with the sampler and
  conditions on ``E[y | f]`` (``sigmoid(f)`` for Bernoulli, ``N sigmoid(f)`` for Binomial,
  ``exp(f)`` for Poisson) as relaxed targets (see :func:`bo_ncgp.likelihoods.soft_targets`),
  or on ``argmax f`` for the softmax. For a Gaussian likelihood it is BoTorch's own
  ``fantasize`` (samples with observation noise).
"""

from __future__ import annotations

from typing import Any

from botorch.models.model import Model
from botorch.sampling import MCSampler
from torch import Tensor
from torch.nn import Module

from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.likelihoods.settings import soft_targets
from bo_ncgp.models.dual import fixed_hyperparameters

__all__ = ["DualSVGPModel", "IterNCGPModel"]


class _LatentModelAdapter(LatentGPModel):
    """Shared pieces of the adapters around models with ``predict_f(X, full_cov=True)``."""

    def __init__(
        self,
        model: Module,
        input_transform: Module | None = None,
        outcome_transform: Module | None = None,
    ) -> None:
        num_latents = int(getattr(model, "num_latents", model.likelihood.num_latents))
        super().__init__(model, num_latents, input_transform, outcome_transform)

    def _latent_mean_cov(self, X: Tensor) -> tuple[Tensor, Tensor]:
        mean, cov = self.model.predict_f(X, full_cov=True)
        if self.num_outputs == 1:
            return mean.unsqueeze(-1), cov
        return mean, cov  # (..., q, C), (..., C, q, q)

    def _targets(self, Y: Tensor) -> Tensor:
        if Y.dim() < 2 or Y.shape[-1] != 1:
            raise ValueError(
                f"{type(self).__name__}: Y must have shape (..., n, 1) (one observation column; "
                f"class labels for a softmax model), got {tuple(Y.shape)}"
            )
        return Y[..., 0]

    def fantasize(
        self,
        X: Tensor,
        sampler: MCSampler,
        observation_noise: Tensor | None = None,
        **kwargs: Any,
    ) -> Model:
        """Fantasy model conditioned on sampled observations at ``X`` (see module doc)."""
        lik = self.model.likelihood
        if isinstance(lik, Gaussian):
            return super().fantasize(X, sampler, observation_noise=observation_noise, **kwargs)
        post = self.posterior(X)  # latent, in the outcome-transformed space's inverse
        f = sampler(post)  # sample_shape x batch x n x m
        if self.num_outputs > 1:
            Y = f.argmax(-1, keepdim=True).to(f.dtype)
            return self.condition_on_observations(X, Y.detach())
        Y = lik.conditional_mean(f[..., 0]).unsqueeze(-1)
        with soft_targets():
            return self.condition_on_observations(X, Y.detach())


class DualSVGPModel(_LatentModelAdapter):
    """BoTorch model around a :class:`~bo_ncgp.models.DualSVGP` (Chang et al. 2023).

    Posteriors and conditioning run inside
    :func:`~bo_ncgp.models.dual_svgp.fixed_hyperparameters`: differentiable in ``X`` (and in
    fantasy inputs), not in the DualSVGP's hyperparameters, so the O(n_M m^2) base
    factorisation is computed once per model instead of once per acquisition evaluation.
    Fit the hyperparameters with :meth:`DualSVGP.update`, not through this adapter.

    Args:
        model: a fitted ``DualSVGP``.
        input_transform / outcome_transform: optional BoTorch transforms; the DualSVGP must
            have been trained on transformed data.

    Example:
        >>> dual = DualSVGP(kernel, Gaussian(0.01), Z).update(X, y)          # doctest: +SKIP
        >>> model = DualSVGPModel(dual)                                      # doctest: +SKIP
        >>> cand, _ = optimize_acqf(LogExpectedImprovement(model, best_f=y.max()),
        ...                         bounds, q=1, num_restarts=8, raw_samples=256)  # doctest: +SKIP
    """

    def _latent_mean_cov(self, X: Tensor) -> tuple[Tensor, Tensor]:
        # acquisitions need gradients in X only: keep the base factorisation cached
        with fixed_hyperparameters():
            return super()._latent_mean_cov(X)

    def _condition(self, X: Tensor, Y: Tensor, **kwargs: Any) -> Module:
        with fixed_hyperparameters():
            return self.model.condition(X, self._targets(Y))


class IterNCGPModel(_LatentModelAdapter):
    """BoTorch model around a fitted :class:`~bo_ncgp.models.IterNCGP` (Tatzel et al.).

    The posterior includes IterNCGP's computational uncertainty (the uncertainty from
    stopping the solver early), so acquisitions see it.

    ``condition_on_observations`` adds the points and runs ``condition_iters`` warm-started,
    recycled solver iterations (:meth:`IterNCGP.condition`).

    Args:
        model: a fitted ``IterNCGP``.
        input_transform / outcome_transform: optional BoTorch transforms; the IterNCGP must
            have been fitted on transformed data.
        condition_iters: solver iterations per Newton step of each conditioning (None: the
            default of :meth:`IterNCGP.condition`).

    Example:
        >>> clf = IterNCGP(kernel, Bernoulli(), max_solver_iters_per_step=5)  # doctest: +SKIP
        >>> model = IterNCGPModel(clf.fit(X, y), condition_iters=3)          # doctest: +SKIP
        >>> acq = qNegIntegratedPosteriorVariance(model, mc_points=X_mc)     # doctest: +SKIP
        >>> cand, _ = optimize_acqf(acq, bounds, q=1, num_restarts=4,
        ...                         raw_samples=64)                          # doctest: +SKIP
    """

    def __init__(
        self,
        model: Module,
        input_transform: Module | None = None,
        outcome_transform: Module | None = None,
        condition_iters: int | None = None,
    ) -> None:
        super().__init__(model, input_transform, outcome_transform)
        self.condition_iters = condition_iters

    def _condition(self, X: Tensor, Y: Tensor, **kwargs: Any) -> Module:
        extra = {} if self.condition_iters is None else {"num_iters": self.condition_iters}
        return self.model.condition(X, self._targets(Y), **extra)
