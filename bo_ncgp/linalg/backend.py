"""The rule that resolves ``backend="auto"`` of kernel products, by memory and measured speed.

A product ``K(X1, X2) @ V`` with ``K`` of shape ``(*batch, n1, n2)`` can

* form and cache ``K`` (``"dense"``): the first product costs one evaluation of the kernel,
  every further product one BLAS call. An iterative solver multiplies by the same ``K`` many
  times, so whenever ``K`` fits in memory this is the fastest backend: IterNCGP fits at
  N = 10,000 on one CPU thread (``benchmarks/iterncgp_backend.py``: 10-15 products, binary
  and 10-class softmax) take 3.2-5.5x longer with KeOps and 5.6-12.7x longer with the
  chunked backend than with the cached dense ``K``;
* evaluate ``K`` symbolically with KeOps (``"keops"``): no ``O(n1 n2)`` memory, faster than
  re-forming row blocks of ``K`` in torch for a few columns, but one reduction per column, so
  with more than :data:`KEOPS_MAX_COLUMNS` columns blocked BLAS is faster;
* form row blocks of ``K`` in torch (``"chunked"``): bounded memory, any kernel.

:func:`choose_backend` is the one place where ``"auto"`` is decided:

1. ``"dense"`` when :data:`DENSE_OVERHEAD` times the bytes of ``K`` (the cached matrix plus
   the temporaries of the kernel's evaluation: squared distances, exponentials) fit in
   :data:`DENSE_MEMORY_FRACTION` of the memory available on ``K``'s device
   (:func:`available_memory_bytes`), or in an explicit ``dense_limit_bytes``;
2. otherwise ``"keops"`` when pykeops works on ``K``'s device (on a GPU: the child-process
   probe of :func:`~bo_ncgp.linalg._keops.keops_available`), supports the kernel and the
   product has at most :data:`KEOPS_MAX_COLUMNS` columns (or an unknown number);
3. otherwise ``"chunked"``.

The choice is logged at debug level (logger ``bo_ncgp.linalg.backend``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Sequence

import gpytorch
import torch

from bo_ncgp.linalg import _keops

__all__ = [
    "DENSE_MEMORY_FRACTION",
    "DENSE_OVERHEAD",
    "KEOPS_MAX_COLUMNS",
    "available_memory_bytes",
    "choose_backend",
]

logger = logging.getLogger(__name__)


@functools.cache
def _log_once(message: str) -> None:
    """``message`` as a warning of this module's logger, once per process."""
    logger.warning(message)


#: fraction of the available memory that a dense kernel matrix (with temporaries) may take
DENSE_MEMORY_FRACTION = 0.5
#: peak memory of forming ``K`` in units of its bytes: the cached ``K`` plus the temporaries of
#: the evaluation (2x measured for a Matern-3/2 ``K`` without autograd; 3 leaves room for it)
DENSE_OVERHEAD = 3
#: KeOps does one reduction per column; above this many columns chunked BLAS products win
KEOPS_MAX_COLUMNS = 64


def _cgroup_available() -> int | None:
    """Memory left under a cgroup-v2 limit (containers), ``None`` without a limit."""
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as fh:
            used = int(fh.read().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def _host_available() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def available_memory_bytes(device: torch.device | str = "cpu") -> int:
    """Bytes that a new tensor on ``device`` can take now.

    CUDA: the driver's free memory (``torch.cuda.mem_get_info``) plus what PyTorch's caching
    allocator holds unused. CPU: ``psutil.virtual_memory().available`` when psutil is
    installed, else ``MemAvailable`` of ``/proc/meminfo``, else ``os.sysconf``; the smaller of
    that and the room left under a cgroup-v2 memory limit. 0 when nothing can be read (the
    dense backend is then never chosen by memory).

    Example:
        >>> available_memory_bytes("cpu") > 0
        True
    """
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + max(0, cached))
    host = _host_available()
    limit = _cgroup_available()
    return host if limit is None else min(host, limit)


def choose_backend(
    requested: str,
    kernel: gpytorch.kernels.Kernel,
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device | str,
    *,
    columns: int | None = None,
    dense_limit_bytes: int | None = None,
    allow_keops: bool = True,
) -> str:
    """The backend of a product with the kernel matrix ``K`` of ``shape`` (``"auto"`` resolved).

    Args:
        requested: ``"auto" | "dense" | "chunked" | "keops"``. ``"dense"`` and ``"chunked"``
            are returned as they are; ``"keops"`` becomes ``"chunked"`` when pykeops does not
            work on ``device`` or does not support ``kernel`` (or ``allow_keops`` is False).
        kernel: the GPyTorch kernel of ``K``.
        shape: ``(*batch, n1, n2)`` of ``K`` (the batch includes every kernel/latent batch that
            a dense ``K`` would hold).
        dtype, device: of ``K``.
        columns: number of columns of the products, when known (KeOps is skipped above
            :data:`KEOPS_MAX_COLUMNS`).
        dense_limit_bytes: the memory the dense ``K`` with its temporaries may take; ``None``:
            :data:`DENSE_MEMORY_FRACTION` of :func:`available_memory_bytes` of ``device``.
        allow_keops: False for callers that need a torch backend (broadcast batches).

    Returns:
        ``"dense"``, ``"chunked"`` or ``"keops"`` (rule in the module docstring).

    Example:
        >>> k = gpytorch.kernels.RBFKernel()
        >>> choose_backend("auto", k, (1000, 1000), torch.float64, "cpu",
        ...                dense_limit_bytes=2**30)
        'dense'
        >>> choose_backend("auto", k, (10**6, 10**6), torch.float64, "cpu",
        ...                columns=100)  # 8 TB do not fit; KeOps is slower with 100 columns
        'chunked'
    """

    def keops_ok() -> bool:  # asked only when KeOps is a candidate: pykeops imports slowly
        return allow_keops and _keops.keops_supports(kernel) and _keops.keops_available(device)

    if requested == "keops":
        if keops_ok():
            return "keops"
        if (missing := _keops.missing_extra()) is not None:
            _log_once(f"backend='keops': {missing}; the chunked backend is used instead")
        return "chunked"
    if requested != "auto":
        return requested
    needed = DENSE_OVERHEAD * math.prod(shape) * dtype.itemsize
    if dense_limit_bytes is None:
        available = available_memory_bytes(device)
        limit = int(DENSE_MEMORY_FRACTION * available)
        source = f"{DENSE_MEMORY_FRACTION} x {available} bytes available on {device}"
    else:
        limit, source = int(dense_limit_bytes), "dense_limit_bytes"
    keops = None  # not asked: dense fits, or too many columns for KeOps
    if needed <= limit:
        choice = "dense"
    elif (columns is None or columns <= KEOPS_MAX_COLUMNS) and (keops := keops_ok()):
        choice = "keops"
    else:
        choice = "chunked"
    logger.debug(
        "backend 'auto' -> %r for K of shape %s (%s, %s columns): dense needs %d bytes, "
        "limit %d (%s), KeOps usable: %s",
        choice, tuple(shape), dtype, columns, needed, limit, source,
        "not checked" if keops is None else keops,
    )  # fmt: skip
    return choice
