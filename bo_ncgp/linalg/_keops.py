"""Translation of GPyTorch kernels into KeOps LazyTensor formulas.

Supported (the kernels KeOps evaluates symbolically): ``RBFKernel``, ``MaternKernel`` with
``nu`` in {1/2, 3/2, 5/2} (also GPyTorch's own ``gpytorch.kernels.keops`` variants), ARD or
shared lengthscales, ``ScaleKernel`` around a supported kernel, and ``AdditiveKernel`` of
supported kernels; ``active_dims`` are honoured. Batched kernels (``batch_shape``) work.

Formulas: each input point is multiplied once, in torch, by ``c / lengthscale`` (``c`` =
``sqrt(1/2)`` for RBF, ``sqrt(2 nu)`` for Matern-1/2 and 3/2, ``1`` for Matern-5/2), so that
with ``s = |z - z'|`` the per-pair KeOps formulas are ``exp(-s^2)``, ``exp(-s)`` and
``(1 + s) exp(-s)``: neither the lengthscale nor ``sqrt(2 nu)`` is applied per pair (the
per-pair constant left is the square root's offset). Matern-5/2 is
``(sqrt(5) r + (1 + 5 r^2 / 3)) exp(-sqrt(5) r)`` of ``r = |x - x'| / lengthscale`` with
``r^2`` summed from the squared differences, the form of GPyTorch's KeOps Matern: KeOps
compiles it to faster code than the same kernel without the per-pair constants
(``(s + (1 + s^2 / 3)) exp(-s)`` of ``s = sqrt(5) r``, 1.2x slower at N = 10,000).

Gradients: inputs are rescaled in torch before entering KeOps, and the
output scale multiplies the KeOps result in torch, so autograd reaches every hyperparameter
and the inputs through pykeops' own backward formulas.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import warnings

import gpytorch
import torch
from torch import Tensor

from bo_ncgp._extras import require
from bo_ncgp.exceptions import MissingExtraError

__all__ = ["keops_available", "keops_matmul", "keops_supports"]

_BROKEN = False


def _kernel_classes() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """The RBF and Matern kernel classes: GPyTorch's, and its KeOps variants (which share the
    hyperparameters but not the class hierarchy) when ``gpytorch.kernels.keops`` has been
    imported -- a kernel of that module exists only then, and importing it here would import
    pykeops on every use of the library."""
    rbf: tuple[type, ...] = (gpytorch.kernels.RBFKernel,)
    matern: tuple[type, ...] = (gpytorch.kernels.MaternKernel,)
    gk = sys.modules.get("gpytorch.kernels.keops")
    if gk is not None:
        rbf, matern = (*rbf, gk.RBFKernel), (*matern, gk.MaternKernel)
    return rbf, matern


@functools.lru_cache(maxsize=1)
def _import_keops():
    """pykeops' ``LazyTensor``, imported on the first use of the KeOps backend. pykeops prints
    its CUDA status when it is imported (a banner on every CPU-only machine) unless its
    verbosity variables ``PYKEOPS_VERBOSE`` and ``KEOPS_VERBOSE`` are ``0``: that is their
    default here (set ``PYKEOPS_VERBOSE=1`` to see pykeops' messages); compilation errors
    still raise."""
    os.environ.setdefault("PYKEOPS_VERBOSE", "0")
    os.environ.setdefault("KEOPS_VERBOSE", os.environ["PYKEOPS_VERBOSE"])
    pykeops = require("keops", "pykeops", needed_by="the KeOps kernel backend")
    pykeops.set_verbose(os.environ["PYKEOPS_VERBOSE"] != "0")
    from pykeops.torch import LazyTensor

    return LazyTensor


def missing_extra() -> str | None:
    """The message naming the ``keops`` extra when pykeops is not installed, else ``None``."""
    try:
        _import_keops()
    except MissingExtraError as err:
        return str(err)
    except Exception:  # installed but broken: keops_available() says so
        return None
    return None


def keops_available() -> bool:
    """True when pykeops imports and no earlier KeOps call in this process has failed."""
    if _BROKEN:
        return False
    try:
        _import_keops()
    except Exception:
        return False
    return True


def mark_keops_broken(err: BaseException) -> None:
    """Disable KeOps for the rest of the process after a failure, with a single warning."""
    global _BROKEN
    if not _BROKEN:
        warnings.warn(
            f"KeOps failed ({type(err).__name__}: {err}); falling back to the chunked torch "
            "backend for the rest of this process",
            RuntimeWarning,
            stacklevel=3,
        )
    _BROKEN = True


def keops_supports(kernel: gpytorch.kernels.Kernel) -> bool:
    """Whether :func:`keops_matmul` can evaluate ``kernel`` symbolically."""
    if isinstance(kernel, gpytorch.kernels.ScaleKernel):
        return keops_supports(kernel.base_kernel)
    if isinstance(kernel, gpytorch.kernels.AdditiveKernel):
        return all(keops_supports(k) for k in kernel.kernels)
    rbf, matern = _kernel_classes()
    if isinstance(kernel, matern):
        return float(kernel.nu) in (0.5, 1.5, 2.5)
    return isinstance(kernel, rbf)


def _select(kernel: gpytorch.kernels.Kernel, X: Tensor) -> Tensor:
    ad = getattr(kernel, "active_dims", None)
    if ad is None:
        return X
    return X.index_select(-1, ad.to(X.device))


def _formula(kernel: gpytorch.kernels.Kernel, X1: Tensor, X2: Tensor, LazyTensor):
    """Returns ``(lazy_K, scale)`` pairs: the kernel is ``sum(scale * lazy_K)``."""
    X1 = _select(kernel, X1)
    X2 = _select(kernel, X2)
    if isinstance(kernel, gpytorch.kernels.ScaleKernel):
        terms = _formula(kernel.base_kernel, X1, X2, LazyTensor)
        s = kernel.outputscale
        return [(K, s if sc is None else s * sc) for K, sc in terms]
    if isinstance(kernel, gpytorch.kernels.AdditiveKernel):
        return [t for k in kernel.kernels for t in _formula(k, X1, X2, LazyTensor)]
    # One per-point rescaling in torch folds the lengthscale and the kernel's constant into
    # the inputs: z = x * c / ell, so the per-pair formula scales neither the distance nor
    # the exponent (its only constants: the offset below and Matern-5/2's 1/3).
    rbf, _ = _kernel_classes()
    nu = None if isinstance(kernel, rbf) else float(kernel.nu)
    if nu is None:
        c = math.sqrt(0.5)  # exp(-|x - x'|^2 / (2 ell^2)) = exp(-|z - z'|^2)
    elif nu == 2.5:
        c = 1.0  # r = |x - x'| / ell; the constants are applied per pair (module docstring)
    else:
        c = math.sqrt(2.0 * nu)  # s = sqrt(2 nu) |x - x'| / ell = |z - z'|
    w = c / kernel.lengthscale  # (*batch, 1, d or 1)
    Z1 = X1 * w
    Z2 = Z1 if X2 is X1 else X2 * w
    z1, z2 = LazyTensor(Z1.unsqueeze(-2)), LazyTensor(Z2.unsqueeze(-3))
    # tiny offset keeps the gradient of sqrt finite at s = 0 (where its true limit is 0)
    tiny = torch.finfo(X1.dtype).tiny * 1e4
    if nu == 2.5:
        r2 = ((z1 - z2) ** 2).sum(-1)
        r = (r2 + tiny).sqrt()
        a = math.sqrt(5.0)
        return [(((a * r) + (1 + (5.0 / 3.0) * r2)) * (-a * r).exp(), None)]
    d2 = z1.sqdist(z2)  # s^2
    if nu is None:
        return [((-d2).exp(), None)]
    s = (d2 + tiny).sqrt()
    if nu == 0.5:
        K = (-s).exp()  # exp(-s)
    else:
        K = (1 + s) * (-s).exp()  # (1 + s) exp(-s)
    return [(K, None)]


def keops_matmul(kernel: gpytorch.kernels.Kernel, X1: Tensor, X2: Tensor, V: Tensor) -> Tensor:
    """``K(X1, X2) @ V`` evaluated by KeOps, never forming ``K``.

    Args:
        kernel: a kernel for which :func:`keops_supports` is true.
        X1: ``(..., n1, d)``; X2: ``(..., n2, d)``; V: ``(..., n2, k)``.
    """
    LazyTensor = _import_keops()
    out = None
    for K, scale in _formula(kernel, X1, X2, LazyTensor):
        term = K @ V.contiguous()
        if scale is not None:
            term = scale.reshape(*scale.shape, 1, 1) * term
        out = term if out is None else out + term
    return out
