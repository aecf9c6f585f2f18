"""Recycling between Newton steps: the virtual solver run with optional compression.

Tatzel et al., Sec. 3.3-3.4 and Algorithm 3. The buffers ``S`` (all actions so far) and
``T = K S`` are carried from one Newton step to the next. Because ``K`` does not depend on
``f_i``, the precision approximation of the *new* regression problem restricted to the old
actions,

    C_0 = S M^{-1} S^T,     M = S^T (T + W(f_i)^{-1} S)                      (Eq. 11)

costs no product with ``K`` (line 2). ``M = U Lambda U^T`` (line 3); keeping the ``R`` largest
eigenpairs (lines 5-6, Sec. 3.4) re-weights the actions, ``S <- S U``, ``T <- T U``, and
gives the root ``Q_0 = S Lambda^{-1/2}`` (line 7) with ``C_0 = Q_0 Q_0^T`` of rank ``R``.
Prop. A.4: the initial residual ``r_0 = (y_hat - m) - K_hat C_0 (y_hat - m)`` is orthogonal to
``span S``.

Numerics (documented deviation): the actions are first scaled to unit Euclidean norm,
``M -> D M D`` with ``D = diag(1/||s_b||)``. Without compression this changes nothing
(``C_0 = S M^{-1} S^T`` is invariant under ``S -> S D``); with compression the kept eigenpairs
are those of the normalised actions, so the truncation does not depend on the arbitrary
scale of the actions (CG residuals shrink by many orders of magnitude, and the paper's raw
``M`` would always discard the late actions first). This is the setting of Prop. A.6, which
motivates keeping the largest eigenvalues. Eigenvalues below ``sqrt(eps) * max(eigenvalue)``
(numerically dependent actions, zero columns of batch elements that had stopped) are dropped:
their directions cannot be normalised accurately in ``Q_0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.models.iterncgp.operators import inner
from bo_ncgp.models.iterncgp.problem import PseudoRegressionProblem

__all__ = ["ActionBuffers", "RecycledBelief", "virtual_solver_run"]


class ActionBuffers(NamedTuple):
    """The buffers that Algorithm 3 carries from one Newton step to the next: the actions
    ``S`` ``(*b, C, n, B)`` and their kernel products ``T = K S`` (same shape).

    Example:
        >>> S = torch.zeros(1, 4, 3)
        >>> ActionBuffers(S, S).size  # B, the number of actions held
        3
    """

    S: Tensor
    T: Tensor

    @property
    def size(self) -> int:
        """Number of actions ``B`` held (columns of ``S``)."""
        return self.S.shape[-1]


@dataclass
class RecycledBelief:
    """Output of :func:`virtual_solver_run`.

    Attributes:
        Q: root of ``C_0``, ``(*b, C, n, R)``.
        KQ: ``K Q``.
        S: re-weighted action buffer ``S U`` (compressed to ``R`` columns).
        T: ``T U = K S U``.
        eigenvalues: kept eigenvalues of ``M``, ``(*b, R)`` (zero where dropped).

    Example (computed by :func:`virtual_solver_run`):
        >>> import dataclasses
        >>> [f.name for f in dataclasses.fields(RecycledBelief)]
        ['Q', 'KQ', 'S', 'T', 'eigenvalues']
    """

    Q: Tensor
    KQ: Tensor
    S: Tensor
    T: Tensor
    eigenvalues: Tensor


def virtual_solver_run(
    buffers: ActionBuffers,
    problem: PseudoRegressionProblem,
    rank: int | None = None,
    rel_tol: float | None = None,
) -> RecycledBelief:
    """Algorithm 3: ``C_0`` for the new regression problem from the buffers ``S``, ``T = K S``.

    Args:
        buffers: the actions ``S`` ``(*b, C, n, B)`` (projected onto ``range W``) and
            ``T = K S``.
        problem: the current Newton step's regression problem (``W(f_i)^{-1}`` products).
        rank: compression rank ``R`` (None: keep all ``B`` eigenpairs).
        rel_tol: relative eigenvalue threshold (default ``sqrt(machine epsilon)``).

    Returns:
        :class:`RecycledBelief`. Costs ``B`` products with ``W^{-1}``, O(B^2 NC) and O(B^3);
        no product with ``K``.

    Example (Prop. A.4: the initial residual is orthogonal to the recycled actions):
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.iterncgp import LatentKernelOperator
        >>> X, y, S = torch.rand(6, 1), torch.randn(6), torch.randn(1, 6, 3)  # 3 old actions
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> problem = PseudoRegressionProblem(K, Gaussian(0.1), y, torch.zeros(1, 6, 1), 0.0)
        >>> buffers = ActionBuffers(S, K.matmul(S))
        >>> rec = virtual_solver_run(buffers, problem)  # no product with K inside
        >>> c = inner(rec.Q, problem.rhs).unsqueeze(-3)  # v_0 = C_0 b = Q (Q^T b)
        >>> r0 = problem.residual(rec.Q @ c, rec.KQ @ c)
        >>> bool(inner(S, r0).abs().max() <= 1e-4 * S.norm() * problem.rhs.norm())
        True
        >>> rec = virtual_solver_run(buffers, problem, rank=2)  # compress to R = 2
        >>> G = inner(rec.Q, rec.KQ + problem.noise_matmul(rec.Q))  # Q^T (K + W^-1) Q
        >>> rec.Q.shape, rec.eigenvalues.shape, bool(torch.allclose(G, torch.eye(2), atol=1e-4))
        (torch.Size([1, 6, 2]), torch.Size([2]), True)
    """
    if rank is not None and int(rank) < 0:
        raise InputDataError(f"virtual_solver_run: rank must be >= 0 or None, got {rank}")
    S, T = buffers
    B = S.shape[-1]
    batch = torch.broadcast_shapes(S.shape[:-3], problem.rhs.shape[:-3])
    S = S.expand(*batch, *S.shape[-3:])
    T = T.expand(*batch, *T.shape[-3:])
    # actions scaled to unit norm (a congruence M -> D M D that leaves C_0 unchanged and makes
    # the eigen-truncation independent of the arbitrary scale of the actions)
    norms = torch.linalg.vector_norm(S, dim=(-3, -2))  # (*b, B)
    tiny = torch.finfo(S.dtype).tiny
    dinv = torch.where(norms > tiny, 1.0 / norms.clamp_min(tiny), 0.0)[..., None, None, :]
    S, T = S * dinv, T * dinv
    # line 2: M = S^T (T + W^{-1} S)
    M = inner(S, T + problem.noise_matmul(S))
    M = 0.5 * (M + M.mT)
    # line 3: eigendecomposition, largest eigenvalues first
    lam, U = torch.linalg.eigh(M)
    lam, U = lam.flip(-1), U.flip(-1)
    # lines 4-5: truncation to R eigenpairs
    R = B if rank is None else min(int(rank), B)
    lam, U = lam[..., :R], U[..., :R]
    if R == 0:
        empty = S[..., :0]
        return RecycledBelief(Q=empty, KQ=empty, S=empty, T=empty, eigenvalues=lam)
    tol = torch.finfo(S.dtype).eps ** 0.5 if rel_tol is None else rel_tol
    keep = lam > tol * lam[..., :1].clamp_min(0)
    cols = keep.reshape(-1, R).any(0)  # drop the columns no batch element keeps
    lam, U, keep = lam[..., cols], U[..., cols], keep[..., cols]
    U = U * keep.unsqueeze(-2).to(U.dtype)
    # line 6: update buffers S <- S U, T <- T U
    S_new = S @ U.unsqueeze(-3)
    T_new = T @ U.unsqueeze(-3)
    # line 7: root Q_0 = S Lambda^{-1/2}
    scale = torch.where(keep, lam.clamp_min(torch.finfo(lam.dtype).tiny).rsqrt(), 0.0)
    scale = scale.unsqueeze(-2).unsqueeze(-2)
    return RecycledBelief(
        Q=S_new * scale,
        KQ=T_new * scale,
        S=S_new,
        T=T_new,
        eigenvalues=torch.where(keep, lam, 0.0),
    )
