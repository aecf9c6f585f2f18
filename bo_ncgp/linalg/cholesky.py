"""Cholesky factorisation with jitter escalation.

Every model in bo_ncgp factorises kernel matrices through :func:`stable_cholesky`, so that
the jitter policy (and the warning a user sees when it is needed) lives in one place.

Jitter sequence (documented contract): if ``torch.linalg.cholesky_ex`` fails on ``A``, the
factorisation is retried on ``A + eps_k * mean(diag(A)) * I`` with
``eps_k = base * 10**k`` for ``k = 0, ..., max_tries - 1``, where ``base`` is ``1e-10`` in
float64 and ``1e-6`` in float32/float16. Jitter is only added to the batch elements that
failed. Each successful retry emits one :class:`NumericalWarning` naming the jitter used;
in float32 / float16, where jitter is routine, only the first one in a process does (with the
advice to use float64) and the later ones are logged at debug level. If the last retry
fails, :class:`NotPSDError` is raised with the smallest eigenvalue of the offending matrix,
unless :func:`psd_jitter` is given an ``eigen_tolerance`` and the deficit is within it (then the
matrix is shifted by twice its smallest eigenvalue's deficit, with one more warning).
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, NotPSDError, NumericalWarning
from bo_ncgp.linalg._args import check_count, check_positive

__all__ = [
    "default_jitter_base",
    "psd_jitter",
    "stable_cholesky",
]

_log = logging.getLogger(__name__)
#: whether a low-precision (float32 / float16) jitter warning was issued in this process
_LOW_PRECISION_WARNED = False


def default_jitter_base(dtype: torch.dtype) -> float:
    """Relative jitter of the first retry: ``1e-10`` for float64, ``1e-6`` otherwise.

    Example:
        >>> default_jitter_base(torch.float64), default_jitter_base(torch.float32)
        (1e-10, 1e-06)
    """
    return 1e-10 if dtype == torch.float64 else 1e-6


def stable_cholesky(
    A: Tensor,
    *,
    max_tries: int = 6,
    jitter_base: float | None = None,
    upper: bool = False,
    name: str = "matrix",
) -> Tensor:
    """Lower Cholesky factor of a (batch of) symmetric positive-definite matrix with jitter.

    Args:
        A: ``(..., n, n)`` symmetric matrix (only the lower triangle is read).
        max_tries: number of jitter levels tried after the plain factorisation fails.
        jitter_base: relative jitter of the first retry (default :func:`default_jitter_base`).
        upper: return the upper factor ``U`` with ``A = U^T U`` instead.
        name: name used in warnings and errors (e.g. ``"K_zz + B_u"``).

    Returns:
        ``L`` with ``L @ L.mT ≈ A + jitter * I``.

    Raises:
        InputDataError: ``A`` is not square or contains NaN/inf.
        NotPSDError: the factorisation fails at every jitter level.

    Example:
        >>> A = torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
        >>> L = stable_cholesky(A)
        >>> torch.allclose(L @ L.mT, A)
        True
    """
    L, _ = _jittered_cholesky(A, max_tries, jitter_base, name, stacklevel=3)
    return L.mT if upper else L


def psd_jitter(
    A: Tensor,
    *,
    max_tries: int = 6,
    jitter_base: float | None = None,
    name: str = "matrix",
    eigen_tolerance: float | None = None,
    eigen_scale: Tensor | None = None,
) -> Tensor:
    """Per-matrix jitter ``(...,)`` that :func:`stable_cholesky` adds to ``A`` (zero where the
    plain factorisation succeeds), for callers that need the repaired matrix
    ``A + jitter[..., None, None] * I`` itself rather than its factor. Same warning and
    errors as :func:`stable_cholesky`.

    ``eigen_tolerance``: when even the largest relative jitter fails, a matrix whose smallest
    eigenvalue falls short of zero by at most ``eigen_tolerance`` times its largest diagonal
    entry is shifted by twice that deficit plus ``1e-12`` of that entry (one more
    ``NumericalWarning``) instead of raising ``NotPSDError``. For covariances whose round-off
    is of the order of a larger, *prior* scale than their own entries (posteriors of
    near-noise-free data), where a jitter relative to the mean diagonal is still too small.
    ``eigen_scale`` ``(...,)``: that prior scale where the caller knows it (the largest prior
    variance of each matrix); the deficit is then measured against the larger of the two.

    Example:
        >>> import warnings
        >>> A = torch.stack([torch.eye(2), torch.ones(2, 2)]).double()  # PD, singular
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     j = psd_jitter(A)
        >>> float(j[0]), bool(j[1] > 0)
        (0.0, True)
        >>> tiny = torch.tensor([[1e-7, 1e-7], [1e-7, 1e-7 - 1e-9]], dtype=torch.float64)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     j = psd_jitter(tiny, max_tries=1, eigen_tolerance=1e-2)
        >>> bool(torch.linalg.eigvalsh(tiny + j * torch.eye(2, dtype=tiny.dtype)).min() > 0)
        True
    """
    _, jitter = _jittered_cholesky(
        A,
        max_tries,
        jitter_base,
        name,
        stacklevel=3,
        eigen_tolerance=eigen_tolerance,
        eigen_scale=eigen_scale,
    )
    return jitter


def _jittered_cholesky(
    A: Tensor,
    max_tries: int,
    jitter_base: float | None,
    name: str,
    stacklevel: int,
    eigen_tolerance: float | None = None,
    eigen_scale: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(L, jitter)``: the lower factor of ``A + jitter I`` and the per-matrix jitter."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise InputDataError(
            f"stable_cholesky: {name} must be square (..., n, n), got shape {tuple(A.shape)}"
        )
    max_tries = check_count(max_tries, "max_tries", "stable_cholesky")
    if jitter_base is not None:
        jitter_base = check_positive(jitter_base, "jitter_base", "stable_cholesky")
    if A.shape[-1] == 0:
        return A.clone(), A.new_zeros(A.shape[:-2])
    if not torch.isfinite(A).all():
        raise InputDataError(f"stable_cholesky: {name} contains NaN or inf entries")
    L, info = torch.linalg.cholesky_ex(A)
    if not bool((info > 0).any()):
        return L, A.new_zeros(A.shape[:-2])
    base = default_jitter_base(A.dtype) if jitter_base is None else jitter_base
    diag_mean = (
        A.diagonal(dim1=-2, dim2=-1)
        .abs()
        .mean(-1, keepdim=True)
        .clamp_min(torch.finfo(A.dtype).tiny)
    )
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    failed = info > 0
    for k in range(max_tries):
        eps = base * 10.0**k
        jitter = (eps * diag_mean * failed.unsqueeze(-1).to(A.dtype)).unsqueeze(-1)
        L_try, info_try = torch.linalg.cholesky_ex(A + jitter * eye)
        if not bool((info_try > 0).any()):
            _report_jitter(
                f"stable_cholesky: {name} was not numerically positive definite; added jitter "
                f"{eps:.1e} * mean(diag) = {float((eps * diag_mean).max().detach()):.3e} to "
                f"{int(failed.sum())} of {failed.numel()} matrices",
                A.dtype,
                stacklevel + 1,
            )
            return L_try, jitter[..., 0, 0]
    lam = torch.linalg.eigvalsh(A.detach())[..., 0]
    if eigen_tolerance is not None:
        scale = A.detach().diagonal(dim1=-2, dim2=-1).abs().amax(-1)
        if eigen_scale is not None:
            scale = torch.maximum(scale, eigen_scale.detach().to(scale).expand_as(scale))
        deficit = (-lam).clamp_min(0)
        if not bool((failed & (deficit > eigen_tolerance * scale)).any()):
            shift = torch.where(failed, 2 * deficit + 1e-12 * scale, torch.zeros_like(scale))
            shift = torch.where(failed, shift.clamp_min(torch.finfo(A.dtype).tiny), shift)
            L_try, info_try = torch.linalg.cholesky_ex(A + shift[..., None, None] * eye)
            if not bool((info_try > 0).any()):
                _report_jitter(
                    f"stable_cholesky: {name} was not positive definite even with jitter "
                    f"{base * 10.0 ** (max_tries - 1):.1e} * mean(diag) (smallest eigenvalue "
                    f"{float(lam[failed].min()):.3e}, largest variance "
                    f"{float(scale[failed].max()):.3e}); shifted by {float(shift.max()):.3e}",
                    A.dtype,
                    stacklevel + 1,
                )
                return L_try, shift
    min_eig = float(lam[failed].min())
    raise NotPSDError(
        f"stable_cholesky: {name} of size {A.shape[-1]} is not positive definite: smallest "
        f"eigenvalue {min_eig:.3e}; Cholesky failed even with jitter "
        f"{base * 10.0 ** (max_tries - 1):.1e} * mean(diag)"
    )


def _report_jitter(message: str, dtype: torch.dtype, stacklevel: int) -> None:
    """A :class:`NumericalWarning` of ``message``; in low precision only the first of the
    process warns (saying to use float64), the later ones are logged at debug level."""
    global _LOW_PRECISION_WARNED
    if dtype == torch.float64:
        warnings.warn(message, NumericalWarning, stacklevel=stacklevel)
        return
    if _LOW_PRECISION_WARNED:
        _log.debug(message)
        return
    _LOW_PRECISION_WARNED = True
    warnings.warn(
        f"{message}. In {str(dtype).removeprefix('torch.')} the kernel matrices of these models "
        "are often too ill-conditioned to factorise: use float64 data and models "
        "(torch.set_default_dtype(torch.float64)); further jitter in "
        f"{str(dtype).removeprefix('torch.')} is logged at debug level only",
        NumericalWarning,
        stacklevel=stacklevel,
    )
