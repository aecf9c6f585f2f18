"""Pool marginals after one dual-conditioned observation, by a rank-one update (Chang et al.
2023, Sec. 3.3 and Sec. 4.1).

Dual conditioning on one site at ``x*`` with ``rho = 1`` multiplies the current posterior
process ``q(f) = GP(mu, Sigma)`` (Eq. 10) by the Gaussian site of Eq. 12 on ``f(x*)``, with
``(alpha_hat, beta_hat)`` of Eqs. 7-8 computed under the current marginal of ``f(x*)``
(:mod:`bo_ncgp.models.dual.posterior`). With the posterior covariance

    c(x, x*) = Sigma(x, x*) = k(x, x*) - k_zx^T K_zz^{-1} k_z* + k_zx^T (K_zz + B_u)^{-1} k_z*

(Eq. 10, Nystrom residual included), the conditioned marginals at every pool point are

    mu'(x)  = mu(x) + c(x, x*) alpha_hat / (1 + beta_hat s_*),
    var'(x) = var(x) - beta_hat c(x, x*)^2 / (1 + beta_hat s_*),     s_* = c(x*, x*),

which is what :meth:`DualSVGP.condition <bo_ncgp.models.dual.DualSVGP.condition>` followed by
``predict_f`` returns. ``c`` between ``n`` candidates and the pool costs O(n m P); each
(candidate, fantasy) pair then costs O(P).

Example:
    >>> import torch
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> from bo_ncgp.models.base import PoolFantasies
    >>> from bo_ncgp.models.dual import DualSVGP
    >>> X = torch.rand(12, 1, dtype=torch.float64)
    >>> dual = DualSVGP(RBFKernel().double(), Bernoulli(), X[:4], num_hyper_steps=0)
    >>> dual = dual.update(X, (X[:, 0] > 0.5).double())
    >>> index, Y = torch.tensor([2, 5]), torch.tensor([[0.0, 1.0], [1.0, 1.0]]).double()
    >>> fast = dual.pool_fantasies(X).conditioned(index, Y)  # rank-one updates
    >>> slow = PoolFantasies(dual, X).conditioned(index, Y)  # through condition
    >>> all(torch.allclose(a, b) for a, b in zip(fast, slow))
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.linalg import latent_block, solve_lower
from bo_ncgp.models.base import PoolFantasies
from bo_ncgp.models.dual.sites import site_targets

if TYPE_CHECKING:
    from bo_ncgp.models.dual.model import DualSVGP

__all__ = ["DualPoolFantasies"]


class DualPoolFantasies(PoolFantasies):
    """:class:`~bo_ncgp.models.base.PoolFantasies` of a single-latent
    :class:`~bo_ncgp.models.dual.DualSVGP` by the rank-one update of dual conditioning
    (module docstring): the same numbers as the generic path through ``condition``.

    Args:
        model: an unconditioned single-latent ``DualSVGP`` (a kernel with ``batch_shape
            ()`` or ``(1,)``).
        X_pool: ``(P, d)`` pool inputs.

    Attributes:
        X: the pool; mean, var: ``(P,)`` latent marginals (Eq. 10).
        H, G: ``(m, P)`` ``L_K^{-1} K_zP`` and ``L_A^{-1} K_zP`` with ``L_K = chol(K_zz)``,
            ``L_A = chol(K_zz + B_u)``, so that ``c(x, x') = k(x, x') - H[:, x]^T H[:, x'] +
            G[:, x]^T G[:, x']`` (the posterior covariance of Eq. 10).

    Example:
        >>> import torch
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Binomial
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(12, 1, generator=g, dtype=torch.float64)
        >>> pool = torch.linspace(0, 1, 20, dtype=torch.float64).unsqueeze(-1)
        >>> dual = DualSVGP(RBFKernel().double(), Binomial(10), X[:4], num_hyper_steps=0)
        >>> dual = dual.update(X, torch.randint(0, 11, (12,), generator=g).to(X))  # counts
        >>> fant = DualPoolFantasies(dual, pool)
        >>> Y = torch.tensor([[0.0, 10.0], [5.0, 5.0]]).to(X)  # 2 candidates (pool[:2]) x 2
        >>> mean, var = fant.conditioned(torch.tensor([0, 1]), Y)  # fantasies
        >>> ref_mean, ref_var = dual.condition(pool[:1], torch.tensor([10.0]).to(X)).predict_f(pool)
        >>> mean.shape, torch.allclose(mean[0, 1], ref_mean), torch.allclose(var[0, 1], ref_var)
        (torch.Size([2, 2, 20]), True, True)
    """

    def __init__(self, model: DualSVGP, X_pool: Tensor) -> None:
        if not callable(getattr(model, "dual_parameters", None)):  # the rank-one path needs them
            raise UnsupportedError(
                f"DualPoolFantasies needs an unconditioned DualSVGP, got {type(model).__name__}"
            )
        if model.num_latents != 1:
            raise UnsupportedError(
                "DualPoolFantasies needs a single-latent DualSVGP (the rank-one update acts "
                f"on one latent), got {model.num_latents} latents"
            )
        if model.batch_shape:
            raise UnsupportedError(
                "DualPoolFantasies needs an unbatched DualSVGP, got batch_shape "
                f"{tuple(model.batch_shape)}"
            )
        super().__init__(model, X_pool)
        with torch.no_grad():
            f = model._factors()  # Eq. 10 factors of the unconditioned model
            self._L_K, self._L_A = f.L_K[0], f.L_A[0]
            self.H, self.G = self._factors(X_pool.to(f.L_K))

    def _factors(self, X: Tensor) -> tuple[Tensor, Tensor]:
        K = self.model._Kzx(X)[0]
        return solve_lower(self._L_K, K), solve_lower(self._L_A, K)

    def cross(self, X: Tensor) -> Tensor:
        """``(n, P)`` posterior covariance ``c(x, x')`` (Eq. 10) between points ``X (n, d)``
        (candidates inside or outside the pool) and the pool.

        Example:
            >>> fant.cross(fant.X[:3]).shape  # doctest: +SKIP
            torch.Size([3, P])
        """
        with torch.no_grad():
            H, G = self._factors(X)
            k = latent_block(self.model.kernel, X, self.X.to(X))[0]
            return k - H.mT @ self.H + G.mT @ self.G

    def sites(self, Y: Tensor, mean_c: Tensor, var_c: Tensor) -> tuple[Tensor, Tensor]:
        """``(alpha_hat, beta_hat)`` ``(n, J)`` of fantasies ``Y (n, J)`` at candidates with
        marginals ``mean_c``, ``var_c`` ``(n,)`` (the sites ``condition`` would add,
        Eqs. 7-8, 12; ``alpha_hat = eta - beta_hat mu(x*)``)."""
        eta, beta = site_targets(
            self.model.likelihood, Y.mT, mean_c.unsqueeze(0), var_c.unsqueeze(0)
        )  # (J, 1, n): targets (J, n) against latent-major marginals (L=1, n)
        eta, beta = eta[:, 0].T, beta[:, 0].T
        return eta - beta * mean_c.unsqueeze(-1), beta  # alpha = eta - beta * mean (Eq. 12)

    def conditioned_at(
        self, C: Tensor, mean_c: Tensor, var_c: Tensor, Y: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Pool marginals after dual conditioning on ``(x*_i, Y[i, j])`` for candidates given
        by their covariance with the pool ``C (n, P)`` (:meth:`cross`) and their marginals
        ``mean_c``, ``var_c`` ``(n,)``; ``Y (n, J)``. Returns ``mean (n, J, P)`` and
        ``var (n, J, P)``."""
        alpha, beta = self.sites(Y, mean_c, var_c)
        denom = 1 + beta * var_c.clamp_min(0).unsqueeze(-1)  # s_* = c(x*, x*)
        mean = self.mean + C.unsqueeze(-2) * (alpha / denom).unsqueeze(-1)
        var = self.var - C.square().unsqueeze(-2) * (beta / denom).unsqueeze(-1)
        return mean, var.clamp_min(0)

    def conditioned(self, index: Tensor, Y: Tensor) -> tuple[Tensor, Tensor]:
        """Pool marginals after conditioning on ``(X[index[i]], Y[i, j])`` for every candidate
        ``i`` and fantasy ``j`` separately (rank-one update, module docstring).

        Args:
            index: ``(n,)`` positions of the candidates in the pool.
            Y: ``(n, J)`` fantasy observations at the candidates.

        Returns:
            ``mean (n, J, P)`` and ``var (n, J, P)``.
        """
        idx = torch.as_tensor(index, dtype=torch.long, device=self.G.device)
        with torch.no_grad():
            k = latent_block(self.model.kernel, self.X[idx], self.X)[0]
            C = k - self.H[:, idx].mT @ self.H + self.G[:, idx].mT @ self.G  # (n, P)
            return self.conditioned_at(C, self.mean[idx], self.var[idx], Y)
