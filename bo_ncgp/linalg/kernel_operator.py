"""Matrix-free products with kernel matrices.

:class:`KernelOperator` is how every model in bo_ncgp touches a large kernel matrix: it
computes ``K(X1, X2) @ V`` with one of three backends

* ``"dense"``   forms ``K`` with GPyTorch and multiplies (fastest for small n);
* ``"chunked"`` forms row blocks of ``K`` so that peak memory stays below
  ``max_memory_bytes``; under autograd each block is recomputed in the backward pass
  (activation checkpointing), so gradients also stay within the budget;
* ``"keops"``   evaluates the kernel symbolically with pykeops LazyTensors (RBF, Matern
  1/2, 3/2, 5/2, scaled and summed kernels; see :mod:`bo_ncgp.linalg._keops`);

and ``"auto"`` (the default) chooses by memory and measured speed with
:func:`bo_ncgp.linalg.backend.choose_backend`: ``dense`` (cached ``K``) when ``K`` with its
temporaries fits in a fraction of the available memory, otherwise ``keops`` when pykeops works
and the kernel is supported, otherwise ``chunked``.
A broken KeOps install (import or compile error) falls back to ``chunked`` with one warning.

All backends keep gradients with respect to the kernel hyperparameters, the inputs and ``V``.
"""

from __future__ import annotations

from typing import Literal

import gpytorch
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.linalg import _keops
from bo_ncgp.linalg._args import cast_with_warning, check_count, check_real_tensor
from bo_ncgp.linalg.backend import choose_backend

__all__ = ["Backend", "KernelOperator"]

Backend = Literal["auto", "dense", "chunked", "keops"]


class KernelOperator:
    """Lazy kernel matrix ``K(X1, X2)`` supporting ``K @ V`` without forming ``K``.

    Args:
        kernel: a GPyTorch kernel (may have a ``batch_shape``).
        X1: ``(..., n1, d)`` inputs of the rows.
        X2: ``(..., n2, d)`` inputs of the columns (``X1`` when omitted: a square, symmetric
            operator that also offers :meth:`diagonal` and :meth:`rows`).
        backend: ``"auto" | "dense" | "chunked" | "keops"``.
        max_memory_bytes: memory budget of one kernel block of the chunked backend.
        dense_threshold_bytes: ``auto`` forms ``K`` densely when it needs (with the
            temporaries of its evaluation) at most this; ``None``: a fraction of the memory
            available on the device (:func:`~bo_ncgp.linalg.backend.choose_backend`).

    Example:
        >>> k = gpytorch.kernels.RBFKernel()
        >>> X = torch.rand(100, 2)
        >>> op = KernelOperator(k, X, backend="chunked", max_memory_bytes=8_000)
        >>> torch.allclose(op @ torch.ones(100, 1), k(X).to_dense() @ torch.ones(100, 1),
        ...                atol=1e-5)
        True
    """

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        X1: Tensor,
        X2: Tensor | None = None,
        backend: Backend = "auto",
        max_memory_bytes: int = 256 * 2**20,
        dense_threshold_bytes: int | None = None,
    ) -> None:
        if backend not in ("auto", "dense", "chunked", "keops"):
            raise InputDataError(
                f"KernelOperator: unknown backend {backend!r}; use 'auto', 'dense', "
                "'chunked' or 'keops'"
            )
        check_real_tensor(X1, "X1", "KernelOperator", floating=True)
        if X2 is not None:
            check_real_tensor(X2, "X2", "KernelOperator", floating=True)
        if X1.dim() < 2:
            raise InputDataError(
                f"KernelOperator: X1 must be (..., n, d), got shape {tuple(X1.shape)}"
            )
        if X2 is not None and (X2.dim() < 2 or X2.shape[-1] != X1.shape[-1]):
            raise InputDataError(
                f"KernelOperator: X2 must be (..., n2, {X1.shape[-1]}), got {tuple(X2.shape)}"
            )
        self.kernel = kernel
        self.X1 = X1
        self.X2 = X1 if X2 is None else X2
        self.symmetric = X2 is None
        self.max_memory_bytes = check_count(
            max_memory_bytes, "max_memory_bytes", "KernelOperator", minimum=1
        )
        self.dense_threshold_bytes = (
            None
            if dense_threshold_bytes is None
            else check_count(dense_threshold_bytes, "dense_threshold_bytes", "KernelOperator")
        )
        self.requested_backend = backend
        self._resolved_backend: str | None = None
        self._dense_cache: tuple[tuple, Tensor] | None = None

    # ------------------------------------------------------------------ shape
    @property
    def batch_shape(self) -> torch.Size:
        return torch.broadcast_shapes(
            self.X1.shape[:-2], self.X2.shape[:-2], tuple(self.kernel.batch_shape)
        )

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.batch_shape, self.X1.shape[-2], self.X2.shape[-2]))

    @property
    def dtype(self) -> torch.dtype:
        return self.X1.dtype

    @property
    def device(self) -> torch.device:
        return self.X1.device

    @property
    def backend(self) -> str:
        """The backend :meth:`matmul` uses (``auto`` resolved once, by memory and speed)."""
        if self._resolved_backend is None:
            self._resolved_backend = choose_backend(
                self.requested_backend,
                self.kernel,
                self.shape,
                self.dtype,
                self.device,
                dense_limit_bytes=self.dense_threshold_bytes,
            )
        if self._resolved_backend == "keops" and not _keops.keops_available(self.device):
            return "chunked"
        return self._resolved_backend

    # ---------------------------------------------------------------- products
    def matmul(self, V: Tensor) -> Tensor:
        """``K @ V`` for ``V`` of shape ``(n2,)`` or ``(..., n2, k)``."""
        check_real_tensor(V, "V", "KernelOperator.matmul", finite=False)
        V = cast_with_warning(V, self.dtype, "V", "KernelOperator.matmul")
        vector = V.dim() == 1
        if vector:
            V = V.unsqueeze(-1)
        if V.dim() < 2 or V.shape[-2] != self.X2.shape[-2]:
            raise InputDataError(
                f"KernelOperator.matmul: V has {V.shape[-2]} rows, the operator has "
                f"{self.X2.shape[-2]} columns (shape {tuple(self.shape)})"
            )
        backend = self.backend
        if backend == "keops":
            try:
                out = _keops.keops_matmul(self.kernel, self.X1, self.X2, V)
            except Exception as err:  # broken install / compiler: warn once, fall back
                _keops.mark_keops_broken(err)
                out = self._chunked_matmul(V)
        elif backend == "dense":
            out = self.to_dense() @ V
        else:
            out = self._chunked_matmul(V)
        if not bool(torch.isfinite(out).all()):
            culprit = (
                "V contains NaN or inf"
                if not bool(torch.isfinite(V).all())
                else "the kernel gives NaN or inf (check its hyperparameters)"
            )
            raise InputDataError(f"KernelOperator.matmul: K @ V is not finite: {culprit}")
        return out.squeeze(-1) if vector else out

    __matmul__ = matmul

    def _chunk_rows(self, k: int) -> int:
        per_row = (
            max(1, self.X2.shape[-2]) * max(1, self.batch_shape.numel()) * self.X1.element_size()
        )
        # GPyTorch materialises a few temporaries of the block's size (distances, exp, ...)
        return max(1, self.max_memory_bytes // (4 * per_row))

    def _chunked_matmul(self, V: Tensor) -> Tensor:
        rows = self._chunk_rows(V.shape[-1])
        n1 = self.X1.shape[-2]
        kernel = self.kernel

        def block(x1: Tensor, x2: Tensor, v: Tensor) -> Tensor:
            return kernel(x1, x2).to_dense() @ v

        use_ckpt = torch.is_grad_enabled() and (
            self.X1.requires_grad
            or self.X2.requires_grad
            or V.requires_grad
            or any(p.requires_grad for p in kernel.parameters())
        )
        outs = []
        for s in range(0, n1, rows):
            x1 = self.X1[..., s : s + rows, :]
            if use_ckpt:
                outs.append(checkpoint(block, x1, self.X2, V, use_reentrant=False))
            else:
                outs.append(block(x1, self.X2, V))
        return torch.cat(outs, dim=-2)

    # ------------------------------------------------------------ row access
    def _state_key(self) -> tuple:
        # inputs: identity + in-place version; hyperparameters: their values, because
        # GPyTorch's setters write through ``.data`` without bumping ``_version``
        params = [p.detach().reshape(-1) for p in self.kernel.parameters()]
        values = torch.cat(params).clone() if params else None
        return (
            torch.is_grad_enabled(),
            (id(self.X1), self.X1._version, id(self.X2), self.X2._version),
            values,
        )

    @staticmethod
    def _same_key(a: tuple, b: tuple) -> bool:
        if a[:2] != b[:2]:
            return False
        if a[2] is None or b[2] is None:
            return a[2] is b[2]
        return a[2].shape == b[2].shape and bool(torch.equal(a[2], b[2]))

    def to_dense(self) -> Tensor:
        """The full matrix ``K(X1, X2)`` (O(n1 n2) memory).

        The matrix is cached until the inputs change in place or the kernel's parameter
        values change (optimiser steps, setters), so repeated products with the dense
        backend cost one evaluation of the kernel.
        """
        key = self._state_key()
        if self._dense_cache is not None and self._same_key(self._dense_cache[0], key):
            return self._dense_cache[1]
        K = self.kernel(self.X1, self.X2).to_dense()
        K = K.expand(self.shape) if K.shape != self.shape else K
        self._dense_cache = (key, K)
        return K

    def diagonal(self) -> Tensor:
        """``diag K`` of a square operator, ``(..., n)``, without forming ``K``."""
        if not self.symmetric and self.X1 is not self.X2:
            raise UnsupportedError("KernelOperator.diagonal: only defined for square K(X, X)")
        return self.kernel(self.X1, self.X1, diag=True)

    def rows(self, idx: Tensor) -> Tensor:
        """Rows ``K[..., idx, :]`` of shape ``(..., len(idx), n2)``.

        The kernel is evaluated at once (``gpytorch.settings.lazily_evaluate_kernels(False)``)
        instead of through the lazy kernel tensor of a plain call, whose per-call overhead
        dominates when few rows are asked for (:func:`~bo_ncgp.linalg.pivoted_cholesky`).

        Example:
            >>> X = torch.rand(50, 3)
            >>> k = gpytorch.kernels.MaternKernel(nu=1.5)
            >>> block = KernelOperator(k, X).rows(torch.tensor([4, 9, 30]))
            >>> block.shape, torch.allclose(block, k(X).to_dense()[[4, 9, 30]])
            (torch.Size([3, 50]), True)
        """
        idx = torch.as_tensor(idx, device=self.X1.device, dtype=torch.long)
        with gpytorch.settings.lazily_evaluate_kernels(False):
            return self.kernel(self.X1.index_select(-2, idx), self.X2).to_dense()

    def __repr__(self) -> str:
        return (
            f"KernelOperator(shape={tuple(self.shape)}, kernel={type(self.kernel).__name__}, "
            f"backend={self.backend!r})"
        )
