"""Batch construction by fantasising (Chang et al. 2023, Algorithm 2; Ginsbourger et al. 2010).

Repeat ``q`` times: maximise the acquisition built from the current models (``optimize_acqf``
over ``bounds`` or ``optimize_acqf_discrete`` over a pool of ``choices``), fantasise the
observation at the maximiser from every model (regression: posterior mean -- the Kriging
believer -- or a sample, as in Alg. 2; classifiers: the predictive probability as a soft
label, or a sampled label), condition every model on its fantasy with its own cheap
conditioning (dual conditioning for :class:`~bo_ncgp.bo.models.DualSVGPModel`, exact GP
updates for BoTorch's ``SingleTaskGP``), raise the incumbent ``best_f`` to the fantasised
objective value where that is higher (an improvement-based acquisition then stops rewarding
the point it has already "observed"), and rebuild the acquisition. With noisy observations the
incumbent can instead be the plug-in one (Picheny et al. 2013, "A benchmark of kriging-based
infill criteria for noisy optimization"): the largest posterior mean of the objective model at
the observed points and the batch so far, recomputed on the conditioned model after every step
(``incumbent_at``), so that one lucky noisy value or fantasy does not lift it above what the
model believes.

:func:`kriging_believer_batch` is the baseline of Sec. 4.1: the same loop where models that
cannot be conditioned (e.g. a classifier of another library) stay unchanged within the batch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.models.model import Model
from botorch.optim import optimize_acqf, optimize_acqf_discrete
from torch import Tensor

from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.likelihoods.settings import soft_targets

__all__ = ["FantasyBatch", "build_fantasy_batch", "fantasy_observation", "kriging_believer_batch"]

AcquisitionFactory = Callable[..., AcquisitionFunction]


@dataclass
class FantasyBatch:
    """Result of :func:`build_fantasy_batch`.

    Attributes:
        X: ``(q, d)`` selected points.
        acquisition_values: ``(q,)`` acquisition value of each point when it was selected.
        indices: ``(q,)`` indices into ``choices`` (discrete search) or ``None``.
        optimize_seconds / condition_seconds: per-step wall-clock of the acquisition
            optimisation and of fantasising + conditioning.
        models: the models conditioned on the whole fantasised batch.

    Example:
        >>> b = FantasyBatch(X=torch.zeros(2, 3), acquisition_values=torch.zeros(2), indices=None)
        >>> b.X.shape, b.models
        (torch.Size([2, 3]), [])
    """

    X: Tensor
    acquisition_values: Tensor
    indices: Tensor | None
    optimize_seconds: list[float] = field(default_factory=list)
    condition_seconds: list[float] = field(default_factory=list)
    models: list[Model] = field(default_factory=list)


def fantasy_observation(
    model: Model, X: Tensor, mode: str = "mean", generator: torch.Generator | None = None
) -> Tensor:
    """Fantasised ``Y`` (``n x m``) of ``model`` at ``X`` (``n x d``), see
    :meth:`LatentGPModel.fantasy_targets`; other BoTorch models use the posterior mean
    (``mode="mean"``) or a posterior sample with observation noise.

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X = torch.rand(10, 2)
        >>> gp = SingleTaskGP(X, X.sum(-1, keepdim=True))
        >>> Xq = torch.rand(3, 2)
        >>> torch.equal(fantasy_observation(gp, Xq), gp.posterior(Xq).mean)
        True
    """
    if isinstance(model, LatentGPModel):
        return model.fantasy_targets(X, mode=mode, generator=generator)
    post = model.posterior(X, observation_noise=(mode == "sample"))
    if mode == "mean":
        return post.mean
    dev = X.device if generator is None else generator.device  # draws on the generator's device
    eps = torch.randn(post.mean.shape, generator=generator, dtype=X.dtype, device=dev).to(X.device)
    return post.mean + post.variance.sqrt() * eps


def _plug_in_incumbent(model: Model, X: Tensor) -> Tensor:
    """The largest posterior mean of ``model``'s first output at ``X`` (a 0-d tensor)."""
    with torch.no_grad():
        return model.posterior(X).mean[..., 0].max().detach().reshape(())


def _is_soft(model: Model) -> bool:
    if not isinstance(model, LatentGPModel):
        return False
    lik = getattr(model.model, "likelihood", None)  # bo_ncgp's, not a GPyTorch view of it
    return lik is not None and not isinstance(lik, Gaussian)


def build_fantasy_batch(
    models: Model | Sequence[Model],
    acquisition_factory: AcquisitionFactory,
    q: int,
    bounds: Tensor | None = None,
    choices: Tensor | None = None,
    fantasy: str = "mean",
    condition: Sequence[bool] | None = None,
    num_restarts: int = 8,
    raw_samples: int = 256,
    options: dict | None = None,
    generator: torch.Generator | None = None,
    best_f: float | Tensor | None = None,
    incumbent_at: Tensor | None = None,
) -> FantasyBatch:
    """Build a batch of ``q`` points by fantasising (Chang et al. 2023, Algorithm 2).

    Args:
        models: the models the acquisition is built from (e.g. a reward regression model
            and a success classifier).
        acquisition_factory: ``models -> AcquisitionFunction`` (rebuilt at every step from the
            conditioned models), or ``(models, best_f) -> AcquisitionFunction`` when
            ``best_f`` is given.
        q: batch size.
        bounds: ``2 x d`` box for ``optimize_acqf`` (continuous search), or
        choices: ``N x d`` candidate pool for ``optimize_acqf_discrete``; chosen entries are
            removed so that the batch has distinct points.
        fantasy: ``"mean"`` or ``"sample"`` (see :func:`fantasy_observation`).
        condition: per model, whether to condition it on its fantasies (default all).
        num_restarts, raw_samples, options: passed to ``optimize_acqf``.
        generator: torch generator for ``fantasy="sample"``.
        best_f: the incumbent (best observed objective value, maximisation) of an
            acquisition that uses one. After each step it is raised to the fantasised value
            of the first model (the objective) where that is higher, and the factory gets
            the current incumbent as its second argument. ``None``: the factory is called
            with the models only.
        incumbent_at: ``n x d`` observed points: the incumbent is the plug-in one instead, the
            largest posterior mean of the first model at these points and at the batch's
            points so far, recomputed after every conditioning (module docstring); the factory
            gets it as its second argument. Not with ``best_f``.

    Returns:
        :class:`FantasyBatch` with the points, their acquisition values and timings.

    Example:
        >>> from botorch.acquisition import UpperConfidenceBound
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.bo import DualSVGPModel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models import DualSVGP
        >>> X = torch.rand(15, 2)
        >>> dual = DualSVGP(RBFKernel(), Gaussian(0.01), X[:8], num_hyper_steps=0)
        >>> _ = dual.update(X, torch.sin(3 * X).sum(-1))
        >>> batch = build_fantasy_batch(
        ...     DualSVGPModel.from_model(dual), lambda ms: UpperConfidenceBound(ms[0], beta=4.0),
        ...     q=3, bounds=torch.tensor([[0.0, 0.0], [1.0, 1.0]]), num_restarts=2,
        ...     raw_samples=64)
        >>> batch.X.shape, len(batch.condition_seconds)
        (torch.Size([3, 2]), 3)

        An improvement-based acquisition takes the incumbent, raised inside the batch::

            build_fantasy_batch(model, lambda ms, best: LogExpectedImprovement(ms[0], best),
                                q=4, bounds=bounds, best_f=train_Y.max())

        With noisy observations, the plug-in incumbent at the observed points::

            build_fantasy_batch(model, lambda ms, best: LogExpectedImprovement(ms[0], best),
                                q=4, bounds=bounds, incumbent_at=train_X)

        For a reward model and a success classifier (the lunar-lander acquisition)::

            build_fantasy_batch(
                [reward, success],
                lambda ms: ConstrainedLogExpectedImprovement(ms[0], ms[1], best_f=best),
                q=3, bounds=torch.tensor([[0.0] * 12, [1.2] * 12]))
    """
    models = [models] if isinstance(models, Model) else list(models)
    if (bounds is None) == (choices is None):
        raise InputDataError("build_fantasy_batch: give exactly one of bounds or choices")
    if q < 1:
        raise InputDataError(f"build_fantasy_batch: q must be >= 1, got {q}")
    if choices is not None and choices.shape[0] < q:
        raise InputDataError(f"build_fantasy_batch: {choices.shape[0]} choices for a batch of {q}")
    if fantasy not in ("mean", "sample"):
        raise InputDataError(
            f"build_fantasy_batch: fantasy must be 'mean' or 'sample', got {fantasy!r}"
        )
    if incumbent_at is not None:
        if best_f is not None:
            raise InputDataError(
                "build_fantasy_batch: give best_f or incumbent_at, not both (incumbent_at "
                "makes the incumbent the largest posterior mean there)"
            )
        if incumbent_at.ndim != 2 or incumbent_at.shape[0] == 0:
            raise InputDataError(
                "build_fantasy_batch: incumbent_at must be a non-empty n x d tensor of observed "
                f"points, got shape {tuple(incumbent_at.shape)}"
            )
        best_f = _plug_in_incumbent(models[0], incumbent_at)
    elif best_f is not None:
        if not isinstance(best_f, Tensor):
            where = bounds if bounds is not None else choices
            best_f = torch.tensor(float(best_f), dtype=torch.float64, device=where.device)
        best_f = best_f.detach()
        if best_f.numel() != 1 or not bool(torch.isfinite(best_f)):
            raise InputDataError(
                f"build_fantasy_batch: best_f must be one finite number, got {best_f.tolist()}"
            )
        best_f = best_f.reshape(())
    condition = [True] * len(models) if condition is None else list(condition)
    if len(condition) != len(models):
        raise InputDataError("build_fantasy_batch: one condition flag per model")
    remaining = None if choices is None else torch.arange(choices.shape[0], device=choices.device)
    xs, vals, idxs, t_opt, t_cond = [], [], [], [], []
    for _ in range(q):
        t0 = time.perf_counter()
        acq = acquisition_factory(models) if best_f is None else acquisition_factory(models, best_f)
        if choices is None:
            x, v = optimize_acqf(
                acq,
                bounds,
                q=1,
                num_restarts=num_restarts,
                raw_samples=raw_samples,
                options=options,
            )
        else:
            x, v = optimize_acqf_discrete(acq, q=1, choices=choices[remaining], unique=True)
            pos = int(torch.nonzero((choices[remaining] == x).all(-1))[0, 0])
            idxs.append(int(remaining[pos]))
            remaining = torch.cat([remaining[:pos], remaining[pos + 1 :]])
        t_opt.append(time.perf_counter() - t0)
        xs.append(x.detach())
        vals.append(torch.as_tensor(v, device=x.device).detach().reshape(()))
        t0 = time.perf_counter()
        new_models = []  # the returned models are conditioned on the whole batch
        for i, (model, cond) in enumerate(zip(models, condition, strict=True)):
            if not cond and not (i == 0 and best_f is not None):
                new_models.append(model)
                continue
            with torch.no_grad():
                Y = fantasy_observation(model, x, fantasy, generator).detach()
            if i == 0 and best_f is not None and incumbent_at is None:
                best_f = torch.maximum(best_f.to(Y), Y.max())  # the incumbent includes the fantasy
            if not cond:
                new_models.append(model)
                continue
            soft = fantasy == "mean" and _is_soft(model)
            with soft_targets() if soft else contextlib.nullcontext():
                new_models.append(model.condition_on_observations(x, Y))
        models = new_models
        if incumbent_at is not None:  # the plug-in incumbent of the conditioned model
            best_f = _plug_in_incumbent(models[0], torch.cat([incumbent_at, *xs]))
        t_cond.append(time.perf_counter() - t0)
    return FantasyBatch(
        X=torch.cat(xs, 0),
        acquisition_values=torch.stack(vals),
        indices=None if choices is None else torch.tensor(idxs, device=choices.device),
        optimize_seconds=t_opt,
        condition_seconds=t_cond,
        models=models,
    )


def kriging_believer_batch(
    models: Model | Sequence[Model],
    acquisition_factory: AcquisitionFactory,
    q: int,
    conditionable: Sequence[bool] | None = None,
    **kwargs,
) -> FantasyBatch:
    """Kriging-believer batch (Ginsbourger et al. 2010): :func:`build_fantasy_batch` with
    posterior-mean fantasies; models flagged not ``conditionable`` (e.g. a classifier without
    cheap conditioning) are left unchanged within the batch; ``best_f`` (see
    :func:`build_fantasy_batch`) is raised by the believed values.

    Example:
        >>> from botorch.acquisition import LogExpectedImprovement
        >>> from botorch.models import SingleTaskGP
        >>> X = torch.rand(10, 2)
        >>> Y = (X - 0.5).pow(2).sum(-1, keepdim=True)
        >>> batch = kriging_believer_batch(
        ...     SingleTaskGP(X, Y), lambda ms: LogExpectedImprovement(ms[0], best_f=Y.max()),
        ...     q=2, bounds=torch.tensor([[0.0, 0.0], [1.0, 1.0]]), num_restarts=2,
        ...     raw_samples=32)
        >>> batch.X.shape
        torch.Size([2, 2])
    """
    return build_fantasy_batch(
        models, acquisition_factory, q, fantasy="mean", condition=conditionable, **kwargs
    )
