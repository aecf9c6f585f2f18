"""HIP-GP: inter-domain SVGP on grid inducing points with FFT whitening.

Wu et al. (2022), "Hierarchical Inducing Point Gaussian Process for Inter-domain
Observations". The model (Eqs. 1-3): ``rho ~ GP(0, k)``, ``y_n ~ p(y_n | (L_n rho)(x_n))``
with a linear operator per observation (value, partial derivative, line integral; see
:mod:`bo_ncgp.models.hipgp.interdomain`). Inducing values ``u = rho(grid)`` are whitened,
``u = R eps`` (Eq. 11), and ``q(eps)`` is block-independent (Eq. 23). Then (Eqs. 13-14)

    ELBO = sum_n E_{q(eps) p(rho*_n | eps)} [log p(y_n | rho*_n)] - KL(q(eps) || N(0, I))

with ``rho*_n | eps ~ N(k_n^T eps, k**_nn - k_n^T k_n)`` and ``k_n = R^T K_uu^{-1} k*_{u,n}``
(Eq. 20), computed by PCG with the circulant preconditioner (Eqs. 21-22). Variational
parameters move by natural-gradient steps (closed form for the Gaussian likelihood);
kernel hyperparameters by Adam on the minibatch ELBO, differentiated through the PCG solves
by an adjoint solve (:func:`bo_ncgp.linalg.cg_solve`).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Sequence

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.likelihoods import Gaussian, Likelihood
from bo_ncgp.linalg._args import check_count, check_number, check_positive
from bo_ncgp.linalg.toeplitz import Grid
from bo_ncgp.models._alias import Alias
from bo_ncgp.models._checks import check_device, check_inputs, module_device
from bo_ncgp.models.base import Callback, LatentGP, check_kernel_and_likelihood
from bo_ncgp.models.hipgp.conditioned import ConditionedHIPGP
from bo_ncgp.models.hipgp.interdomain import (
    VALUE,
    OpSpec,
    as_op_codes,
    cross_covariance,
    transformed_covariance,
    transformed_variance,
)
from bo_ncgp.models.hipgp.variational import BlockGaussian
from bo_ncgp.models.hipgp.whitening import CholeskyWhitener, FFTWhitener, interpolation_guess
from bo_ncgp.models.training import STEP_ERRORS, AdamStepper, FitClock, NonFinitePolicy

__all__ = ["HIPGP", "MINIBATCH_PCG_MAX_ITERS", "minibatch_start_tol"]

#: rows (``k_n``, ``N`` floats each) formed at once by the natural-gradient steps that never
#: hold all ``n x N`` rows (2^22 floats: 32 MB in float64)
ROW_CHUNK_ENTRIES = 2**22
#: Cholesky-whitened rows are formed in chunks of this many entries (kernel temporaries)
CHOLESKY_CHUNK_ENTRIES = 2**24

#: PCG iteration cap of minibatch training steps under ``pcg_train_max_iters="auto"`` for the
#: rows whose start is not kept (:func:`minibatch_start_tol`): where the interpolation start
#: is poor (lengthscales of 1-3 grid spacings), 3 iterations bring ``k_n`` to within 0.1 %
MINIBATCH_PCG_MAX_ITERS = 3


def minibatch_start_tol(batch_size: int, num_data: int, lr: float = 1.0) -> float:
    """Relative error of the rows ``k_n`` that a minibatch natural-gradient step of step
    size ``lr`` accepts without a solve under ``pcg_train_max_iters="auto"``:
    ``sqrt(lr / (2 - lr)) * sqrt(1 / n_b - 1 / N)``.

    A step moves the natural parameters to ``(1 - lr) theta + lr theta_b``, ``theta_b`` the
    optimum of the minibatch (Gaussian likelihood), so the iterate averages minibatch
    estimates with weights ``lr (1 - lr)^j``; ``sqrt(1 / n_b - 1 / N)`` is the relative
    standard error of a mean over ``n_b`` of ``N`` terms of equal spread drawn without
    replacement (a lower bound on the spread of ``theta_b``: terms that differ in
    direction add more), and ``sqrt(lr / (2 - lr))`` what the averaging leaves of it. Rows
    off by at most this much shift the iterate by no more than the sampling noise it
    carries anyway. A full batch (``n_b >= N``) gives 0: full-batch steps keep solving.

    Example:
        >>> round(minibatch_start_tol(500, 2000), 4)  # one step from the prior
        0.0387
        >>> round(minibatch_start_tol(500, 2000, lr=0.1), 4)  # late steps average more
        0.0089
        >>> minibatch_start_tol(100, 100)
        0.0
    """
    batch_size = check_count(batch_size, "batch_size", "minibatch_start_tol", minimum=1)
    num_data = check_count(num_data, "num_data", "minibatch_start_tol", minimum=1)
    check_number(lr, "lr", "minibatch_start_tol", low=0, high=1, low_open=True)
    return math.sqrt(lr / (2 - lr)) * math.sqrt(max(0.0, 1.0 / batch_size - 1.0 / num_data))


class HIPGP(torch.nn.Module, LatentGP):
    """Inter-domain SVGP with grid inducing points (HIP-GP, Wu et al. 2022).

    Args:
        kernel: stationary GPyTorch kernel (RBF / Matern, optionally in a ``ScaleKernel``, for
            derivative and closed-form line-integral observations; any stationary kernel
            for values).
        grid: a :class:`~bo_ncgp.linalg.toeplitz.Grid`, or ``(lower, upper, shape)``.
        likelihood: a bo_ncgp likelihood (default ``Gaussian(noise=0.1)``).
        variational: ``"block"`` (Eq. 23), ``"mean_field"`` or ``"full"`` (small grids).
        block_shape: block of whitened variables per axis (``"block"`` only; default 2 per
            axis). The whitened grid has ``embedding_factor * M_d`` points per axis (``M_d`` for
            Cholesky).
        whitening: ``"fft"`` (HIP-GP, Eq. 20) or ``"cholesky"`` (the SVGP baseline).
        pcg_max_iters: PCG iteration cap per solve (``None``: no cap beyond CG's default;
            0: no solve, ``k_n = R^T W_n`` from the interpolation guess ``W_n`` of
            ``pcg_initial_guess``, i.e. ``k*_{u,n} ~= K_uu W_n`` as in structured kernel
            interpolation; for line integrals the guess sums the weights at the
            quadrature nodes).
        pcg_train_max_iters: PCG iteration cap of the solves of the training steps
            (:meth:`fit`, :meth:`natgrad_step`), never above ``pcg_max_iters``; predictions,
            conditioning and :meth:`elbo` keep ``pcg_max_iters``. ``"auto"`` (default): in
            minibatch steps (``num_data`` above the batch), each row's start (the
            interpolation weights, or its warm start) is checked with one ``K_uu`` and one
            preconditioner product and kept where its estimated relative error of ``k_n``
            is within the minibatch noise (:func:`minibatch_start_tol` of the step size;
            starts are 0.4-1 % off for kernels 4-6 grid spacings long, where PCG iterations
            barely move them); the other rows take :data:`MINIBATCH_PCG_MAX_ITERS` PCG
            iterations. Full-batch steps, which jump to the optimum, keep
            ``pcg_max_iters``. An int caps every training solve; ``None``:
            ``pcg_max_iters``.
        pcg_tol: relative residual tolerance of the PCG solves.
        jitter: added to the diagonal of ``K_uu`` (and to the circulant spectrum).
        num_quad: Gauss-Legendre nodes for line integrals of non-RBF kernels.
        precondition: use the circulant preconditioner (Eqs. 21-22) in PCG.
        embedding_factor: circulant embedding of ``embedding_factor * M_d`` points per axis
            (an int or one int per axis)
            (2 in the paper; larger when the lengthscale is long compared with the grid and
            the minimal embedding has negative eigenvalues).
        pcg_warm_start: in :meth:`fit`, start each observation's PCG solve from its solution
            of the previous epoch (``fft`` whitening; ``N_data x M`` floats of memory). The
            solves still stop at ``pcg_tol`` (or the cap), so with fixed hyperparameters an
            epoch refines the solves of the one before until they meet ``pcg_tol`` and cost
            one product each; with learned ones the solutions move slowly between epochs.
        pcg_initial_guess: where a PCG solve without a warm start begins (``fft``
            whitening): ``"interpolation"`` (local cubic interpolation weights of the point
            on the grid, :func:`~bo_ncgp.models.hipgp.whitening.interpolation_guess`, which
            already hold ``k_n`` to about 1 % for kernels smooth on the grid's scale) or
            ``"zero"`` (plain PCG); ``None``: interpolation for capped solves
            (``pcg_max_iters`` set, or a training cap), where it decides how accurate
            ``k_n`` is, and zero for solves to ``pcg_tol``, whose answers it would change
            only within the tolerance.

    Example:
        >>> k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
        >>> k.base_kernel.lengthscale = 0.2
        >>> m = HIPGP(k, Grid([0.0], [1.0], (64,)), likelihood=Gaussian(noise=0.01))
        >>> X = torch.rand(50, 1); y = torch.sin(6 * X[:, 0])
        >>> _ = m.fit(X, y, num_epochs=1)
        >>> mean, var = m.predict_f(torch.rand(5, 1))
        >>> mean.shape, bool((var > 0).all())
        (torch.Size([5]), True)
    """

    supports_fit = True

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        grid: Grid | tuple,
        likelihood: Likelihood | None = None,
        variational: str = "block",
        block_shape: Sequence[int] | None = None,
        whitening: str = "fft",
        pcg_max_iters: int | None = None,
        pcg_train_max_iters: int | str | None = "auto",
        pcg_tol: float = 1e-6,
        jitter: float = 1e-6,
        num_quad: int = 32,
        precondition: bool = True,
        embedding_factor: int | Sequence[int] = 2,
        pcg_warm_start: bool = True,
        pcg_initial_guess: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(grid, Grid):
            grid = Grid(*grid)
        if likelihood is None:
            likelihood = Gaussian(noise=0.1).to(device=grid.lower.device)
        check_kernel_and_likelihood("HIPGP", kernel, likelihood)
        if whitening not in ("fft", "cholesky"):
            raise InputDataError(f"HIPGP: whitening must be 'fft' or 'cholesky', got {whitening!r}")
        if variational not in ("block", "mean_field", "full"):
            raise InputDataError(
                f"HIPGP: variational must be 'block', 'mean_field' or 'full', got {variational!r}"
            )
        if pcg_initial_guess not in (None, "interpolation", "zero"):
            raise InputDataError(
                "HIPGP: pcg_initial_guess must be 'interpolation', 'zero' or None, got "
                f"{pcg_initial_guess!r}"
            )
        who = "HIPGP"
        if pcg_max_iters is not None:
            pcg_max_iters = check_count(pcg_max_iters, "pcg_max_iters", who, minimum=0)
            if pcg_max_iters == 0 and pcg_initial_guess == "zero":
                raise InputDataError(
                    "HIPGP: pcg_max_iters=0 takes k_n from the interpolation guess and needs "
                    "pcg_initial_guess='interpolation' or None, got 'zero'"
                )
        if pcg_train_max_iters != "auto" and pcg_train_max_iters is not None:
            if isinstance(pcg_train_max_iters, str):
                raise InputDataError(
                    "HIPGP: pcg_train_max_iters must be 'auto', None or a count >= 0, got "
                    f"{pcg_train_max_iters!r}"
                )
            pcg_train_max_iters = check_count(
                pcg_train_max_iters, "pcg_train_max_iters", who, minimum=0
            )
            if pcg_train_max_iters == 0 and pcg_initial_guess == "zero":
                raise InputDataError(
                    "HIPGP: pcg_train_max_iters=0 takes k_n from the interpolation guess and "
                    "needs pcg_initial_guess='interpolation' or None, got 'zero'"
                )
        pcg_tol = check_positive(pcg_tol, "pcg_tol", who, allow_zero=True)
        jitter = check_positive(jitter, "jitter", who, allow_zero=True)
        num_quad = check_count(num_quad, "num_quad", who, minimum=1)
        self.kernel = kernel
        self.likelihood = likelihood
        self.grid = grid
        self.whitening = whitening
        self.pcg_max_iters, self.pcg_tol = pcg_max_iters, pcg_tol
        self.pcg_train_max_iters = pcg_train_max_iters
        # (cap, start tolerance) inside training steps
        self._cap_override: tuple[int | None, float | None] | None = None
        self.jitter, self.num_quad, self.precondition = jitter, num_quad, precondition
        self.embedding_factor = embedding_factor
        self.pcg_warm_start = bool(pcg_warm_start)
        self.pcg_initial_guess = pcg_initial_guess
        self.whitened_shape = (
            grid.padded_shape(self.embedding_factor) if whitening == "fft" else grid.shape
        )
        if variational == "mean_field":
            block_shape = (1,) * grid.dim
        elif variational == "full":
            block_shape = self.whitened_shape
        elif block_shape is None:
            block_shape = (2,) * grid.dim
        self.variational = variational
        self.q = BlockGaussian(
            self.whitened_shape, block_shape, dtype=grid.lower.dtype, device=grid.lower.device
        )
        self._whitener_cache: tuple | None = None
        self._row_cache: tuple | None = None
        self._Z: Tensor | None = None
        self.last_pcg_iterations: int | None = None
        #: rows of the last training solves whose start was kept without PCG iterations
        #: (``pcg_train_max_iters="auto"`` in minibatch steps; ``None`` elsewhere)
        self.last_kept_starts: int | None = None
        self._last_pcg_solution: Tensor | None = None
        #: ELBO estimates of the last :meth:`fit` (one per minibatch with learned hyperparameters)
        self.history: list[float] = []

    def __getstate__(self) -> dict:
        """Copies (``copy.deepcopy``) and pickles leave out the caches (grid points, whitener,
        last PCG solution): they follow from the grid and the hyperparameters, are rebuilt on
        demand, and a whitener built with gradients holds an autograd graph, which
        ``deepcopy`` refuses."""
        state = dict(super().__getstate__())
        state.update(_Z=None, _whitener_cache=None, _last_pcg_solution=None)
        return state

    def _apply(self, fn, *args, **kwargs):
        """``.to()``, ``.double()``, ... also move the grid (a copy) and drop the caches."""
        out = super()._apply(fn, *args, **kwargs)
        grid = copy.copy(self.grid)
        grid.lower, grid.upper = fn(self.grid.lower), fn(self.grid.upper)
        self.grid, self._Z, self._whitener_cache = grid, None, None
        self._last_pcg_solution = self._row_cache = None
        return out

    # ----------------------------------------------------------------- pieces
    dim: Alias[int] = Alias("grid.dim", "Number of input dimensions ``D`` (those of the grid).")
    num_inducing: Alias[int] = Alias(
        "grid.num_points", "Number of inducing points ``M`` (the grid points)."
    )

    def inducing_points(self) -> Tensor:
        """``(M, D)`` grid points (cached)."""
        if self._Z is None:
            self._Z = self.grid.points()
        return self._Z

    def _state_key(self) -> tuple:
        # the values too: GPyTorch's setters (``kernel.lengthscale = ...``) write through
        # ``.data``, which leaves the version counter unchanged
        return tuple(
            (id(p), p._version, p.detach().cpu().numpy().tobytes())
            for p in self.kernel.parameters()
        )

    def whitener(self) -> FFTWhitener | CholeskyWhitener:
        """The whitening operator for the current hyperparameters, cached until they change.

        One built with gradients enabled also serves no-grad calls (natural-gradient steps,
        predictions), so the circulant spectrum is not recomputed when ``fit`` alternates
        between the two; a no-grad one is rebuilt when gradients are needed.
        """
        key, grad = self._state_key(), torch.is_grad_enabled()
        cache = self._whitener_cache
        if cache is not None and cache[0] == key and (cache[1] or not grad):
            w = cache[2]
        else:
            if self.whitening == "fft":
                w = FFTWhitener(
                    self.kernel, self.grid, jitter=self.jitter, factor=self.embedding_factor
                )
            else:
                w = CholeskyWhitener(self.kernel, self.grid, jitter=self.jitter)
            self._whitener_cache = (key, grad, w)
        if self.whitening == "fft":
            w.pcg_tol, w.pcg_max_iters, w.precondition = (
                self.pcg_tol,
                self.pcg_cap(),
                self.precondition,
            )
        return w

    def pcg_cap(self) -> int | None:
        """The PCG iteration cap of the solves that run now: ``pcg_max_iters``, or inside a
        training step the cap of :meth:`training_cap`."""
        return self.pcg_max_iters if self._cap_override is None else self._cap_override[0]

    def training_cap(self, minibatch: bool) -> int | None:
        """PCG iteration cap of a training step (``pcg_train_max_iters``, never above
        ``pcg_max_iters``) for a minibatch step or a full-batch one; ``"auto"`` caps
        minibatch steps at :data:`MINIBATCH_PCG_MAX_ITERS` (every row has an interpolation
        start, :func:`~bo_ncgp.models.hipgp.whitening.interpolation_guess`); rows whose
        start passes :meth:`training_start_tol` take no iteration at all.

        Example:
            >>> m = HIPGP(gpytorch.kernels.RBFKernel(), Grid([0.0], [1.0], (16,)))
            >>> m.training_cap(minibatch=True), m.training_cap(minibatch=False)
            (3, None)
            >>> m.pcg_max_iters = 2
            >>> m.training_cap(minibatch=True), m.training_cap(minibatch=False)
            (2, 2)
        """
        base, cap = self.pcg_max_iters, self.pcg_train_max_iters
        if cap == "auto":
            cap = MINIBATCH_PCG_MAX_ITERS if minibatch else None
        if cap is None:
            return base
        return cap if base is None else min(cap, base)

    def training_start_tol(self, batch_size: int, num_data: int, lr: float = 1.0) -> float | None:
        """Relative error of ``k_n`` up to which a training step of step size ``lr`` on
        ``batch_size`` of ``num_data`` observations keeps a row's start without PCG
        iterations (:func:`minibatch_start_tol`), or ``None`` where every row is solved: an int or
        ``None`` ``pcg_train_max_iters``, Cholesky whitening and full batches.

        Example:
            >>> m = HIPGP(gpytorch.kernels.RBFKernel(), Grid([0.0], [1.0], (16,)))
            >>> round(m.training_start_tol(500, 2000), 4), m.training_start_tol(500, 500)
            (0.0387, None)
        """
        if self.pcg_train_max_iters != "auto" or self.whitening != "fft":
            return None
        tol = minibatch_start_tol(batch_size, num_data, lr)
        return tol if tol > 0 else None

    @contextlib.contextmanager
    def _training_solves(self, cap: int | None, start_tol: float | None = None):
        """Solves inside the block use ``cap`` (:meth:`pcg_cap`) and keep starts within
        ``start_tol`` (:meth:`training_start_tol`)."""
        old, self._cap_override = self._cap_override, (cap, start_tol)
        try:
            yield
        finally:
            self._cap_override = old

    def _check_X(self, X: Tensor, what: str = "X", matrix: bool = False) -> Tensor:
        return check_inputs(
            X,
            "HIPGP",
            name=what,
            dims=self.dim,
            matrix=matrix,
            allow_empty=False,
            dtype=self.grid.lower.dtype,
            device=module_device(self),
        )

    def _check_on_grid(self, X: Tensor, codes: Tensor) -> None:
        """Refuse point observations (values, derivatives) more than one grid spacing outside
        the grid: the inducing points cover only the grid, so such data would leave the
        posterior at the prior. Line integrals from the origin may end outside the grid."""
        g = self.grid
        lower, upper, h = g.lower.to(X), g.upper.to(X), g.spacing.to(X)
        outside = ((X < lower - h) | (X > upper + h)).any(-1) & (codes >= VALUE)
        if bool(outside.any()):
            i = int(outside.nonzero()[0, 0])
            raise InputDataError(
                f"HIPGP: {int(outside.sum())} of {X.shape[0]} training points lie outside the "
                f"grid [{g.lower.tolist()}, {g.upper.tolist()}] (more than one grid spacing "
                f"beyond it), e.g. X[{i}] = {X[i].tolist()}; the model cannot learn there; "
                "enlarge the grid to cover the data"
            )

    def whitened_cross_covariance(
        self, X: Tensor, codes: Tensor, x0: Tensor | None = None
    ) -> Tensor:
        """Rows ``k_n^T`` (Eq. 20) for ``X (n, D)``, shape ``(n, N)``; ``x0 (n, M)``
        warm-starts the PCG solves for ``K_uu^{-1} k*_{u,n}`` (``fft`` whitening; default
        :meth:`initial_guess`). Cholesky rows are formed ``CHOLESKY_CHUNK_ENTRIES // M`` at a
        time, so the kernel's temporaries never take more than the rows themselves."""
        w = self.whitener()
        if self.whitening == "cholesky":
            Z = self.inducing_points().to(X)
            step = max(1, CHOLESKY_CHUNK_ENTRIES // Z.shape[0])
            parts = [
                w.whiten(
                    cross_covariance(
                        self.kernel, Z, X[s : s + step], codes[s : s + step], num_quad=self.num_quad
                    ).mT
                )
                for s in range(0, X.shape[0], step)
            ]
            return parts[0] if len(parts) == 1 else torch.cat(parts)
        return w.root_t_mv(self._fft_solutions(X, codes, x0))

    def _fft_solutions(
        self, X: Tensor, codes: Tensor, x0: Tensor | None = None, sparse: bool = False
    ) -> Tensor:
        """``K_uu^{-1} k*_{u,n}`` ``(n, M)`` for ``X (n, D)`` (``fft`` whitening), the rows
        ``k_n = R^T`` of it (Eq. 20) not formed: under a PCG cap of 0 the interpolation guess
        (``sparse``: as a CSR matrix; differentiable in ``X`` and, through ``R``, the
        hyperparameters), else PCG from ``x0`` (default :meth:`initial_guess`) keeping the
        starts within the training steps' start tolerance. Sets the solve's records."""
        if self.pcg_cap() == 0:
            W = interpolation_guess(X, self.grid, codes, num_quad=self.num_quad, sparse=sparse)
            self._last_pcg_solution = W.detach()
            self.last_pcg_iterations, self.last_kept_starts = 0, None
            return W
        w = self.whitener()
        Z = self.inducing_points().to(X)
        k_un = cross_covariance(self.kernel, Z, X, codes, num_quad=self.num_quad)  # Eq. 7
        if x0 is None:
            x0 = self.initial_guess(X, codes)
        start_tol = None if self._cap_override is None else self._cap_override[1]
        sol = w.solve(k_un.mT, x0=x0, start_tol=start_tol)
        self._last_pcg_solution = w.last_solution
        res, kept = w.last_result, w.last_accepted
        self.last_pcg_iterations = 0 if res is None else int(res.iterations)
        self.last_kept_starts = None if kept is None else int(kept.sum())
        return sol

    def _rows_factor(self) -> tuple | None:
        """``(X, R_mv, R_t_mv)`` with ``K = X R`` for the rows ``K`` that the last
        :meth:`whitened_cross_covariance` returned (``fft`` whitening; ``None`` for
        Cholesky), for the CG products of the natural-gradient mean step
        (:meth:`BlockGaussian.natgrad_step`)."""
        X = self._last_pcg_solution
        if self.whitening != "fft" or X is None:
            return None
        w = self.whitener()
        return X, w.root_mv, w.root_t_mv

    def _training_rows(
        self, X: Tensor, codes: Tensor, obs_noise: Tensor | None, x0: Tensor | None = None
    ) -> tuple[Tensor | None, tuple | None]:
        """``(K, factor)`` of a training step without hyperparameter gradients: with ``fft``
        whitening and a Gaussian likelihood ``K = None`` and the factor ``(X_sol, R_mv,
        R_t_mv)`` of ``K = X_sol R``, solved ``ROW_CHUNK_ENTRIES // N`` rows at a time (under
        a PCG cap of 0 ``X_sol`` is the sparse interpolation guess) so that the ``n x N``
        rows are never held; else the rows ``K`` (and :meth:`_rows_factor`). ``x0``: warm
        starts. :attr:`last_pcg_iterations` is the most of any chunk."""
        rows_free = self.whitening == "fft" and (
            obs_noise is not None or isinstance(self.likelihood, Gaussian)
        )
        if not rows_free:
            return self.whitened_cross_covariance(X, codes, x0=x0), self._rows_factor()
        w = self.whitener()
        if self.pcg_cap() == 0:
            return None, (self._fft_solutions(X, codes, sparse=True), w.root_mv, w.root_t_mv)
        step = max(1, ROW_CHUNK_ENTRIES // self.q.N)
        sols, iters, kept = [], 0, None
        with torch.no_grad():
            for s in range(0, X.shape[0], step):
                part = None if x0 is None else x0[s : s + step]
                sols.append(self._fft_solutions(X[s : s + step], codes[s : s + step], part))
                iters = max(iters, self.last_pcg_iterations or 0)
                if self.last_kept_starts is not None:
                    kept = (kept or 0) + self.last_kept_starts
        self._last_pcg_solution = torch.cat(sols)
        self.last_pcg_iterations, self.last_kept_starts = iters, kept
        return None, (self._last_pcg_solution, w.root_mv, w.root_t_mv)

    @torch.no_grad()
    def initial_guess(self, X: Tensor, codes: Tensor) -> Tensor | None:
        """Start ``(n, M)`` of the PCG solves ``K_uu^{-1} k*_{u,n}`` for ``X (n, D)`` without
        a warm start (see ``pcg_initial_guess``); ``None`` for zeros."""
        guess = self.pcg_initial_guess
        if guess is None:
            guess = "zero" if self.pcg_cap() is None else "interpolation"
        if guess == "zero":
            return None
        return interpolation_guess(X.detach(), self.grid, codes, num_quad=self.num_quad)

    @torch.no_grad()
    def remember_rows(self, X: Tensor, op: OpSpec = None) -> None:
        """Whiten the rows ``k_n^T`` (Eq. 20) of the fixed points ``X (n, D)`` once and serve
        them to later predictions and conditionings at these points (with the same
        operators) while the hyperparameters stay as they are (a pool of candidates and a
        test set in active learning: one PCG solve per point instead of one per query).

        The cache is bypassed where gradients are needed (inputs that require grad, or
        grad mode with trainable hyperparameters) and replaced by the next call.

        Example:
            >>> k = gpytorch.kernels.RBFKernel()
            >>> k.lengthscale = 0.2
            >>> m = HIPGP(k, Grid([0.0], [1.0], (32,)), likelihood=Gaussian(noise=0.01))
            >>> pool = torch.rand(50, 1)
            >>> m.remember_rows(pool)
            >>> m.last_pcg_iterations = None
            >>> with torch.no_grad():
            ...     mean, var = m.predict_f(pool[:5])  # served from the cache
            >>> m.last_pcg_iterations is None  # no PCG solve ran
            True
        """
        X = self._check_X(X, matrix=True)
        codes = as_op_codes(op, X.shape[0], self.dim, X.device)
        rows = self.whitened_cross_covariance(X, codes).detach()
        keys = X.detach().cpu().numpy()
        lookup = {
            (int(c), x.tobytes()): i
            for i, (x, c) in enumerate(zip(keys, codes.tolist(), strict=True))
        }
        self._row_cache = (self._state_key(), lookup, rows)

    def _rows(self, X: Tensor, codes: Tensor) -> Tensor:
        """:meth:`whitened_cross_covariance` of ``X (n, D)``, rows remembered by
        :meth:`remember_rows` taken from its cache where it may serve them."""
        cache = self._row_cache
        if (
            cache is None
            or cache[0] != self._state_key()
            or X.requires_grad
            or (torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()))
        ):
            return self.whitened_cross_covariance(X, codes)
        _, lookup, rows = cache
        keys = X.detach().cpu().numpy()
        found = [
            lookup.get((int(c), x.tobytes()), -1) for x, c in zip(keys, codes.tolist(), strict=True)
        ]
        idx = torch.tensor(found, dtype=torch.long, device=X.device)
        hit = idx >= 0
        if bool(hit.all()):
            return rows[idx].to(X)
        out = X.new_zeros(X.shape[0], rows.shape[-1])
        out[hit] = rows[idx[hit]].to(X)
        miss = ~hit
        out[miss] = self.whitened_cross_covariance(X[miss], codes[miss])
        return out

    def _moments(self, K: Tensor, X: Tensor, codes: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``k_n^T m`` and variance ``k** - k_n^T k_n + k_n^T S k_n`` (Eq. 14)."""
        kss = transformed_variance(self.kernel, X, codes, num_quad=self.num_quad)  # Eq. 8
        q = self.q
        m = q.mean.to(K)
        mean = K @ m
        var = (kss - (K * K).sum(-1)).clamp_min(0) + q.quad_form(K)
        return mean, var

    # ------------------------------------------------------------- objective
    def _expected(self, y, mean, var, obs_noise):
        if obs_noise is None:
            return self.likelihood.expected(y, mean, var)
        s2 = obs_noise  # Eq. 14 with per-observation sigma_n^2
        elp = -0.5 * (math.log(2 * math.pi) + torch.log(s2) + ((y - mean) ** 2 + var) / s2)
        return elp, (y - mean) / s2, 1.0 / s2

    def _prepare(self, X, y, op, obs_noise):
        X = self._check_X(X, matrix=True)
        y = torch.as_tensor(y, device=None if isinstance(y, Tensor) else X.device)
        check_device("HIPGP", X.device, y=y)
        if y.is_complex():
            raise InputDataError(f"HIPGP: y must be real, got {y.dtype}")
        y = y.to(X.dtype).reshape(-1)
        if y.numel() != X.shape[0]:
            raise InputDataError(f"HIPGP: X has {X.shape[0]} rows but y has {y.numel()} entries")
        if not torch.isfinite(y).all():
            raise InputDataError("HIPGP: y contains NaN or inf")
        y = self.likelihood.check_targets(y)
        codes = as_op_codes(op, X.shape[0], self.dim, X.device)
        self._check_on_grid(X, codes)
        if obs_noise is not None:
            if not isinstance(self.likelihood, Gaussian):
                raise UnsupportedError("HIPGP: obs_noise needs the Gaussian likelihood")
            obs_noise = torch.as_tensor(obs_noise, dtype=X.dtype, device=X.device)
            obs_noise = obs_noise.expand(X.shape[0]).reshape(-1)
            if not bool((torch.isfinite(obs_noise) & (obs_noise > 0)).all()):
                raise InputDataError("HIPGP: obs_noise must be positive and finite")
        return X, y, codes, obs_noise

    def elbo(
        self,
        X: Tensor,
        y: Tensor,
        op: OpSpec = None,
        num_data: int | None = None,
        obs_noise: Tensor | None = None,
    ) -> Tensor:
        """Minibatch estimate of the ELBO (Eqs. 13-14), differentiable in the kernel and
        likelihood hyperparameters (through the PCG solves by adjoint solves).

        Args:
            X: ``(n, D)`` observation locations; y: ``(n,)`` targets.
            op: observation operator(s), see :func:`bo_ncgp.models.hipgp.interdomain.as_op_codes`.
            num_data: size of the full data set (``n`` when omitted).
            obs_noise: known per-observation noise variances ``sigma_n^2`` (Gaussian only).
        """
        X, y, codes, obs_noise = self._prepare(X, y, op, obs_noise)
        K = self.whitened_cross_covariance(X, codes)
        return self._elbo_from(K, X, y, codes, num_data or X.shape[0], obs_noise)

    def _elbo_from(self, K, X, y, codes, num_data, obs_noise):
        mean, var = self._moments(K, X, codes)
        elp = self._expected(y, mean, var, obs_noise)[0]
        return num_data / X.shape[0] * elp.sum() - self.q.kl()

    @torch.no_grad()
    def natgrad_step(
        self,
        X: Tensor,
        y: Tensor,
        op: OpSpec = None,
        num_data: int | None = None,
        lr: float = 1.0,
        obs_noise: Tensor | None = None,
        K: Tensor | None = None,
        tol: float = 1e-3,
        max_iters: int = 100,
    ) -> None:
        """One natural-gradient step of ``q`` on a minibatch (Sec. 3.4,
        :meth:`BlockGaussian.natgrad_step`); with the Gaussian likelihood, the whole data
        set and ``lr=1`` it reaches the optimal mean (to the relative residual ``tol`` of the
        mean step's CG, at most ``max_iters`` iterations; exactly for
        ``variational='full'``). Without ``K`` the rows are whitened with the PCG cap of
        :meth:`training_cap` (a minibatch step when ``num_data`` exceeds the batch); with
        ``fft`` whitening and a Gaussian likelihood they are then never held at once (the
        step runs on their factor ``K = X R``, :meth:`BlockGaussian.factor_gram`)."""
        check_number(lr, "lr", "HIPGP.natgrad_step", low=0, high=1, low_open=True)
        check_positive(tol, "tol", "HIPGP.natgrad_step")
        max_iters = check_count(max_iters, "max_iters", "HIPGP.natgrad_step", minimum=1)
        if num_data is not None:
            num_data = check_count(num_data, "num_data", "HIPGP.natgrad_step", minimum=1)
        X, y, codes, obs_noise = self._prepare(X, y, op, obs_noise)
        factor = None
        if K is None:
            n = X.shape[0] if num_data is None else num_data
            cap = self.training_cap(n > X.shape[0])
            start_tol = self.training_start_tol(X.shape[0], n, lr)
            with self._training_solves(cap, start_tol), torch.no_grad():
                K, factor = self._training_rows(X, codes, obs_noise)
        self._natgrad_from(K, X, y, codes, num_data, lr, obs_noise, (tol, max_iters), factor)

    def _natgrad_from(self, K, X, y, codes, num_data, lr, obs_noise, cg_stop, factor) -> None:
        """:meth:`natgrad_step` on checked data with the rows ``K`` (``factor``: see
        :meth:`_rows_factor`; ``K=None``: the step from ``factor`` alone; ``cg_stop``: the
        mean step's ``(tol, max_iters)``)."""
        K = None if K is None else K.detach()
        if obs_noise is None and not isinstance(self.likelihood, Gaussian):
            mean, var = self._moments(K, X, codes)
        else:  # alpha and beta of the Gaussian likelihood do not depend on the variance
            m = self.q.mean.to(X)
            mean = K @ m if factor is None else factor[0] @ factor[1](m)
            var = torch.zeros_like(mean)
        _, alpha, beta = self._expected(y, mean, var, obs_noise)
        beta = beta.expand_as(mean)
        scale = (num_data or X.shape[0]) / X.shape[0]
        tol, max_iters = cg_stop
        self.q.natgrad_step(K, alpha, beta, scale, lr, tol=tol, max_iters=max_iters, factor=factor)

    def fit(
        self,
        X: Tensor,
        y: Tensor,
        *,
        callback: Callback | None = None,
        op: OpSpec = None,
        obs_noise: Tensor | None = None,
        num_epochs: int = 1,
        batch_size: int | None = None,
        natgrad_lr: float | None = None,
        natgrad_tol: float = 1e-3,
        natgrad_max_iters: int = 100,
        learn_hyperparameters: bool = False,
        hyper_lr: float = 0.01,
        generator: torch.Generator | None = None,
        progress: bool = False,
        on_nonfinite: NonFinitePolicy = "stop",
    ) -> HIPGP:
        """Stochastic variational inference (Sec. 3.4): per minibatch one natural-gradient
        step of ``q`` and (optionally) one Adam step of the hyperparameters on the ELBO
        (Eqs. 13-14) through :class:`bo_ncgp.models.training.AdamStepper`.

        Args:
            X, y, op, obs_noise: training data (see :meth:`elbo`).
            callback: ``callback(FitStep) -> bool | None`` after every minibatch, with
                ``info = {"epoch": e, "batch": b}`` and, when hyperparameters are learned, the
                loss ``-ELBO / n``; ``True`` stops.
            num_epochs: passes over the data.
            batch_size: minibatch size (all data when omitted).
            natgrad_lr: natural-gradient step size in ``(0, 1]``; 1 jumps to the minibatch's
                optimum (with the Gaussian likelihood), which forgets the other minibatches.
                Default: 1 when the whole data set is one batch, 0.1 with minibatches.
            natgrad_tol, natgrad_max_iters: relative residual and iteration cap of each
                step's mean solve (CG, see :meth:`natgrad_step`); a full batch with a
                Gaussian likelihood and nearly noise-free data needs a tighter ``natgrad_tol``
                (and more iterations) to reach the optimal mean in few epochs.
            learn_hyperparameters: also learn kernel/likelihood hyperparameters.
            hyper_lr: Adam learning rate for the hyperparameters.
            generator: RNG for the minibatch order.
            progress: show a tqdm bar over epochs.
            on_nonfinite: ``"stop"`` or ``"raise"`` on a non-finite ELBO or gradient
                (:mod:`bo_ncgp.models.training`).

        Returns:
            ``self``; :attr:`history` holds the ELBO estimates (one per minibatch when
            hyperparameters are learned, else empty).
        """
        X, y, codes, obs_noise = self._prepare(X, y, op, obs_noise)
        n = X.shape[0]
        who = "HIPGP.fit"
        bs = n if batch_size is None else check_count(batch_size, "batch_size", who, minimum=1)
        num_epochs = check_count(num_epochs, "num_epochs", who)
        if natgrad_lr is None:
            natgrad_lr = 1.0 if bs >= n else 0.1
        check_number(natgrad_lr, "natgrad_lr", who, low=0, high=1, low_open=True)
        check_positive(natgrad_tol, "natgrad_tol", who)
        cg_stop = (natgrad_tol, check_count(natgrad_max_iters, "natgrad_max_iters", who, minimum=1))
        check_positive(hyper_lr, "hyper_lr", who)
        hypers = [p for p in self.parameters() if p.requires_grad]
        if obs_noise is not None:
            hypers = [p for p in self.kernel.parameters() if p.requires_grad]
        stepper = (
            AdamStepper(hypers, hyper_lr, on_nonfinite=on_nonfinite, name="HIPGP.fit")
            if learn_hyperparameters and hypers
            else None
        )
        self.history = []
        epochs = range(num_epochs)
        if progress:
            from tqdm.auto import tqdm

            epochs = tqdm(epochs, desc="HIPGP epochs")
        clock, count = FitClock(), 0
        # the training solves' cap; warm starts: the last PCG solution of every observation,
        # and whether it has one
        cap = self.training_cap(bs < n)
        start_tol = self.training_start_tol(bs, n, natgrad_lr)
        warm = self.pcg_warm_start and self.whitening == "fft" and cap != 0
        sols = X.new_zeros(n, self.num_inducing) if warm else None
        seen = torch.zeros(n, dtype=torch.bool, device=X.device) if warm else None
        for epoch in epochs:
            dev = "cpu" if generator is None else generator.device
            perm = torch.randperm(n, generator=generator, device=dev).to(X.device)
            for step, s in enumerate(range(0, n, bs)):
                idx = perm[s : s + bs]
                Xb, yb, cb = X[idx], y[idx], codes[idx]
                nb = None if obs_noise is None else obs_noise[idx]
                x0 = None
                try:
                    with self._training_solves(cap, start_tol):
                        if warm and bool(seen[idx].any()):
                            x0 = sols[idx]
                            guess = self.initial_guess(Xb, cb)
                            if guess is not None:
                                x0 = torch.where(seen[idx, None], x0, guess)
                        if stepper is None:
                            with torch.no_grad():
                                K, factor = self._training_rows(Xb, cb, nb, x0)
                        else:
                            with torch.enable_grad():
                                K = self.whitened_cross_covariance(Xb, cb, x0=x0)
                            factor = self._rows_factor()
                except STEP_ERRORS:
                    if stepper is None or stepper.loss is None:
                        raise
                    # the last hyperparameter step led where the covariances fail: undo it
                    with self._training_solves(cap):
                        stepper.finish(lambda: self.whitened_cross_covariance(Xb, cb).sum())  # noqa: B023
                    return self
                if warm:
                    sols[idx], seen[idx] = self._last_pcg_solution, True
                with torch.no_grad():
                    self._natgrad_from(K, Xb, yb, cb, n, natgrad_lr, nb, cg_stop, factor)
                value = None
                if stepper is not None:
                    loss = -self._elbo_from(K, Xb, yb, cb, n, nb) / n
                    if not stepper.step(loss):
                        return self
                    value = float(loss.detach())
                    self.history.append(-value * n)
                if clock.notify(callback, count, self, value, {"epoch": epoch, "batch": step}):
                    return self
                count += 1
        return self

    # -------------------------------------------------------------- prediction
    def predict_f(
        self, X: Tensor, full_cov: bool = False, *, op: OpSpec = None
    ) -> tuple[Tensor, Tensor]:
        """Posterior of ``L rho`` at ``X (..., n, D)``: the latent ``rho`` (``op='value'``)
        or a transformed domain (``'integral'``, ``('derivative', d)``, codes ``(n,)``).

        Returns:
            ``mean (..., n)`` and ``var (..., n)`` or ``cov (..., n, n)``; differentiable in
            ``X`` (through the PCG solves) and in the hyperparameters.
        """
        X = self._check_X(X)
        batch, n = X.shape[:-2], X.shape[-2]
        codes = as_op_codes(op, n, self.dim, X.device)
        Xf = X.reshape(-1, self.dim)
        cf = codes.repeat(max(1, batch.numel()))
        K = self._rows(Xf, cf)
        mean, var = self._moments(K, Xf, cf)
        mean = mean.reshape(*batch, n)
        if not full_cov:
            return mean, var.reshape(*batch, n)
        Xb = X.reshape(-1, n, self.dim)
        Kb = K.reshape(-1, n, K.shape[-1])
        covs = []
        for i in range(Xb.shape[0]):
            if bool((codes == 0).all()):
                Kss = self.kernel(Xb[i]).to_dense()
            else:
                Kss = transformed_covariance(self.kernel, Xb[i], codes, num_quad=self.num_quad)
            Ki = Kb[i]
            covs.append(Kss - Ki @ Ki.mT + self.q.covariance_form(Ki, Ki))
        cov = torch.stack(covs).reshape(*batch, n, n)
        return mean, cov

    def predict_y(self, X: Tensor, *, op: OpSpec = None) -> Tensor:
        """Predictive mean ``E[y]`` of observations of ``L rho`` at ``X`` (the likelihood's
        ``predictive_mean`` of :meth:`predict_f`). With the Gaussian likelihood the variance
        of an observation is ``predict_f(X, op=op)[1] + likelihood.noise``."""
        mean, var = self.predict_f(X, op=op)
        return self.likelihood.predictive_mean(mean, var)

    def condition(
        self, X: Tensor, Y: Tensor, *, op: OpSpec = None, obs_noise: Tensor | float | None = None
    ) -> ConditionedHIPGP:
        """This posterior conditioned on Gaussian observations ``Y (..., n)`` of ``L rho`` at
        ``X (..., n, D)`` (operator(s) ``op``; noise variances ``obs_noise``, default the
        Gaussian likelihood's), with the hyperparameters and ``q(eps)`` fixed: exact Gaussian
        conditioning of the variational posterior GP, jointly over the conditioned and the
        query points (:class:`~bo_ncgp.models.hipgp.conditioned.ConditionedHIPGP`). Leading
        dimensions of ``X`` / ``Y`` (fantasies x candidates) become its ``batch_shape``.

        Example:
            >>> k = gpytorch.kernels.RBFKernel()
            >>> k.lengthscale = 0.2
            >>> m = HIPGP(k, Grid([0.0], [1.0], (32,)), likelihood=Gaussian(noise=0.01))
            >>> _ = m.fit(torch.rand(20, 1), torch.zeros(20))
            >>> x = torch.tensor([[0.3]])
            >>> mean, var = m.condition(x, torch.tensor([1.0])).predict_f(x)
            >>> bool(0 < mean < 1), bool(var < m.predict_f(x)[1])  # pulled up, less uncertain
            (True, True)
        """
        return ConditionedHIPGP.from_model(self, X, Y, op=op, obs_noise=obs_noise)

    @torch.no_grad()
    def latent_grid_mean(self) -> Tensor:
        """Posterior mean of the inducing values ``E[u] = R m`` on the grid, shaped like the
        grid (``O(M log M)``; for maps)."""
        return self.whitener().root_mv(self.q.mean).reshape(self.grid.shape)
