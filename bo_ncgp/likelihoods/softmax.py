"""Categorical likelihood with the softmax link over ``C`` latent functions.

Latents are stored as ``f`` of shape ``(..., n, C)`` ("NC ordering": the C values of one
point are contiguous, Tatzel et al. Sec. B.1), so ``W`` is block diagonal with the ``C x C``
blocks ``W_n = diag(pi_n) - pi_n pi_n^T`` (Tatzel et al. Sec. C.3).

``W_n`` has rank ``C - 1`` (its null space is the constant vector), so the IterNCGP noise
model uses the Moore–Penrose pseudo-inverse (Tatzel et al. Sec. A.6)::

    W_n^+ = (I - 11^T/C) diag(1/pi_n) (I - 11^T/C)

applied in O(C) per point, O(NC) in total, by :meth:`Softmax.neg_hessian_inv_matvec`.

Expectations under ``N(mean, var)`` use Monte Carlo with a fixed set of base samples
(``num_samples``, drawn once from a seeded generator), so they are deterministic and
differentiable in ``mean`` and ``var``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods._checks import check_integer, check_range
from bo_ncgp.likelihoods.base import Likelihood, _check_real
from bo_ncgp.linalg._args import check_count

__all__ = ["Softmax"]


class Softmax(Likelihood):
    """``log p(y = c | f) = f_c - logsumexp(f)`` for labels ``y`` in ``{0, ..., C-1}``.

    Args:
        num_classes: C (>= 2).
        num_samples: Monte-Carlo samples of :meth:`expected` / :meth:`predictive_log_prob`.
        seed: seed of the fixed base samples.

    Example:
        >>> lik = Softmax(3)
        >>> lik.grad(torch.tensor([0]), torch.zeros(1, 3))
        tensor([[ 0.6667, -0.3333, -0.3333]])
    """

    def __init__(self, num_classes: int, num_samples: int = 512, seed: int = 0) -> None:
        super().__init__()
        self.num_latents = check_count(num_classes, "num_classes", "Softmax", minimum=2)
        self.num_samples = check_count(num_samples, "num_samples", "Softmax", minimum=1)
        self.seed = int(seed)
        self._base: dict[tuple, Tensor] = {}

    @property
    def num_classes(self) -> int:
        return self.num_latents

    def _check(self, y: Tensor) -> Tensor:
        yf = check_integer(self.name, y, "labels")
        check_range(self.name, yf, 0, self.num_latents - 1, "labels")
        return yf.long()

    def _prepare(self, y: Tensor, f: Tensor, what: str = "f") -> Tensor:
        y = self.check_targets(y)
        self._check_f(y, f, what)
        return y.to(device=f.device)

    def _onehot(self, y: Tensor, f: Tensor) -> Tensor:
        return F.one_hot(y, self.num_latents).to(f.dtype)

    # ------------------------------------------------------------ pointwise
    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        lse = torch.logsumexp(f, dim=-1)
        fy = torch.gather(
            f, -1, y.unsqueeze(-1).expand(*torch.broadcast_shapes(y.shape, f.shape[:-1]), 1)
        )
        return fy.squeeze(-1) - lse

    def _grad(self, y: Tensor, f: Tensor) -> Tensor:
        return self._onehot(y, f) - torch.softmax(f, dim=-1)

    def _neg_hessian(self, y: Tensor, f: Tensor) -> Tensor:
        pi = torch.softmax(f, dim=-1)
        return torch.diag_embed(pi) - pi.unsqueeze(-1) * pi.unsqueeze(-2)

    def neg_hessian_matvec(self, y: Tensor, f: Tensor, v: Tensor) -> Tensor:
        """``W v = pi * v - pi (pi^T v)`` per point, O(NC)."""
        self._prepare(y, f)
        pi = torch.softmax(f, dim=-1)
        return pi * v - pi * (pi * v).sum(-1, keepdim=True)

    def neg_hessian_inv_matvec(self, y: Tensor, f: Tensor, v: Tensor) -> Tensor:
        """Pseudo-inverse product ``W^+ v`` in O(NC) (Tatzel et al. Sec. A.6)."""
        self._prepare(y, f)
        pi = torch.softmax(f, dim=-1)
        u = v - v.mean(-1, keepdim=True)  # (I - 11^T/C) v
        u = u / pi.clamp_min(torch.finfo(pi.dtype).tiny)
        return u - u.mean(-1, keepdim=True)

    def neg_hessian_pinv(self, y: Tensor, f: Tensor) -> Tensor:
        """Dense blocks ``W_n^+`` of shape ``(..., n, C, C)`` (for tests and small problems)."""
        self._prepare(y, f)
        pi = torch.softmax(f, dim=-1)
        C = self.num_latents
        P = torch.eye(C, dtype=f.dtype, device=f.device) - 1.0 / C
        return P @ torch.diag_embed(1.0 / pi) @ P

    def sample(self, f: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Labels ``(...)`` drawn from ``softmax(f)`` for ``f`` of shape ``(..., C)``."""
        _check_real(self.name, f, "f")
        probs = torch.softmax(f, dim=-1).reshape(-1, self.num_latents)
        dev = f.device if generator is None else generator.device  # draws on the generator's device
        y = torch.multinomial(probs.to(dev), 1, generator=generator).to(f.device)
        y = y.reshape(f.shape[:-1])
        return y

    # --------------------------------------------------------- expectations
    def base_samples(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The fixed ``(num_samples, C)`` standard-normal base samples."""
        key = (dtype, str(device))
        if key not in self._base:
            g = torch.Generator().manual_seed(self.seed)
            eps = torch.randn(
                self.num_samples, self.num_latents, generator=g, dtype=torch.float64, device="cpu"
            )
            self._base[key] = eps.to(dtype=dtype, device=device)
        return self._base[key]

    def _samples(self, mean: Tensor, var: Tensor) -> Tensor:
        """``(S, ..., n, C)`` samples of ``f``; ``var`` is ``(..., n, C)`` (independent
        latents) or ``(..., n, C, C)`` (full covariance per point)."""
        eps = self.base_samples(mean.dtype, mean.device)
        eps = eps.reshape(eps.shape[0], *([1] * (mean.dim() - 1)), self.num_latents)
        if var.shape == mean.shape:
            return mean + var.clamp_min(0).sqrt() * eps
        if var.shape[-2:] != (self.num_latents, self.num_latents) or var.shape[:-1] != mean.shape:
            raise InputDataError(
                f"{self.name}: var must be (..., n, C) or (..., n, C, C); got "
                f"{tuple(var.shape)} for mean {tuple(mean.shape)}"
            )
        Lc = torch.linalg.cholesky(
            var + 1e-12 * torch.eye(self.num_latents, dtype=var.dtype, device=var.device)
        )
        return mean + (Lc @ eps.unsqueeze(-1)).squeeze(-1)

    def _check_var(self, var: Tensor) -> None:
        _check_real(self.name, var, "var")

    def expected(self, y, mean, var, num_points=None):
        """Monte-Carlo ``(E log p (..., n), alpha (..., n, C), beta (..., n, C, C))``."""
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        f = self._samples(mean, var)
        pi = torch.softmax(f, dim=-1)
        elp = self._log_prob(y, f).mean(0)
        pbar = pi.mean(0)
        alpha = self._onehot(y, mean) - pbar
        beta = torch.diag_embed(pbar) - (pi.unsqueeze(-1) * pi.unsqueeze(-2)).mean(0)
        return elp, alpha, beta

    def expected_log_prob(self, y, mean, var, num_points=None):
        """Monte-Carlo ``E log p`` only, ``(..., n)`` (no ``C x C`` Hessian expectation)."""
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        return self._log_prob(y, self._samples(mean, var)).mean(0)

    def expected_diagonal(self, y, mean, var, num_points=None):
        """``(E log p (..., n), alpha (..., n, C), diag(beta) (..., n, C))`` with
        ``diag(beta)_c = E[pi_c (1 - pi_c)]``: O(S n C) memory instead of O(S n C^2)."""
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        f = self._samples(mean, var)
        log_pi = torch.log_softmax(f, dim=-1)
        pi = log_pi.exp()
        idx = y.unsqueeze(-1).expand(*torch.broadcast_shapes(y.shape, f.shape[:-1]), 1)
        elp = torch.gather(log_pi, -1, idx).squeeze(-1).mean(0)
        pbar = pi.mean(0)
        alpha = self._onehot(y, mean) - pbar
        beta = pbar - pi.square().mean(0)
        return elp, alpha, beta

    def predictive_log_prob(self, y, mean, var, num_points=None):
        y = self._prepare(y, mean, "mean")
        self._check_var(var)
        f = self._samples(mean, var)
        lp = self._log_prob(y, f)
        return torch.logsumexp(lp, dim=0) - torch.log(
            torch.tensor(float(lp.shape[0]), dtype=lp.dtype, device=lp.device)
        )

    def predictive_mean(self, mean, var, num_points=None):
        """Class probabilities ``E[softmax(f)]``, shape ``(..., n, C)``."""
        self._check_var(var)
        return torch.softmax(self._samples(mean, var), dim=-1).mean(0)
