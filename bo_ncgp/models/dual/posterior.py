"""Predictions of the dual SVGP from its dual pair (Chang et al. 2023, Eq. 10, App. A.2).

With ``A = K_zz + B_u`` and the first natural parameter ``lam`` (``lam = sum_i k_zi beta_i
y_hat_i``, Eq. 7 in k-space) the posterior of Eq. 10 / Eq. 42 is

    mean(x) = k_zx^T A^{-1} lam                                    (= k_zx^T K_zz^{-1} alpha_u)
    var(x)  = k_xx - k_zx^T K_zz^{-1} k_zx + k_zx^T A^{-1} k_zx     (Eq. 10)

computed through the Cholesky factors ``L_K`` of ``K_zz`` and ``L_A`` of ``A`` (never an
explicit inverse). ``alpha_u = K_zz A^{-1} lam`` is the posterior mean of ``u = f(Z)``.

Conditioning on ``n`` new sites ``(eta_j, beta_j)`` at inputs ``X_c`` (Sec. 3.3, the sites of
Eq. 12 at the posterior they are added to) multiplies the current approximate posterior
``q(f) = GP(mu, Sigma)`` -- the Eq. 10 process, whose covariance

    Sigma(x, x') = k(x, x') - k_zx^T K_zz^{-1} k_zx' + k_zx^T A^{-1} k_zx'

keeps the Nystrom residual ``k - Q`` -- by the Gaussian sites on ``f(X_c)`` in function space.
With ``B = diag(beta)``, ``mu_c = mu(X_c)`` and ``Sigma_cc = Sigma(X_c, X_c)`` this is

    mean'(x) = mu(x) + Sigma_xc (I + B Sigma_cc)^{-1} (eta - B mu_c)
    cov'(x, x') = Sigma(x, x') - Sigma_xc (I + B Sigma_cc)^{-1} B Sigma_cx'

(the Gaussian conditioning of Eqs. 10-12 with the sites placed on ``f(X_c)`` itself): the
current posterior moved unchanged to the inducing set ``Z + X_c`` (``q(u, f_c) = q(u)
p(f_c | u)``, Eq. 27 with ``Z`` kept) and the sites added there by Eq. 11. Where ``X_c`` lies
in ``Z`` it equals adding ``k_zc beta k_cz`` to ``B_u``. Computed with
``D = diag(sqrt(beta))`` and ``L_M = chol(I + D Sigma_cc D)``, finite at ``beta = 0``:

    (I + B Sigma_cc)^{-1} B = D L_M^{-T} L_M^{-1} D,

and for the mean ``eta - B mu_c = D e + r_0`` with ``e = (eta - beta mu_c) / sqrt(beta)`` on
the sites with ``beta > 0`` and ``r_0`` on the others (a site with ``beta = 0`` shifts the mean
only), ``(I + B Sigma_cc)^{-1} (D e + r_0) = D M^{-1} (e - D Sigma_cc r_0) + r_0``, so that the
mean is not the difference of two terms of order ``beta``. A conditioned model costs
O(m^2 n + n^3) per batch element to build and O(m n) per test point, never stores an m x m
matrix per batch element and never refactorises ``A``. For one new point (n = 1) it is the
rank-one update of the marginals.

Where one posterior is evaluated many times with fixed hyperparameters (an acquisition
optimised over ``x``), :func:`predictive_weights` folds the factors into the equivalent form on
the extended inducing set ``Z_e = Z + X_c`` with ``k_e(x) = K(Z_e, x)``:

    mean(x) = k_e(x)^T a,        cov(x, x') = k(x, x') + k_e(x)^T W k_e(x'),

    a = [L_A^{-T} w; 0] + E (D L_M^{-T} s + r_0),
    W = [[A^{-1} - K_zz^{-1}, 0], [0, 0]] - E D M^{-1} D E^T,
    E = [(A^{-1} - K_zz^{-1}) K_zc; I]                  (so that Sigma(X_c, x) = E^T k_e(x)),

so that an evaluation is one kernel call and two products (:func:`weights_predict`) instead of
the triangular solves of :func:`dual_predict`. ``W`` holds the difference of two inverses, whose
round-off grows with the condition number of ``K_zz`` and of ``A``: with every point inducing,
long lengthscales and a small noise (``cond(K_zz)`` ~ 1e10, posterior variances ~1e-6 of the
prior's near the data) the weights' variances there are off by tens of per cent where the
solves' are not. :func:`checked_weights` therefore builds the weights only where they give the
solves' posterior at the extended inducing set itself (where the posterior variance is
smallest and the cancellation largest), and the models use them only from it, in float64.

Shapes: latents ``L`` sit just before the matrix dimensions, ``(..., L, m, m)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg import solve_lower, stable_cholesky

__all__ = [
    "DualFactors",
    "PredictiveWeights",
    "SiteBlock",
    "checked_weights",
    "dual_factors",
    "dual_predict",
    "predictive_weights",
    "site_block",
    "weights_predict",
]


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


class SiteBlock(NamedTuple):
    """Sites ``(eta, beta)`` at inputs ``X_c`` conditioned on in function space on top of
    :class:`DualFactors` (see module docstring), ``n`` sites per batch element:
    ``H = L_K^{-1} K_zc`` and ``G = L_A^{-1} K_zc`` ``(*bx, L, m, n)``, ``d = sqrt(beta)``
    ``(*b, L, n)``, ``L_M = chol(I + D Sigma_cc D)`` ``(*b, L, n, n)``,
    ``s = L_M^{-1} (e - D Sigma_cc r_0)`` and ``r0`` ``(*b, L, n)``.

    Example:
        >>> Kzz, Kzc = torch.eye(3).expand(1, 3, 3), torch.rand(1, 3, 2)  # m = 3, n = 2 sites
        >>> base = dual_factors(Kzz, torch.zeros_like(Kzz), torch.zeros(1, 3))
        >>> eta = torch.randn(5, 1, 2)  # 5 fantasies (b = (5,)) sharing the precisions beta
        >>> blk = site_block(base, Kzc, torch.eye(2)[None], eta, torch.ones(1, 2))
        >>> blk.G.shape, blk.L_M.shape  # beta unbatched: L_M is shared
        (torch.Size([1, 3, 2]), torch.Size([1, 2, 2]))
        >>> blk.s.shape
        torch.Size([5, 1, 2])
    """

    H: Tensor
    G: Tensor
    d: Tensor
    L_M: Tensor
    s: Tensor
    r0: Tensor


def site_block(
    factors: DualFactors, Kzc: Tensor, kcc: Tensor, eta: Tensor, beta: Tensor
) -> SiteBlock:
    """Factors of the base posterior conditioned on sites ``(eta, beta)`` at inputs ``X_c``
    (module docstring: Gaussian conditioning of the Eq. 10 process on the Eq. 12 sites).

    Args:
        factors: base posterior factors.
        Kzc: ``(*bx, L, m, n)`` cross-covariance between ``Z`` and the new inputs.
        kcc: ``(*bx, L, n, n)`` prior covariance of the new inputs (``(*bx, L, n)`` variances
            are enough for ``n = 1``).
        eta: ``(*b, L, n)`` first site parameters ``beta_j * y_hat_j`` (Eq. 12).
        beta: ``(*b, L, n)`` site precisions (non-negative).

    Example:
        >>> k = lambda A, B: torch.exp(-2 * torch.cdist(A, B) ** 2).unsqueeze(0)  # L = 1
        >>> Z, C = torch.linspace(0, 1, 4).unsqueeze(-1), torch.tensor([[0.2], [0.7]])
        >>> ZC = torch.cat([Z, C])  # inducing set extended by the conditioned inputs
        >>> eta, beta = torch.tensor([[1.0, -1.0]]), torch.tensor([[2.0, 3.0]])
        >>> prior = dual_factors(k(Z, Z), torch.zeros(1, 4, 4), torch.zeros(1, 4))
        >>> blk = site_block(prior, k(Z, C), k(C, C), eta, beta)
        >>> Xs = torch.rand(3, 1)
        >>> m1, v1 = dual_predict(prior, k(Z, Xs), torch.ones(1, 3), block=blk, Kcx=k(C, Xs))
        >>> B, lam = (k(ZC, C) * beta) @ k(ZC, C).mT, (k(ZC, C) @ eta.mT)[..., 0]  # Eq. 11
        >>> m2, v2 = dual_predict(dual_factors(k(ZC, ZC), B, lam), k(ZC, Xs), torch.ones(1, 3))
        >>> torch.allclose(m1, m2, atol=1e-4), torch.allclose(v1, v2, atol=1e-4)  # Z + X_c
        (True, True)
    """
    H = solve_lower(factors.L_K, Kzc)  # (*bx, L, m, n)
    G = solve_lower(factors.L_A, Kzc)
    mu = (factors.w.unsqueeze(-2) @ G).squeeze(-2)  # base mean of g at X_c
    n = Kzc.shape[-1]
    if kcc.dim() == Kzc.dim() - 1:  # variances of single points
        if n != 1:
            raise InputDataError(
                f"site_block: kcc must be (..., n, n) for n = {n} sites, got {tuple(kcc.shape)}"
            )
        kcc = kcc.unsqueeze(-1)
    Scc = kcc - H.mT @ H + G.mT @ G  # Sigma(X_c, X_c) (*bx, L, n, n)
    Scc = 0.5 * (Scc + Scc.mT)
    beta = beta.clamp_min(0)
    d = beta.sqrt()
    r = eta - beta * mu
    pos = d > 0
    e = torch.where(pos, r / torch.where(pos, d, torch.ones_like(d)), torch.zeros_like(r))
    r0 = torch.where(pos, torch.zeros_like(r), r)
    eye = torch.eye(n, dtype=G.dtype, device=G.device)
    M = eye + d.unsqueeze(-1) * Scc * d.unsqueeze(-2)
    L_M = stable_cholesky(M, name="I + D Sigma_cc D (conditioning)")
    rhs = e - d * (Scc @ r0.unsqueeze(-1)).squeeze(-1)
    s = solve_lower(L_M, rhs.unsqueeze(-1)).squeeze(-1)
    return SiteBlock(H, G, d, L_M, s, r0)


def dual_predict(
    factors: DualFactors,
    Kzx: Tensor,
    kxx: Tensor,
    full_cov: bool = False,
    block: SiteBlock | None = None,
    Kcx: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Posterior mean and (co)variance of ``f(X)`` (Eq. 10), optionally conditioned on a
    site block (module docstring).

    Args:
        factors: base posterior factors.
        Kzx: ``(*bx, L, m, n)`` cross-covariance ``K(Z, X)``.
        kxx: prior ``(*bx, L, n)`` variances, or ``(*bx, L, n, n)`` covariance if ``full_cov``.
        full_cov: return the joint covariance instead of marginal variances.
        block: conditioning sites added on top of the base posterior.
        Kcx: ``(*, L, n_c, n)`` prior cross-covariance ``K(X_c, X)`` of the block's inputs
            and ``X`` (required with ``block``).

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
    mean = (factors.w.unsqueeze(-2) @ G).squeeze(-2)
    if full_cov:
        cov = kxx - H.mT @ H + G.mT @ G
    else:
        var = kxx - H.square().sum(-2) + G.square().sum(-2)
    if block is not None:
        if Kcx is None:
            raise InputDataError("dual_predict: a site block needs Kcx = K(X_c, X), got None")
        Scx = Kcx - block.H.mT @ H + block.G.mT @ G  # Sigma(X_c, X) (*, L, n_c, n)
        S = solve_lower(block.L_M, block.d.unsqueeze(-1) * Scx)  # L_M^{-1} D Sigma_cx
        mean = mean + (block.s.unsqueeze(-2) @ S).squeeze(-2)
        mean = mean + (block.r0.unsqueeze(-2) @ Scx).squeeze(-2)
        if full_cov:
            cov = cov - S.mT @ S
        else:
            var = var - S.square().sum(-2)
    if full_cov:
        return mean, 0.5 * (cov + cov.mT)
    return mean, var


class PredictiveWeights(NamedTuple):
    """The posterior of :func:`dual_predict` as weights on the extended inducing set
    ``Z_e = Z + X_c`` (module docstring): ``mean(x) = k_e(x)^T a`` and ``cov(x, x') = k(x, x')
    + k_e(x)^T W k_e(x')``; ``a`` ``(*b, L, m_e)``, ``W`` ``(*b, L, m_e, m_e)``.

    Example:
        >>> Kzz = torch.tensor([[[2.0, 1.0], [1.0, 2.0]]], dtype=torch.float64)
        >>> w = predictive_weights(dual_factors(Kzz, Kzz, torch.ones(1, 2, dtype=torch.float64)))
        >>> w._fields, w.a.shape, w.W.shape
        (('a', 'W'), torch.Size([1, 2]), torch.Size([1, 2, 2]))
    """

    a: Tensor
    W: Tensor


def predictive_weights(factors: DualFactors, block: SiteBlock | None = None) -> PredictiveWeights:
    """Fold the base factors (and a site block) into :class:`PredictiveWeights` (module
    docstring; Eq. 10 and its conditioning on the Eq. 12 sites). O((m + n_c)^3) once.

    Args:
        factors: base posterior factors.
        block: conditioning sites on top of them (``None``: the base posterior, ``m_e = m``).

    Example:
        >>> k = lambda A, B: torch.exp(-2 * torch.cdist(A, B) ** 2).unsqueeze(0)  # L = 1
        >>> Z = torch.linspace(0, 1, 4, dtype=torch.float64).unsqueeze(-1)
        >>> C = torch.tensor([[0.2], [0.7]], dtype=torch.float64)
        >>> f = dual_factors(k(Z, Z), k(Z, Z) @ k(Z, Z), torch.ones(1, 4, dtype=torch.float64))
        >>> eta, beta = torch.tensor([[1.0, -1.0]]).double(), torch.tensor([[2.0, 3.0]]).double()
        >>> blk = site_block(f, k(Z, C), k(C, C), eta, beta)
        >>> Xs = torch.rand(3, 1, dtype=torch.float64)
        >>> m1, v1 = dual_predict(f, k(Z, Xs), torch.ones(1, 3), block=blk, Kcx=k(C, Xs))
        >>> ZC = torch.cat([Z, C])
        >>> m2, v2 = weights_predict(predictive_weights(f, blk), k(ZC, Xs), torch.ones(1, 3))
        >>> torch.allclose(m1, m2), torch.allclose(v1, v2)
        (True, True)
    """
    L_K, L_A, w = factors
    m = L_K.shape[-1]
    eye = torch.eye(m, dtype=L_K.dtype, device=L_K.device)
    iK, iA = solve_lower(L_K, eye), solve_lower(L_A, eye)  # L^{-1}
    a = (w.unsqueeze(-2) @ iA).squeeze(-2)  # L_A^{-T} w
    P = iA.mT @ iA - iK.mT @ iK  # A^{-1} - K_zz^{-1}
    if block is None:
        return PredictiveWeights(a, 0.5 * (P + P.mT))
    n = block.G.shape[-1]
    PK = iA.mT @ block.G - iK.mT @ block.H  # (A^{-1} - K_zz^{-1}) K_zc  (*bx, L, m, n)
    eye_n = torch.eye(n, dtype=PK.dtype, device=PK.device).expand(*PK.shape[:-2], n, n)
    E = torch.cat([PK, eye_n], -2)  # (*bx, L, m + n, n)
    v = torch.linalg.solve_triangular(block.L_M.mT, block.s.unsqueeze(-1), upper=True)
    coef = block.d * v.squeeze(-1) + block.r0  # D L_M^{-T} s + r_0
    a = torch.cat([a, a.new_zeros(*a.shape[:-1], n)], -1)
    a = a + (E @ coef.unsqueeze(-1)).squeeze(-1)
    Q = solve_lower(block.L_M, block.d.unsqueeze(-1) * E.mT)  # L_M^{-1} D E^T
    W = torch.nn.functional.pad(P, (0, n, 0, n)) - Q.mT @ Q
    return PredictiveWeights(a, 0.5 * (W + W.mT))


def weights_predict(
    weights: PredictiveWeights, Kex: Tensor, kxx: Tensor, full_cov: bool = False
) -> tuple[Tensor, Tensor]:
    """Posterior mean and (co)variance of ``f(X)`` from :class:`PredictiveWeights` (the values
    of :func:`dual_predict` with the factors and block they were folded from).

    Args:
        weights: from :func:`predictive_weights`.
        Kex: ``(*bx, L, m_e, n)`` cross-covariance ``K(Z_e, X)`` (rows ``Z``, then ``X_c``).
        kxx: prior ``(*bx, L, n)`` variances, or ``(*bx, L, n, n)`` covariance if ``full_cov``.
        full_cov: return the joint covariance instead of marginal variances.

    Example:
        >>> Kzz = torch.eye(2, dtype=torch.float64)[None]  # mean A^{-1} lam, var 1 + 1/2 - 1
        >>> f = dual_factors(Kzz, Kzz, torch.ones(1, 2, dtype=torch.float64))  # A = 2 I
        >>> mean, var = weights_predict(predictive_weights(f), Kzz, torch.ones(1, 2))
        >>> mean.round(decimals=6).tolist(), var.round(decimals=6).tolist()
        ([[0.5, 0.5]], [[0.5, 0.5]])
    """
    a, W = weights
    mean = (a.unsqueeze(-2) @ Kex).squeeze(-2)
    WK = W @ Kex
    if full_cov:
        cov = kxx + Kex.mT @ WK
        return mean, 0.5 * (cov + cov.mT)
    return mean, kxx + (WK * Kex).sum(-2)


#: relative tolerance of :func:`checked_weights` on the posterior (co)variances
WEIGHTS_RTOL = 1e-6


def checked_weights(
    factors: DualFactors,
    Kee: Tensor,
    kee: Tensor,
    block: SiteBlock | None = None,
    rtol: float = WEIGHTS_RTOL,
) -> PredictiveWeights | None:
    """:func:`predictive_weights`, or ``None`` where they do not give the posterior of
    :func:`dual_predict` at the extended inducing set ``Z_e = Z + X_c`` itself: the means to
    ``rtol`` of ``|mean| + sqrt(k(x, x))`` and the variances to ``rtol`` of the solves'
    variance plus ``1e-10 k(x, x)`` (the floor below which a variance is round-off). At
    ``Z_e`` the posterior variance is smallest and the weights' cancellation largest (module
    docstring).

    Args:
        factors: base posterior factors.
        Kee: ``(L, m_e, m_e)`` prior covariance ``K(Z_e, Z_e)`` (rows and columns ``Z``, then
            ``X_c``).
        kee: ``(L, m_e)`` its diagonal.
        block: conditioning sites at ``X_c`` (``None``: ``Z_e = Z``).
        rtol: relative tolerance.

    Example:
        >>> k = lambda A, B: torch.exp(-2 * torch.cdist(A, B) ** 2).unsqueeze(0)  # L = 1
        >>> Z = torch.linspace(0, 1, 4, dtype=torch.float64).unsqueeze(-1)
        >>> f = dual_factors(k(Z, Z), k(Z, Z) @ k(Z, Z), torch.ones(1, 4, dtype=torch.float64))
        >>> checked_weights(f, k(Z, Z), torch.ones(1, 4, dtype=torch.float64)) is None
        False
        >>> X = torch.rand(12, 2, dtype=torch.float64)  # every point inducing, noise 1e-6
        >>> K = 5 * torch.exp(-0.2 * torch.cdist(X, X) ** 2).unsqueeze(0)
        >>> f = dual_factors(K, K @ K / 1e-6, torch.ones(1, 12, dtype=torch.float64))
        >>> checked_weights(f, K, K.diagonal(dim1=-2, dim2=-1)) is None
        True
    """
    weights = predictive_weights(factors, block)
    m = factors.L_K.shape[-1]
    Kcx = None if block is None else Kee[..., m:, :]
    mean, var = dual_predict(factors, Kee[..., :m, :], kee, False, block, Kcx)
    mean_w, var_w = weights_predict(weights, Kee, kee, False)
    scale = kee.abs()
    ok_mean = (mean_w - mean).abs() <= rtol * (mean.abs() + scale.sqrt())
    ok_var = (var_w - var).abs() <= rtol * (var.abs() + 1e-10 * scale)
    return weights if bool(ok_mean.all() and ok_var.all()) else None
