"""The one GPyTorch SVGP of bo_ncgp: :class:`SVGP`.

Hensman, Matthews & Ghahramani (2015), "Scalable Variational Gaussian Process
Classification": inducing values ``u = f(Z)`` with ``q(u)`` and
``q(f) = int p(f | u) q(u) du`` (their Eq. 8-9), in GPyTorch's whitened parameterisation
``u = L v``, ``L L^T = K_ZZ`` (:class:`gpytorch.variational.VariationalStrategy`). The ELBO of
a bo_ncgp likelihood is ``sum_n E_q[log p(y_n | f_n)] - KL[q(u) || p(u)]`` (their Eq. 10)
with :meth:`SVGP.kl_divergence` and the likelihood's ``expected_log_prob`` on the marginals of
``model(X)``.

Every GPyTorch SVGP of the project (refitted hotspot models, the offline streaming baseline,
the multi-class SVGP baseline) is this class with options: a zero or constant prior mean, a
batch of independent models, ``C`` independent latent functions (a multi-task strategy),
a Cholesky or natural-parameter ``q(u)``, fixed or learned inducing inputs.

Example:
    >>> import torch
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> X = torch.rand(30, 2, dtype=torch.float64); y = (X[:, 0] > 0.5).double()
    >>> gp = SVGP(RBFKernel(), X[:8], mean="constant")
    >>> q = gp(X)
    >>> elbo = Bernoulli().expected_log_prob(y, q.mean, q.variance).sum() - gp.kl_divergence()
    >>> q.mean.shape, elbo.shape, q.mean.dtype
    (torch.Size([30]), torch.Size([]), torch.float64)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg import log_prior, stable_cholesky
from bo_ncgp.linalg._args import check_count, check_positive, check_real_tensor

__all__ = ["SVGP"]

_DISTRIBUTIONS = {
    "cholesky": gpytorch.variational.CholeskyVariationalDistribution,
    "natural": gpytorch.variational.NaturalVariationalDistribution,
}


class SVGP(gpytorch.models.ApproximateGP):
    """GPyTorch SVGP with whitened inducing values (Hensman et al. 2015).

    Args:
        kernel: the GPyTorch prior covariance (its batch shape must broadcast with
            ``batch_shape`` and, with ``num_latents``, with ``(C,)``).
        inducing_points: ``(M, d)`` (or batched ``(*batch, M, d)``) inducing inputs ``Z``;
            the model keeps a detached copy.
        mean: ``None`` (zero prior mean), ``"constant"`` (a learned
            :class:`gpytorch.means.ConstantMean`) or any GPyTorch mean module.
        num_latents: ``C`` independent latent functions (``q(u)`` with a batch ``(C,)`` and
            :class:`gpytorch.variational.IndependentMultitaskVariationalStrategy`, so the
            output is ``(..., n, C)``); ``None``: one latent function.
        batch_shape: a batch of independent models (e.g. fantasy refits), leading every output.
        variational: ``"cholesky"`` (:class:`~gpytorch.variational.CholeskyVariationalDistribution`,
            trained by Adam) or ``"natural"``
            (:class:`~gpytorch.variational.NaturalVariationalDistribution`, trained by
            :class:`gpytorch.optim.NGD`).
        learn_inducing_locations: make ``Z`` a parameter.
        jitter: ``jitter_val`` of the variational strategy (``None``: GPyTorch's default).

    Attributes:
        kernel: the covariance module; mean_module: the mean module (``None`` for zero mean).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> Z = torch.rand(3, 6, 2)  # three latent functions, six inducing points each
        >>> gp = SVGP(RBFKernel(batch_shape=torch.Size([3])), Z, num_latents=3)
        >>> gp(torch.rand(10, 2)).mean.shape
        torch.Size([10, 3])
        >>> fant = SVGP(RBFKernel(), torch.rand(6, 2), batch_shape=(4,), variational="natural",
        ...             learn_inducing_locations=False)
        >>> fant(torch.rand(10, 2)).mean.shape, fant.kl_divergence().shape
        (torch.Size([4, 10]), torch.Size([4]))
    """

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        inducing_points: Tensor,
        *,
        mean: Literal["constant"] | gpytorch.means.Mean | None = None,
        num_latents: int | None = None,
        batch_shape: Sequence[int] = (),
        variational: Literal["cholesky", "natural"] = "cholesky",
        learn_inducing_locations: bool = True,
        jitter: float | None = None,
    ) -> None:
        if not isinstance(inducing_points, Tensor) or inducing_points.dim() < 2:
            raise InputDataError("SVGP: inducing_points must be a (..., M, d) tensor")
        check_real_tensor(inducing_points, "inducing_points", "SVGP", floating=True)
        if jitter is not None:
            jitter = check_positive(jitter, "jitter", "SVGP", allow_zero=True)
        if variational not in _DISTRIBUTIONS:
            raise InputDataError(
                f"SVGP: variational must be 'cholesky' or 'natural', got {variational!r}"
            )
        if num_latents is not None:
            num_latents = check_count(num_latents, "num_latents", "SVGP", minimum=1)
        batch = torch.Size(batch_shape)
        q_batch = batch if num_latents is None else batch + torch.Size([int(num_latents)])
        Z = inducing_points.detach().clone()
        dist = _DISTRIBUTIONS[variational](Z.shape[-2], batch_shape=q_batch)
        strategy = gpytorch.variational.VariationalStrategy(
            self, Z, dist, learn_inducing_locations=learn_inducing_locations, jitter_val=jitter
        )
        if num_latents is not None:
            strategy = gpytorch.variational.IndependentMultitaskVariationalStrategy(
                strategy, num_tasks=int(num_latents)
            )
        super().__init__(strategy)
        if mean == "constant":
            mean = gpytorch.means.ConstantMean(batch_shape=batch)
        elif mean is not None and not isinstance(mean, gpytorch.means.Mean):
            raise InputDataError(f"SVGP: mean must be None, 'constant' or a Mean, got {mean!r}")
        self.mean_module = mean
        self.kernel = kernel
        self.to(device=Z.device, dtype=Z.dtype)

    def forward(self, x: Tensor) -> gpytorch.distributions.MultivariateNormal:
        """The prior ``N(m(x), k(x, x))`` (GPyTorch calls it on inducing and test inputs)."""
        K = self.kernel(x)
        if self.mean_module is None:
            return gpytorch.distributions.MultivariateNormal(x.new_zeros(K.shape[:-1]), K)
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), K)

    @property
    def inducing_points(self) -> Tensor:
        """The inducing inputs ``Z`` (the learned ones if they are learned)."""
        strategy = self.variational_strategy
        return getattr(strategy, "base_variational_strategy", strategy).inducing_points

    def inducing_posterior(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(Z, m, S)``: the inducing inputs and the un-whitened ``q(g(Z)) = N(m, S)`` of the
        zero-mean part ``g = f - mean`` (``m = L m_w``, ``S = L S_w L^T``, ``L L^T = K_ZZ``).

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> gp = SVGP(RBFKernel(), torch.rand(5, 1, dtype=torch.float64))
            >>> Z, m, S = gp.inducing_posterior()  # q(v) = N(0, I) at initialisation: the prior
            >>> bool(torch.allclose(S, gp.kernel(Z).to_dense(), atol=1e-8)), m.shape
            (True, torch.Size([5]))
        """
        strategy = self.variational_strategy
        strategy = getattr(strategy, "base_variational_strategy", strategy)
        with torch.no_grad():
            Z = strategy.inducing_points.detach().clone()
            q = strategy.variational_distribution
            L = stable_cholesky(self.kernel(Z).to_dense(), name="K_zz")
            m = L @ q.mean if q.mean.dim() == 1 else (L @ q.mean.unsqueeze(-1)).squeeze(-1)
            return Z, m, L @ q.covariance_matrix @ L.mT

    def kl_divergence(self) -> Tensor:
        """``KL[q(u) || p(u)]`` (summed over latent functions; one per batch element)."""
        return self.variational_strategy.kl_divergence()

    def log_prior(self) -> Tensor:
        """Sum of the log densities of the GPyTorch priors registered on the model."""
        return log_prior(self)
