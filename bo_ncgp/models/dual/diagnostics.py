"""Hyperparameter drift of a streaming :class:`~bo_ncgp.models.dual.DualSVGP` against offline fits.

A streaming model claims to optimise a hyperparameter objective (Eq. 26 with the Sec. 3.4
memory scaling, or the ELBO of Eq. 21). :class:`DriftTracker` records, after an update, three
sets of hyperparameters side by side:

* ``stream`` -- the streaming model's;
* ``own`` -- the optimum of the streaming model's *own* objective at its current sites,
  memory and ``Z`` (L-BFGS on a copy, :func:`own_optimum`): the distance ``stream -> own`` is
  the optimisation error of the update;
* ``offline`` -- an offline fit of the same model class on all data seen so far
  (:func:`fit_offline`: every point held as a site, the same ``Z`` policy, sites converged and
  L-BFGS on the same objective, alternated until the hyperparameters stop moving): the
  distance ``own -> offline`` is the error of the streaming objective itself (memory scaling,
  the summarised old data).

and the objective gap ``F(theta_offline) - F(theta_stream)``, where ``F(theta)`` is the offline
objective with the sites converged at ``theta`` (:func:`offline_objective`), in nats and per
data point. With pivoted-Cholesky inducing inputs ``Z`` is chosen at each ``theta``, so ``F``
is not smooth and the gap can be slightly negative (so can an offline fit stopped after too
few rounds). The experiment ``experiments/chang2023/drift.py`` plots the records.

Example:
    >>> import gpytorch
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> from bo_ncgp.models.dual import DualSVGP
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.rand(40, 1, generator=g, dtype=torch.float64)
    >>> y = (torch.sin(6 * X[:, 0]) > 0).double()
    >>> kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
    >>> model = DualSVGP(kernel, Bernoulli(), X[:5], memory_size=5, generator=g)
    >>> tracker = DriftTracker(max_rounds=3)
    >>> rec = tracker.record(model.update(X, y), X, y)
    >>> sorted(rec.stream), rec.num_data, len(tracker.records)
    (['kernel.base_kernel.lengthscale', 'kernel.outputscale'], 40, 1)
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.models.dual.inducing import select_inducing_points
from bo_ncgp.models.dual.streaming import converge_sites
from bo_ncgp.models.training import minimize_lbfgs

if TYPE_CHECKING:
    from bo_ncgp.models.dual.model import DualSVGP

__all__ = [
    "DriftRecord",
    "DriftTracker",
    "claimed_objective",
    "fit_offline",
    "hyperparameter_distance",
    "hyperparameters",
    "offline_objective",
    "own_optimum",
]


def hyperparameters(model: DualSVGP) -> dict[str, list[float]]:
    """The trained hyperparameters of ``model`` (kernel and likelihood, and ``mean_constant``
    when it is learned), constrained values (e.g. ``outputscale``, not ``raw_outputscale``),
    flattened, keyed by their dotted names.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> k = RBFKernel(); k.lengthscale = 0.5
        >>> hyperparameters(DualSVGP(k, Bernoulli(), torch.rand(3, 1)))
        {'kernel.lengthscale': [0.5]}
    """
    out: dict[str, list[float]] = {}
    for prefix, module in (("kernel", model.kernel), ("likelihood", model.likelihood)):
        for name, param, constraint in module.named_parameters_and_constraints():
            if not param.requires_grad:
                continue
            value = param if constraint is None else constraint.transform(param)
            key = f"{prefix}.{name.replace('raw_', '')}"
            out[key] = [float(v) for v in value.detach().reshape(-1)]
    if model.learn_mean_constant:
        out["mean_constant"] = [model.mean_constant]
    return out


def hyperparameter_distance(a: dict[str, list[float]], b: dict[str, list[float]]) -> float:
    """The largest ``|log10(a_i / b_i)|`` over the positive hyperparameters both dictionaries
    hold (orders of magnitude apart; 0.1 is a factor 1.26). Entries that are not positive in
    both (e.g. a constant mean) are compared as ``|a_i - b_i|``.

    Example:
        >>> hyperparameter_distance({"s": [1.0, 2.0]}, {"s": [10.0, 2.0]})
        1.0
    """
    worst = 0.0
    for key in a.keys() & b.keys():
        for u, v in zip(a[key], b[key], strict=True):
            d = abs(math.log10(u / v)) if u > 0 and v > 0 else abs(u - v)
            worst = max(worst, d)
    return worst


def claimed_objective(model: DualSVGP, include_prior: bool = True) -> Tensor:
    """The objective the model's hyperparameter steps maximise, at its current state:
    :meth:`~bo_ncgp.models.dual.DualSVGP.log_marginal` (Eq. 26 with the memory scaling) for
    ``hyper_objective="dual"``, :meth:`~bo_ncgp.models.dual.DualSVGP.elbo` (Eq. 21) for
    ``"elbo"``; differentiable in the hyperparameters.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> X = torch.rand(5, 1)
        >>> model = DualSVGP(RBFKernel(), Gaussian(0.1), X, memory_size=None, num_hyper_steps=0)
        >>> bool(claimed_objective(model.update(X, X[:, 0])) == model.log_marginal())
        True
    """
    if model.hyper_objective == "elbo":
        return model.elbo(include_prior)
    return model.log_marginal(include_prior)


def _params(model: DualSVGP) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _offline_model(
    model: DualSVGP,
    X: Tensor,
    y: Tensor,
    kernel: gpytorch.kernels.Kernel,
    likelihood: torch.nn.Module,
    site_tolerance: float,
    mean_constant: float,
) -> DualSVGP:
    """Every point of ``(X, y)`` held as a site with ``kernel``, ``likelihood`` (shared, not
    copied) and the constant mean ``mean_constant`` (learned if ``model`` learns it); ``Z``
    by the policy of ``model``; sites converged."""
    from bo_ncgp.models.dual.model import DualSVGP

    if model.inducing_update == "fixed":
        Z = model.Z.detach()
    else:
        Z = select_inducing_points(kernel, X, model.max_inducing)
    off = DualSVGP(
        kernel,
        likelihood,
        Z,
        memory_size=None,
        memory_cap=None,
        rho=model.rho,
        num_inner_steps=model.num_inner_steps,
        num_hyper_steps=0,
        inducing_update="fixed",
        hyper_objective=model.hyper_objective,
        mean_constant=mean_constant,
        learn_mean_constant=model.learn_mean_constant,
    )
    off.update(X, y)
    converge_sites(off, site_tolerance)
    return off


def fit_offline(
    model: DualSVGP,
    X: Tensor,
    y: Tensor,
    *,
    start: DualSVGP | None = None,
    tolerance: float = 1e-4,
    site_tolerance: float = 1e-6,
    max_rounds: int = 30,
    max_iter: int = 100,
) -> DualSVGP:
    """An offline fit of ``model``'s class on all data ``(X, y)``: every point held as a site
    (no memory scaling, no summarised old data), ``Z`` by ``model``'s policy (the model's own
    ``Z`` for ``inducing_update="fixed"``, pivoted Cholesky on ``X`` at the current
    hyperparameters otherwise), rounds of (sites converged, L-BFGS to convergence on the same
    objective with the sites fixed) until no raw hyperparameter moves by more than
    ``tolerance`` (at most ``max_rounds``).

    Args:
        model: the streaming model (its settings, ``Z`` policy and, without ``start``, its
            hyperparameters as the starting point; it is not modified).
        X, y: all data seen so far.
        start: a model whose hyperparameters start the fit (e.g. the previous offline fit,
            to follow one optimum as data arrives).
        tolerance, site_tolerance, max_rounds, max_iter: convergence of the hyperparameters,
            of the sites (:func:`~bo_ncgp.models.dual.streaming.converge_sites`), the most
            rounds and the most L-BFGS iterations per round.

    Returns:
        The fitted model (its own copies of the kernel and likelihood).
    """
    src = model if start is None else start
    kernel, likelihood = copy.deepcopy(src.kernel), copy.deepcopy(src.likelihood)
    off = _offline_model(model, X, y, kernel, likelihood, site_tolerance, src.mean_constant)
    for _ in range(max_rounds):
        params = _params(off)
        if not params:
            break
        before = [p.detach().clone() for p in params]
        minimize_lbfgs(params, lambda o=off: -claimed_objective(o), max_iter, name="fit_offline")
        moved = max(
            float((p.detach() - b).abs().max()) for p, b in zip(params, before, strict=True)
        )
        off = _offline_model(model, X, y, kernel, likelihood, site_tolerance, off.mean_constant)
        if moved < tolerance:
            break
    return off


def offline_objective(model: DualSVGP, X: Tensor, y: Tensor, site_tolerance: float = 1e-6) -> float:
    """``F(theta)``: the offline objective (every point of ``(X, y)`` held as a site, ``Z`` by
    ``model``'s policy, sites converged) at ``model``'s hyperparameters (``model`` is not
    modified)."""
    kernel, likelihood = copy.deepcopy(model.kernel), copy.deepcopy(model.likelihood)
    with torch.no_grad():
        off = _offline_model(model, X, y, kernel, likelihood, site_tolerance, model.mean_constant)
        return float(claimed_objective(off))


def own_optimum(model: DualSVGP, max_iter: int = 200) -> DualSVGP:
    """A copy of ``model`` with its hyperparameters at the optimum of its own claimed
    objective (:func:`claimed_objective`: memory, sites, ``Z`` and summarised old data held
    fixed), by L-BFGS (``max_iter`` iterations at most)."""
    own = model.copy()
    params = _params(own)
    if params:
        if own.rest_factor == "inducing":  # the factor on f(Z) held fixed, as update does
            with torch.no_grad():
                own._rest_anchor = torch.linalg.cholesky(own._Kzz())
        try:
            minimize_lbfgs(params, lambda: -claimed_objective(own), max_iter, name="own_optimum")
        finally:
            own._settle_rest()
    own._touch()
    return own


@dataclass
class DriftRecord:
    """One row of :class:`DriftTracker`: the hyperparameters after an update beside those of
    the optimum of the model's own objective (``own``) and of an offline fit on all data
    (``offline``); ``objective_*`` are :func:`offline_objective` values (``gap`` =
    ``objective_offline - objective_stream``, ``gap_per_point`` divided by ``num_data``);
    ``distance_*`` are :func:`hyperparameter_distance` values (orders of magnitude)."""

    update: int
    num_data: int
    memory: int
    stream: dict[str, list[float]]
    own: dict[str, list[float]] | None
    offline: dict[str, list[float]]
    objective_stream: float
    objective_offline: float
    gap: float
    gap_per_point: float
    distance_stream_offline: float
    distance_stream_own: float | None
    distance_own_offline: float | None
    seconds: float = field(default=0.0)


class DriftTracker:
    """Records a :class:`DriftRecord` per call of :meth:`record` (after an update).

    Args:
        own: also compute the optimum of the model's own objective (:func:`own_optimum`).
        warm_start: fit offline from two starts, the streaming model's hyperparameters and
            the previous offline fit's, and keep the fit with the larger objective (a start
            in a flat region, e.g. a collapsed outputscale, does not trap the tracked optimum);
            ``False``: from the streaming model's only.
        starts: more models whose hyperparameters start an offline fit each (e.g. a copy
            of the streaming model before its first update); the best fit is kept.
        **options: keywords of :func:`fit_offline` (``tolerance``, ``max_rounds``, ...).

    Attributes:
        records: the rows so far.
        offline: the last offline fit (``None`` before the first record).
    """

    def __init__(
        self,
        *,
        own: bool = True,
        warm_start: bool = True,
        starts: tuple[DualSVGP, ...] = (),
        **options: Any,
    ) -> None:
        self.own = own
        self.warm_start = warm_start
        self.starts = tuple(starts)
        self.options = options
        self.records: list[DriftRecord] = []
        self.offline: DualSVGP | None = None

    def record(self, model: DualSVGP, X: Tensor, y: Tensor) -> DriftRecord:
        """Compare ``model`` (after an update) with fits on all data seen so far ``(X, y)``."""
        t0 = time.perf_counter()
        site_tol = self.options.get("site_tolerance", 1e-6)
        starts = [None, *self.starts]
        if self.warm_start and self.offline is not None:
            starts.append(self.offline)
        best = None
        for start in starts:  # the best of the fits from all starts
            fit = fit_offline(model, X, y, start=start, **self.options)
            value = offline_objective(fit, X, y, site_tol)
            if best is None or value > best[1]:
                best = (fit, value)
        off, f_off = best
        self.offline = off
        f_stream = offline_objective(model, X, y, site_tol)
        stream, offline = hyperparameters(model), hyperparameters(off)
        own = hyperparameters(own_optimum(model)) if self.own else None
        gap = f_off - f_stream
        n = int(X.shape[0])
        rec = DriftRecord(
            update=len(self.records),
            num_data=n,
            memory=len(model.memory),
            stream=stream,
            own=own,
            offline=offline,
            objective_stream=f_stream,
            objective_offline=f_off,
            gap=gap,
            gap_per_point=gap / max(n, 1),
            distance_stream_offline=hyperparameter_distance(stream, offline),
            distance_stream_own=None if own is None else hyperparameter_distance(stream, own),
            distance_own_offline=None if own is None else hyperparameter_distance(own, offline),
            seconds=time.perf_counter() - t0,
        )
        self.records.append(rec)
        return rec

    def as_dicts(self) -> list[dict[str, Any]]:
        """The records as plain dictionaries (for JSON)."""
        return [asdict(r) for r in self.records]
