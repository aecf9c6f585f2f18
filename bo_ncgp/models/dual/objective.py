"""Hyperparameter objectives of the memory-based dual SVGP (Chang et al. 2023, Secs. 3.2-3.4).

State: a fixed Gaussian factor ``T_rest(v) = exp(lam_r^T v - v^T B_r v / 2)`` on
``v = K_zz^{-1} u`` that summarises the old data no longer held individually (the dual pair of
``old \\ M``, Eqs. 19-20), plus individual sites ``t_i(f) = exp(eta_i f - beta_i f^2 / 2)`` on
``f_i ~= a_i^T u`` for the points at hand (new batch and memory). For hyperparameters ``theta``
the posterior is ``q_theta(u) ∝ p_theta(u) T_rest Π_i t_i`` (Eq. 25 with the sites fixed).

:func:`dual_objective` is Eq. 26, ``L(theta) = log Z(theta) + c(theta)`` with

    log Z = log ∫ p_theta(u) T_rest Π t_i du = ½ log|K_zz| - ½ log|A| + ½ lam^T A^{-1} lam,
    c     = Σ_i w_i E_q[log p(y_i|f_i)] - Σ_i E_q[log t_i] - E_q[log T_rest],

``A = K_zz + B``, ``lam``/``B`` the totals (Eq. 11). The sites' part of ``A`` is whitened: with
``C = K_zz + B_rest`` and ``G0 = chol(C)^{-1} K_za``, ``A = L_C (I + G0 diag(beta) G0^T)
L_C^T``, so that ``log|K_zz| - log|A|`` is not the difference of two near-singular
log-determinants (inducing points close to the data with long lengthscales). The weights
``w_i`` are 1 for the new batch and ``n_old / n_M`` for memory points (the Sec. 3.4 stochastic
estimate of the sum over ``D_old``). ``L(theta)`` is the ELBO (Eq. 3/13) evaluated at
``q_theta``, so with a Gaussian likelihood, all data held as sites and converged sites it
equals the exact log marginal likelihood, and so does its gradient (Adam et al. 2021, App. B).

:func:`sequential_elbo` is the plain objective of Eq. 21 with ``q(u) = N(m_u, V_u)`` held fixed
and the prior ``p_theta(u) T_rest(u) / Z_rest(theta)`` (the "new prior" of Eqs. 18-20).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import solve_lower, stable_cholesky, tri_logdet
from bo_ncgp.models.dual.sites import expected_log_prob

__all__ = ["dual_objective", "sequential_elbo"]


def _expected_log_rest(lam_r: Tensor, B_r: Tensor, L_A: Tensor, mu_v: Tensor) -> Tensor:
    """``E_q[log T_rest(v)] = lam_r^T mu_v - ½ tr(B_r (A^{-1} + mu_v mu_v^T))`` summed over L."""
    X = solve_lower(L_A, B_r)
    tr = solve_lower(L_A, X.mT).diagonal(dim1=-2, dim2=-1).sum(-1)  # tr(L_A^{-1} B_r L_A^{-T})
    quad = (mu_v * (B_r @ mu_v.unsqueeze(-1)).squeeze(-1)).sum(-1)
    return ((lam_r * mu_v).sum(-1) - 0.5 * (tr + quad)).sum()


def dual_objective(
    likelihood: Likelihood,
    Kzz: Tensor,
    Kza: Tensor,
    kaa: Tensor,
    y: Tensor,
    eta: Tensor,
    beta: Tensor,
    weights: Tensor,
    lam_rest: Tensor,
    B_rest: Tensor,
    include_rest: bool = True,
    mean_offset: float | Tensor = 0.0,
) -> Tensor:
    """Eq. 26 with the Sec. 3.4 memory scaling (see module docstring).

    Args:
        likelihood: the observation model.
        Kzz: ``(L, m, m)``; Kza: ``(L, m, n)`` cross-covariance to the active points; kaa:
            ``(L, n)`` their prior variances -- all functions of ``theta``.
        y: ``(n,)`` targets of the active points; eta, beta: ``(L, n)`` their fixed sites.
        weights: ``(n,)`` weights of ``E log p`` (1 for new data, ``n_old / n_M`` for memory).
        lam_rest, B_rest: ``(L, m)``, ``(L, m, m)`` fixed factor of the remaining old data.
        include_rest: subtract ``E_q[log T_rest]``; ``False`` when no memory represents the
            old data's likelihood (``T_rest`` is then treated as exact, and both terms cancel).
        mean_offset: constant prior mean ``c``: the likelihood sees ``f = c + g`` while the
            sites and the dual pair describe ``g``.

    Returns:
        The scalar objective (to be maximised).

    Example:
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> X = torch.linspace(0, 1, 4).unsqueeze(-1)  # all data held as sites at Z = X
        >>> K, y, s2 = torch.exp(-2 * torch.cdist(X, X) ** 2), torch.sin(3 * X[:, 0]), 0.1
        >>> eta, beta = (y / s2)[None], torch.full((1, 4), 1 / s2)  # converged Gaussian sites
        >>> obj = dual_objective(Gaussian(s2), K[None], K[None], K.diagonal()[None], y, eta, beta,
        ...                      torch.ones(4), torch.zeros(1, 4), torch.zeros(1, 4, 4), False)
        >>> exact = torch.distributions.MultivariateNormal(torch.zeros(4), K + s2 * torch.eye(4))
        >>> bool(torch.isclose(obj, exact.log_prob(y), atol=1e-4))  # log marginal likelihood
        True
    """
    # The sites' part whitened: with C = K_zz + B_rest = L_C L_C^T (C = K_zz without a rest
    # factor) and B_s = K_za diag(beta) K_az, A = L_C P L_C^T with P = I + G0 diag(beta) G0^T,
    # G0 = L_C^{-1} K_za. Then log|K_zz| - log|A| = log|K_zz| - log|C| - log|P| (the first
    # difference is 0 without a rest factor) and lam^T A^{-1} lam = |L_P^{-1} L_C^{-1} lam|^2
    # are formed without cancelling the log-determinants of two near-singular matrices (Z close
    # to the data, long lengthscales), each of which would be jittered on its own.
    L_K = stable_cholesky(Kzz, name="K_zz")
    has_rest = bool(B_rest.abs().sum() > 0) or bool(lam_rest.abs().sum() > 0)
    if has_rest:
        L_C = stable_cholesky(Kzz + B_rest, name="K_zz + B_rest")
        log_ratio = tri_logdet(L_K) - tri_logdet(L_C)
        r = solve_lower(L_C, lam_rest.unsqueeze(-1)).squeeze(-1)
    else:
        L_C, log_ratio, r = L_K, 0.0, 0.0
    G0 = solve_lower(L_C, Kza)
    P = (G0 * beta.unsqueeze(-2)) @ G0.mT
    P = 0.5 * (P + P.mT) + torch.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    L_P = stable_cholesky(P, name="I + L_C^{-1} B_s L_C^{-T}")
    r = r + (G0 @ eta.unsqueeze(-1)).squeeze(-1)  # L_C^{-1} lam
    w = solve_lower(L_P, r.unsqueeze(-1)).squeeze(-1)  # = L_A^{-1} lam for L_A = L_C L_P
    log_Z = 0.5 * (log_ratio - tri_logdet(L_P) + w.square().sum(-1)).sum()
    out = log_Z
    if Kza.shape[-1] > 0:
        H = G0 if L_C is L_K else solve_lower(L_K, Kza)
        G = solve_lower(L_P, G0)  # L_A^{-1} K_za
        mean = (G * w.unsqueeze(-1)).sum(-2)
        var_u = G.square().sum(-2)  # Var[a_i^T u] = k^T A^{-1} k
        var_f = (kaa - H.square().sum(-2)).clamp_min(0) + var_u
        elp = expected_log_prob(likelihood, y, mean + mean_offset, var_f)
        e_log_t = (eta * mean - 0.5 * beta * (var_u + mean.square())).sum()
        out = out + (weights * elp).sum() - e_log_t
    if include_rest and has_rest:
        L_A = L_C @ L_P
        mu_v = torch.linalg.solve_triangular(L_A.mT, w.unsqueeze(-1), upper=True).squeeze(-1)
        out = out - _expected_log_rest(lam_rest, B_rest, L_A, mu_v)
    return out


def sequential_elbo(
    likelihood: Likelihood,
    Kzz: Tensor,
    Kza: Tensor,
    kaa: Tensor,
    y: Tensor,
    weights: Tensor,
    m_u: Tensor,
    L_V: Tensor,
    lam_rest: Tensor,
    B_rest: Tensor,
    mean_offset: float | Tensor = 0.0,
) -> Tensor:
    """Eq. 21: ``Σ_i w_i E_q[log p(y_i|f_i)] - KL[q(u) || p_theta(u) T_rest(u) / Z_rest]``.

    The arguments not listed below are as in :func:`dual_objective` (``weights`` are 1 in
    Eq. 21; ``m_u`` is the mean of ``g(Z)`` when ``mean_offset`` is non-zero).

    Args:
        m_u, L_V: ``(L, m)`` mean and ``(L, m, m)`` Cholesky factor of the covariance of the
            fixed ``q(u)`` (in u-space, independent of ``theta``).

    Example:
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> X = torch.linspace(0, 1, 4).unsqueeze(-1)  # Z = X, no old data (T_rest = 1)
        >>> K, y, s2 = torch.exp(-2 * torch.cdist(X, X) ** 2), torch.sin(3 * X[:, 0]), 0.1
        >>> S = torch.linalg.solve(K + s2 * torch.eye(4), K)  # exact q(u): mean S y, cov s2 S
        >>> m_u, L_V = (S @ y)[None], torch.linalg.cholesky(s2 * S)[None]
        >>> elbo = sequential_elbo(Gaussian(s2), K[None], K[None], K.diagonal()[None], y,
        ...                        torch.ones(4), m_u, L_V, torch.zeros(1, 4), torch.zeros(1, 4, 4))
        >>> exact = torch.distributions.MultivariateNormal(torch.zeros(4), K + s2 * torch.eye(4))
        >>> bool(torch.isclose(elbo, exact.log_prob(y), atol=1e-4))  # ELBO is tight at q = post.
        True
    """
    m = Kzz.shape[-1]
    L_K = stable_cholesky(Kzz, name="K_zz")
    # a_i = K^{-1} k_i; marginals of q(f_i) (Eq. 4)
    KinvL_V = torch.cholesky_solve(L_V, L_K)  # K^{-1} L_V
    Kinv_m = torch.cholesky_solve(m_u.unsqueeze(-1), L_K).squeeze(-1)
    out = Kzz.new_zeros(())
    if Kza.shape[-1] > 0:
        H = solve_lower(L_K, Kza)
        mean = (Kza * Kinv_m.unsqueeze(-1)).sum(-2)
        var = (kaa - H.square().sum(-2)).clamp_min(0) + (KinvL_V.mT @ Kza).square().sum(-2)
        elp = expected_log_prob(likelihood, y, mean + mean_offset, var)
        out = out + (weights * elp).sum()
    # KL[q || p T_rest / Z_rest] = E log q - E log p - E log T_rest + log Z_rest
    e_log_q = -0.5 * (m * math.log(2 * math.pi) + tri_logdet(L_V) + m)
    tr_KinvV = (solve_lower(L_K, L_V)).square().sum((-2, -1))
    e_log_p = -0.5 * (
        m * math.log(2 * math.pi) + tri_logdet(L_K) + tr_KinvV + (m_u * Kinv_m).sum(-1)
    )
    e_log_rest = (lam_rest * Kinv_m).sum(-1) - 0.5 * (
        (KinvL_V * (B_rest @ KinvL_V)).sum((-2, -1))
        + (Kinv_m * (B_rest @ Kinv_m.unsqueeze(-1)).squeeze(-1)).sum(-1)
    )
    L_R = stable_cholesky(Kzz + B_rest, name="K_zz + B_rest")
    w_r = solve_lower(L_R, lam_rest.unsqueeze(-1)).squeeze(-1)
    log_Z_rest = 0.5 * (tri_logdet(L_K) - tri_logdet(L_R) + w_r.square().sum(-1))
    kl = (e_log_q - e_log_p - e_log_rest + log_Z_rest).sum()
    return out - kl
