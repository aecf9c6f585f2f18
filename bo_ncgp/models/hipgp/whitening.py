"""Whitening of grid inducing points: ``k_n`` with ``K_uu = R R^T``, ``k*_{u,n} = R k_n``.

Wu et al. (2022), Eq. 12. Two strategies share one interface so that HIP-GP and its SVGP
baseline differ only here:

* :class:`FFTWhitener` -- HIP-GP's fast whitening, ``R`` = top block row of ``C^{1/2}``,
  ``k_n = R^T K_uu^{-1} k*_{u,n}`` (Eq. 20) with the PCG solve preconditioned by the
  top-left block of ``C^{-1}`` (Eqs. 21-22); ``O(M log M)`` per observation, ``N = 2^D M``
  whitened variables;
* :class:`CholeskyWhitener` -- the classical ``R = L = chol(K_uu)``, ``k_n = L^{-1}
  k*_{u,n}`` (Sec. 3.1), ``O(M^3)`` once plus ``O(M^2)`` per observation, ``N = M``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bo_ncgp.linalg import solve_lower, stable_cholesky
from bo_ncgp.linalg.cg import CGResult
from bo_ncgp.linalg.toeplitz import CirculantEmbedding, Grid, circulant_first_row
from bo_ncgp.models.hipgp.interdomain import _gauss_legendre
from bo_ncgp.models.hipgp.variational import csr_from_coo

__all__ = ["CholeskyWhitener", "FFTWhitener", "interpolation_guess"]


def _lagrange(t: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """Lagrange basis ``l_j(t)`` and its derivative on ``nodes (n, p)`` at ``t (n,)``."""
    p = nodes.shape[-1]
    diff = t[:, None] - nodes  # (n, p)
    den = nodes[:, :, None] - nodes[:, None, :]  # (n, p, p): t_j - t_l
    eye = torch.eye(p, dtype=torch.bool, device=t.device)
    ratio = torch.where(eye, torch.ones_like(den), diff[:, None, :] / den.masked_fill(eye, 1.0))
    basis = ratio.prod(-1)  # (n, p)
    # l_j' = sum_{m != j} 1 / (t_j - t_m) prod_{l != j, m} (t - t_l) / (t_j - t_l)
    deriv = torch.zeros_like(basis)
    for m in range(p):
        others = ratio.clone()
        others[:, :, m] = 1.0
        term = others.prod(-1) / den[:, :, m].masked_fill(eye[m][None].expand_as(basis), 1.0)
        deriv = deriv + torch.where(eye[m][None].expand_as(basis), 0.0, term)
    return basis, deriv


def _local_weights(X: Tensor, grid: Grid, codes: Tensor, order: int) -> tuple[Tensor, Tensor]:
    """Flat grid indices and weights ``(n, order^D)`` of the tensor-product Lagrange
    interpolation at ``X (n, D)`` (axis ``d`` differentiated for codes ``d + 1``)."""
    n = X.shape[0]
    spacing = grid.spacing.to(X)
    lower = grid.lower.to(X)
    offsets = torch.arange(order, device=X.device)
    flat = torch.zeros(n, 1, dtype=torch.long, device=X.device)
    weight = torch.ones(n, 1, dtype=X.dtype, device=X.device)
    for d, size in enumerate(grid.shape):
        p = min(order, size)
        t = (X[:, d] - lower[d]) / spacing[d]
        start = (torch.floor(t).long() - (p - 1) // 2).clamp(0, size - p)
        idx = start[:, None] + offsets[:p]
        b, db = _lagrange(t, idx.to(X.dtype))
        factor = torch.where((codes == d + 1)[:, None], db / spacing[d], b)
        flat = (flat[:, :, None] * size + idx[:, None, :]).reshape(n, -1)
        weight = (weight[:, :, None] * factor[:, None, :]).reshape(n, -1)
    return flat, weight


def interpolation_guess(
    X: Tensor, grid: Grid, codes: Tensor, order: int = 4, num_quad: int = 32, sparse: bool = False
) -> Tensor:
    """Initial guess ``W (n, M)`` for the whitening solves ``K_uu x = k*_{u,n}`` (Eq. 20):
    local tensor-product Lagrange interpolation weights of order ``order`` per axis (the
    ``order`` grid points around ``x_n``; their derivative along axis ``d`` for derivative
    codes ``d + 1``). A line integral from the origin to ``x_n`` (code ``-1``) is linear in
    the point functionals along it, so its guess is the ``num_quad``-point Gauss-Legendre
    sum ``|x_n| sum_q w_q W(t_q x_n)`` of the weights at the nodes (the quadrature of
    :func:`~bo_ncgp.models.hipgp.interdomain.cross_covariance`). ``sparse``: ``W`` as a sparse
    CSR matrix (``order^D`` entries per point row, at most ``num_quad`` times that per line
    integral).

    A stationary kernel that is smooth on the scale of the grid spacing is interpolated
    almost exactly, ``k(Z, x_n) ~= K_uu W_n`` (the structured kernel interpolation of
    Wilson and Nickisch 2015), so ``W_n`` is close to ``K_uu^{-1} k*_{u,n}`` in the norm
    that matters for ``k_n = R^T K_uu^{-1} k*_{u,n}`` (``K_uu``'s energy norm, ``|R^T e|``):
    (P)CG started there needs a fraction of the iterations it needs from zero to reach a
    given accuracy of ``k_n``.

    Example:
        >>> g = Grid([0.0], [1.0], (11,))
        >>> X, codes = torch.tensor([[0.25], [0.5]]), torch.tensor([0, -1])  # a value, an integral
        >>> W = interpolation_guess(X, g, codes)
        >>> f = torch.sin(3 * g.points()[:, 0])  # a cubic reproduces smooth functions
        >>> bool(abs(W[0] @ f - torch.sin(torch.tensor(0.75))) < 1e-3)
        True
        >>> exact = (1 - torch.cos(torch.tensor(1.5))) / 3  # int_0^0.5 sin(3 x) dx
        >>> bool(abs(W[1] @ f - exact) < 1e-3)
        True
        >>> S = interpolation_guess(X, g, codes, sparse=True)
        >>> S.layout, bool(torch.allclose(S.to_dense(), W))
        (torch.sparse_csr, True)
    """
    n, D = X.shape
    order = int(order)
    codes = codes.reshape(-1)
    owners, cols, vals = [], [], []
    point = codes >= 0
    if bool(point.any()):
        rows = point.nonzero().squeeze(-1)
        flat, weight = _local_weights(X[rows], grid, codes[rows], order)
        owners.append(rows[:, None].expand_as(flat))
        cols.append(flat)
        vals.append(weight)
    ints = ~point
    if bool(ints.any()):
        rows = ints.nonzero().squeeze(-1)
        Xi = X[rows]
        t, w = _gauss_legendre(num_quad, X)
        nodes = (t.view(-1, 1, 1) * Xi.unsqueeze(0)).reshape(-1, D)  # (Q * ni, D), node-major
        values = torch.zeros(nodes.shape[0], dtype=torch.long, device=X.device)
        flat, weight = _local_weights(nodes, grid, values, order)
        owners.append(rows.repeat(num_quad)[:, None].expand_as(flat))
        cols.append(flat)
        vals.append(weight * (w.view(-1, 1) * Xi.norm(dim=-1).view(1, -1)).reshape(-1, 1))
    index = (torch.cat([o.reshape(-1) for o in owners]), torch.cat([c.reshape(-1) for c in cols]))
    value = torch.cat([v.reshape(-1) for v in vals])
    if sparse:
        return csr_from_coo(
            torch.sparse_coo_tensor(
                torch.stack(index), value, (n, grid.num_points), check_invariants=True
            )
        )
    return X.new_zeros(n, grid.num_points).index_put_(index, value, accumulate=True)


class FFTWhitener:
    """HIP-GP whitening from the circulant embedding of ``K_uu`` (Eqs. 16-22).

    Example:
        >>> from gpytorch.kernels import MaternKernel
        >>> kern, grid = MaternKernel(nu=1.5), Grid([0.0], [2.0], (16,))
        >>> kern.lengthscale = 0.3
        >>> k_un = kern(2 * torch.rand(3, 1), grid.points()).to_dense()  # rows k*_{u,n}
        >>> w = FFTWhitener(kern, grid)
        >>> k_n = w.whiten(k_un)
        >>> k_n.shape, w.num_whitened  # N = 2 M whitened variables on a 1-D grid
        (torch.Size([3, 32]), 32)
        >>> bool(torch.allclose(w.root_mv(k_n), k_un, atol=1e-5))  # R k_n = k*_{u,n}
        True
        >>> nys = CholeskyWhitener(kern, grid).whiten(k_un).square().sum(-1)  # k*^T K_uu^-1 k*
        >>> bool(torch.allclose(k_n.square().sum(-1), nys, atol=1e-5))  # same as Cholesky
        True
    """

    def __init__(
        self,
        kernel,
        grid: Grid,
        jitter: float = 0.0,
        pcg_tol: float = 1e-6,
        pcg_max_iters: int | None = None,
        precondition: bool = True,
        factor: int | tuple[int, ...] = 2,
    ) -> None:
        c = circulant_first_row(kernel, grid, factor=factor)
        self.embedding = CirculantEmbedding(c, grid_shape=grid.shape, jitter=jitter)
        self.whitened_shape = self.embedding.embedding_shape
        self.pcg_tol, self.pcg_max_iters = pcg_tol, pcg_max_iters
        self.precondition = precondition
        self.last_result: CGResult | None = None
        #: ``K_uu^{-1} k*_{u,n}`` of the last :meth:`whiten` (detached), a warm start for the
        #: next solve with the same observations
        self.last_solution: Tensor | None = None
        #: ``(n,)`` rows of the last :meth:`whiten` with ``start_tol`` whose start was kept
        self.last_accepted: Tensor | None = None

    @property
    def num_whitened(self) -> int:
        return self.embedding.num_whitened

    def whiten(
        self, k_un: Tensor, x0: Tensor | None = None, start_tol: float | None = None
    ) -> Tensor:
        """``(n, M)`` rows ``k*_{u,n}^T`` -> ``(n, N)`` rows ``k_n^T = R^T K_uu^{-1} k*_{u,n}``
        (Eq. 20): ``R^T`` applied to :meth:`solve`. See :meth:`solve` for ``x0`` and
        ``start_tol``."""
        return self.embedding.root_t_mv(self.solve(k_un, x0=x0, start_tol=start_tol))

    def solve(
        self, k_un: Tensor, x0: Tensor | None = None, start_tol: float | None = None
    ) -> Tensor:
        """``(n, M)`` solutions ``K_uu^{-1} k*_{u,n}`` of the PCG solves of :meth:`whiten`
        (without forming the rows); ``x0`` ``(n, M)`` warm-starts them (e.g.
        :attr:`last_solution` of the same rows).

        ``start_tol`` (with ``x0``): keep the start of every row whose estimated relative
        error of ``k_n`` (:meth:`start_errors`) is at most ``start_tol``, and run PCG
        (capped at ``pcg_max_iters``) only for the others, on the correction ``K_uu d = r``
        with ``r = k*_{u,n} - K_uu x0`` from zero (the iterates of PCG from ``x0``). Kept
        rows cost one ``K_uu`` and one preconditioner product; their ``k_n = R^T x0`` is
        differentiable through ``R`` only (``x0`` is a constant), as with
        ``pcg_max_iters=0`` in :class:`~bo_ncgp.models.hipgp.HIPGP`.

        Example:
            >>> from gpytorch.kernels import MaternKernel
            >>> kern, grid = MaternKernel(nu=2.5).double(), Grid([0.0], [1.0], (64,))
            >>> kern.lengthscale = 0.1  # 6 grid spacings: the interpolation start is good
            >>> grid = grid.to(torch.float64)
            >>> X = torch.rand(4, 1, dtype=torch.float64)
            >>> k_un = kern(X, grid.points()).to_dense()
            >>> w = FFTWhitener(kern, grid, jitter=1e-8, pcg_max_iters=3)
            >>> W = interpolation_guess(X, grid, torch.zeros(4, dtype=torch.long))
            >>> k_n = w.whiten(k_un, x0=W, start_tol=0.05)
            >>> bool(w.last_accepted.all()), bool(torch.equal(k_n, w.root_t_mv(W)))
            (True, True)
        """
        emb = self.embedding
        self.last_accepted = None
        if start_tol is None or x0 is None:
            sol, res = emb.solve(
                k_un,
                precondition=self.precondition,
                tol=self.pcg_tol,
                max_iters=self.pcg_max_iters,
                x0=x0,
            )
            self.last_result, self.last_solution = res, sol.detach()
            return sol
        x0 = x0.detach()
        kuu_x0 = emb.kuu_mv(x0)
        r = k_un - kuu_x0  # differentiable: the right-hand side of the correction
        ok = self.start_errors(x0, r.detach(), kuu_x0.detach()) <= start_tol
        self.last_accepted, res, sol = ok, None, x0
        if not bool(ok.all()):
            idx = (~ok).nonzero().squeeze(-1)
            # PCG's tolerance is relative to |k*_{u,n}|, the correction's to |r|
            ratio = k_un[idx].detach().norm(dim=-1) / r[idx].detach().norm(dim=-1)
            d, res = emb.solve(
                r[idx],
                precondition=self.precondition,
                tol=self.pcg_tol * float(ratio.min().clamp(max=1e12)),
                max_iters=self.pcg_max_iters,
            )
            sol = x0.index_put((idx,), x0[idx] + d)
        self.last_result, self.last_solution = res, sol.detach()
        return sol

    @torch.no_grad()
    def start_errors(self, x0: Tensor, r: Tensor, kuu_x0: Tensor) -> Tensor:
        """Estimated relative errors ``|R^T (x0 - x*)| / |R^T x*|`` of starts ``x0 (n, M)`` of
        the solves ``K_uu x* = k*_{u,n}``, from their residuals ``r = k*_{u,n} - K_uu x0``
        and ``K_uu x0``: ``sqrt(r^T P r / x0^T K_uu x0)``, the circulant preconditioner
        ``P`` (Eqs. 21-22) standing in for ``K_uu^{-1}`` in ``|R^T e|^2 = r^T K_uu^{-1} r``
        (for a PSD embedding the top-left block of ``C^{-1}`` bounds ``K_uu^{-1}`` from
        above); ``inf`` where ``x0^T K_uu x0 <= 0`` (e.g. a zero start).

        Example:
            >>> from gpytorch.kernels import RBFKernel
            >>> kern, grid = RBFKernel(), Grid([0.0], [1.0], (32,))
            >>> kern.lengthscale = 0.2
            >>> w = FFTWhitener(kern, grid, jitter=1e-4)
            >>> x0 = torch.zeros(1, 32)
            >>> r = kern(torch.tensor([[0.5]]), grid.points()).to_dense()
            >>> w.start_errors(x0, r, torch.zeros(1, 32))  # no start at all
            tensor([inf])
        """
        err2 = (r * self.embedding.precond_mv(r)).sum(-1).clamp_min(0)
        energy = (x0 * kuu_x0).sum(-1)
        safe = torch.where(energy > 0, energy, torch.ones_like(energy))
        return torch.where(energy > 0, (err2 / safe).sqrt(), torch.full_like(energy, math.inf))

    def root_mv(self, e: Tensor) -> Tensor:
        """``u = R eps`` (Eq. 11)."""
        return self.embedding.root_mv(e)

    def root_t_mv(self, v: Tensor) -> Tensor:
        """``R^T v`` for ``v (..., M)``, result ``(..., N)`` (Eq. 20 without the solve)."""
        return self.embedding.root_t_mv(v)


class CholeskyWhitener:
    """Cholesky whitening ``R = chol(K_uu)`` (the standard SVGP baseline).

    Example:
        >>> from gpytorch.kernels import MaternKernel
        >>> kern, grid = MaternKernel(nu=1.5), Grid([0.0, 0.0], [1.0, 1.0], (4, 4))
        >>> k_un = kern(torch.rand(5, 2), grid.points()).to_dense()  # rows k*_{u,n}
        >>> w = CholeskyWhitener(kern, grid, jitter=1e-6)
        >>> k_n = w.whiten(k_un)
        >>> k_n.shape, w.num_whitened, w.whitened_shape
        (torch.Size([5, 16]), 16, (4, 4))
        >>> bool(torch.allclose(w.root_mv(k_n), k_un, atol=1e-5))  # L k_n = k*_{u,n}
        True
    """

    def __init__(self, kernel, grid: Grid, jitter: float = 0.0) -> None:
        Z = grid.points()
        K = kernel(Z).to_dense()
        if jitter:
            K = K + jitter * torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
        self.L = stable_cholesky(K, name="K_uu")
        self.whitened_shape = grid.shape
        self.last_result = self.last_solution = None

    @property
    def num_whitened(self) -> int:
        return self.L.shape[-1]

    def whiten(self, k_un: Tensor, x0: Tensor | None = None) -> Tensor:
        """``(n, M)`` -> ``(n, M)`` rows of ``L^{-1} k*_{u,n}`` (a direct solve: ``x0`` is
        ignored)."""
        return solve_lower(self.L, k_un.mT).mT

    def root_mv(self, e: Tensor) -> Tensor:
        return e @ self.L.mT
