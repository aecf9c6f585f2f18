"""Step-size control for IterNCGP's Newton steps (an extension of Tatzel et al., Algorithm 1).

Algorithm 1 takes the full step ``f_{i+1} = m + K v_j``. For likelihoods with an exponential
link and large counts the full step from the prior mean overshoots badly (Poisson with
``y = 100`` at ``f_0 = 0``: the pseudo target is ``y_hat = f + (y - e^f) / e^f = 99``), after
which Newton's method creeps back by about one unit of ``f`` per step. A backtracking line
search on the log posterior (Rasmussen & Williams 2006, Sec. 3.4.1, "step-size control")

    Psi(w) = log p(y | m + K w) - 1/2 w^T K w,       f = m + K w

repairs this without a single product with ``K``: the representer weights ``w`` and ``K w`` of
the current iterate and of the candidate ``v_j``, ``K v_j`` (tracked by the solver) give
``Psi`` along the segment in O(NC). The step ``w <- w + alpha (v_j - w)`` halves ``alpha``
from 1 until ``Psi`` does not decrease, so every step that already increases ``Psi`` -- in
particular all steps near the mode -- is the paper's full step.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from bo_ncgp.exceptions import NumericalWarning
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.models.iterncgp.operators import to_likelihood_layout

__all__ = ["backtracking_step", "log_posterior"]


def log_posterior(
    likelihood: Likelihood, y: Tensor, prior_mean: Tensor, w: Tensor, Kw: Tensor
) -> Tensor:
    """``Psi = log p(y | m + K w) - w^T K w / 2`` per batch element (up to a constant).

    Args:
        likelihood: the likelihood.
        y: targets ``(*b, n)``.
        prior_mean: ``m`` broadcastable to ``(*b, C, n, 1)``.
        w: representer weights ``(*b, C, n, 1)``; Kw: ``K w``.

    Example:
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> y, w0 = torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.zeros(1, 4, 1)
        >>> psi0 = log_posterior(Bernoulli(), y, 0.0, w0, w0)  # f = m = 0: 4 log(1/2)
        >>> round(psi0.item(), 4)
        -2.7726
        >>> w = 0.5 * (2 * y - 1).reshape(1, 4, 1)  # weights towards the labels, with K = I
        >>> bool(log_posterior(Bernoulli(), y, 0.0, w, w) > psi0)
        True
    """
    C = w.shape[-3]
    f = to_likelihood_layout((prior_mean + Kw)[..., 0], C)
    return likelihood.log_prob(y, f).sum(-1) - 0.5 * (w * Kw).sum((-3, -2, -1))


def backtracking_step(
    likelihood: Likelihood,
    y: Tensor,
    prior_mean: Tensor,
    w: Tensor,
    Kw: Tensor,
    v: Tensor,
    Kv: Tensor,
    max_halvings: int = 10,
) -> tuple[Tensor, Tensor, Tensor]:
    """Largest ``alpha`` in ``{1, 1/2, ..., 2^-max_halvings}`` with ``Psi(w + alpha (v - w))
    >= Psi(w)``.

    Returns ``(w_new, Kw_new, alpha)`` with ``alpha`` of shape ``(*b,)``. If no step size
    increases ``Psi`` (the inexact Newton direction of a partial solve need not be an ascent
    direction), the full step of Algorithm 1 is taken with a warning.

    Example (Poisson ``y = 100`` at ``f = 0`` with ``K = 1``: the full step overshoots):
        >>> from bo_ncgp.likelihoods import Poisson
        >>> y, zero = torch.tensor([100.0]), torch.zeros(1, 1, 1)
        >>> v = torch.full((1, 1, 1), 49.5)  # full Newton step: f = (K + W^-1)^-1 K y_hat = 49.5
        >>> w, Kw, alpha = backtracking_step(Poisson(), y, 0.0, zero, zero, v, v)
        >>> alpha.item(), round(Kw.item(), 4)  # three halvings
        (0.125, 6.1875)
    """
    psi0 = log_posterior(likelihood, y, prior_mean, w, Kw)
    tol = 1e3 * torch.finfo(psi0.dtype).eps * (psi0.abs() + 1)
    dw, dKw = v - w, Kv - Kw
    alpha = torch.ones_like(psi0)
    done = torch.zeros_like(psi0, dtype=torch.bool)
    for _ in range(max_halvings + 1):
        a = alpha[..., None, None, None]
        psi = log_posterior(likelihood, y, prior_mean, w + a * dw, Kw + a * dKw)
        ok = torch.isfinite(psi) & (psi >= psi0 - tol)
        done = done | ok
        if bool(done.all()):
            break
        alpha = torch.where(done, alpha, 0.5 * alpha)
    if not bool(done.all()):
        warnings.warn(
            "IterNCGP: the line search found no step that increases the log posterior; taking "
            "the full Newton step",
            NumericalWarning,
            stacklevel=3,
        )
        alpha = torch.where(done, alpha, torch.ones_like(alpha))
    a = alpha[..., None, None, None]
    return w + a * dw, Kw + a * dKw, alpha
