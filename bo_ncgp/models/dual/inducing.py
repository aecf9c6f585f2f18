"""Inducing inputs of the dual SVGP: checks, pivoted-Cholesky selection and projection; the
checks of a streaming sparse GP's kernel and likelihood (:func:`check_kernel_and_likelihood`).

Chang et al. (2023), Sec. 3.4: the new inducing inputs are chosen by greedy pivoted Cholesky
(Burt et al. 2020) on ``[Z_old, X_new]`` with a fixed size ``m``, and the dual pair is moved to
them with ``P = K(Z_new, Z_old) K(Z_old, Z_old)^{-1}`` (Eq. 27):

    lam <- P lam,   B_u <- P B_u P^T.

Eq. 27 follows from ``k(Z_new, x) ~= P k(Z_old, x)`` (the Nyström approximation); the sites
are re-expressed on the new inducing outputs, and when ``Z_new`` contains ``Z_old`` the
projected posterior is exactly ``q(u_old) p(u_extra | u_old)``, so predictions are unchanged.

With a batched kernel (one kernel per latent, ``batch_shape (C,)``) the selection runs on the
sum of the C kernels, a valid kernel whose residual variance is the total over latents.
"""

from __future__ import annotations

import warnings

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, NumericalWarning
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import KernelOperator, pivoted_cholesky, stable_cholesky
from bo_ncgp.linalg._args import check_real_tensor
from bo_ncgp.models.base import check_kernel_and_likelihood

__all__ = [
    "check_inducing_points",
    "check_latent_kernel",
    "project_dual_pair",
    "repair_psd",
    "select_inducing_points",
]


def check_latent_kernel(owner: str, kernel: gpytorch.kernels.Kernel, likelihood: Likelihood) -> int:
    """Check the prior and the observation model of a sparse GP with ``C`` latent functions
    (the likelihood's ``num_latents``): the type checks of
    :func:`bo_ncgp.models.base.check_kernel_and_likelihood`, and a kernel shared by the latents
    (batch shape ``()``) or one per latent (``(C,)``).

    Returns:
        ``C``.

    Raises:
        InputDataError: naming ``owner`` (the model) and what is wrong.

    Example:
        >>> from bo_ncgp.likelihoods import Softmax
        >>> check_latent_kernel("M", gpytorch.kernels.RBFKernel(), Softmax(3))
        3
        >>> k = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([2]))
        >>> check_latent_kernel("M", k, Softmax(3))
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: M: kernel batch_shape must be () (shared) or (3,) ...
    """
    check_kernel_and_likelihood(owner, kernel, likelihood)
    C = int(likelihood.num_latents)
    kb = tuple(kernel.batch_shape)
    if kb not in ((), (C,)):
        raise InputDataError(
            f"{owner}: kernel batch_shape must be () (shared) or ({C},) (one per latent), got {kb}"
        )
    return C


def check_inducing_points(Z: Tensor, name: str = "inducing_points") -> Tensor:
    """Validate ``Z`` ``(m, d)``: finite, non-empty; exact duplicates are dropped with a warning.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # it warns about the duplicate
        ...     check_inducing_points(torch.tensor([[0.0], [1.0], [1.0]])).shape
        torch.Size([2, 1])
    """
    check_real_tensor(Z, name, "DualSVGP", finite=False, floating=True)
    if Z.dim() != 2:
        raise InputDataError(f"DualSVGP: {name} must have shape (m, d), got {tuple(Z.shape)}")
    if Z.shape[0] == 0 or Z.shape[1] == 0:
        raise InputDataError(f"DualSVGP: {name} is empty (shape {tuple(Z.shape)})")
    if not torch.isfinite(Z).all():
        raise InputDataError(f"DualSVGP: {name} contains NaN or inf")
    uniq, first = _unique_rows(Z)
    if uniq.shape[0] < Z.shape[0]:
        warnings.warn(
            f"DualSVGP: {name} contained {Z.shape[0] - uniq.shape[0]} duplicate row(s); "
            f"they were dropped ({uniq.shape[0]} inducing points remain)",
            UserWarning,
            stacklevel=3,
        )
        return Z[first]
    return Z


def _unique_rows(Z: Tensor) -> tuple[Tensor, Tensor]:
    """Unique rows and the (sorted) index of their first occurrence."""
    uniq, inverse = torch.unique(Z.detach(), dim=0, return_inverse=True)
    first = torch.full((uniq.shape[0],), Z.shape[0], dtype=torch.long, device=Z.device)
    first = first.scatter_reduce(
        0, inverse, torch.arange(Z.shape[0], device=Z.device), reduce="amin"
    )
    return uniq, first.sort().values


class _SummedRows:
    """Row access to ``sum_c K_c(X, X)`` for a batched kernel (see module docstring)."""

    def __init__(self, kernel: gpytorch.kernels.Kernel, X: Tensor) -> None:
        self.op = KernelOperator(kernel, X, backend="dense")

    def diagonal(self) -> Tensor:
        d = self.op.diagonal()
        return d.reshape(-1, d.shape[-1]).sum(0)

    def rows(self, idx: Tensor) -> Tensor:
        r = self.op.rows(idx)
        return r.reshape(-1, *r.shape[-2:]).sum(0)


def select_inducing_points(kernel: gpytorch.kernels.Kernel, candidates: Tensor, num: int) -> Tensor:
    """Greedy pivoted-Cholesky choice of ``num`` rows of ``candidates`` (Sec. 3.4).

    Fewer rows are returned when the candidates' kernel matrix has lower numerical rank
    (e.g. duplicated inputs). Only ``diag K`` and rows of ``K`` are evaluated, a block of the
    likeliest next pivots' rows per kernel call (:func:`~bo_ncgp.linalg.pivoted_cholesky`).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> X = torch.rand(30, 2)
        >>> Z = select_inducing_points(RBFKernel(), X, num=5)
        >>> Z.shape, bool((Z.unsqueeze(1) == X).all(-1).any(-1).all())  # 5 rows of X
        (torch.Size([5, 2]), True)
        >>> select_inducing_points(RBFKernel(), torch.zeros(4, 2), num=3).shape  # rank 1
        torch.Size([1, 2])
    """
    with torch.no_grad():
        res = pivoted_cholesky(_SummedRows(kernel, candidates), max_rank=num)
    return candidates[res.pivots.sort().values]


def repair_psd(B: Tensor, name: str = "B_u") -> Tensor:
    """Symmetrise ``B``; clip clearly negative eigenvalues with a warning (report, not NaN).

    Eigenvalues below ``-100 m eps max|eig|`` are set to zero and a
    :class:`~bo_ncgp.exceptions.NumericalWarning` names the size of the repair; smaller negative
    values are rounding noise that ``K_zz + B`` absorbs and are left alone.

    Example:
        >>> import warnings
        >>> B = torch.tensor([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     fixed = repair_psd(B)
        >>> caught[0].category.__name__, torch.linalg.eigvalsh(fixed).round(decimals=4).abs()
        ('NumericalWarning', tensor([0., 3.]))
    """
    B = 0.5 * (B + B.mT)
    if B.shape[-1] == 0:
        return B
    evals, evecs = torch.linalg.eigh(B)
    scale = evals.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(B.dtype).tiny)
    tol = 100 * B.shape[-1] * torch.finfo(B.dtype).eps
    if bool((evals < -tol * scale).any()):
        worst = float((evals / scale).min())
        warnings.warn(
            f"DualSVGP: {name} was not positive semi-definite after projection (smallest "
            f"relative eigenvalue {worst:.2e}); negative eigenvalues were clipped to zero",
            NumericalWarning,
            stacklevel=3,
        )
        B = (evecs * evals.clamp_min(0).unsqueeze(-2)) @ evecs.mT
        B = 0.5 * (B + B.mT)
    return B


def project_dual_pair(
    Kzz_old: Tensor, K_new_old: Tensor, lam: Tensor, B: Tensor
) -> tuple[Tensor, Tensor]:
    """Eq. 27 with ``P = K(Z_new, Z_old) K(Z_old, Z_old)^{-1}`` (Cholesky solve, no inverse).

    Args:
        Kzz_old: ``(L, m_old, m_old)``; K_new_old: ``(L, m_new, m_old)``.
        lam: ``(L, m_old)``, or ``(L, k, m_old)``: ``k`` vectors projected alike;
        B: ``(L, m_old, m_old)``.

    Returns:
        ``(P lam, P B P^T)`` of shapes ``(L, m_new)`` (or ``(L, k, m_new)``),
        ``(L, m_new, m_new)``.

    Example:
        >>> k = lambda A, B: torch.exp(-0.5 * torch.cdist(A, B) ** 2).unsqueeze(0)  # L = 1
        >>> Z = torch.linspace(0.0, 3.0, 4).unsqueeze(-1)
        >>> lam, B = torch.randn(1, 4), torch.eye(4).expand(1, 4, 4)
        >>> lam2, B2 = project_dual_pair(k(Z, Z), k(Z[:2], Z), lam, B)  # keep Z[:2]: P = [I 0]
        >>> lam2.shape, torch.allclose(lam2, lam[:, :2]), torch.allclose(B2, B[:, :2, :2])
        (torch.Size([1, 2]), True, True)
    """
    L_old = stable_cholesky(Kzz_old, name="K(Z_old, Z_old)")
    Pt = torch.cholesky_solve(K_new_old.mT, L_old)  # K_old^{-1} K(Z_old, Z_new) = P^T
    P = Pt.mT
    if lam.dim() > P.dim() - 1:
        P = P.unsqueeze(-3)
    lam_new = (P @ lam.unsqueeze(-1)).squeeze(-1)
    B_new = repair_psd(Pt.mT @ B @ Pt, name="projected B_u")
    return lam_new, B_new
