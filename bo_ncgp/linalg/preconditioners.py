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
from bo_ncgp.linalg._args import check_real_tensor
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
    who = "low_rank_plus_diagonal_inverse"
    check_real_tensor(L, "L", who, floating=True)
    if L.dim() != 2:
        raise InputDataError(f"{who}: L must have shape (n, r), got {tuple(L.shape)}")
    D = torch.as_tensor(D, dtype=L.dtype, device=L.device).expand(L.shape[0])
    if not bool((torch.isfinite(D) & (D > 0)).all()):
        raise InputDataError(f"{who}: D must be finite and positive, got min {float(D.min()):g}")
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
