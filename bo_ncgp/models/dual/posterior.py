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

from bo_ncgp.linalg import solve_lower, stable_cholesky

__all__ = ["DualFactors", "SiteBlock", "dual_factors", "dual_predict", "site_block"]


class DualFactors(NamedTuple):
    """Cholesky factors of the base posterior: ``L_K = chol(K_zz)``, ``L_A = chol(K_zz + B)``
    (both ``(L, m, m)``) and ``w = L_A^{-1} lam`` ``(L, m)``.

    Example:
        >>> Kzz = torch.tensor([[[2.0, 1.0], [1.0, 2.0]]])  # L = 1 latent, m = 2
        >>> f = dual_factors(Kzz, torch.zeros_like(Kzz), torch.ones(1, 2))
        >>> f._fields, f.L_K.shape, f.w.shape
        (('L_K', 'L_A', 'w'), torch.Size([1, 2, 2]), torch.Size([1, 2]))
        >>> torch.allclose(f.L_A, f.L_K), torch.allclose(f.L_K @ f.L_K.mT, Kzz)  # B = 0: A = K_zz
        (True, True)
    """

    L_K: Tensor
    L_A: Tensor
    w: Tensor


class SiteBlock(NamedTuple):
    """Woodbury factors of sites added on top of :class:`DualFactors` (see module docstring):
    ``W`` ``(*b, L, m, n)``, ``L_M = chol(I + W^T W)`` ``(*b, L, n, n)``,
    ``w = L_A^{-1}(lam + K_zc eta)`` ``(*b, L, m)`` and ``r = L_M^{-1} W^T w`` ``(*b, L, n)``.

    Example:
        >>> Kzz, Kzc = torch.eye(3).expand(1, 3, 3), torch.rand(1, 3, 2)  # m = 3, n = 2 sites
        >>> base = dual_factors(Kzz, torch.zeros_like(Kzz), torch.zeros(1, 3))
        >>> eta = torch.randn(5, 1, 2)  # 5 fantasies (b = (5,)) sharing the precisions beta
        >>> blk = site_block(base, Kzc, eta, torch.ones(1, 2))
        >>> blk.W.shape, blk.L_M.shape  # beta unbatched: W and L_M are shared
        (torch.Size([1, 3, 2]), torch.Size([1, 2, 2]))
        >>> blk.w.shape, blk.r.shape
        (torch.Size([5, 1, 3]), torch.Size([5, 1, 2]))
    """

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
    w = solve_lower(L_A, lam.unsqueeze(-1)).squeeze(-1)
    return DualFactors(L_K, L_A, w)


def site_block(factors: DualFactors, Kzc: Tensor, eta: Tensor, beta: Tensor) -> SiteBlock:
    """Woodbury factors for adding sites ``(eta, beta)`` at inputs with ``K_zc`` (conditioning).

    Args:
        factors: base posterior factors.
        Kzc: ``(*bx, L, m, n)`` cross-covariance between ``Z`` and the new inputs.
        eta: ``(*b, L, n)`` first site parameters ``beta_j * y_hat_j`` (Eq. 12).
        beta: ``(*b, L, n)`` site precisions (non-negative).

    Example:
        >>> k = lambda A, B: torch.exp(-2 * torch.cdist(A, B) ** 2).unsqueeze(0)  # L = 1
        >>> Z, C = torch.linspace(0, 1, 4).unsqueeze(-1), torch.tensor([[0.2], [0.7]])
        >>> eta, beta = torch.tensor([[1.0, -1.0]]), torch.tensor([[2.0, 3.0]])
        >>> prior = dual_factors(k(Z, Z), torch.zeros(1, 4, 4), torch.zeros(1, 4))
        >>> blk = site_block(prior, k(Z, C), eta, beta)
        >>> m1, v1 = dual_predict(prior, k(Z, C), torch.ones(1, 2), block=blk)
        >>> B, lam = (k(Z, C) * beta) @ k(Z, C).mT, (k(Z, C) @ eta.mT)[..., 0]  # Eq. 11
        >>> m2, v2 = dual_predict(dual_factors(k(Z, Z), B, lam), k(Z, C), torch.ones(1, 2))
        >>> torch.allclose(m1, m2, atol=1e-6), torch.allclose(v1, v2, atol=1e-6)  # no refactoring
        (True, True)
    """
    U = solve_lower(factors.L_A, Kzc)  # (*bx, L, m, n)
    W = U * beta.clamp_min(0).sqrt().unsqueeze(-2)
    w = factors.w + (U @ eta.unsqueeze(-1)).squeeze(-1)
    n = W.shape[-1]
    eye = torch.eye(n, dtype=W.dtype, device=W.device)
    L_M = stable_cholesky(eye + W.mT @ W, name="I + W^T W (conditioning)")
    r = solve_lower(L_M, W.mT @ w.unsqueeze(-1)).squeeze(-1)
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

    Example:
        >>> X = torch.linspace(0, 1, 4).unsqueeze(-1)  # Gaussian sites at Z = X: exact GP
        >>> K, y, s2 = torch.exp(-2 * torch.cdist(X, X) ** 2), torch.sin(3 * X[:, 0]), 0.1
        >>> f = dual_factors(K[None], (K @ K / s2)[None], (K @ y / s2)[None])  # Eq. 11
        >>> mean, var = dual_predict(f, K[None], K.diagonal()[None])
        >>> exact = K @ torch.linalg.solve(K + s2 * torch.eye(4), y)
        >>> mean.shape, var.shape, torch.allclose(mean[0], exact, atol=1e-5)
        (torch.Size([1, 4]), torch.Size([1, 4]), True)
    """
    H = solve_lower(factors.L_K, Kzx)  # L_K^{-1} k
    G = solve_lower(factors.L_A, Kzx)  # L_A^{-1} k
    if block is None:
        mean = (factors.w.unsqueeze(-2) @ G).squeeze(-2)
        S = None
    else:
        mean = (block.w.unsqueeze(-2) @ G).squeeze(-2)
        S = solve_lower(block.L_M, block.W.mT @ G)  # (*, L, n_c, n)
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
