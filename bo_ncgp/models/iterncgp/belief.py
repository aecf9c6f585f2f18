"""Belief over the representer weights and its update (IterGP's probabilistic linear solver).

Tatzel et al., Algorithm 2, lines 8 and 11-16 (after Wenger et al. 2022, "Posterior and
computational uncertainty in Gaussian processes"): the solver's belief about the solution
``v = K_hat^{-1}(y_hat - m)`` is summarised by the approximate precision matrix
``C_j = S_j (S_j^T K_hat S_j)^{-1} S_j^T`` (Eq. 10), stored through its low-rank root
``C_j = Q_j Q_j^T``, and the estimate ``v_j = C_j (y_hat - m)``. They give the posterior

    m_{i,j}(.) = m(.) + K(., X) v_j                                             (Eq. 8)
    K_{i,j}(., .) = K(., .) - K(., X) C_j K(X, .)                                (Eq. 9)

We also keep ``K Q_j`` and ``K v_j`` so that residuals and the Newton update
``f_{i+1} = m + K v_j`` (Algorithm 1, line 9) need no further products with ``K``.

Numerics: ``d_j = s_j - C_{j-1} K_hat s_j`` (line 12) is a Gram-Schmidt step in the
``K_hat`` inner product; it is repeated once ("twice is enough") to keep ``Q^T K_hat Q = I``
in finite precision, and ``eta_j = d_j^T K_hat d_j`` and ``alpha_j = d_j^T r_{j-1}`` are used,
which equal the paper's ``z_j^T d_j`` and ``s_j^T r_{j-1}`` in exact arithmetic. An action that
adds (numerically) almost nothing new (``eta_j <= sqrt(eps) s_j^T K_hat s_j``: less than about
1e-4 of its K_hat-norm lies outside the span of the earlier actions in float64) leaves the
belief unchanged and is reported as ``accepted = False``; normalising such a direction would
amplify round-off and destroy ``Q^T K_hat Q = I``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from bo_ncgp.models._alias import Alias
from bo_ncgp.models.iterncgp.operators import inner

__all__ = ["Belief", "BeliefUpdate", "ColumnBuffer"]


class _Problem(Protocol):
    def noise_matmul(self, V: Tensor) -> Tensor: ...

    def project(self, V: Tensor) -> Tensor: ...


class ColumnBuffer:
    """A ``(*b, C, n, k)`` matrix that grows by columns without re-allocating every time.

    Example:
        >>> buf = ColumnBuffer(torch.zeros(2, 3, 0))
        >>> buf.append(torch.ones(2, 3, 1)); buf.data.shape
        torch.Size([2, 3, 1])
    """

    def __init__(self, data: Tensor, extra: int = 16) -> None:
        self._store = data.new_zeros(*data.shape[:-1], data.shape[-1] + max(1, extra))
        self._store[..., : data.shape[-1]] = data
        self._k = data.shape[-1]

    @property
    def data(self) -> Tensor:
        """The columns appended so far (a view: later appends do not change it)."""
        return self._store[..., : self._k]

    @property
    def size(self) -> int:
        """Number of columns appended so far."""
        return self._k

    def append(self, cols: Tensor) -> None:
        """Append ``cols`` of shape ``(*b, C, n, k)``."""
        k = cols.shape[-1]
        if self._k + k > self._store.shape[-1]:
            size = self._k + max(k, self._k + 8)  # doubling, or the block's size for a block
            grown = self._store.new_empty(*self._store.shape[:-1], size)
            grown[..., : self._k] = self._store[..., : self._k]
            self._store = grown
        self._store[..., self._k : self._k + k] = cols
        self._k += k


@dataclass
class BeliefUpdate:
    """Diagnostics of one belief update (Algorithm 2, lines 8 and 13).

    Returned by :meth:`Belief.update`; here one CG step (action ``s = r_0``) on a regression:

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.iterncgp import LatentKernelOperator, PseudoRegressionProblem
        >>> X, y = torch.rand(5, 1), torch.randn(5)
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> prob = PseudoRegressionProblem(K, Gaussian(0.1), y, torch.zeros(1, 5, 1), 0.0)
        >>> belief, r = Belief(torch.zeros(1, 5, 0), torch.zeros(1, 5, 0), prob.rhs), prob.rhs
        >>> upd = belief.update(r, K.matmul(r), r, prob)
        >>> bool(upd.accepted), bool(upd.alpha > 0), bool(upd.eta > 0), belief.rank
        (True, True, True, 1)
    """

    alpha: Tensor  # (*b,) observation alpha_j = s_j^T r_{j-1}
    eta: Tensor  # (*b,) normalisation eta_j
    accepted: Tensor  # (*b,) bool: the action added a new direction


class Belief:
    """Gaussian belief over the representer weights, ``C_j = Q Q^T``, ``v_j = C_j (y_hat - m)``.

    Args:
        Q: root of the precision approximation, ``(*b, C, n, B)``.
        KQ: ``K Q``.
        rhs: ``y_hat - m``, ``(*b, C, n, 1)``.
        capacity: columns reserved for later updates.

    Example:
        >>> b = torch.randn(1, 4, 1)
        >>> Q = torch.zeros(1, 4, 0)
        >>> belief = Belief(Q, Q, b)
        >>> belief.v.abs().max()  # no actions yet: v_0 = C_0 b = 0
        tensor(0.)
    """

    def __init__(self, Q: Tensor, KQ: Tensor, rhs: Tensor, capacity: int = 16) -> None:
        self._Q = ColumnBuffer(Q, capacity)
        self._KQ = ColumnBuffer(KQ, capacity)
        # Alg. 2, line 3: consistent initial iterate v_0 = C_0 (y_hat - m) = Q_0 (Q_0^T b)
        w = inner(Q, rhs).unsqueeze(-3)  # (*b, 1, B, 1)
        self.v = Q @ w
        self.Kv = KQ @ w

    Q: Alias[Tensor] = Alias("_Q.data", "Root of ``C_j``: ``(*b, C, n, B)``.")
    KQ: Alias[Tensor] = Alias(
        "_KQ.data", "``K Q``, the kernel matrix times the root of ``C_j``: ``(*b, C, n, B)``."
    )
    rank: Alias[int] = Alias(
        "_Q.size", "Number of columns of ``Q`` (an upper bound on the rank of ``C_j``)."
    )

    def precision_matmul(self, V: Tensor) -> Tensor:
        """``C_j V = Q (Q^T V)``."""
        return self.Q @ inner(self.Q, V).unsqueeze(-3)

    def update(
        self,
        s: Tensor,
        t: Tensor,
        residual: Tensor,
        problem: _Problem,
        eps: float | None = None,
    ) -> BeliefUpdate:
        """Condition the belief on the observations ``alpha = S^T r`` (Alg. 2, lines 8, 11-16).

        Args:
            s: action ``(*b, C, n, 1)``, or a block of ``k`` actions ``(*b, C, n, k)``
                observed together (one product with ``K`` for all of them).
            t: ``K s`` (line 9).
            residual: ``r_{j-1}``.
            problem: supplies ``W^{-1}`` products.
            eps: relative threshold on ``eta_j`` below which the action is rejected
                (default ``sqrt(machine epsilon)``).

        A block is conditioned on at once: ``C_j = C_{j-1} + D (D^T K_hat D)^{-1} D^T`` with
        ``D`` the block made ``K_hat``-orthogonal to ``Q_{j-1}`` (twice, as for one action);
        ``D^T K_hat D = U Lambda U^T`` (columns scaled to unit ``K_hat``-norm first) gives
        the new columns ``D U Lambda^{-1/2}`` of ``Q``, and eigenvalues below ``eps`` (the
        directions a column adds beyond the others and ``Q_{j-1}``) are dropped. With
        ``k = 1`` this is the single-action update. The diagnostics of a block have a
        trailing dimension ``k``: ``alpha`` and ``eta`` of the orthonormalised directions.

        Example (a block of all n unit vectors: the exact solve in one update):
            >>> import gpytorch
            >>> from bo_ncgp.likelihoods import Gaussian
            >>> from bo_ncgp.models.iterncgp import LatentKernelOperator, PseudoRegressionProblem
            >>> X, y = torch.rand(5, 1, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
            >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
            >>> prob = PseudoRegressionProblem(K, Gaussian(0.1), y, torch.zeros(1, 5, 1), 0.0)
            >>> belief = Belief(X.new_zeros(1, 5, 0), X.new_zeros(1, 5, 0), prob.rhs)
            >>> S = torch.eye(5, dtype=X.dtype).unsqueeze(0)
            >>> upd = belief.update(S, K.matmul(S), prob.rhs, prob)
            >>> v = torch.linalg.solve(prob.matmul(S), prob.rhs)
            >>> belief.rank, bool(upd.accepted), bool(torch.allclose(belief.v, v))
            (5, True, True)
        """
        eps = torch.finfo(s.dtype).eps ** 0.5 if eps is None else eps
        if s.shape[-1] != 1:
            return self._update_block(s, t, residual, problem, eps)
        Q, KQ = self.Q, self.KQ
        z = t + problem.noise_matmul(s)  # line 11: z = K_hat s
        sz = inner(s, z)[..., 0, 0]
        d, Kd = s, t
        Khat_d = z
        for _ in range(2):  # line 12, repeated once for stability
            c = inner(Q, Khat_d).unsqueeze(-3)  # (*b, 1, B, 1)
            d = d - Q @ c
            Kd = Kd - KQ @ c
            Khat_d = Kd + problem.noise_matmul(d)
        eta = inner(d, Khat_d)[..., 0, 0]  # line 13
        alpha = inner(d, residual)[..., 0, 0]  # line 8 (= s^T r_{j-1})
        accepted = eta > eps * sz.abs()
        safe = torch.where(accepted, eta, torch.ones_like(eta))
        scale = torch.where(accepted, safe.rsqrt(), torch.zeros_like(eta))[..., None, None, None]
        step = torch.where(accepted, alpha / safe, torch.zeros_like(alpha))[..., None, None, None]
        if bool(accepted.any()):
            self._Q.append(scale * d)  # line 14 (zero columns where rejected)
            self._KQ.append(scale * Kd)
            self.v = self.v + step * d  # line 16
            self.Kv = self.Kv + step * Kd
        return BeliefUpdate(alpha=alpha, eta=eta, accepted=accepted)

    def _update_block(
        self, s: Tensor, t: Tensor, residual: Tensor, problem: _Problem, eps: float
    ) -> BeliefUpdate:
        """:meth:`update` for a block of ``k > 1`` actions."""
        Q, KQ = self.Q, self.KQ
        d, Kd = s, t
        Khat_d = t + problem.noise_matmul(s)
        norms = torch.einsum("...cnk,...cnk->...k", d, Khat_d)  # K_hat-norms^2 of the actions
        if Q.shape[-1] > 0:
            KhatQ = KQ + problem.noise_matmul(Q)
            before = norms
            for _ in range(2):  # K_hat-orthogonal to Q_{j-1}; repeated when a column lost
                c = inner(Q, Khat_d).unsqueeze(-3)  # (*b, 1, B, k)  more than half its norm
                d = d - Q @ c
                Kd = Kd - KQ @ c
                Khat_d = Khat_d - KhatQ @ c
                after = torch.einsum("...cnk,...cnk->...k", d, Khat_d)
                if bool((after > 0.5 * before).all()):
                    break
                before = after
        G = inner(d, Khat_d)
        G = 0.5 * (G + G.mT)
        tiny = torch.finfo(s.dtype).tiny
        # scaled by the actions' K_hat-norms, so that eps is relative to each action
        unit = torch.where(norms > tiny, norms.clamp_min(tiny).rsqrt(), 0.0)
        Gs = G * unit.unsqueeze(-1) * unit.unsqueeze(-2)
        # the block is K_hat-orthonormalised by a Cholesky factor Gs = L L^T when every column
        # adds a direction of relative size > eps (D = d diag(unit) L^{-T}); else by the
        # eigenpairs of Gs, dropping those <= eps
        L, info = torch.linalg.cholesky_ex(Gs)
        pivots = torch.diagonal(L, dim1=-2, dim2=-1).square()
        if bool((info == 0).all()) and bool((pivots > eps).all()):
            R = (L.mT / unit.unsqueeze(-2)).unsqueeze(-3)  # G = R^T R: D = d R^{-1}
            D = torch.linalg.solve_triangular(R, d, upper=True, left=False)
            KD = torch.linalg.solve_triangular(R, Kd, upper=True, left=False)
            lam, keep = pivots, pivots > eps
        else:
            lam, U = torch.linalg.eigh(Gs)
            lam, U = lam.flip(-1), U.flip(-1)  # largest first
            keep = lam > eps
            cols = keep.reshape(-1, keep.shape[-1]).any(0)  # columns some batch element keeps
            lam, U, keep = lam[..., cols], U[..., cols], keep[..., cols]
            scale = torch.where(keep, lam.clamp_min(tiny).rsqrt(), 0.0)
            R = (unit.unsqueeze(-1) * U * scale.unsqueeze(-2)).unsqueeze(-3)  # (*b, 1, k, k')
            D, KD = d @ R, Kd @ R
        alpha = inner(D, residual)  # (*b, k', 1)
        accepted = keep.any(-1)
        if D.shape[-1] > 0:
            self._Q.append(D)
            self._KQ.append(KD)
            w = alpha.unsqueeze(-3)
            self.v = self.v + D @ w
            self.Kv = self.Kv + KD @ w
        return BeliefUpdate(alpha=alpha[..., 0], eta=lam, accepted=accepted)
