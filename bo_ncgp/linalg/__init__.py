"""Matrix-free numerical core shared by every bo_ncgp model.

* :class:`KernelOperator` -- ``K @ V`` with dense, chunked or KeOps backends;
* :func:`cg` -- batched preconditioned conjugate gradients;
* :func:`pivoted_cholesky` -- greedy low-rank factorisation from row access;
* :func:`stable_cholesky` -- Cholesky with documented jitter escalation;
* :func:`low_rank_plus_diagonal_inverse` -- Woodbury preconditioner;
* :func:`cg_solve` -- CG solve with an adjoint backward pass (differentiable);
* :class:`Grid`, :class:`CirculantEmbedding` -- hierarchical Toeplitz ``K_uu`` on grids,
  its circulant embedding, rectangular root and preconditioner (HIP-GP);
* :mod:`~bo_ncgp.linalg.sparse_gp` -- sparse-GP blocks: :func:`latent_block`,
  :func:`jittered`, :func:`solve_lower`, :func:`tri_logdet`, :func:`whitened_kl`,
  :func:`log_prior`.
"""

from bo_ncgp.linalg.cg import CGResult, cg
from bo_ncgp.linalg.cg_solve import cg_solve
from bo_ncgp.linalg.cholesky import (
    default_jitter_base,
    psd_jitter,
    stable_cholesky,
)
from bo_ncgp.linalg.kernel_operator import KernelOperator
from bo_ncgp.linalg.pivoted_cholesky import PivotedCholeskyResult, RowAccess, pivoted_cholesky
from bo_ncgp.linalg.preconditioners import low_rank_plus_diagonal_inverse
from bo_ncgp.linalg.sparse_gp import (
    jittered,
    latent_block,
    log_prior,
    solve_lower,
    tri_logdet,
    whitened_kl,
)
from bo_ncgp.linalg.toeplitz import (
    CirculantEmbedding,
    Grid,
    circulant_first_row,
    toeplitz_first_row,
)

__all__ = [
    "CGResult",
    "CirculantEmbedding",
    "Grid",
    "KernelOperator",
    "PivotedCholeskyResult",
    "RowAccess",
    "cg",
    "cg_solve",
    "circulant_first_row",
    "default_jitter_base",
    "jittered",
    "latent_block",
    "log_prior",
    "low_rank_plus_diagonal_inverse",
    "pivoted_cholesky",
    "psd_jitter",
    "solve_lower",
    "stable_cholesky",
    "toeplitz_first_row",
    "tri_logdet",
    "whitened_kl",
]
