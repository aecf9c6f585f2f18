"""Preconditioners for :func:`bo_ncgp.linalg.cg`.

``low_rank_plus_diagonal_inverse(L, D)`` applies ``(L L^T + diag(D))^{-1}`` by the Woodbury
identity in O(n r) per column after an O(n r^2) set-up: with a pivoted-Cholesky factor ``L``
of ``K`` it is the standard preconditioner for ``K + sigma^2 I`` (Gardner et al. 2018).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg.cholesky import stable_cholesky

__all__ = ["low_rank_plus_diagonal_inverse"]


def low_rank_plus_diagonal_inverse(L: Tensor, D: Tensor | float) -> Callable[[Tensor], Tensor]:
    """Return ``R -> (L L^T + diag(D))^{-1} R`` for ``L`` ``(n, r)`` and positive ``D``.

    Example:
        >>> L = torch.randn(20, 3, dtype=torch.float64)
        >>> apply = low_rank_plus_diagonal_inverse(L, 0.5)
        >>> A = L @ L.T + 0.5 * torch.eye(20, dtype=torch.float64)
        >>> R = torch.randn(20, 2, dtype=torch.float64)
        >>> torch.allclose(A @ apply(R), R)
        True
    """
    D = torch.as_tensor(D, dtype=L.dtype, device=L.device).expand(L.shape[0])
    if bool((D <= 0).any()):
        raise InputDataError("low_rank_plus_diagonal_inverse: D must be positive")
    Dinv = 1.0 / D
    # (L L^T + D)^{-1} = D^{-1} - D^{-1} L (I + L^T D^{-1} L)^{-1} L^T D^{-1}
    inner = torch.eye(L.shape[1], dtype=L.dtype, device=L.device) + L.mT @ (Dinv[:, None] * L)
    C = stable_cholesky(inner, name="I + L^T D^-1 L")

    def apply(R: Tensor) -> Tensor:
        vec = R.dim() == 1
        R2 = R.unsqueeze(-1) if vec else R
        DR = Dinv[:, None] * R2
        corr = Dinv[:, None] * (L @ torch.cholesky_solve(L.mT @ DR, C))
        out = DR - corr
        return out.squeeze(-1) if vec else out

    return apply
