"""Matrix-free numerical core shared by every bo_ncgp model.

* :class:`KernelOperator` -- ``K @ V`` with dense, chunked or KeOps backends;
* :func:`cg` -- batched preconditioned conjugate gradients;
* :func:`pivoted_cholesky` -- greedy low-rank factorisation from row access;
* :func:`stable_cholesky` -- Cholesky with documented jitter escalation;
* :func:`low_rank_plus_diagonal_inverse` -- Woodbury preconditioner.
"""

from bo_ncgp.linalg.cg import CGResult, cg
from bo_ncgp.linalg.cholesky import (
    NotPSDError,
    NumericalWarning,
    default_jitter_base,
    stable_cholesky,
)
from bo_ncgp.linalg.kernel_operator import KernelOperator
from bo_ncgp.linalg.pivoted_cholesky import PivotedCholeskyResult, RowAccess, pivoted_cholesky
from bo_ncgp.linalg.preconditioners import low_rank_plus_diagonal_inverse

__all__ = [
    "CGResult",
    "KernelOperator",
    "NotPSDError",
    "NumericalWarning",
    "PivotedCholeskyResult",
    "RowAccess",
    "cg",
    "default_jitter_base",
    "low_rank_plus_diagonal_inverse",
    "pivoted_cholesky",
    "stable_cholesky",
]
