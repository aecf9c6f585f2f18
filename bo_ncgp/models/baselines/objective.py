"""The online variational objective of Bui, Nguyen & Turner (2017), uncollapsed form.

Streaming sparse GP ("Streaming sparse Gaussian process approximations", NeurIPS 2017), as
written in Eq. 5 of Chang et al. (2023). With new inducing outputs ``b = f(Z)`` under the new
hyperparameters ``theta``, old inducing outputs ``a = f(Z_old)``, the old posterior
``q_old(a)`` and the old prior ``p_theta_old(a)``:

    L(q, theta, Z) = sum_{i in D_new} E_q[log p(y_i | f_i)] - KL[q(b) || p_theta(b)]
                     + KL[q(a) || p_theta_old(a)] - KL[q(a) || q_old(a)]               (Eq. 5)

where ``q(a) = ∫ p_theta(a | b) q(b) db`` is the new approximation's marginal at the old
inducing inputs. The last two terms are ``E_q(a)[log q_old(a) - log p_theta_old(a)]``: the
ratio ``q_old / p_old`` is the Gaussian "pseudo-likelihood" of the old data.

Parameterisation (whitened, as GPflow/GPyTorch do by default): ``b = L_b v`` with
``L_b = chol K_bb(theta)``, ``q(v) = N(mu, S)``, ``S = L L^T``, so
``KL[q(b) || p(b)] = KL[N(mu, S) || N(0, I)]``. The old quantities are stored whitened with
respect to the old prior, ``a = L_a w`` with ``L_a = chol K_aa(theta_old)``:
``p_old(w) = N(0, I)`` and ``q_old(w) = N(mu_o, L_o L_o^T)``; the Jacobian of ``a -> w``
cancels in the log ratio. Under ``q``, ``w = P v + L_a^{-1} eps`` with
``P = L_a^{-1} K_ab(theta) L_b^{-T}`` and ``eps ~ N(0, K_aa - K_ab K_bb^{-1} K_ba)`` (all under
``theta``), hence ``q(w) = N(P mu, C - P P^T + P S P^T)`` with
``C = L_a^{-1} K_aa(theta) L_a^{-T}``, and::

    E_q[log q_old(w) - log p_old(w)] = -½ [ log|S_o| + tr(S_o^{-1} Σ_w) + r^T r
                                            - tr(Σ_w) - |P mu|^2 ],   r = L_o^{-1}(P mu - mu_o).

Only triangular solves are used; the matrices ``L_a^{-1}`` and ``L_o^{-1} L_a^{-1}`` do not
depend on ``theta`` and are computed once per streaming step (:func:`old_posterior`).

Shapes are latent-major: ``L`` latents (``C`` for the softmax) sit before the matrix
dimensions, ``mu (L, m)``, ``S (L, m, m)``; kernel matrices may carry a size-1 latent
dimension (one kernel shared by all latents) and broadcast.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import solve_lower, tri_logdet, whitened_kl
from bo_ncgp.models.dual.sites import expected_log_prob

__all__ = [
    "OldPosterior",
    "old_posterior",
    "old_terms",
    "predictive_marginals",
    "streaming_elbo",
]


class OldPosterior(NamedTuple):
    """The previous step's posterior, whitened with respect to the previous prior.

    ``Z`` ``(M, d)`` old inducing inputs; ``L_a`` ``(L', M, M)`` Cholesky factor of
    ``K(Z, Z; theta_old)`` (``L' = 1`` for a shared kernel); ``mu`` ``(L, M)`` and ``L_q``
    ``(L, M, M)`` mean and Cholesky factor of ``q_old(w)``; ``A_inv = L_a^{-1}`` and
    ``R = L_q^{-1} L_a^{-1}`` (both theta-independent, see module docstring);
    ``logdet_q = log|L_q L_q^T|``.

    Example:
        >>> L_a = torch.linalg.cholesky(torch.tensor([[[2.0, 1.0], [1.0, 2.0]]]))
        >>> old = old_posterior(torch.rand(2, 1), L_a, torch.zeros(1, 2), 0.5 * torch.eye(2)[None])
        >>> old._fields
        ('Z', 'L_a', 'mu', 'L_q', 'A_inv', 'R', 'logdet_q')
        >>> torch.allclose(old.A_inv @ old.L_a, torch.eye(2), atol=1e-6)  # A_inv = L_a^{-1}
        True
        >>> round(float(old.logdet_q), 4)  # log|L_q L_q^T| = 2 log(1/4)
        -2.7726
    """

    Z: Tensor
    L_a: Tensor
    mu: Tensor
    L_q: Tensor
    A_inv: Tensor
    R: Tensor
    logdet_q: Tensor


def old_posterior(Z: Tensor, L_a: Tensor, mu: Tensor, L_q: Tensor) -> OldPosterior:
    """Freeze a posterior ``(Z, L_a, mu, L_q)`` as the "old" one of the next step.

    Example:
        >>> I = torch.eye(2).expand(1, 2, 2)
        >>> old = old_posterior(torch.zeros(2, 1), I, torch.zeros(1, 2), I)
        >>> old.R.shape
        torch.Size([1, 2, 2])
    """
    Z, L_a, mu, L_q = (t.detach() for t in (Z, L_a, mu, L_q))
    eye = torch.eye(L_a.shape[-1], dtype=L_a.dtype, device=L_a.device)
    A_inv = solve_lower(L_a, eye.expand_as(L_a))
    R = solve_lower(L_q, A_inv.expand(*L_q.shape[:-2], *A_inv.shape[-2:]))
    return OldPosterior(Z, L_a, mu, L_q, A_inv, R, tri_logdet(L_q))


def predictive_marginals(
    L_b: Tensor, K_bx: Tensor, k_xx: Tensor, mu: Tensor, L: Tensor
) -> tuple[Tensor, Tensor]:
    """Marginals of ``q(f_x) = ∫ p(f_x | b) q(b) db`` (Chang et al. Eq. 4, whitened form).

    Args:
        L_b: ``(L', m, m)`` ``chol K_bb``; K_bx: ``(L', m, n)``; k_xx: ``(L', n)`` prior
            variances; mu: ``(L, m)``; L: ``(L, m, m)`` whitened mean / Cholesky factor.

    Returns:
        ``mean (L, n)`` and ``var (L, n)`` (clamped at zero).

    Example:
        >>> K = torch.tensor([[[2.0, 1.0], [1.0, 2.0]]])  # evaluate at x = Z: K_bx = K_bb
        >>> L_b, mu, L = torch.linalg.cholesky(K), torch.tensor([[1.0, -1.0]]), torch.eye(2)[None]
        >>> mean, var = predictive_marginals(L_b, K, torch.full((1, 2), 2.0), mu, L)
        >>> mean.shape, torch.allclose(mean, (L_b @ mu.mT).mT)  # b = L_b v: mean L_b mu
        (torch.Size([1, 2]), True)
        >>> torch.allclose(var, K.diagonal(dim1=-2, dim2=-1))  # q(v) = N(mu, I): prior variance
        True
    """
    H = solve_lower(L_b, K_bx)  # L_b^{-1} K_bx
    mean = (mu.unsqueeze(-2) @ H).squeeze(-2)
    var = k_xx - H.square().sum(-2) + (L.mT @ H).square().sum(-2)
    return mean, var.clamp_min(0)


def old_terms(
    old: OldPosterior, L_b: Tensor, K_ab: Tensor, K_aa: Tensor, mu: Tensor, L: Tensor
) -> Tensor:
    """``KL[q(a) || p_old(a)] - KL[q(a) || q_old(a)]`` (the last two terms of Eq. 5).

    Args:
        old: the frozen previous posterior (:func:`old_posterior`).
        L_b: ``(L', m, m)`` ``chol K_bb(theta)``; K_ab: ``(L', M, m)`` ``K(Z_old, Z; theta)``;
            K_aa: ``(L', M, M)`` ``K(Z_old, Z_old; theta)``.
        mu, L: ``(L, m)``, ``(L, m, m)`` whitened mean and Cholesky factor of ``q(v)``.

    Returns:
        The scalar sum over latents.

    Example:
        >>> K = torch.tensor([[[2.0, 1.0], [1.0, 2.0]]])
        >>> L_K, mu = torch.linalg.cholesky(K), torch.tensor([[0.5, -1.0]])
        >>> L_q = 0.5 * torch.eye(2)[None]
        >>> old = old_posterior(torch.rand(2, 1), L_K, mu, L_q)
        >>> v = old_terms(old, L_K, K, K, mu, L_q)  # same Z, theta and q as the old step
        >>> bool(torch.isclose(v, whitened_kl(mu, L_q).sum()))  # KL[q || q_old] = 0, KL to prior
        True
    """
    Pt = solve_lower(L_b, (old.A_inv @ K_ab).mT)  # P^T = L_b^{-1} K_ba L_a^{-T}, (L', m, M)
    P = Pt.mT
    Q = old.R @ K_ab  # L_o^{-1} L_a^{-1} K_ab (L, M, m), then right-solve with L_b^T
    Q = solve_lower(L_b, Q.mT).mT  # = L_o^{-1} P
    mu_w = (P @ mu.unsqueeze(-1)).squeeze(-1)
    tr_old = (old.R * (old.R @ K_aa)).sum((-2, -1))  # tr(S_o^{-1} C)
    tr_old = tr_old - Q.square().sum((-2, -1)) + (Q @ L).square().sum((-2, -1))
    tr_prior = (old.A_inv * (old.A_inv @ K_aa)).sum((-2, -1))  # tr(C)
    tr_prior = tr_prior - P.square().sum((-2, -1)) + (P @ L).square().sum((-2, -1))
    r = solve_lower(old.L_q, (mu_w - old.mu).unsqueeze(-1)).squeeze(-1)
    val = old.logdet_q + tr_old + r.square().sum(-1) - tr_prior - mu_w.square().sum(-1)
    return -0.5 * val.sum()


def streaming_elbo(
    likelihood: Likelihood,
    y: Tensor,
    L_b: Tensor,
    K_bx: Tensor,
    k_xx: Tensor,
    mu: Tensor,
    L: Tensor,
    old: OldPosterior | None = None,
    K_ab: Tensor | None = None,
    K_aa: Tensor | None = None,
) -> Tensor:
    """Eq. 5 of Chang et al. (2023) (Bui et al. 2017): the online ELBO on the new batch.

    With ``old = None`` (the first batch) this is the batch SVGP ELBO, Eq. 3.

    Args:
        likelihood: observation model; y: ``(n,)`` new targets.
        L_b, K_bx, k_xx: ``chol K_bb``, ``K(Z, X_new)``, prior variances at ``X_new``.
        mu, L: the whitened variational parameters ``(L, m)``, ``(L, m, m)``.
        old, K_ab, K_aa: the previous posterior and ``K(Z_old, Z)``, ``K(Z_old, Z_old)`` under
            the current hyperparameters.

    Returns:
        The scalar objective (to be maximised).

    Example:
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> I = torch.eye(2).expand(1, 2, 2)
        >>> v = streaming_elbo(Gaussian(1.0), torch.zeros(2), I, I, torch.ones(1, 2),
        ...                    torch.zeros(1, 2), I)
        >>> round(float(v), 4)  # 2 x E log N(0 | f, 1) with f ~ N(0, 1), KL = 0
        -2.8379
    """
    out = -whitened_kl(mu, L).sum()
    if K_bx.shape[-1] > 0:
        mean, var = predictive_marginals(L_b, K_bx, k_xx, mu, L)
        out = out + expected_log_prob(likelihood, y, mean, var).sum()
    if old is not None:
        if K_ab is None or K_aa is None:
            raise InputDataError("streaming_elbo: K_ab and K_aa are needed with an old posterior")
        out = out + old_terms(old, L_b, K_ab, K_aa, mu, L)
    return out
