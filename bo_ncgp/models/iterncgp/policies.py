"""Action policies of IterNCGP's inner solver (Tatzel et al., Algorithm 2, line 6; Sec. 3.2).

An action ``s_j`` in R^{NC} selects which linear combination of the residual the solver
observes next (``alpha_j = s_j^T r_{j-1}``). A new policy is one small class: subclass
:class:`Policy` and implement ``__call__``.

* :class:`CGPolicy` -- residual actions ``s_j = r_{j-1}``: conjugate gradients (Sec. 3.2,
  "(Conjugate) Gradient Policy"; Wenger et al. 2022, Tab. 1);
* :class:`JacobiCGPolicy` -- preconditioned residual actions ``s_j = D^{-1} r_{j-1}`` with
  ``D = diag(K_hat) = diag(K) + diag(W^{-1})``: preconditioned CG (Wenger et al. 2022, Tab. 1,
  with the Jacobi preconditioner). Points whose curvature ``W`` is small (confidently
  classified, saturated logits) carry a large noise ``W^{-1}`` and receive little weight, so
  the actions concentrate on the data that move the posterior;
* :class:`CovariancePolicy` -- block actions ``W K(X, Z)`` for the kernel columns at pivot
  points ``Z`` (with the preconditioned residual): exact predictive covariances for the
  Nystrom approximation of ``K`` at ``Z``, all in one product with ``K``; IterNCGP's
  covariance step (``covariance_targets``);
* :class:`UnitVectorPolicy` -- unit vectors ``s_j = e_j``: partial Cholesky, i.e. exact
  conditioning on a growing subset of the data (Sec. 3.2, "Unit Vector Policy = Subset of
  Data"), in data order or a given permutation of the points. Vectors are enumerated point
  by point (all C latents of one point, then the next point), so after ``k C`` actions the
  first ``k`` points are used.

Actions are returned in the latent layout ``(*b, C, n, 1)`` (a block of ``k`` actions:
``(*b, C, n, k)``, one product with ``K`` for all of them) and already projected onto the
range of ``W`` (see :mod:`bo_ncgp.models.iterncgp.problem`).
"""

from __future__ import annotations

import abc
import copy

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.linalg._args import check_count
from bo_ncgp.linalg.pivoted_cholesky import pivoted_cholesky
from bo_ncgp.linalg.sparse_gp import latent_block
from bo_ncgp.models.iterncgp.problem import PseudoRegressionProblem

__all__ = [
    "CGPolicy",
    "CovariancePolicy",
    "JacobiCGPolicy",
    "Policy",
    "UnitVectorPolicy",
    "make_policy",
]


class Policy(abc.ABC):
    """Base class: ``policy(residual, problem, iteration) -> action or None`` (exhausted).

    A user policy that observes the point with the largest residual next:

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.iterncgp import IterNCGP
        >>> class GreedyPolicy(Policy):
        ...     def __call__(self, residual, problem, iteration):
        ...         s = torch.zeros_like(residual)
        ...         s.view(-1)[residual.abs().argmax()] = 1.0
        ...         return problem.project(s)
        >>> X = torch.rand(12, 1); y = (X[:, 0] > 0.5).to(X.dtype)
        >>> model = IterNCGP(gpytorch.kernels.RBFKernel(), Bernoulli(), policy=GreedyPolicy(),
        ...                  max_solver_iters_per_step=4, backend="dense").fit(X, y)
        >>> mean, var = model.predict_f(X[:3])
        >>> mean.shape, bool((var > 0).all())
        (torch.Size([3]), True)
    """

    #: whether an action that adds no new direction ends the inner loop (CG: the residual
    #: would repeat); a policy whose next action differs anyway sets this to False
    stop_on_dependent_action: bool = True

    def reset(self, problem: PseudoRegressionProblem, recycled: bool) -> None:  # noqa: B027
        """Called at the start of every Newton step; ``recycled`` says whether the actions of
        earlier steps are kept in the recycling buffers."""

    @abc.abstractmethod
    def __call__(
        self, residual: Tensor, problem: PseudoRegressionProblem, iteration: int
    ) -> Tensor | None:
        """The next action ``(*b, C, n, 1)`` (or a block of ``k`` actions ``(*b, C, n, k)``),
        or None when the policy has nothing left."""

    def extend(self, num_old: int, num_new: int) -> Policy:
        """A copy of this policy for the data set grown by ``num_new`` points (appended)."""
        return copy.deepcopy(self)


class CGPolicy(Policy):
    """Residual actions ``s_j = r_{j-1}`` (IterNCGP-CG).

    Example:
        >>> r = torch.randn(1, 5, 1)
        >>> torch.equal(CGPolicy()(r, None, 0), r)
        True
    """

    def __call__(
        self, residual: Tensor, problem: PseudoRegressionProblem, iteration: int
    ) -> Tensor | None:
        return residual


class JacobiCGPolicy(Policy):
    """Jacobi-preconditioned residual actions ``s_j = P D^{-1} r_{j-1}``,
    ``D = diag(K) + diag(W(f_i)^{-1})`` (IterNCGP-PCG).

    The diagonal is computed once per Newton step (:meth:`reset`: ``C`` products with
    ``W^{-1}``, O(N C^2)); each action costs O(N C) on top of the product with ``K``.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.iterncgp import LatentKernelOperator, PseudoRegressionProblem
        >>> X = torch.linspace(0, 1, 5).unsqueeze(-1); y = (X[:, 0] > 0.5).double()
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> f = torch.tensor([-3.0, -1, 0, 1, 3]).reshape(1, 5, 1).double()
        >>> problem = PseudoRegressionProblem(K, Bernoulli(), y, f, 0.0)
        >>> policy = JacobiCGPolicy(); policy.reset(problem, recycled=False)
        >>> s = policy(torch.ones(1, 5, 1).double(), problem, 0)
        >>> bool(s[0, 2, 0] > s[0, 0, 0])  # the uncertain point (f = 0) weighs most
        True
    """

    def __init__(self) -> None:
        self._inv_diag: Tensor | None = None

    def reset(self, problem: PseudoRegressionProblem, recycled: bool) -> None:
        self._inv_diag = (problem.kernel_diagonal() + problem.noise_diagonal()).reciprocal()

    def __call__(
        self, residual: Tensor, problem: PseudoRegressionProblem, iteration: int
    ) -> Tensor | None:
        if self._inv_diag is None:
            self.reset(problem, recycled=False)
        return problem.project(self._inv_diag * residual)


class UnitVectorPolicy(Policy):
    """Unit-vector actions ``s_j = e_j`` (IterNCGP-Chol / subset of data).

    Args:
        permutation: order in which the points are used (default: data order).

    With recycling the policy continues where the previous Newton step stopped (earlier
    points stay in the recycled buffers); without recycling every Newton step starts again
    from the first point, which is exactly the subset-of-data Laplace approximation.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.iterncgp import LatentKernelOperator
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), torch.rand(3, 1), 1, "dense")
        >>> y = torch.tensor([0.0, 1.0, 1.0])
        >>> problem = PseudoRegressionProblem(K, Bernoulli(), y, torch.zeros(1, 3, 1), 0.0)
        >>> pol = UnitVectorPolicy(permutation=torch.tensor([2, 0, 1]))
        >>> pol.reset(problem, recycled=False); r = problem.rhs
        >>> [int(pol(r, problem, j).argmax()) for j in range(3)], pol(r, problem, 3)
        ([2, 0, 1], None)
    """

    stop_on_dependent_action = False

    def __init__(self, permutation: Tensor | None = None) -> None:
        if permutation is not None:
            permutation = torch.as_tensor(permutation, dtype=torch.long).cpu()
            if permutation.dim() != 1:
                raise InputDataError(
                    "UnitVectorPolicy: permutation must be a 1-D tensor of indices"
                )
        self.permutation = permutation
        self._order: Tensor | None = None
        self._cursor = 0
        self._num_latents = 1

    def reset(self, problem: PseudoRegressionProblem, recycled: bool) -> None:
        n = problem.kernel_op.n
        self._num_latents = problem.C
        if self._order is None or self._order.numel() != n:
            order = torch.arange(n, device="cpu") if self.permutation is None else self.permutation
            if order.numel() != n or not torch.equal(
                torch.sort(order).values, torch.arange(n, device="cpu")
            ):
                raise InputDataError(
                    f"UnitVectorPolicy: permutation must be a permutation of range({n}) (the "
                    f"number of training points), got {order.numel()} entries"
                )
            self._order = order
            self._cursor = 0
        if not recycled:
            self._cursor = 0

    def __call__(
        self, residual: Tensor, problem: PseudoRegressionProblem, iteration: int
    ) -> Tensor | None:
        C = residual.shape[-3]
        if self._order is None or self._cursor >= self._order.numel() * C:
            return None
        point = int(self._order[self._cursor // C])
        latent = self._cursor % C
        self._cursor += 1
        s = torch.zeros_like(residual)
        s[..., latent, point, 0] = 1.0
        return problem.project(s)

    def extend(self, num_old: int, num_new: int) -> UnitVectorPolicy:
        """New points are used next (right after the point the cursor is in)."""
        new = copy.deepcopy(self)
        order = torch.arange(num_old, device="cpu") if self._order is None else self._order
        pos = -(-self._cursor // self._num_latents)  # ceil(cursor / C)
        new._order = torch.cat(
            [order[:pos], torch.arange(num_old, num_old + num_new, device="cpu"), order[pos:]]
        )
        new.permutation = new._order
        return new


class CovariancePolicy(Policy):
    """Block actions for the posterior covariance: ``W(f_i) K(X, Z)`` for the kernel columns
    at ``targets`` points ``Z`` (one per latent function and point), together with the
    Jacobi-preconditioned residual ``D^{-1} r_{j-1}`` of the mean system.

    For a kernel of rank ``m``, ``K = L L^T``, Woodbury's identity gives
    ``K_hat^{-1} L = W L (I + L^T W L)^{-1}``: the actions ``S = W L`` make the predictive
    covariance ``K(x, X) C_j K(X, x)`` (Eq. 9) exact. With ``L`` the kernel columns at the
    pivots ``Z`` of a greedy pivoted Cholesky factorisation of the prior ``K``
    (:func:`~bo_ncgp.linalg.pivoted_cholesky`, the latents' kernels summed) the actions are
    exact for the Nystrom approximation of ``K`` at ``Z`` and the computational uncertainty
    that remains is that of the Nystrom remainder. The solver still conditions on the true
    ``K_hat``, so the variances never fall below the Laplace ones. For the softmax the
    columns of one point sum to a vector in the null space of ``W`` and the last latent's
    column is left out (``C - 1`` columns per point).

    Each action is one product with ``K`` for all of its columns (one pass over a cached
    kernel matrix); by default (``block=None``) all targets form one action. The policy is
    exhausted (returns None) once all ``targets`` points were used.

    Args:
        targets: number of points ``Z``.
        block: points per action (None: all).

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.iterncgp import LatentKernelOperator, PseudoRegressionProblem
        >>> X = torch.rand(8, 1, dtype=torch.float64); y = (X[:, 0] > 0.5).double()
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> problem = PseudoRegressionProblem(K, Bernoulli(), y, X.new_zeros(1, 8, 1), 0.0)
        >>> policy = CovariancePolicy(targets=3, block=2); policy.reset(problem, recycled=False)
        >>> r = problem.rhs  # one residual column and one column per point (C = 1)
        >>> policy(r, problem, 0).shape[-1], policy(r, problem, 1).shape[-1]
        (3, 2)
        >>> policy(problem.rhs, problem, 2) is None  # the three targets are used
        True
    """

    stop_on_dependent_action = False

    def __init__(self, targets: int, block: int | None = None) -> None:
        self.targets = check_count(targets, "targets", "CovariancePolicy", minimum=1)
        if block is not None:
            block = check_count(block, "block", "CovariancePolicy", minimum=1)
        self.block = block
        self._pivots: Tensor | None = None
        self._inv_diag: Tensor | None = None
        self._cursor = 0

    def reset(self, problem: PseudoRegressionProblem, recycled: bool) -> None:
        self._inv_diag = (problem.kernel_diagonal() + problem.noise_diagonal()).reciprocal()
        op = problem.kernel_op
        if op.X.dim() != 2:
            raise UnsupportedError(
                "CovariancePolicy: needs training inputs without batch dimensions, got X of "
                f"shape {tuple(op.X.shape)}"
            )
        rank = min(self.targets, op.n)
        with torch.no_grad():  # the prior kernel (summed over the latents of a per-latent one)
            K = op.op if op.shared else latent_block(op.kernel, op.X).sum(0)
            self._pivots = pivoted_cholesky(K, rank).pivots
        self._cursor = 0

    def _columns(self, idx: Tensor, problem: PseudoRegressionProblem) -> Tensor:
        """``K(X, z)`` of the first ``C - 1`` latents (all ``C`` for ``C = 1``) at the points
        ``idx``, ``(C, n, C' len(idx))``, in the latent layout."""
        op = problem.kernel_op
        C, n, k = problem.C, op.n, idx.numel()
        with torch.no_grad():
            Kz = latent_block(op.kernel, op.X, op.X[idx]).expand(C, n, k)
        used = max(C - 1, 1)
        B = Kz.new_zeros(C, n, used, k)
        for c in range(used):
            B[c, :, c] = Kz[c]
        return B.reshape(C, n, used * k)

    def __call__(
        self, residual: Tensor, problem: PseudoRegressionProblem, iteration: int
    ) -> Tensor | None:
        if self._pivots is None or self._inv_diag is None:
            self.reset(problem, recycled=False)
        if self._cursor >= self._pivots.numel():
            return None
        step = self._pivots.numel() if self.block is None else self.block
        idx = self._pivots[self._cursor : self._cursor + step]
        self._cursor += idx.numel()
        V = self._columns(idx, problem)
        WV = problem.curvature_matmul(V.expand(*residual.shape[:-3], *V.shape))
        return problem.project(torch.cat([self._inv_diag * residual, WV], dim=-1))


def make_policy(policy: str | Policy) -> Policy:
    """``"cg"`` / ``"pcg"`` (:class:`JacobiCGPolicy`) / ``"unit_vector"`` or a
    :class:`Policy` instance (copied).

    Example:
        >>> type(make_policy("cg")).__name__, type(make_policy("unit_vector")).__name__
        ('CGPolicy', 'UnitVectorPolicy')
        >>> mine = UnitVectorPolicy(permutation=torch.tensor([2, 0, 1]))
        >>> pol = make_policy(mine)  # a copy: fitting a model never changes ``mine``
        >>> pol is mine, torch.equal(pol.permutation, mine.permutation)
        (False, True)
    """
    if isinstance(policy, Policy):
        return copy.deepcopy(policy)
    if policy == "cg":
        return CGPolicy()
    if policy == "pcg":
        return JacobiCGPolicy()
    if policy == "unit_vector":
        return UnitVectorPolicy()
    raise InputDataError(
        f"IterNCGP: unknown policy {policy!r}; use 'cg', 'pcg', 'unit_vector' or a Policy instance"
    )
