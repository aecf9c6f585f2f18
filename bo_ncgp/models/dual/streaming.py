"""One streaming step of the memory-based dual SVGP: Algorithm 1 of Chang et al. (2023).

:func:`update` is what :meth:`DualSVGP.update <bo_ncgp.models.dual.DualSVGP.update>` runs on a
batch: pivoted-Cholesky inducing update and projection (Sec. 3.4, Eq. 27), damped site steps
(Eqs. 23-24, 54), L-BFGS or Adam steps on the hyperparameter objective (Eq. 26 or Eq. 21)
under the non-finite policy of :mod:`bo_ncgp.models.training`, the BLS-weighted choice of
memory points whose sites stay individual while the others are folded into
``(lam_rest, B_rest)`` (Eq. 11, Sec. 3.5), and a
:class:`~bo_ncgp.exceptions.ModelCollapseWarning` when the prior variance collapses
(:func:`check_collapse`).

Example:
    >>> import torch
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> from bo_ncgp.models.dual import DualSVGP
    >>> X = torch.rand(12, 1); y = (X[:, 0] > 0.5).double()
    >>> model = DualSVGP(RBFKernel(), Bernoulli(), X[:4], memory_size=3, num_hyper_steps=2,
    ...                  hyper_optimizer="adam")
    >>> steps = []
    >>> _ = update(model, X, y, callback=lambda s: steps.append(s.step))
    >>> steps, len(model.memory), model.num_data
    ([0, 1], 3, 12)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import ModelCollapseWarning, NotPSDError, NumericalWarning
from bo_ncgp.likelihoods import Bernoulli, Gaussian, Likelihood, Softmax
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.models.base import Callback
from bo_ncgp.models.dual.inducing import select_inducing_points
from bo_ncgp.models.dual.memory import (
    bayesian_leverage_scores,
    sample_by_score,
    sample_reservoir,
    sample_stratified,
)
from bo_ncgp.models.dual.posterior import dual_factors, dual_predict
from bo_ncgp.models.dual.sites import damp, site_contributions, site_targets
from bo_ncgp.models.training import AdamStepper, FitClock, minimize_lbfgs

if TYPE_CHECKING:
    from bo_ncgp.models.dual.model import DualSVGP

__all__ = [
    "add_to_memory",
    "check_collapse",
    "conjugate_sites",
    "converge_sites",
    "fold",
    "hyper_optimizer",
    "hyper_steps",
    "inner_steps",
    "project_unenforced_constraints",
    "update",
]


def update(model: DualSVGP, X: Tensor, y: Tensor, callback: Callback | None = None) -> DualSVGP:
    """Algorithm 1 on the checked batch ``X (n, d)``, ``y (n,)``; returns ``model``.

    ``callback`` gets a :class:`~bo_ncgp.models.base.FitStep` after every hyperparameter step
    (``info``: ``round``, ``hyper_step``), or after every round when no hyperparameter steps
    run (``loss=None``); returning ``True`` skips the remaining steps and rounds, and the
    batch is still added to the memory or folded into the posterior. With a Gaussian
    likelihood the sites kept are those at the fitted noise (:func:`conjugate_sites`).
    """
    with torch.no_grad():
        if model.inducing_update == "pivoted_cholesky":
            Z_new = select_inducing_points(
                model.kernel, torch.cat([model._Z, X]), model.max_inducing
            )
            if Z_new.shape[0] > 0 and _factorisable(model, Z_new):  # else Z is kept
                model.project(Z_new)
    n, n_old, n_M = X.shape[0], model.num_data, len(model.memory)
    Xa = torch.cat([model.memory.X, X])
    ya = torch.cat([model.memory.y, y])
    eta_m, beta_m = model._memory_sites()
    zeros = X.new_zeros(model._C, n)
    eta, beta = torch.cat([eta_m, zeros], -1), torch.cat([beta_m, zeros], -1)
    weights = torch.cat([model._memory_weights(n_old), X.new_ones(n)])
    clock, reported = FitClock(), 0

    def report(loss: float | None, info: dict[str, int]) -> bool:
        nonlocal reported
        reported += 1
        return clock.notify(callback, reported - 1, model, loss, info)

    for r in range(model.num_rounds):
        eta, beta = inner_steps(model, Xa, ya, eta, beta)
        before = reported
        stop = False
        if model.num_hyper_steps > 0:
            active = (Xa, ya, eta, beta, weights, n_M > 0 and model.memory_scaling)
            stop = hyper_steps(model, active, report, r)
        if reported == before:  # no hyperparameter step ran: report the round
            stop = report(None, {"round": r})
        if stop:
            break
    with torch.no_grad():
        tied = conjugate_sites(model, ya)
        if tied is not None:  # the sites at the fitted noise
            eta, beta = tied
        model.memory.set_sites(eta[:, :n_M].mT, beta[:, :n_M].mT)
        add_to_memory(model, X, y, eta[:, n_M:], beta[:, n_M:])
        model._num_data = model._num_data + n
        check_collapse(model, X)
    model._touch()
    return model


def _factorisable(model: DualSVGP, Z_new: Tensor) -> bool:
    """Whether ``K(Z_new, Z_new)`` has a Cholesky factor (:func:`stable_cholesky`'s jitter
    included). At extreme hyperparameters (a lengthscale fitted to ~1e-6 on a binary input)
    the kernel's distances lose the zeros between equal inputs to cancellation, and the
    matrix of a new inducing set can be indefinite where that of the current one, checked by
    the last hyperparameter step, is not: the current set is then kept, with a
    :class:`~bo_ncgp.exceptions.NumericalWarning`."""
    try:
        stable_cholesky(model._Kzz(Z_new), name="K_zz")
    except NotPSDError as err:
        warnings.warn(
            f"DualSVGP: the kernel matrix of the new inducing set cannot be factorised ({err}); "
            "the current inducing set is kept. Priors on the kernel's hyperparameters keep "
            "them away from such values.",
            NumericalWarning,
            stacklevel=4,
        )
        return False
    return True


#: a prior variance below this fraction of the largest one seen after an update is a
#: collapse of the model (:class:`~bo_ncgp.exceptions.ModelCollapseWarning`)
COLLAPSE_WARN_FACTOR = 1e-2


@torch.no_grad()
def check_collapse(model: DualSVGP, X: Tensor) -> bool:
    """Warn (:class:`~bo_ncgp.exceptions.ModelCollapseWarning`, once until it recovers) when
    the mean prior variance of a latent at the batch ``X`` (the outputscale of a stationary
    kernel) fell below :data:`COLLAPSE_WARN_FACTOR` times the largest value seen after an
    earlier update: the hyperparameters drove the model towards its prior mean. Returns
    whether the model is collapsed. Only updates that learn hyperparameters are checked.

    Example:
        >>> import warnings
        >>> from gpytorch.kernels import ScaleKernel, RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> X = torch.rand(10, 1)
        >>> model = DualSVGP(ScaleKernel(RBFKernel()), Bernoulli(), X, num_hyper_steps=1)
        >>> check_collapse(model, X), check_collapse(model, X)
        (False, False)
        >>> model.kernel.outputscale = 1e-4
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     collapsed = check_collapse(model, X)
        >>> collapsed, caught[0].category.__name__
        (True, 'ModelCollapseWarning')
    """
    if model.num_hyper_steps == 0 or not model._hyperparameters():
        return False
    current = model._kxx(X, False).mean(-1).reshape(-1)
    ref = model._prior_var_ref
    if ref.shape != current.shape:
        model._prior_var_ref = current.clone()
        return False
    collapsed = bool((current < COLLAPSE_WARN_FACTOR * ref).any())
    if collapsed and not model._collapse_warned:
        i = int(torch.argmin(current / ref))
        warnings.warn(
            f"DualSVGP: the prior variance of latent {i} fell from {float(ref[i]):.3g} to "
            f"{float(current[i]):.3g} over the updates (the model collapsed towards its "
            "prior mean; keep a memory, put a prior on the outputscale or fix the "
            "hyperparameters)",
            ModelCollapseWarning,
            stacklevel=4,
        )
    model._collapse_warned = collapsed
    model._prior_var_ref = torch.maximum(ref, current)
    return collapsed


def inner_steps(
    model: DualSVGP, Xa: Tensor, ya: Tensor, eta: Tensor, beta: Tensor
) -> tuple[Tensor, Tensor]:
    """Damped natural-gradient steps on the sites ``(eta, beta)`` (on ``f``) of the active
    points (Eqs. 23-24, 54)."""
    with torch.no_grad():
        Kzz, Kza, kaa = model._Kzz(), model._Kzx(Xa), model._kxx(Xa, False)
        L_K = stable_cholesky(Kzz, name="K_zz")
        lam_r, B_r = model._rest_pair(Kzz)
        c = model._mean_constant
        for _ in range(model.num_inner_steps):
            lam_s, B_s = site_contributions(Kza, model._on_g(eta, beta), beta)
            f = dual_factors(Kzz, B_r + B_s, lam_r + lam_s, L_K=L_K)
            mean, var = dual_predict(f, Kza, kaa)
            target = model._site_targets(ya, mean + c, var.clamp_min(0))
            eta, beta = damp((eta, beta), target, model.rho)
    return eta, beta


def conjugate_sites(model: DualSVGP, y: Tensor) -> tuple[Tensor, Tensor] | None:
    """The sites ``(eta, beta)`` ``(L, n)`` of the targets ``y`` when they do not depend on
    the posterior, else ``None``: with a Gaussian likelihood every site is the likelihood
    itself, ``eta_i = y_i / sigma^2``, ``beta_i = 1 / sigma^2`` (Eqs. 7-9, 12 for any
    marginals), a function of the noise alone, differentiable in it.

    The hyperparameter steps use them in place of fixed sites, so that Eq. 26 on the points
    held as sites is, at every noise, the log marginal likelihood of the sparse GP (the
    exact GP's when ``Z`` holds the data) and its optimum the evidence optimum, instead of
    the optimum of an EM-like alternation of site and hyperparameter steps.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli, Gaussian
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> X, y = torch.rand(3, 1), torch.tensor([1.0, 0.0, 2.0])
        >>> eta, beta = conjugate_sites(DualSVGP(RBFKernel(), Gaussian(0.5), X), y)
        >>> eta.detach().round(decimals=6), beta.detach().round(decimals=6)  # y / s2, 1 / s2
        (tensor([[2., 0., 4.]]), tensor([[2., 2., 2.]]))
        >>> conjugate_sites(DualSVGP(RBFKernel(), Bernoulli(), X), y) is None
        True
    """
    if not isinstance(model.likelihood, Gaussian):
        return None
    zeros = y.new_zeros(model._C, y.shape[-1])
    return site_targets(model.likelihood, y, zeros, zeros)


def converge_sites(model: DualSVGP, tolerance: float = 1e-6, max_steps: int = 500) -> int:
    """Damped site steps (Eqs. 23-24, 54) on the memory points at the current ``Z`` and
    hyperparameters until the largest change of a site, relative to ``1 + |site|``, is below
    ``tolerance`` (at most ``max_steps``); returns the number of steps taken.

    The memory's sites become those of the posterior at the current hyperparameters (what
    :meth:`DualSVGP.update` computes for a batch, iterated to its fixed point).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> X = torch.rand(6, 1)
        >>> model = DualSVGP(RBFKernel(), Gaussian(0.1), X, memory_size=None, num_hyper_steps=0)
        >>> converge_sites(model.update(X, X[:, 0]))  # Gaussian sites: already converged
        1
    """
    mem = model.memory
    if len(mem) == 0:
        return 0
    eta, beta = model._memory_sites()
    steps = 0
    saved = model.num_inner_steps
    try:
        model.num_inner_steps = 1
        while steps < max_steps:
            new_eta, new_beta = inner_steps(model, mem.X, mem.y, eta, beta)
            steps += 1
            change = max(
                float(((new_eta - eta).abs() / (1 + eta.abs())).max()),
                float(((new_beta - beta).abs() / (1 + beta.abs())).max()),
            )
            eta, beta = new_eta, new_beta
            if change < tolerance:
                break
    finally:
        model.num_inner_steps = saved
    with torch.no_grad():
        mem.set_sites(eta.mT, beta.mT)
    model._touch()
    return steps


def hyper_steps(
    model: DualSVGP,
    active: tuple[Tensor, Tensor, Tensor, Tensor, Tensor, bool],
    report: Callable[[float, dict[str, int]], bool] | None = None,
    round_: int = 0,
) -> bool:
    """L-BFGS (:func:`_lbfgs_steps`) or Adam on Eq. 26 (or Eq. 21) plus log priors, sites and
    ``Z`` fixed (Sec. 3.4), on the active points ``active = (X, y, eta, beta, weights, rest)``
    (the first arguments of the model's objective); on Eq. 26 the sites of a Gaussian
    likelihood are tied to its noise (:func:`conjugate_sites`); with ``rest_factor="inducing"`` the
    summarised old data are held fixed on ``f(Z)`` and re-expressed at the new
    hyperparameters afterwards (:meth:`DualSVGP._rest_pair`).

    The steps follow the non-finite policy of :mod:`bo_ncgp.models.training`: a step with a
    non-finite objective, gradient or result (or an objective that raises, e.g. a non-PSD
    ``K_zz + B_u``) is undone and ends this round's steps with a
    :class:`~bo_ncgp.exceptions.NumericalWarning`; so is the step before it when the objective
    fails at the final parameters. A round whose objective rose by more than
    :data:`MAX_RISE` ``* (1 + |objective before it|)`` (diverged) or whose outputscale or one
    of whose lengthscales fell by more than :data:`COLLAPSE_FACTOR` (collapsed: a learning
    rate far too large, or the evidence of a few points without priors) is undone as a whole,
    with the optimiser's state, also with a warning. After every step
    taken ``report(loss, {"round": round_, "hyper_step": step})`` is called (if given);
    returns ``True`` when it asked to stop.
    """
    params = model._hyperparameters()
    if not params:
        return False
    anchored = model.rest_factor == "inducing" and bool(model._B_rest.abs().sum() > 0)
    if anchored:
        with torch.no_grad():
            model._rest_anchor = stable_cholesky(model._Kzz(), name="K_zz")
    try:
        return _hyper_steps(model, params, active, report, round_)
    finally:
        if anchored:  # the factor on u at the new hyperparameters
            model._settle_rest()


def _hyper_steps(
    model: DualSVGP,
    params: list[Tensor],
    active: tuple[Tensor, Tensor, Tensor, Tensor, Tensor, bool],
    report: Callable[[float, dict[str, int]], bool] | None,
    round_: int,
) -> bool:
    q_fixed = None
    which = model.hyper_objective
    if which == "elbo":
        model._touch()
        q_fixed = model._fixed_q(active[0], active[2], active[3])  # after this round's sites

    Xa, ya, _, _, weights, rest = active

    def loss_fn() -> Tensor:
        sites = conjugate_sites(model, ya) if q_fixed is None else None
        args = active if sites is None else (Xa, ya, *sites, weights, rest)
        obj = model._objective(*args, which, q_fixed)
        return -(obj + model._log_prior())

    scales = _scales(model.kernel)
    if hyper_optimizer(model) == "lbfgs":
        return _lbfgs_steps(model, params, loss_fn, scales, report, round_)
    stepper = AdamStepper(
        params, model.lr, project=model._project_unenforced_constraints, name="DualSVGP"
    )
    stop = False
    with torch.enable_grad():
        for step in range(model.num_hyper_steps):
            if not stepper.step(loss_fn):
                break
            if report is not None:
                model._touch()  # the callback sees the model after the step
                if report(float(stepper.loss), {"round": round_, "hyper_step": step}):
                    stop = True
                    break
    stepper.optimizer.zero_grad(set_to_none=True)
    model._touch()
    # a step into a region where the objective fails is undone; a diverged round as a whole
    stepper.finish(loss_fn, max_rise=MAX_RISE)
    collapse = _collapse(scales, _scales(model.kernel))
    if collapse is not None:
        stepper.undo_all(collapse)
    model._touch()
    return stop


def _lbfgs_steps(
    model: DualSVGP,
    params: list[Tensor],
    loss_fn: Callable[[], Tensor],
    scales: list[Tensor],
    report: Callable[[float, dict[str, int]], bool] | None,
    round_: int,
) -> bool:
    """One L-BFGS run (at most ``num_hyper_steps`` iterations, strong-Wolfe line search) on the
    hyperparameter objective, under the non-finite policy of
    :func:`~bo_ncgp.models.training.minimize_lbfgs`; a run that collapsed an outputscale or a
    lengthscale by more than :data:`COLLAPSE_FACTOR` is undone with a warning, as a round of
    Adam steps is."""
    saved = [p.detach().clone() for p in params]
    loss = minimize_lbfgs(params, loss_fn, model.num_hyper_steps, name="DualSVGP")
    model._project_unenforced_constraints()
    model._touch()
    collapse = _collapse(scales, _scales(model.kernel))
    if collapse is not None:
        with torch.no_grad():
            for p, v in zip(params, saved, strict=True):
                p.copy_(v)
        model._touch()
        warnings.warn(
            f"DualSVGP: {collapse}; the L-BFGS run was undone", NumericalWarning, stacklevel=4
        )
        with torch.no_grad():
            loss = float(loss_fn())
    if report is not None:
        return report(float(loss), {"round": round_, "hyper_step": 0})
    return False


#: a round of hyperparameter steps whose objective rose by more than this fraction of
#: ``1 + |objective before it|`` diverged and is undone (:meth:`AdamStepper.finish`)
MAX_RISE = 0.5

#: a fall of an outputscale or of a lengthscale by this factor within one round of
#: hyperparameter steps is a collapse: the round is undone with a NumericalWarning
COLLAPSE_FACTOR = 1e-3


def _scales(kernel: torch.nn.Module) -> list[tuple[str, Tensor]]:
    """``(name, detached copy)`` of the outputscale of every scale kernel inside ``kernel``
    and of the lengthscales of every kernel with one, in module order."""
    out = []
    for m in kernel.modules():
        if isinstance(m, gpytorch.kernels.ScaleKernel):
            out.append(("outputscale", m.outputscale.detach().clone()))
        elif getattr(m, "has_lengthscale", False) and m.lengthscale is not None:
            out.append(("lengthscale", m.lengthscale.detach().clone()))
    return out


_COLLAPSED = {
    "outputscale": "the model collapsed to its prior mean",
    "lengthscale": "the kernel became a spike at each input, the model forgetting between "
    "inputs that differ in it; priors on the lengthscales keep them away from zero",
}


def _collapse(before: list[tuple[str, Tensor]], after: list[tuple[str, Tensor]]) -> str | None:
    """What collapsed when an outputscale fell by more than :data:`COLLAPSE_FACTOR` (the model
    going to its prior mean) or a lengthscale did (e.g. the evidence of a few points run to a
    kernel that tells every distinct value of a categorical input apart), else ``None``.

    Example:
        >>> one, tiny = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1e-4])
        >>> _collapse([("lengthscale", one)], [("lengthscale", tiny)])[:48]
        'a kernel lengthscale fell from 2 to 0.0001 in on'
        >>> _collapse([("outputscale", one)], [("outputscale", one / 2)]) is None
        True
    """
    for (name, old), (_, new) in zip(before, after, strict=True):
        fell = new < COLLAPSE_FACTOR * old
        if bool(fell.any()):
            where = torch.nonzero(fell.reshape(-1))[0, 0]
            was, now = old.reshape(-1)[where].item(), new.reshape(-1)[where].item()
            article = "the" if name == "outputscale" else "a"
            return (
                f"{article} kernel {name} fell from {was:.3g} to {now:.3g} in one round of "
                f"hyperparameter steps ({_COLLAPSED[name]})"
            )
    return None


def _unenforced_constraints(model: DualSVGP) -> Iterator[tuple[Tensor, Any]]:
    """The kernel's and likelihood's parameters whose GPyTorch constraint has no transform."""
    for module in (model.kernel, model.likelihood):
        for _name, param, constraint in module.named_parameters_and_constraints():
            if constraint is not None and not constraint.enforced:
                yield param, constraint


def hyper_optimizer(model: DualSVGP) -> str:
    """The optimiser of the hyperparameter steps: the model's ``hyper_optimizer``, with
    ``"auto"`` resolved to ``"adam"`` (projected steps) when a parameter's constraint has no
    transform, else to ``"lbfgs"``.

    Example:
        >>> import torch
        >>> from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> Z = torch.rand(4, 2)
        >>> hyper_optimizer(DualSVGP(RBFKernel(), Gaussian(0.1), Z))
        'lbfgs'
        >>> hyper_optimizer(DualSVGP(get_covar_module_with_dim_scaled_prior(2), Gaussian(0.1), Z))
        'adam'
    """
    if model.hyper_optimizer != "auto":
        return model.hyper_optimizer
    return "adam" if any(True for _ in _unenforced_constraints(model)) else "lbfgs"


@torch.no_grad()
def project_unenforced_constraints(model: DualSVGP) -> None:
    """Clamp raw parameters whose GPyTorch constraint has no transform (e.g. BoTorch's
    ``GreaterThan(2.5e-2, transform=None)`` lengthscales, meant for bounded L-BFGS) back
    into the constraint after an Adam step (projected gradient)."""
    for param, constraint in _unenforced_constraints(model):
        lo = constraint.lower_bound.to(param)
        hi = constraint.upper_bound.to(param)
        param.copy_(torch.maximum(torch.minimum(param, hi), lo))


def fold(model: DualSVGP, X: Tensor, eta: Tensor, beta: Tensor) -> None:
    """Fold sites ``(L, n)`` on ``f`` at inputs ``X`` into the summarised factor (Eq. 11 on
    ``f``: ``lam_f += sum k eta``, ``s += sum k beta``, ``B += sum k beta k^T``, and the totals
    ``sum eta``, ``sum beta``; :mod:`~bo_ncgp.models.dual.model`)."""
    if X.shape[-2] == 0:
        return
    Kzx = model._Kzx(X)
    dl, dB = site_contributions(Kzx, eta, beta)
    model._lam_rest = model._lam_rest + dl
    model._s_rest = model._s_rest + (Kzx @ beta.unsqueeze(-1)).squeeze(-1)
    model._B_rest = model._B_rest + 0.5 * (dB + dB.mT)
    model._rest_totals = model._rest_totals + torch.stack([eta.sum(-1), beta.sum(-1)], -1)


_STRATIFIED = ("bls_balanced", "bls_stratified", "random_stratified", "reservoir_stratified")


def _select(model: DualSVGP, scores: Tensor, y: Tensor, k: int) -> Tensor:
    """``k`` indices by the model's ``memory_selection`` rule (``y``: the points' targets)."""
    rule = model.memory_selection
    uniform = ("random", "random_stratified", "reservoir_stratified")
    if rule in _STRATIFIED and num_label_classes(model.likelihood):
        weights = None
        if rule != "bls_balanced":  # shares in proportion to the labels seen so far
            weights = model._label_counts[label_classes(model.likelihood, torch.unique(y))]
        method = "random" if rule in uniform else "bls"
        return sample_stratified(scores, y, k, weights, model.generator, method)
    method = "random" if rule in uniform else "bls"
    return sample_by_score(scores, k, method, model.generator)


def _memory_classes(model: DualSVGP, y: Tensor) -> Tensor:
    """The class index of each target for the reservoir memory (all zero without labels)."""
    if num_label_classes(model.likelihood):
        return label_classes(model.likelihood, y)
    return torch.zeros(y.shape[0], dtype=torch.long, device=y.device)


def _class_counts(model: DualSVGP, y: Tensor) -> Tensor:
    """How many of the targets ``y`` fall in each class of :func:`_memory_classes`."""
    size = model._offered_counts.numel()
    return torch.bincount(_memory_classes(model, y), minlength=size).to(model._offered_counts)


def num_label_classes(likelihood: Likelihood) -> int:
    """The number of classes of a likelihood of class labels (Bernoulli: 2, Softmax: C), else
    0.

    Example:
        >>> from bo_ncgp.likelihoods import Bernoulli, Gaussian, Softmax
        >>> [num_label_classes(lik) for lik in (Bernoulli(), Softmax(3), Gaussian())]
        [2, 3, 0]
    """
    if isinstance(likelihood, Bernoulli):
        return 2
    return likelihood.num_latents if isinstance(likelihood, Softmax) else 0


def label_classes(likelihood: Likelihood, y: Tensor) -> Tensor:
    """The class index (``0 ... C - 1``) of each label ``y`` of a likelihood of class labels
    (Bernoulli ``{0, 1}`` or ``{-1, 1}``: ``y > 1/2`` or ``y > 0``; Softmax: ``y``).

    Example:
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> label_classes(Bernoulli(labels="pm1"), torch.tensor([-1.0, 1.0, 1.0]))
        tensor([0, 1, 1])
    """
    if isinstance(likelihood, Bernoulli):
        return (y > (0.0 if likelihood.labels == "pm1" else 0.5)).long()
    return y.round().long()


def add_to_memory(model: DualSVGP, X: Tensor, y: Tensor, eta: Tensor, beta: Tensor) -> None:
    """Sec. 3.5: BLS-weighted (label-balanced, or random) choice of memory points; fold the
    rest; beyond ``memory_cap``, evict by the same rule."""
    n = X.shape[0]
    k = n if model.memory_size is None else min(int(model.memory_size), n)
    if model._label_counts.numel():  # every label seen, for the stratified memory
        classes = label_classes(model.likelihood, y)
        model._label_counts = model._label_counts + torch.bincount(
            classes, minlength=model._label_counts.numel()
        ).to(model._label_counts)
    model._touch()
    # the total posterior is the same whichever way points are split between the memory
    # and the folded factor, so one set of variances serves both selections
    lam_n, B_n = model._contributions(X, eta, beta)
    lam, B = model._total_pair()
    f = dual_factors(model._Kzz(), B + B_n, lam + lam_n)
    memory = model.memory
    need_mem = model.memory_cap is not None and len(memory) + k > model.memory_cap
    Xv = torch.cat([memory.X, X]) if need_mem else X
    _, var = dual_predict(f, model._Kzx(Xv), model._kxx(Xv, False))
    var = var.clamp_min(0)
    beta_all = torch.cat([model._memory_sites()[1], beta], -1) if need_mem else beta
    h = bayesian_leverage_scores(beta_all, var).sum(0)
    h_new = h[-n:]
    idx = _select(model, h_new, y, k)
    keep = torch.zeros(n, dtype=torch.bool, device=X.device)
    keep[idx] = True
    fold(model, X[~keep], eta[:, ~keep], beta[:, ~keep])
    reservoir = model.memory_selection == "reservoir_stratified"
    if reservoir:  # a memory saved before the offered points were counted stands for itself
        offered = torch.maximum(model._offered_counts, _class_counts(model, memory.y))
    memory.add(X[keep], y[keep], eta[:, keep].mT, beta[:, keep].mT)
    if need_mem:
        if reservoir:  # the last points of the memory are this update's
            classes = _memory_classes(model, memory.y)
            new = torch.arange(len(memory), device=classes.device) >= len(memory) - int(keep.sum())
            weights = model._label_counts if num_label_classes(model.likelihood) else None
            cap = int(model.memory_cap)
            idx = sample_reservoir(classes, new, cap, offered, weights, model.generator)
        else:
            h_mem = torch.cat([h[: len(h) - n], h_new[keep]])
            idx = _select(model, h_mem, memory.y, int(model.memory_cap))
        Xr, _, eta_r, beta_r = memory.keep(idx)
        fold(model, Xr, eta_r.mT, beta_r.mT)
    if reservoir:
        model._offered_counts = offered + _class_counts(model, y[keep])
    model._touch()
