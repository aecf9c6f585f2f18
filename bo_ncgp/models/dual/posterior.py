"""Predictions of the dual SVGP from its dual pair (Chang et al. 2023, Eq. 10, App. A.2).

With ``A = K_zz + B_u`` and the first natural parameter ``lam`` (``lam = sum_i k_zi beta_i
y_hat_i``, Eq. 7 in k-space) the posterior of Eq. 10 / Eq. 42 is

    mean(x) = k_zx^T A^{-1} lam                                    (= k_zx^T K_zz^{-1} alpha_u)
    var(x)  = k_xx - k_zx^T K_zz^{-1} k_zx + k_zx^T A^{-1} k_zx     (Eq. 10)

computed through the Cholesky factors ``L_K`` of ``K_zz`` and ``L_A`` of ``A`` (never an
explicit inverse). ``alpha_u = K_zz A^{-1} lam`` is the posterior mean of ``u = f(Z)``.

Cheap conditioning adds ``n`` sites ``(eta_j, beta_j)`` at inputs ``X_c`` (possibly with
leading batch dimensions, e.g. fantasies) without refactorising ``A``: with
``W = L_A^{-1} K_zc diag(sqrt(beta))`` and ``M = I + W^T W`` (n x n),

    (A + K_zc diag(beta) K_cz)^{-1} = L_A^{-T} (I - W M^{-1} W^T) L_A^{-1}      (Woodbury)

so a conditioned model costs O(m^2 n + n^3) per batch element to build and never stores an
m x m matrix per batch element. For one new point (n = 1) this is the rank-one update.

Shapes: latents ``L`` sit just before the matrix dimensions, ``(..., L, m, m)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bo_ncgp.linalg import stable_cholesky

__all__ = ["DualFactors", "SiteBlock", "dual_factors", "dual_predict", "site_block"]


def _tri(L: Tensor, B: Tensor) -> Tensor:
    """``L^{-1} B`` for lower-triangular ``L`` (broadcast over batch dimensions)."""
    return torch.linalg.solve_triangular(L, B, upper=False)


class DualFactors(NamedTuple):
    """Cholesky factors of the base posterior: ``L_K = chol(K_zz)``, ``L_A = chol(K_zz + B)``
    (both ``(L, m, m)``) and ``w = L_A^{-1} lam`` ``(L, m)``."""

    L_K: Tensor
    L_A: Tensor
    w: Tensor


class SiteBlock(NamedTuple):
    """Woodbury factors of sites added on top of :class:`DualFactors` (see module docstring):
    ``W`` ``(*b, L, m, n)``, ``L_M = chol(I + W^T W)`` ``(*b, L, n, n)``,
    ``w = L_A^{-1}(lam + K_zc eta)`` ``(*b, L, m)`` and ``r = L_M^{-1} W^T w`` ``(*b, L, n)``."""

    W: Tensor
    L_M: Tensor
    w: Tensor
    r: Tensor


def dual_factors(Kzz: Tensor, B: Tensor, lam: Tensor, L_K: Tensor | None = None) -> DualFactors:
    """Factorise the dual posterior (Eq. 10): ``chol(K_zz)``, ``chol(K_zz + B_u)``,
    ``L_A^{-1} lam``.

    Args:
        Kzz: ``(L, m, m)`` prior covariance of the inducing outputs.
        B: ``(L, m, m)`` second dual parameter ``B_u`` (Eq. 11), symmetric PSD.
        lam: ``(L, m)`` first natural parameter in k-space.
        L_K: ``chol(K_zz)`` if already known.

    Example:
        >>> K = torch.eye(2).expand(1, 2, 2)
        >>> f = dual_factors(K, K, torch.ones(1, 2))
        >>> f.w.shape
        torch.Size([1, 2])
    """
    if L_K is None:
        L_K = stable_cholesky(Kzz, name="K_zz")
    L_A = stable_cholesky(Kzz + B, name="K_zz + B_u")
    w = _tri(L_A, lam.unsqueeze(-1)).squeeze(-1)
    return DualFactors(L_K, L_A, w)


def site_block(factors: DualFactors, Kzc: Tensor, eta: Tensor, beta: Tensor) -> SiteBlock:
    """Woodbury factors for adding sites ``(eta, beta)`` at inputs with ``K_zc`` (conditioning).

    Args:
        factors: base posterior factors.
        Kzc: ``(*bx, L, m, n)`` cross-covariance between ``Z`` and the new inputs.
        eta: ``(*b, L, n)`` first site parameters ``beta_j * y_hat_j`` (Eq. 12).
        beta: ``(*b, L, n)`` site precisions (non-negative).
    """
    U = _tri(factors.L_A, Kzc)  # (*bx, L, m, n)
    W = U * beta.clamp_min(0).sqrt().unsqueeze(-2)
    w = factors.w + (U @ eta.unsqueeze(-1)).squeeze(-1)
    n = W.shape[-1]
    eye = torch.eye(n, dtype=W.dtype, device=W.device)
    L_M = stable_cholesky(eye + W.mT @ W, name="I + W^T W (conditioning)")
    r = _tri(L_M, W.mT @ w.unsqueeze(-1)).squeeze(-1)
    return SiteBlock(W, L_M, w, r)


def dual_predict(
    factors: DualFactors,
    Kzx: Tensor,
    kxx: Tensor,
    full_cov: bool = False,
    block: SiteBlock | None = None,
) -> tuple[Tensor, Tensor]:
    """Posterior mean and (co)variance of ``f(X)`` (Eq. 10), optionally with a site block.

    Args:
        factors: base posterior factors.
        Kzx: ``(*bx, L, m, n)`` cross-covariance ``K(Z, X)``.
        kxx: prior ``(*bx, L, n)`` variances, or ``(*bx, L, n, n)`` covariance if ``full_cov``.
        full_cov: return the joint covariance instead of marginal variances.
        block: conditioning sites added on top of the base posterior.

    Returns:
        ``mean (*, L, n)`` and ``var (*, L, n)`` or ``cov (*, L, n, n)``, batch dimensions
        broadcast between ``X`` and the block.
    """
    H = _tri(factors.L_K, Kzx)  # L_K^{-1} k
    G = _tri(factors.L_A, Kzx)  # L_A^{-1} k
    if block is None:
        mean = (factors.w.unsqueeze(-2) @ G).squeeze(-2)
        S = None
    else:
        mean = (block.w.unsqueeze(-2) @ G).squeeze(-2)
        S = _tri(block.L_M, block.W.mT @ G)  # (*, L, n_c, n)
        mean = mean - (block.r.unsqueeze(-2) @ S).squeeze(-2)
    if full_cov:
        cov = kxx - H.mT @ H + G.mT @ G
        if S is not None:
            cov = cov - S.mT @ S
        return mean, 0.5 * (cov + cov.mT)
    var = kxx - H.square().sum(-2) + G.square().sum(-2)
    if S is not None:
        var = var - S.square().sum(-2)
    return mean, var
