"""Newton's method as a sequence of GP regressions: the outer loop of IterNCGP.

Tatzel et al., Algorithm 1 (Sec. 3.1, Prop. A.1):

    line 4   buffers S, T (empty, or carried over from an earlier fit)
    line 5   for i = 0, 1, ... while not OuterStoppingCriterion()
    lines 6-7   W(f_i)^{-1} and pseudo targets y_hat(f_i)       (problem.py)
    line 8      GP(m_ij, K_ij), v_j <- IterGP(..., S, T)         (itergp.py)
    line 9      f_{i+1} <- K v_j + m

With ``recycle=True`` the buffers ``S``, ``T`` of step ``i`` enter the virtual solver run of
step ``i + 1`` (Sec. 3.3); otherwise every step starts from ``C_0 = 0``. With
``line_search=True`` (an extension, :mod:`.linesearch`) line 9 backtracks on the log posterior
when the full step would decrease it. With ``covariance_targets > 0`` (an extension) the loop
ends with one more Newton step at its last iterate whose solver takes the block action of
:class:`~bo_ncgp.models.iterncgp.policies.CovariancePolicy` (after the recycled actions), so
that the returned belief carries little computational uncertainty in the covariance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, NonFiniteError
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.models.iterncgp.belief import Belief
from bo_ncgp.models.iterncgp.itergp import itergp
from bo_ncgp.models.iterncgp.linesearch import backtracking_step
from bo_ncgp.models.iterncgp.operators import LatentKernelOperator
from bo_ncgp.models.iterncgp.policies import CovariancePolicy, Policy
from bo_ncgp.models.iterncgp.problem import PseudoRegressionProblem
from bo_ncgp.models.iterncgp.recycling import ActionBuffers
from bo_ncgp.models.iterncgp.stopping import MaxIterations, RelativeChange, ResidualNorm

__all__ = ["LaplaceState", "NewtonConfig", "NewtonStepInfo", "newton_laplace"]

#: ``(newton_step, solver_iter, belief, problem) -> stop?``
NewtonHook = Callable[[int, int, Belief, PseudoRegressionProblem], bool | None]


@dataclass
class NewtonConfig:
    """Settings of the two loops (see :class:`~bo_ncgp.models.iterncgp.IterNCGP`).

    Example:
        >>> cfg = NewtonConfig(max_solver_iters=2, max_newton_steps=5)  # 2 products with K/step
        >>> cfg.max_solver_iters, cfg.recycle, cfg.line_search
        (2, True, True)
    """

    max_newton_steps: int = 20
    max_solver_iters: int | None = 10
    tol: float = 1e-2
    solver_atol: float = 1e-5
    solver_rtol: float = 1e-5
    recycle: bool = True
    compression_rank: int | None = None
    line_search: bool = True
    covariance_targets: int = 0


@dataclass
class NewtonStepInfo:
    """Diagnostics of one Newton step (:attr:`LaplaceState.steps`).

    Example:
        >>> info = NewtonStepInfo(0, solver_iters=4, recycled_rank=0, rank=4,
        ...                       residual_norm=1e-3, rel_change=0.5)
        >>> info.step_size  # a full Newton step unless the line search damped it
        1.0
    """

    step: int
    solver_iters: int
    recycled_rank: int
    rank: int
    residual_norm: float
    rel_change: float
    step_size: float = 1.0


@dataclass
class LaplaceState:
    """Result of :func:`newton_laplace`.

    Attributes:
        f: last Newton iterate ``f_{i+1} = m + K w`` at the training inputs, ``(*b, C, n, 1)``.
        w: its representer weights (``= v_j`` of the last step unless the line search damped it).
        belief: belief of the last step (``v_j`` and the root ``Q_j`` of ``C_j``).
        S, T: action buffer and ``K S`` after the last step (for recycling / conditioning).
        steps: per-step diagnostics.
        converged: the outer stopping criterion was met.
        interrupted: a hook asked to stop.

    Example (a run: :func:`newton_laplace`):
        >>> import dataclasses
        >>> [f.name for f in dataclasses.fields(LaplaceState)][:5]
        ['f', 'w', 'belief', 'S', 'T']
    """

    f: Tensor
    w: Tensor
    belief: Belief
    S: Tensor
    T: Tensor
    steps: list[NewtonStepInfo] = field(default_factory=list)
    converged: bool = False
    interrupted: bool = False


def newton_laplace(
    kernel_op: LatentKernelOperator,
    likelihood: Likelihood,
    y: Tensor,
    prior_mean: Tensor,
    f0: Tensor,
    policy: Policy,
    config: NewtonConfig,
    buffers: ActionBuffers | None = None,
    on_iteration: NewtonHook | None = None,
    w0: Tensor | None = None,
) -> LaplaceState:
    """Algorithm 1 from ``f0`` (and optional initial buffers ``S``, ``T = K S``).

    Args:
        kernel_op: products with ``K``.
        likelihood: the likelihood.
        y: targets ``(*b, n)``.
        prior_mean: ``m(X)``, ``(1|C, n, 1)``.
        f0: initial iterate ``(*b, C, n, 1)`` (the prior mean for a fresh fit).
        policy: action policy.
        config: loop settings.
        buffers: initial buffers ``S``, ``T = K S``, used by the first step's virtual solver
            run.
        on_iteration: hook ``(i, j, belief, problem) -> stop?``.
        w0: representer weights of ``f0`` (``f0 = m + K w0``; zeros when omitted, i.e.
            ``f0 = m``); needed by the line search.

    Example (the mode satisfies ``f = K grad log p(y | f)`` for a zero prior mean):
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.iterncgp import CGPolicy
        >>> X = torch.linspace(0, 1, 8).unsqueeze(-1); y = (X[:, 0] > 0.5).to(X.dtype)
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> f0, lik, cfg = torch.zeros(1, 8, 1), Bernoulli(), NewtonConfig(tol=1e-4)
        >>> st = newton_laplace(K, lik, y, f0, f0, CGPolicy(), cfg)
        >>> grad = lik.grad(y, st.f[0, :, 0]).reshape(1, 8, 1)
        >>> st.converged, bool(torch.allclose(st.f, K.matmul(grad), atol=1e-3))
        (True, True)
        >>> bool(torch.allclose(st.f, K.matmul(st.w))), st.S.shape == st.T.shape  # f = m + K w
        (True, True)
        >>> info = st.steps[-1]  # the step that met the outer tolerance
        >>> info.step == len(st.steps) - 1, info.rel_change <= 1e-4, info.step_size
        (True, True, 1.0)
    """
    outer = RelativeChange(config.tol)
    inner_stop = MaxIterations(config.max_solver_iters) | ResidualNorm(
        config.solver_atol, config.solver_rtol
    )
    capacity = config.max_solver_iters if config.max_solver_iters is not None else 64
    f = f0
    w = torch.zeros_like(f0) if w0 is None else w0.expand_as(f0)
    state = None
    steps: list[NewtonStepInfo] = []
    converged = interrupted = False
    final = config.covariance_targets > 0
    i = 0
    while i < config.max_newton_steps or final:  # line 5
        covariance_step = i >= config.max_newton_steps or converged
        problem = PseudoRegressionProblem(kernel_op, likelihood, y, f, prior_mean)  # lines 6-7
        if not bool(torch.isfinite(problem.rhs_norm).all()):
            raise NonFiniteError(
                f"IterNCGP: Newton step {i} met non-finite pseudo targets (the likelihood's "
                f"gradient or curvature overflowed at max |f| = {float(f.abs().max()):.3g}): the "
                "targets are far from the prior mean; give the model a mean function at their "
                "scale (e.g. a ConstantMean at log(mean(y)) for counts) or rescale them"
            )
        recycled = buffers is not None and buffers.size > 0
        step_policy: Policy = policy
        step_stop = inner_stop
        if covariance_step:  # the covariance step at the last iterate
            final = False
            step_policy = CovariancePolicy(config.covariance_targets)
            step_stop = MaxIterations(None)
        step_policy.reset(problem, recycled)
        hook = None
        if on_iteration is not None:

            def hook(j: int, belief: Belief, i: int = i, problem=problem) -> bool | None:
                return on_iteration(i, j, belief, problem)

        res = itergp(  # line 8
            problem,
            step_policy,
            step_stop,
            buffers,
            config.compression_rank,
            capacity=max(1, min(capacity, 4096)),
            on_iteration=hook,
        )
        # line 9: f_{i+1} = m + K v_j (damped by the line search when that is on)
        v, Kv = res.belief.v, res.belief.Kv
        # convergence is judged on the full step, so that damping never fakes convergence
        change = outer.change(f - prior_mean, Kv)
        alpha = torch.ones(f.shape[:-3], dtype=f.dtype, device=f.device)
        if config.line_search:
            v, Kv, alpha = backtracking_step(likelihood, y, prior_mean, w, f - prior_mean, v, Kv)
        f_new = prior_mean + Kv
        w = v
        steps.append(
            NewtonStepInfo(
                step=i,
                solver_iters=res.iterations,
                recycled_rank=res.recycled_rank,
                rank=res.belief.rank,
                residual_norm=float(res.residual_norm.detach().max()),
                rel_change=float(change.detach().max()),
                step_size=float(alpha.detach().min()),
            )
        )
        f = f_new
        state = res
        buffers = ActionBuffers(res.S, res.T) if config.recycle else None
        i += 1
        if res.interrupted:
            interrupted = True
            break
        if covariance_step:
            break
        if bool((change <= config.tol).all()):
            converged = True
            if not final:
                break
    if state is None:
        raise InputDataError("newton_laplace: max_newton_steps must be >= 1")
    return LaplaceState(
        f=f,
        w=w,
        belief=state.belief,
        S=state.S,
        T=state.T,
        steps=steps,
        converged=converged,
        interrupted=interrupted,
    )
