"""Per-point sites of the dual SVGP and their damped update (Chang et al. 2023).

Every data point ``i`` contributes a Gaussian site on its latent value,
``t_i(f) = exp(eta_i f - beta_i f^2 / 2)``, i.e. the pseudo-likelihood of Eq. 12 with
precision ``beta_i`` and pseudo-output ``y_hat_i = eta_i / beta_i``. The sites of a posterior
``q`` are (Eqs. 7-9, 12)

    alpha_hat_i = E_q[d log p(y_i|f_i) / df_i],   beta_hat_i = E_q[-d^2 log p(y_i|f_i) / df_i^2]
    y_hat_i     = alpha_hat_i / beta_hat_i + mean_i,   so   eta_i = alpha_hat_i + beta_hat_i mean_i

and they enter the dual pair as ``lam = sum_i k_zi eta_i`` and ``B_u = sum_i k_zi beta_i k_zi^T``
(Eq. 11). The Bayesian learning rule (Eq. 54) damps the *natural parameters*; because the
prior part is the same in every iteration this is the same as damping each site,

    eta_i <- (1 - rho) eta_i + rho eta_hat_i,   beta_i <- (1 - rho) beta_i + rho beta_hat_i,

which is the form of Eqs. 23-24 that converges in one step for a Gaussian likelihood with
``rho = 1`` (the deviation from the paper's notation of Eqs. 23-24 / 59-60 noted in
:mod:`bo_ncgp.models.dual.model`).

Multi-latent likelihoods (softmax, C latents sharing ``Z``): the posterior factorises over
latents (mean field across the C GPs), so the natural gradient of each factor only involves
the diagonal of the C x C expected Hessian; the off-diagonal entries are dropped (this is the
exact stationarity condition of the ELBO for that family, not an extra approximation).

Layout: latent-major, ``(..., L, n)``; the likelihood sees ``(..., n)`` (L = 1) or
``(..., n, C)``.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from bo_ncgp.exceptions import NumericalWarning
from bo_ncgp.likelihoods import Likelihood

__all__ = [
    "damp",
    "expected_log_prob",
    "expected_terms",
    "site_contributions",
    "site_targets",
]


def _to_lik(x: Tensor, L: int) -> Tensor:
    return x.squeeze(-2) if L == 1 else x.transpose(-1, -2)


def _from_lik(x: Tensor, L: int) -> Tensor:
    return x.unsqueeze(-2) if L == 1 else x.transpose(-1, -2)


def expected_terms(
    likelihood: Likelihood, y: Tensor, mean: Tensor, var: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``(E log p (..., n), alpha_hat (..., L, n), beta_hat (..., L, n))`` under ``N(mean, var)``.

    ``mean`` and ``var`` are latent-major ``(..., L, n)``; for ``L > 1`` the diagonal of the
    likelihood's ``(..., n, C, C)`` expected Hessian is returned (see module docstring).

    Example:
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> y, mean, var = torch.tensor([1.0, 2.0]), torch.zeros(1, 2), torch.ones(1, 2)
        >>> elp, alpha, beta = expected_terms(Gaussian(0.5), y, mean, var)
        >>> elp.shape, alpha.shape  # (n,) and latent-major (L, n)
        (torch.Size([2]), torch.Size([1, 2]))
        >>> alpha.detach().round(decimals=6), beta.detach().round(decimals=6)  # (y-m)/s2, 1/s2
        (tensor([[2., 4.]]), tensor([[2., 2.]]))
    """
    L = mean.shape[-2]
    batch = torch.broadcast_shapes(y.shape[:-1], mean.shape[:-2], var.shape[:-2])
    mean = mean.expand(*batch, *mean.shape[-2:])  # targets may carry more batch dims (fantasies)
    var = var.clamp_min(0).expand(*batch, *var.shape[-2:])
    y = y.expand(*batch, y.shape[-1])
    elp, alpha, beta = likelihood.expected_diagonal(y, _to_lik(mean, L), _to_lik(var, L))
    return elp, _from_lik(alpha, L), _from_lik(beta, L)


def expected_log_prob(likelihood: Likelihood, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """``E log p(y|f)`` ``(..., n)`` under ``N(mean, var)`` (latent-major inputs).

    Example:
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> y = torch.tensor([1.0])
        >>> elp = expected_log_prob(Gaussian(0.5), y, torch.zeros(1, 1), torch.ones(1, 1))
        >>> exact = torch.distributions.Normal(0.0, 0.5**0.5).log_prob(y) - 1.0 / (2 * 0.5)
        >>> elp.shape, bool(torch.allclose(elp, exact))  # log N(y | mean, s2) - var / (2 s2)
        (torch.Size([1]), True)
    """
    L = mean.shape[-2]
    return likelihood.expected_log_prob(y, _to_lik(mean, L), _to_lik(var.clamp_min(0), L))


def site_targets(
    likelihood: Likelihood, y: Tensor, mean: Tensor, var: Tensor
) -> tuple[Tensor, Tensor]:
    """Sites ``(eta_hat, beta_hat)`` of a posterior with marginals ``N(mean, var)``
    (Eqs. 7-9, 12).

    Example:
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> eta, beta = site_targets(Gaussian(0.5), torch.tensor([1.0]),
        ...                          torch.zeros(1, 1), torch.ones(1, 1))
        >>> round(float(eta), 8), round(float(beta), 8)  # y / s2 and 1 / s2, any posterior
        (2.0, 2.0)
    """
    _, alpha, beta = expected_terms(likelihood, y, mean, var)
    beta = beta.clamp_min(0)
    eta = alpha + beta * mean  # Eq. 12: eta = beta * y_hat, y_hat = alpha / beta + a^T m
    return eta, beta


def damp(
    old: tuple[Tensor, Tensor], target: tuple[Tensor, Tensor], rho: float
) -> tuple[Tensor, Tensor]:
    """Damped site update (Eqs. 23-24 on the natural parameters, Eq. 54).

    Non-finite targets (overflow of a likelihood expectation) keep the previous site and emit
    a :class:`~bo_ncgp.exceptions.NumericalWarning` instead of propagating NaN.

    Example:
        >>> import warnings
        >>> old = (torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0]))
        >>> target = (torch.tensor([2.0, float("nan")]), torch.tensor([3.0, 3.0]))
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     eta, beta = damp(old, target, rho=0.5)
        >>> eta, beta, caught[0].category.__name__  # the NaN site keeps its old value
        (tensor([1., 1.]), tensor([2., 1.]), 'NumericalWarning')
    """
    eta_t, beta_t = target
    bad = ~(torch.isfinite(eta_t) & torch.isfinite(beta_t))
    if bool(bad.any()):
        warnings.warn(
            f"DualSVGP: {int(bad.sum())} site update(s) were not finite (overflow in the "
            "likelihood expectation); those sites keep their previous value",
            NumericalWarning,
            stacklevel=3,
        )
        eta_t = torch.where(bad, old[0], eta_t)
        beta_t = torch.where(bad, old[1], beta_t)
    return (1 - rho) * old[0] + rho * eta_t, (1 - rho) * old[1] + rho * beta_t


def site_contributions(Kzx: Tensor, eta: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """``(sum_i k_zi eta_i, sum_i k_zi beta_i k_zi^T)`` (Eq. 11), shapes ``(..., L, m)``,
    ``(..., L, m, m)`` for ``Kzx (..., L, m, n)`` and sites ``(..., L, n)``.

    Example:
        >>> Kzx = torch.tensor([[[1.0, 0.5], [0.0, 1.0]]])  # L = 1, m = 2, n = 2
        >>> lam, B = site_contributions(Kzx, torch.tensor([[1.0, 2.0]]), torch.ones(1, 2))
        >>> lam, torch.allclose(B, Kzx @ Kzx.mT)  # unit precisions: B = K_zx K_xz
        (tensor([[2., 2.]]), True)
    """
    lam = (Kzx @ eta.unsqueeze(-1)).squeeze(-1)
    B = (Kzx * beta.unsqueeze(-2)) @ Kzx.mT
    return lam, B
