"""The gradient-based optimisation loops of bo_ncgp's models, with one non-finite policy.

Every model that learns parameters by Adam (the sparse GAM's ELBO, HIP-GP's and the dual
SVGP's hyperparameters, the streaming and offline SVGP baselines) takes its steps through
:class:`AdamStepper` -- directly where the model interleaves other updates between the Adam
steps (HIP-GP's natural-gradient steps, the dual SVGP's site updates) -- or through
:func:`minimize_adam`, the whole loop with the :class:`~bo_ncgp.models.base.FitStep`
callback. Full-batch deterministic objectives may use :func:`minimize_lbfgs` instead (the
streaming baseline's ``optimizer="lbfgs"``). Loops that do not step an optimiser (IterNCGP's
Newton steps) report through :class:`FitClock`.

The non-finite policy (the same everywhere): when the loss or any gradient of a step is NaN or
infinite, when computing them raises one of :data:`STEP_ERRORS` (a ``ValueError`` such as
:class:`~bo_ncgp.exceptions.NotPSDError` or the :class:`~bo_ncgp.exceptions.InputDataError` of a
Cholesky of non-finite entries, or ``torch.linalg.LinAlgError``), or when the update leaves a
parameter non-finite, the step is undone -- the parameters and the optimiser's moments are
exactly as they were before it --, one :class:`~bo_ncgp.exceptions.NumericalWarning` is
emitted and training stops (``on_nonfinite="stop"``, the default) or
:class:`~bo_ncgp.exceptions.NonFiniteError` is raised (``on_nonfinite="raise"``).
:meth:`AdamStepper.finish` applies the same policy to the loss at the final parameters.

Example:
    >>> import torch
    >>> w = torch.nn.Parameter(torch.tensor([3.0]))
    >>> losses = minimize_adam([w], lambda step: (w**2).sum(), num_steps=200, lr=0.1)
    >>> len(losses), bool(w.abs() < 0.1)
    (200, True)
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, NonFiniteError, NotPSDError, NumericalWarning
from bo_ncgp.linalg._args import check_count, check_positive
from bo_ncgp.models.base import Callback, FitStep, notify

__all__ = [
    "STEP_ERRORS",
    "AdamStepper",
    "FitClock",
    "NonFinitePolicy",
    "minimize_adam",
    "minimize_lbfgs",
]

#: what a non-finite loss or gradient does: warn and stop, or raise
#: :class:`~bo_ncgp.exceptions.NonFiniteError`
NonFinitePolicy = Literal["stop", "raise"]

#: errors of a loss evaluation that make a step fail (NotPSDError and the InputDataError of a
#: Cholesky of non-finite entries are ValueErrors)
STEP_ERRORS: tuple[type[Exception], ...] = (ValueError, torch.linalg.LinAlgError)


class FitClock:
    """Training time without the time spent in callbacks; calls a callback with a
    :class:`~bo_ncgp.models.base.FitStep` (used by every model's training loop).

    Example:
        >>> clock = FitClock()
        >>> seen = []
        >>> clock.notify(lambda s: seen.append(s) or True, 0, model=None, info={"epoch": 0})
        True
        >>> seen[0].step, seen[0].info["epoch"], seen[0].seconds <= clock.elapsed()
        (0, 0, True)
    """

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.paused = 0.0

    def elapsed(self) -> float:
        """Seconds since the clock started, minus the seconds spent in callbacks."""
        return time.perf_counter() - self.start - self.paused

    def notify(
        self,
        callback: Callback | None,
        step: int,
        model: Any,
        loss: float | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> bool:
        """Call ``callback(FitStep(...))`` (if given) with the training time so far; the
        time spent in the callback is not counted. ``True`` when the callback asks to stop."""
        if callback is None:
            return False
        t = time.perf_counter()
        fit_step = FitStep(step, model, loss, t - self.start - self.paused, dict(info or {}))
        try:
            return notify(callback, fit_step)
        finally:
            self.paused += time.perf_counter() - t


def _all_finite(tensors: Sequence[Tensor]) -> bool:
    """Whether every entry of every tensor is finite (one device synchronisation)."""
    if not tensors:
        return True
    flags = [torch.isfinite(t.detach()).all() for t in tensors]
    if all(f.device == flags[0].device for f in flags):
        return bool(torch.stack(flags).all())
    return all(bool(f) for f in flags)


class AdamStepper:
    """One Adam step per :meth:`step` call, under the non-finite policy of this module.

    A step fails when the loss is NaN or infinite, when its evaluation or backward pass raises
    one of :data:`STEP_ERRORS` (e.g. :class:`~bo_ncgp.exceptions.NotPSDError`), when a
    gradient is non-finite, or when the
    parameters are non-finite after the update (and after ``project``). A failed step leaves
    the parameters and the optimiser's state as they were before it.

    Args:
        params: the parameters to optimise (those without ``requires_grad`` are left out).
        lr: Adam learning rate (``torch.optim.Adam`` with its defaults otherwise).
        on_nonfinite: ``"stop"`` (warn, undo the step, report it) or ``"raise"``.
        project: called after every update, e.g. to clamp parameters into constraints that
            their parameterisation does not enforce (projected gradient).
        companions: other optimisers stepped on the same backward pass before the Adam step
            (e.g. :class:`gpytorch.optim.NGD` on variational parameters); their parameters
            are checked and restored with Adam's.
        name: who is training, for the warning and error messages.

    Attributes:
        stopped: ``True`` once a step failed (the caller ends its loop).
        loss: the (detached) loss of the last step taken, evaluated before its update
            (``None`` before the first step).

    Example:
        >>> w = torch.nn.Parameter(torch.tensor([1.0]))
        >>> stepper = AdamStepper([w], lr=0.5)
        >>> stepper.step((w - 2.0).square().sum()), round(float(w), 3)
        (True, 1.5)
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     ok = stepper.step((w * float("nan")).sum())
        >>> ok, stepper.stopped, round(float(w), 3), len(caught)  # the step was not applied
        (False, True, 1.5, 1)
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        *,
        on_nonfinite: NonFinitePolicy = "stop",
        project: Callable[[], None] | None = None,
        companions: Sequence[torch.optim.Optimizer] = (),
        name: str = "training",
    ) -> None:
        if on_nonfinite not in ("stop", "raise"):
            raise InputDataError(f"on_nonfinite must be 'stop' or 'raise', got {on_nonfinite!r}")
        lr = check_positive(lr, "lr", name)
        self.params = [p for p in params if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=lr)
        self.companions = list(companions)
        self._optimizers = [*self.companions, self.optimizer]
        self._all_params = [
            p for opt in self._optimizers for g in opt.param_groups for p in g["params"]
        ]
        self.on_nonfinite = on_nonfinite
        self.project = project
        self.name = name
        self.stopped = False
        self.loss: Tensor | None = None
        self._before_last: tuple[list[Tensor], list[dict]] | None = None
        self._first: tuple[tuple[list[Tensor], list[dict]], float] | None = None

    def step(self, loss: Tensor | Callable[[], Tensor]) -> bool:
        """Back-propagate ``loss`` (a scalar to minimise, or a function that computes it) and
        take one Adam step.

        Returns:
            ``True`` when the step was taken; ``False`` when it failed (the step is undone, a
            :class:`NumericalWarning` emitted and :attr:`stopped` set), unless
            ``on_nonfinite="raise"``.
        """
        for opt in self._optimizers:
            opt.zero_grad(set_to_none=True)
        problem = None
        try:
            value = loss() if callable(loss) else loss
            if not bool(torch.isfinite(value.detach()).all()):
                problem = f"a non-finite loss ({float(value.detach()):.4g})"
            else:
                value.backward()
                if not _all_finite([p.grad for p in self._all_params if p.grad is not None]):
                    problem = "a non-finite gradient"
        except NotPSDError as err:
            problem = f"a matrix that is not positive definite ({err})"
        except STEP_ERRORS as err:
            problem = f"an error in the loss ({type(err).__name__}: {err})"
        if problem is None:
            saved = self._snapshot()
            for opt in self._optimizers:
                opt.step()
            if self.project is not None:
                self.project()
            if _all_finite(self._all_params):
                self.loss = value.detach()
                self._before_last = saved
                if self._first is None:
                    self._first = (saved, float(self.loss))
                return True
            self._restore(saved)
            problem = "non-finite parameters after the update"
        for opt in self._optimizers:
            opt.zero_grad(set_to_none=True)
        self._fail(problem)
        return False

    def finish(self, loss: Callable[[], Tensor], *, max_rise: float | None = None) -> float:
        """Check the loss at the final parameters (no gradients); when it is NaN or infinite
        (or raises one of :data:`STEP_ERRORS`) the last step taken fails like
        any other step: it is undone and reported under the non-finite policy.

        With ``max_rise``, a run that diverged -- a final loss above the loss before the first
        step by more than ``max_rise * (1 + |that loss|)`` (a learning rate far too large for
        the objective) -- is undone as a whole: the parameters and the optimiser's state are
        those before the first step, reported under the same policy.

        Returns:
            The loss at the final parameters, or, when steps were undone, the loss at the
            restored parameters (evaluated before the step that followed them).

        Example:
            >>> w = torch.nn.Parameter(torch.tensor([1.0]))
            >>> stepper = AdamStepper([w], lr=0.5)
            >>> stepper.step(lambda: (w - 2.0).square().sum()), round(stepper.finish(w.sum), 3)
            (True, 1.5)
            >>> import warnings
            >>> with warnings.catch_warnings(record=True):
            ...     warnings.simplefilter("always")
            ...     value = stepper.finish(lambda: w.sum() / 0.0 - w.sum() / 0.0)  # NaN
            >>> value, float(w), stepper.stopped  # w is back where it was before the step
            (1.0, 1.0, True)
        """
        with torch.no_grad():
            try:
                value = float(loss())
            except STEP_ERRORS:
                value = float("nan")
        if not math.isfinite(value) and self._before_last is not None:
            self._restore(self._before_last)
            self._before_last = None
            self._fail(f"a non-finite loss after the last step ({value:.4g})")
            value = float(self.loss)
        if math.isfinite(value) and max_rise is not None and self._first is not None:
            first = self._first[1]
            if value > first + max_rise * (1 + abs(first)):
                self.undo_all(f"the loss rose from {first:.4g} to {value:.4g} (the steps diverged)")
                return first
        return value

    def undo_all(self, problem: str) -> bool:
        """Undo every step taken: the parameters and the optimiser's state are those before the
        first step; ``problem`` is reported under the non-finite policy. ``False`` (and nothing
        done) when no step was taken.

        Example:
            >>> import warnings
            >>> w = torch.nn.Parameter(torch.tensor([1.0]))
            >>> stepper = AdamStepper([w], lr=0.5)
            >>> stepper.step(lambda: w.square().sum()), round(float(w), 3)
            (True, 0.5)
            >>> with warnings.catch_warnings(record=True):
            ...     warnings.simplefilter("always")
            ...     stepper.undo_all("the model collapsed")
            True
            >>> float(w), stepper.stopped
            (1.0, True)
        """
        if self._first is None:
            return False
        self._restore(self._first[0])
        self._before_last = self._first = None
        self._fail(
            problem,
            undone="every step was undone: training stopped at the parameters before the first",
        )
        return True

    def _fail(
        self,
        problem: str,
        undone: str = "the step was undone and training stopped at the parameters before it",
    ) -> None:
        """Report a failed (and undone) step under the non-finite policy."""
        msg = f"{self.name}: {problem}; {undone} (lower the learning rate or rescale the data)"
        if self.on_nonfinite == "raise":
            raise NonFiniteError(msg)
        warnings.warn(msg, NumericalWarning, stacklevel=4)
        self.stopped = True

    def _snapshot(self) -> tuple[list[Tensor], list[dict]]:
        states = [
            {
                p: {k: v.clone() if isinstance(v, Tensor) else v for k, v in st.items()}
                for p, st in opt.state.items()
            }
            for opt in self._optimizers
        ]
        return [p.detach().clone() for p in self._all_params], states

    @torch.no_grad()
    def _restore(self, saved: tuple[list[Tensor], list[dict]]) -> None:
        values, states = saved
        for p, v in zip(self._all_params, values, strict=True):
            p.copy_(v)
        for opt, state in zip(self._optimizers, states, strict=True):
            opt.state.clear()
            opt.state.update(state)


def minimize_adam(
    params: Iterable[torch.nn.Parameter],
    loss_fn: Callable[[int], Tensor],
    num_steps: int,
    *,
    lr: float = 0.01,
    model: Any = None,
    callback: Callback | None = None,
    on_nonfinite: NonFinitePolicy = "stop",
    after_step: Callable[[int], None] | None = None,
    info: Callable[[int], Mapping[str, Any]] | None = None,
    progress: str | None = None,
    project: Callable[[], None] | None = None,
    name: str = "training",
) -> list[float]:
    """Minimise ``loss_fn(step)`` by ``num_steps`` Adam steps (:class:`AdamStepper`).

    Args:
        params: parameters to optimise.
        loss_fn: the objective of step ``step`` (a scalar; a minibatch estimate is fine).
        num_steps: Adam steps.
        lr: learning rate.
        model: the model passed to the callback in :class:`FitStep`.
        callback: ``callback(FitStep) -> bool | None`` after every step taken (with the loss
            and the training time so far, callbacks excluded); ``True`` stops.
        on_nonfinite: the non-finite policy (module docstring).
        after_step: called as ``after_step(step)`` after each step's callback unless it
            stopped training (e.g. a periodic re-initialisation of variational parameters).
        info: ``info(step)`` gives :attr:`FitStep.info`.
        progress: a description to show a tqdm bar with the loss (``None``: no bar).
        project: called after every update (:class:`AdamStepper`).
        name: who is training, for messages.

    Returns:
        The loss of every step taken (before its update).

    Example:
        >>> w = torch.nn.Parameter(torch.tensor([3.0]))
        >>> seen = []
        >>> losses = minimize_adam([w], lambda s: (w**2).sum(), 100, lr=0.1,
        ...                        callback=lambda s: seen.append(s.step) or s.step == 4)
        >>> len(losses), seen  # the callback stopped training after step 4
        (5, [0, 1, 2, 3, 4])
    """
    num_steps = check_count(num_steps, "num_steps", name)
    stepper = AdamStepper(params, lr, on_nonfinite=on_nonfinite, project=project, name=name)
    steps: Iterable[int] = range(int(num_steps))
    bar = None
    if progress is not None:
        from tqdm.auto import trange

        steps = bar = trange(int(num_steps), desc=progress)
    history: list[float] = []
    clock = FitClock()
    for step in steps:
        if not stepper.step(lambda: loss_fn(step)):  # noqa: B023 (called right away)
            break
        value = float(stepper.loss)
        history.append(value)
        if bar is not None and step % 10 == 0:
            bar.set_postfix(loss=f"{value:.4f}")
        if callback is not None and clock.notify(
            callback, step, model, value, info(step) if info is not None else None
        ):
            break
        if after_step is not None:
            after_step(step)
    if bar is not None:
        bar.close()
    return history


def minimize_lbfgs(
    params: Iterable[torch.nn.Parameter],
    loss_fn: Callable[[], Tensor],
    max_iter: int,
    *,
    lr: float = 1.0,
    line_search_fn: str | None = "strong_wolfe",
    tolerance_grad: float = 1e-7,
    tolerance_change: float = 1e-9,
    history_size: int = 100,
    on_nonfinite: NonFinitePolicy = "stop",
    name: str = "training",
) -> float:
    """Minimise ``loss_fn()`` by one ``torch.optim.LBFGS`` run of up to ``max_iter``
    iterations, under the non-finite policy of this module.

    The run fails when the loss raises one of :data:`STEP_ERRORS` or the loss at
    the final parameters is non-finite; the parameters are then restored to those before the
    run, with one :class:`NumericalWarning` (or :class:`NonFiniteError` with
    ``on_nonfinite="raise"``).

    Args:
        params: parameters to optimise.
        loss_fn: the full-batch objective (deterministic, as L-BFGS needs).
        max_iter: L-BFGS iterations; lr, line_search_fn, tolerance_grad, tolerance_change,
            history_size: those of ``torch.optim.LBFGS``.
        on_nonfinite: the non-finite policy (module docstring).
        name: who is training, for messages.

    Returns:
        The loss at the final (or restored) parameters.

    Example:
        >>> w = torch.nn.Parameter(torch.tensor([3.0, -1.0]))
        >>> loss = minimize_lbfgs([w], lambda: ((w - 1.0) ** 2).sum(), 20)
        >>> round(loss, 6), [round(v, 4) for v in w.tolist()]
        (0.0, [1.0, 1.0])
    """
    if on_nonfinite not in ("stop", "raise"):
        raise InputDataError(f"on_nonfinite must be 'stop' or 'raise', got {on_nonfinite!r}")
    max_iter = check_count(max_iter, "max_iter", name, minimum=1)
    lr = check_positive(lr, "lr", name)
    params = [p for p in params if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    opt = torch.optim.LBFGS(
        params,
        lr=lr,
        max_iter=int(max_iter),
        line_search_fn=line_search_fn,
        tolerance_grad=tolerance_grad,
        tolerance_change=tolerance_change,
        history_size=history_size,
    )

    def closure() -> Tensor:
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    with torch.enable_grad():
        try:
            last = float(opt.step(closure).detach())
        except STEP_ERRORS:
            last = float("nan")
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        if math.isfinite(last):
            try:
                last = float(loss_fn())
            except STEP_ERRORS:
                last = float("nan")
        if math.isfinite(last):
            return last
        for p, v in zip(params, saved, strict=True):
            p.copy_(v)
    msg = (
        f"{name}: L-BFGS met a non-finite loss or a matrix that is not positive definite; "
        "the parameters before the run were restored (rescale the data or use Adam)"
    )
    if on_nonfinite == "raise":
        raise NonFiniteError(msg)
    warnings.warn(msg, NumericalWarning, stacklevel=2)
    with torch.no_grad():
        return float(loss_fn())
