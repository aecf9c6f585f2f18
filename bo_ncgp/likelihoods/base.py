"""Base class of bo_ncgp's log-concave likelihoods.

A likelihood ``p(y | f)`` provides, in closed form and pointwise,

* ``log_prob(y, f)``, ``grad(y, f) = d log p / df`` and ``neg_hessian(y, f) = W = -d² log p / df²``;
* ``expected(y, mean, var)``: ``E[log p]``, ``alpha = E[d log p/df]`` and
  ``beta = E[-d² log p/df²]`` under ``f ~ N(mean, var)`` -- the dual parameters of the
  memory-based dual SVGP (Chang et al. 2023, Eqs. 2 and 12); by Gauss–Hermite quadrature
  unless a subclass has a closed form;
* ``neg_hessian_matvec`` / ``neg_hessian_inv_matvec``: products with ``W`` and ``W^{-1}``
  (the pseudo-inverse ``W^+`` for the softmax, Tatzel et al. Sec. A.6), the noise model of
  the pseudo-regression problems of IterNCGP (Algorithm 1);
* ``predictive_log_prob(y, mean, var) = log ∫ p(y|f) N(f|mean, var) df`` (for NLPD) and
  ``predictive_mean(mean, var) = E[y]``.

Targets are validated on every call: NaN, inf, complex values, labels out of range,
non-integer counts and shape mismatches raise :class:`ValueError` naming the problem.

Shapes for scalar-latent likelihoods: ``y`` and ``f`` broadcast against each other and share
the trailing data dimension ``n`` (``f`` may carry extra leading batch dimensions, e.g.
fantasies). Multi-latent likelihoods (softmax) take ``f`` of shape ``(..., n, C)``.
"""

from __future__ import annotations

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods.quadrature import gh_points

__all__ = ["Likelihood"]


def _check_real(who: str, t: Tensor, what: str) -> None:
    """Raise unless ``t`` is a real tensor with finite entries."""
    if not isinstance(t, Tensor):
        raise InputDataError(f"{who}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_complex():
        raise InputDataError(f"{who}: {what} must be real, got {t.dtype}")
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise InputDataError(f"{who}: {what} contains {'NaN' if t.isnan().any() else 'inf'}")


class Likelihood(gpytorch.Module):
    """Abstract log-concave likelihood with closed-form derivatives (see module docstring).

    Subclasses implement ``_check(y)``, ``_log_prob``, ``_grad`` and ``_neg_hessian``; the
    public methods validate their inputs and call them.

    Example:
        Every likelihood answers the same questions, here a Poisson count model:

        >>> from bo_ncgp.likelihoods import Poisson
        >>> lik, y, f = Poisson(), torch.tensor([3.0]), torch.tensor([1.0])
        >>> torch.allclose(lik.grad(y, f), y - f.exp())  # d log p / df
        True
        >>> ell, alpha, beta = lik.expected(y, f, torch.tensor([0.5]))  # E over N(1, 0.5)
        >>> torch.allclose(beta, torch.exp(f + 0.25))  # E[-d2 log p/df2] = E[exp f]
        True
        >>> lik.check_targets(torch.tensor([-1.0]))
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: ...
    """

    #: number of latent functions per data point (C)
    num_latents: int = 1
    #: Gauss–Hermite points used by :meth:`expected` (smooth integrands)
    num_quadrature: int = 32
    #: points of :meth:`predictive_log_prob`, whose integrand ``p(y|f)`` can be sharply peaked
    num_predictive_quadrature: int = 80

    # -------------------------------------------------------------- validation
    @property
    def name(self) -> str:
        return type(self).__name__

    def check_targets(self, y: Tensor) -> Tensor:
        """Validate targets and return them as a floating tensor (labels as class indices for
        the softmax). Raises :class:`ValueError` naming the problem."""
        if not isinstance(y, Tensor):
            y = torch.as_tensor(y)
        if y.is_complex():
            raise InputDataError(f"{self.name}: targets must be real, got {y.dtype}")
        if y.is_floating_point() and not bool(torch.isfinite(y).all()):
            raise InputDataError(
                f"{self.name}: targets contain {'NaN' if y.isnan().any() else 'inf'}"
            )
        return self._check(y)

    def _check(self, y: Tensor) -> Tensor:
        raise NotImplementedError

    def _check_f(self, y: Tensor, f: Tensor, what: str = "f") -> None:
        _check_real(self.name, f, what)
        if self.num_latents == 1:
            if f.dim() == 0 or y.dim() == 0:
                return
            if f.shape[-1] != y.shape[-1] and 1 not in (f.shape[-1], y.shape[-1]):
                raise InputDataError(
                    f"{self.name}: shape mismatch, targets have {y.shape[-1]} points (shape "
                    f"{tuple(y.shape)}) but {what} has {f.shape[-1]} (shape {tuple(f.shape)})"
                )
        else:
            if f.dim() < 1 or f.shape[-1] != self.num_latents:
                raise InputDataError(
                    f"{self.name}: {what} must have a trailing dimension of size "
                    f"C={self.num_latents}, got shape {tuple(f.shape)}"
                )
            if y.dim() > 0 and f.dim() > 1 and f.shape[-2] != y.shape[-1]:
                raise InputDataError(
                    f"{self.name}: shape mismatch, targets have {y.shape[-1]} points but {what} "
                    f"has {f.shape[-2]} rows (shape {tuple(f.shape)})"
                )

    def _prepare(self, y: Tensor, f: Tensor, what: str = "f") -> Tensor:
        y = self.check_targets(y)
        self._check_f(y, f, what)
        return y.to(device=f.device, dtype=f.dtype if self.num_latents == 1 else y.dtype)

    # --------------------------------------------------------- pointwise (public)
    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """``log p(y | f)`` per data point, shape ``(..., n)``."""
        return self._log_prob(self._prepare(y, f), f)

    def grad(self, y: Tensor, f: Tensor) -> Tensor:
        """``d log p(y|f) / df``, shape of ``f`` (``(..., n)`` or ``(..., n, C)``)."""
        return self._grad(self._prepare(y, f), f)

    def neg_hessian(self, y: Tensor, f: Tensor) -> Tensor:
        """``W = -d² log p(y|f) / df²``: ``(..., n)``, or ``(..., n, C, C)`` blocks."""
        return self._neg_hessian(self._prepare(y, f), f)

    def neg_hessian_matvec(self, y: Tensor, f: Tensor, v: Tensor) -> Tensor:
        """``W v`` for ``v`` shaped like ``f`` (block-diagonal ``W``)."""
        y = self._prepare(y, f)
        return self._neg_hessian(y, f) * v

    def neg_hessian_inv_matvec(self, y: Tensor, f: Tensor, v: Tensor) -> Tensor:
        """``W^{-1} v`` (the pseudo-regression noise covariance times ``v``)."""
        y = self._prepare(y, f)
        W = self._neg_hessian(y, f)
        return v / W.clamp_min(torch.finfo(W.dtype).tiny)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        raise NotImplementedError

    def _grad(self, y: Tensor, f: Tensor) -> Tensor:
        raise NotImplementedError

    def _neg_hessian(self, y: Tensor, f: Tensor) -> Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------ expectations
    def expected(
        self, y: Tensor, mean: Tensor, var: Tensor, num_points: int | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(E[log p], alpha, beta)`` under ``f ~ N(mean, var)`` (Chang et al. Eq. 12).

        Gauss–Hermite quadrature with ``num_points`` nodes (default :attr:`num_quadrature`);
        differentiable with respect to ``mean``, ``var`` and the likelihood's parameters.
        """
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        f, w = gh_points(mean, var, num_points or self.num_quadrature)
        yk = y.unsqueeze(-1)
        elp = (self._log_prob(yk, f) * w).sum(-1)
        alpha = (self._grad(yk, f) * w).sum(-1)
        beta = (self._neg_hessian(yk, f) * w).sum(-1)
        return elp, alpha, beta

    def expected_log_prob(
        self, y: Tensor, mean: Tensor, var: Tensor, num_points: int | None = None
    ) -> Tensor:
        """``E[log p(y|f)]`` under ``f ~ N(mean, var)`` only (the data term of an ELBO);
        subclasses may skip the derivative expectations of :meth:`expected`."""
        return self.expected(y, mean, var, num_points)[0]

    def expected_diagonal(
        self, y: Tensor, mean: Tensor, var: Tensor, num_points: int | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`expected` with only the diagonal of ``beta``: ``(..., n)`` for one latent
        (the same as :meth:`expected`), ``(..., n, C)`` for multi-latent likelihoods."""
        elp, alpha, beta = self.expected(y, mean, var, num_points)
        if self.num_latents > 1:
            beta = beta.diagonal(dim1=-2, dim2=-1)
        return elp, alpha, beta

    def _check_var(self, var: Tensor) -> None:
        _check_real(self.name, var, "var")
        if (var < 0).any():
            raise InputDataError(
                f"{self.name}: var must be non-negative (min {float(var.min()):.3e})"
            )

    def predictive_log_prob(
        self, y: Tensor, mean: Tensor, var: Tensor, num_points: int | None = None
    ) -> Tensor:
        """``log ∫ p(y|f) N(f | mean, var) df`` per point (the negative NLPD contribution)."""
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        f, w = gh_points(mean, var, num_points or self.num_predictive_quadrature)
        return torch.logsumexp(self._log_prob(y.unsqueeze(-1), f) + w.log(), dim=-1)

    def conditional_mean(self, f: Tensor) -> Tensor:
        """``E[y | f]`` (``sigmoid(f)``, ``N sigmoid(f)``, ``exp(f)``, ``f``; softmax
        probabilities ``(..., C)``)."""
        _check_real(self.name, f, "f")
        if self.num_latents > 1:
            return torch.softmax(f, dim=-1)
        return self._mean_of_y(f)

    def sample(self, f: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw observations ``y ~ p(y | f)`` (same shape as ``f``; labels for the softmax)."""
        raise NotImplementedError(f"{self.name} does not implement sample")

    def predictive_mean(self, mean: Tensor, var: Tensor, num_points: int | None = None) -> Tensor:
        """``E[y]`` under ``f ~ N(mean, var)`` (probability of class 1 for Bernoulli)."""
        _check_real(self.name, mean, "mean")
        self._check_var(var)
        f, w = gh_points(mean, var, num_points or self.num_quadrature)
        return (self._mean_of_y(f) * w).sum(-1)

    def _mean_of_y(self, f: Tensor) -> Tensor:
        raise NotImplementedError
