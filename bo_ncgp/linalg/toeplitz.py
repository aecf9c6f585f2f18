"""Hierarchical Toeplitz kernel matrices on regular grids and their circulant embedding.

Wu et al. (2022), "Hierarchical Inducing Point Gaussian Process for Inter-domain
Observations", Sec. 3.2:

* a stationary kernel on an evenly spaced ``M_1 x ... x M_D`` grid in C order gives a
  hierarchical (multi-level) Toeplitz ``K_uu``, fixed by its first row;
* ``K_uu`` is the top-left block of a (multi-level) circulant ``C`` of size
  ``N = prod(2 M_d)`` (Eq. 16), diagonalised by the FFT, ``C = F^* diag(F c) F`` (Eq. 17), so
  ``K_uu v`` costs ``O(N log N)``;
* ``C^{1/2} = F^* diag(F c)^{1/2} F`` (Eq. 18); its top block row ``R`` (Eqs. 19-20) is a
  rectangular root, ``R R^T = K_uu``;
* the top-left block of ``C^{-1} = F^* diag(F c)^{-1} F`` (Eqs. 21-22) preconditions CG
  solves with ``K_uu``.

Vectors live on the last axis: ``(..., M)`` on the inducing grid (C order), ``(..., N)`` on
the doubled "whitened" grid. Negative eigenvalues of the embedding (it is not always PSD)
are clamped to zero with a :class:`~bo_ncgp.exceptions.NumericalWarning` that says how much
spectral mass was removed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, NumericalWarning
from bo_ncgp.linalg._args import check_count, check_number, check_positive
from bo_ncgp.linalg.cg import CGResult
from bo_ncgp.linalg.cg_solve import cg_solve

__all__ = ["CirculantEmbedding", "Grid", "circulant_first_row", "toeplitz_first_row"]


class Grid:
    """Evenly spaced grid over a box, ``M = prod(shape)`` points in C (x-major) order.

    Args:
        lower: ``(D,)`` lower corner.
        upper: ``(D,)`` upper corner (the last grid point of each axis).
        shape: ``(M_1, ..., M_D)`` points per axis, each at least 2.

    Example:
        >>> g = Grid([0.0, 0.0], [1.0, 2.0], (3, 5))
        >>> g.num_points, g.spacing.tolist()
        (15, [0.5, 0.5])
    """

    def __init__(
        self,
        lower: Sequence[float] | Tensor,
        upper: Sequence[float] | Tensor,
        shape: Sequence[int],
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        dtype = dtype or torch.get_default_dtype()
        self.lower = torch.as_tensor(lower, dtype=dtype, device=device).reshape(-1)
        self.upper = torch.as_tensor(upper, dtype=dtype, device=device).reshape(-1)
        self.shape = tuple(check_count(s, "shape", "Grid") for s in shape)
        D = len(self.shape)
        if D == 0 or self.lower.numel() != D or self.upper.numel() != D:
            raise InputDataError(
                f"Grid: lower, upper and shape must have the same length D >= 1, got "
                f"{self.lower.numel()}, {self.upper.numel()} and {len(self.shape)}"
            )
        if min(self.shape) < 2:
            raise InputDataError(
                f"Grid: every axis needs at least 2 points, got shape {self.shape}"
            )
        if not (torch.isfinite(self.lower).all() and torch.isfinite(self.upper).all()):
            raise InputDataError("Grid: bounds contain NaN or inf")
        if not bool((self.upper > self.lower).all()):
            raise InputDataError(
                f"Grid: upper {self.upper.tolist()} must exceed lower {self.lower.tolist()}"
            )

    @property
    def dim(self) -> int:
        return len(self.shape)

    @property
    def num_points(self) -> int:
        return math.prod(self.shape)

    @property
    def spacing(self) -> Tensor:
        """``(D,)`` distance between neighbouring points per axis."""
        sizes = torch.tensor(self.shape, dtype=self.lower.dtype, device=self.lower.device)
        return (self.upper - self.lower) / (sizes - 1)

    @property
    def embedding_shape(self) -> tuple[int, ...]:
        """Shape ``(2 M_1, ..., 2 M_D)`` of the circulant embedding (the whitened grid)."""
        return self.padded_shape(2)

    def padded_shape(self, factor: int | Sequence[int] = 2) -> tuple[int, ...]:
        """Shape ``(f_1 M_1, ..., f_D M_D)`` of a circulant embedding (``factor`` an int or one
        integer ``f_d >= 2`` per axis)."""
        fs = [factor] * self.dim if isinstance(factor, int | float) else list(factor)
        if len(fs) != self.dim or any(int(f) != f or f < 2 for f in fs):
            raise InputDataError(
                f"Grid: embedding_factor must be an integer >= 2 (or one per axis), got {factor}"
            )
        return tuple(int(f) * s for f, s in zip(fs, self.shape, strict=True))

    def axes(self) -> list[Tensor]:
        return [
            torch.linspace(
                float(lo), float(hi), s, dtype=self.lower.dtype, device=self.lower.device
            )
            for lo, hi, s in zip(self.lower, self.upper, self.shape, strict=True)
        ]

    def points(self) -> Tensor:
        """``(M, D)`` grid points in C order (materialised: ``O(M D)`` memory)."""
        mesh = torch.meshgrid(*self.axes(), indexing="ij")
        return torch.stack([m.reshape(-1) for m in mesh], dim=-1)

    def to(self, dtype: torch.dtype | None = None, device=None) -> Grid:
        return Grid(
            self.lower.to(dtype=dtype, device=device),
            self.upper.to(dtype=dtype, device=device),
            self.shape,
            dtype=dtype or self.lower.dtype,
            device=device or self.lower.device,
        )

    def __repr__(self) -> str:
        return f"Grid(lower={self.lower.tolist()}, upper={self.upper.tolist()}, shape={self.shape})"


def _lags(grid: Grid, periodic: bool, factor: int | Sequence[int] = 2) -> Tensor:
    """Lag vectors of the first row, ``(*shape', D)``; signed circulant lags if periodic."""
    axes = []
    for L, s, h in zip(grid.padded_shape(factor), grid.shape, grid.spacing, strict=True):
        if periodic:
            j = torch.arange(L, dtype=h.dtype, device=h.device)
            j = torch.where(j <= L // 2, j, j - L)  # 0, 1, ..., L/2, -(L/2-1), ..., -1
        else:
            j = torch.arange(s, dtype=h.dtype, device=h.device)
        axes.append(j * h)
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(mesh, dim=-1)


def _kernel_at_lags(kernel: gpytorch.kernels.Kernel, lags: Tensor) -> Tensor:
    shape = lags.shape[:-1]
    flat = lags.reshape(-1, lags.shape[-1])
    origin = torch.zeros(1, lags.shape[-1], dtype=lags.dtype, device=lags.device)
    k = kernel(origin, flat).to_dense()  # (..., 1, n): k(0 - tau) = k(tau), stationary
    return k[..., 0, :].reshape(*k.shape[:-2], *shape)


def toeplitz_first_row(kernel: gpytorch.kernels.Kernel, grid: Grid) -> Tensor:
    """First row of the hierarchical Toeplitz ``K_uu`` as an array of the grid's shape
    (``k(x_0, x_j)`` for every grid point ``x_j``), differentiable in the kernel's
    hyperparameters.

    Example:
        >>> k = gpytorch.kernels.RBFKernel()
        >>> toeplitz_first_row(k, Grid([0.0], [1.0], (3,))).shape
        torch.Size([3])
    """
    return _kernel_at_lags(kernel, _lags(grid, periodic=False))


def circulant_first_row(kernel: gpytorch.kernels.Kernel, grid: Grid, factor: int = 2) -> Tensor:
    """First row ``c`` of the circulant embedding ``C`` of ``K_uu`` (Eq. 16), shape
    ``(2 M_1, ..., 2 M_D)``: the kernel at the signed lags ``(0, h, ..., M h, -(M-1) h, ...,
    -h)`` along every axis, so that ``C``'s top-left block is ``K_uu``.

    ``factor > 2`` (an int or one per axis) embeds into ``factor M_d`` points per axis
    (lags up to ``factor M_d h / 2``): the classical remedy when the minimal embedding has
    negative eigenvalues (lengthscales that are long compared with the grid). ``R`` then has
    ``prod(factor M_d)`` columns.

    Example:
        >>> k = gpytorch.kernels.MaternKernel(nu=2.5)
        >>> circulant_first_row(k, Grid([0.0, 0.0], [1.0, 1.0], (4, 3))).shape
        torch.Size([8, 6])
    """
    return _kernel_at_lags(kernel, _lags(grid, periodic=True, factor=factor))


class CirculantEmbedding:
    """Fast products with ``K_uu``, its rectangular root ``R`` and the circulant
    preconditioner, from the first row ``c`` of the circulant embedding.

    Args:
        c: ``(L_1, ..., L_D)`` first row of ``C`` (see :func:`circulant_first_row`).
        grid_shape: ``(M_1, ..., M_D)`` with ``M_d <= L_d / 2`` (default ``L_d / 2``).
        jitter: added to ``c[0]``, i.e. to every eigenvalue of ``C`` and to the diagonal of
            ``K_uu`` (so ``R R^T = K_uu + jitter I`` holds exactly).
        precond_floor: relative floor on the eigenvalues inverted by the preconditioner
            (``|lambda| >= precond_floor * max |lambda|``; the preconditioner inverts
            ``|lambda|``, which is ``lambda`` for a PSD embedding).
        warn: warn when negative eigenvalues are clamped.

    Attributes:
        chunk_elements: products and solves with many vectors run in batches of about this
            many embedding entries (``2**18`` by default, i.e. 2 MB in float64: cache-sized
            batches make CPU FFTs several times faster than one huge batch).
        eigenvalues: real eigenvalues of ``C`` on the rFFT half-spectrum (used for exact
            ``K_uu`` products); ``sqrt_eigenvalues`` are their square roots after clamping
            at 0 (``R``).
        clamped_fraction: ``sum |negative eigenvalues| / sum |eigenvalues|`` removed by the
            clamp (0 when the embedding is PSD).

    Example:
        >>> k = gpytorch.kernels.MaternKernel(nu=1.5)
        >>> k.lengthscale = 0.1
        >>> grid = Grid([0.0], [1.0], (50,))
        >>> emb = CirculantEmbedding(circulant_first_row(k, grid))
        >>> K = k(grid.points()).to_dense()
        >>> R = emb.root_dense()
        >>> torch.allclose(R @ R.T, K, atol=1e-5)
        True
    """

    def __init__(
        self,
        c: Tensor,
        grid_shape: Sequence[int] | None = None,
        jitter: float = 0.0,
        precond_floor: float = 1e-10,
        warn: bool = True,
    ) -> None:
        jitter = check_positive(jitter, "jitter", "CirculantEmbedding", allow_zero=True)
        precond_floor = check_number(
            precond_floor, "precond_floor", "CirculantEmbedding", low=0, high=1
        )
        if c.dim() < 1 or min(c.shape) < 2:
            raise InputDataError(
                f"CirculantEmbedding: c must have at least 2 entries per axis, got {tuple(c.shape)}"
            )
        if not torch.isfinite(c).all():
            raise InputDataError("CirculantEmbedding: the first row contains NaN or inf")
        self.embedding_shape = tuple(c.shape)
        if grid_shape is None:
            grid_shape = tuple(s // 2 for s in c.shape)
        self.grid_shape = tuple(int(g) for g in grid_shape)
        if len(self.grid_shape) != c.dim() or any(
            g < 1 or 2 * g > s for g, s in zip(self.grid_shape, c.shape, strict=True)
        ):
            raise InputDataError(
                f"CirculantEmbedding: grid shape {self.grid_shape} must have at most half the "
                f"embedding's size {tuple(c.shape)} along every axis"
            )
        self.D = c.dim()
        self.chunk_elements: int = 2**18
        self._fft_dims = tuple(range(-self.D, 0))
        if jitter:
            c = c.clone()
            c.view(-1)[0] = c.view(-1)[0] + jitter
        lam = torch.fft.rfftn(c, dim=self._fft_dims).real  # Eq. 17: D = diag(F c)
        neg = lam < 0
        # round-off negatives (|lambda| ~ eps max lambda) are clamped silently
        tiny = 100 * torch.finfo(lam.dtype).eps * float(lam.detach().abs().max())
        total = self._spectral_sum(lam.detach().abs())
        removed = self._spectral_sum(torch.where(neg, -lam.detach(), torch.zeros_like(lam)))
        self.clamped_fraction = float(removed / total) if float(total) > 0 else 0.0
        self.num_clamped = int(neg.sum())
        if self.num_clamped and warn and float(lam.detach().min()) < -tiny:
            warnings.warn(
                f"CirculantEmbedding: clamped {self.num_clamped} negative eigenvalue(s) of "
                f"the circulant embedding to 0, removing {100 * self.clamped_fraction:.3g}% "
                f"of the spectral mass (min eigenvalue {float(lam.detach().min()):.3g}); R R^T now "
                "approximates K_uu -- use a larger embedding factor, a shorter lengthscale or a "
                "larger grid domain",
                NumericalWarning,
                stacklevel=2,
            )
        # K_uu products use the raw spectrum: the top-left block of C is K_uu exactly, PSD
        # embedding or not. Only the square root (and the preconditioner) need clamping.
        self.eigenvalues = lam
        self.sqrt_eigenvalues = lam.clamp_min(0.0).sqrt()  # Eq. 18
        # Eq. 21 with |lambda|: where the minimal embedding is not PSD, the negative
        # eigenvalues enter with their magnitude (|C| is the SPD matrix nearest to C), not at
        # the floor, whose huge inverses made the preconditioner several times weaker
        floor = precond_floor * lam.detach().abs().max()
        self.inv_eigenvalues = 1.0 / lam.detach().abs().clamp_min(floor)

    # -------------------------------------------------------------- helpers
    def _spectral_sum(self, lam_half: Tensor) -> Tensor:
        # the rFFT half-spectrum counts interior frequencies of the last axis twice
        n_last = self.embedding_shape[-1]
        w = torch.full((lam_half.shape[-1],), 2.0, dtype=lam_half.dtype, device=lam_half.device)
        w[0] = 1.0
        if n_last % 2 == 0:
            w[-1] = 1.0
        return (lam_half * w).sum()

    @property
    def num_points(self) -> int:
        """``M``, the number of inducing points."""
        return math.prod(self.grid_shape)

    @property
    def num_whitened(self) -> int:
        """``N = prod(2 M_d)``, the number of whitened variables (columns of ``R``)."""
        return math.prod(self.embedding_shape)

    def _chunk_rows(self) -> int:
        """Vectors per FFT batch: about ``chunk_elements`` reals of embedding per batch."""
        return max(1, int(self.chunk_elements) // self.num_whitened)

    def _chunked(self, fn, x: Tensor, lead: int) -> Tensor:
        """Apply ``fn`` to ``x`` in batches of vectors along its ``lead`` leading axes.

        Huge batched FFTs (hundreds of vectors of 10^4-10^5 entries) run several times slower
        per element than cache-sized batches on CPU, so products are evaluated in chunks of
        about :attr:`chunk_elements` entries (results are identical).
        """
        shape = x.shape[:lead]
        flat = x.reshape(-1, *x.shape[lead:])
        c = self._chunk_rows()
        if flat.shape[0] <= c:
            out = fn(flat)
        else:
            out = torch.cat([fn(flat[i : i + c]) for i in range(0, flat.shape[0], c)])
        return out.reshape(*shape, *out.shape[1:])

    def _forward_fft(self, x: Tensor, padded: bool) -> Tensor:
        """rFFT over the last ``D`` axes; ``padded``: ``x`` holds only the grid block
        ``(..., M_1, ..., M_D)`` of a zero-padded embedding vector (pruned transform: each
        1-D pass zero-pads its own axis, so the zero rows are never transformed)."""
        if not padded:
            return torch.fft.rfftn(x, dim=self._fft_dims)
        L = self.embedding_shape
        X = torch.fft.rfft(x, n=L[-1], dim=-1)
        for d in range(self.D - 2, -1, -1):
            X = torch.fft.fft(X, n=L[d], dim=d - self.D)
        return X

    def _inverse_fft(self, X: Tensor, crop: bool) -> Tensor:
        """Inverse of :meth:`_forward_fft`; ``crop``: return only the grid block ``(...,
        M_1, ..., M_D)`` (pruned: each 1-D pass is cropped before the next one runs)."""
        if not crop:
            return torch.fft.irfftn(X, s=self.embedding_shape, dim=self._fft_dims)
        for d in range(self.D - 1):
            X = torch.fft.ifft(X, dim=d - self.D).narrow(d - self.D, 0, self.grid_shape[d])
        x = torch.fft.irfft(X, n=self.embedding_shape[-1], dim=-1)
        return x.narrow(-1, 0, self.grid_shape[-1])

    def _product(self, v: Tensor, lam: Tensor, pad: bool, crop: bool) -> Tensor:
        """``crop(C_lam pad(v))`` (Eqs. 16-18): ``v`` is ``(..., M)`` if ``pad`` else
        ``(..., N)``; the result is ``(..., M)`` if ``crop`` else ``(..., N)``."""
        in_shape = self.grid_shape if pad else self.embedding_shape
        out_len = self.num_points if crop else self.num_whitened
        lead = v.dim() - 1

        def fn(u: Tensor) -> Tensor:
            x = u.reshape(u.shape[0], *in_shape)
            y = self._inverse_fft(self._forward_fft(x, padded=pad) * lam, crop=crop)
            return y.reshape(u.shape[0], out_len)

        return self._chunked(fn, v, lead)

    def _to_grid(self, v: Tensor, n: int, what: str) -> Tensor:
        if v.shape[-1] != n:
            raise InputDataError(
                f"CirculantEmbedding.{what}: expected vectors of length {n} on the last axis, "
                f"got shape {tuple(v.shape)}"
            )
        return v

    # ------------------------------------------------------------- products
    def kuu_mv(self, v: Tensor) -> Tensor:
        """``K_uu v`` for ``v`` of shape ``(..., M)`` in ``O(N log N)`` (Eqs. 16-17)."""
        v = self._to_grid(v, self.num_points, "kuu_mv")
        return self._product(v, self.eigenvalues, pad=True, crop=True)

    def root_mv(self, e: Tensor) -> Tensor:
        """``R e`` for ``e`` of shape ``(..., N)``: ``u = R eps`` (Eqs. 11, 19-20)."""
        e = self._to_grid(e, self.num_whitened, "root_mv")
        return self._product(e, self.sqrt_eigenvalues, pad=False, crop=True)

    def root_t_mv(self, v: Tensor) -> Tensor:
        """``R^T v`` for ``v`` of shape ``(..., M)``, result ``(..., N)`` (Eq. 20)."""
        v = self._to_grid(v, self.num_points, "root_t_mv")
        return self._product(v, self.sqrt_eigenvalues, pad=True, crop=False)

    def precond_mv(self, v: Tensor) -> Tensor:
        """Top-left ``M x M`` block of ``|C|^{-1}`` times ``v`` (Eqs. 21-22; ``|C| = C`` for a
        PSD embedding); not differentiable (the preconditioner only changes the speed of CG,
        never its answer)."""
        v = self._to_grid(v, self.num_points, "precond_mv")
        return self._product(v, self.inv_eigenvalues, pad=True, crop=True)

    # --------------------------------------------------------------- solves
    def solve(
        self,
        B: Tensor,
        precondition: bool = True,
        tol: float = 1e-6,
        max_iters: int | None = None,
        record_history: bool = False,
        x0: Tensor | None = None,
    ) -> tuple[Tensor, CGResult]:
        """``K_uu^{-1} B`` for ``B`` of shape ``(..., M)`` by (P)CG (the shared
        :func:`bo_ncgp.linalg.cg`), differentiable through an adjoint solve
        (:func:`bo_ncgp.linalg.cg_solve`) in ``B`` and the kernel hyperparameters.

        ``x0`` (shape of ``B``) warm-starts the forward solve, e.g. with the solutions of
        the same right-hand sides under slightly different hyperparameters; it changes the
        number of iterations, not the tolerance the answer meets.

        Returns:
            ``(solution (..., M), CGResult of the forward solve)``.
        """
        B = self._to_grid(B, self.num_points, "solve")
        lam = self.eigenvalues

        def matmul(V: Tensor, lam_: Tensor) -> Tensor:  # V (..., M, 1)
            return self._product(V.squeeze(-1), lam_, pad=True, crop=True).unsqueeze(-1)

        def precond(V: Tensor) -> Tensor:
            return self.precond_mv(V.squeeze(-1)).unsqueeze(-1)

        if x0 is not None and x0.shape != B.shape:
            raise InputDataError(
                f"CirculantEmbedding.solve: x0 must have the shape of B, {tuple(B.shape)}, "
                f"got {tuple(x0.shape)}"
            )

        def one(Bc: Tensor, x0c: Tensor | None) -> tuple[Tensor, CGResult]:
            X, res = cg_solve(
                matmul,
                Bc.unsqueeze(-1),
                operands=(lam,),
                precond=precond if precondition else None,
                tol=tol,
                max_iters=max_iters,
                record_history=record_history,
                x0=None if x0c is None else x0c.unsqueeze(-1),
            )
            return X.squeeze(-1), res

        # The right-hand sides are independent (CG runs them in lock-step, freezing each
        # on convergence), so solving cache-sized chunks gives the same columns, faster.
        lead = B.shape[:-1]
        flat = B.reshape(-1, self.num_points)
        c = self._chunk_rows()
        if record_history or flat.shape[0] <= c:
            return one(B, x0)
        x0f = None if x0 is None else x0.reshape(-1, self.num_points)
        parts = [
            one(flat[i : i + c], None if x0f is None else x0f[i : i + c])
            for i in range(0, flat.shape[0], c)
        ]
        res = CGResult(
            solution=torch.cat([r.solution for _, r in parts]).reshape(*lead, self.num_points, 1),
            iterations=max(r.iterations for _, r in parts),
            column_iterations=torch.cat([r.column_iterations for _, r in parts]).reshape(*lead, 1),
            residual_norms=torch.cat([r.residual_norms for _, r in parts]).reshape(*lead, 1),
            converged=torch.cat([r.converged for _, r in parts]).reshape(*lead, 1),
        )
        return torch.cat([X for X, _ in parts]).reshape(*lead, self.num_points), res

    def whiten(
        self, k_un: Tensor, tol: float = 1e-6, max_iters: int | None = None
    ) -> tuple[Tensor, CGResult]:
        """``k_n = R^T K_uu^{-1} k_un`` (Eq. 20) for ``k_un`` of shape ``(..., M)``: one PCG
        solve per leading index, then a product with ``R^T``; returns ``(..., N)``."""
        sol, res = self.solve(k_un, precondition=True, tol=tol, max_iters=max_iters)
        return self.root_t_mv(sol), res

    # ---------------------------------------------------------------- dense
    def kuu_dense(self) -> Tensor:
        """``K_uu`` as an ``M x M`` matrix (small grids; for tests)."""
        ev = self.eigenvalues
        return self.kuu_mv(torch.eye(self.num_points, dtype=ev.dtype, device=ev.device))

    def root_dense(self) -> Tensor:
        """``R`` as an ``M x N`` matrix (small grids; for tests)."""
        ev = self.eigenvalues
        return self.root_t_mv(torch.eye(self.num_points, dtype=ev.dtype, device=ev.device))
