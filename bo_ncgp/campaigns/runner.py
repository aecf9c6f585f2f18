"""The campaign runner: an ask/tell loop with crash-safe checkpoints and resume.

Files in ``out_dir`` (all written atomically, see :mod:`bo_ncgp.campaigns.storage`):

* ``state.json`` -- configuration, every finished evaluation (inputs, outcome, error,
  duration), the batch in flight (``pending``) with its already finished evaluations,
  per-iteration timings (model update / acquisition / evaluation) and strategy metrics,
  and the final recommendation with its held-out score;
* ``evaluations.csv`` -- the evaluation log, one row per evaluation;
* ``.campaign.lock`` -- the lock that keeps a second process out of the folder while a
  campaign runs (:class:`~bo_ncgp.campaigns.storage.FolderLock`; released by the operating
  system when the process ends, however it ends).

``state.json`` is strict JSON with a checksum; a resumed campaign is checked before it
continues (:mod:`bo_ncgp.campaigns.state`): a damaged, edited or inconsistent ``state.json``
or ``evaluations.csv`` is refused with :class:`~bo_ncgp.exceptions.StateError` naming the file
and what is wrong, and so are a budget, batch size or initial design other than the saved
ones unless the change is asked for (``extend=True``). Files that cannot be written (full
disk, read-only folder) raise :class:`~bo_ncgp.exceptions.StorageError`.

Each finished evaluation is saved as soon as it completes, and a proposed batch is saved
before it is evaluated; :meth:`Campaign.resume` therefore neither loses nor repeats a finished
evaluation when a run was killed (even by SIGKILL, even mid-batch). Randomness is derived
from ``(seed, iteration)`` -- numpy's ``default_rng([seed, iteration])`` and
``torch.manual_seed`` -- and streaming strategies are rebuilt by replaying ``observe`` over
the saved batches, so a resumed run proposes the same points as an uninterrupted one, bit
for bit (floats are saved with ``repr``).
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.campaigns.executors import DASK_TIMEOUT, InlineExecutor, make_executor
from bo_ncgp.campaigns.state import CSV_HEADER, check_csv, check_state, csv_rows
from bo_ncgp.campaigns.storage import (
    CHECKSUM,
    FolderLock,
    check_name,
    read_json,
    remove_stale_temps,
    write_csv,
    write_json,
)
from bo_ncgp.campaigns.strategies.base import History, Strategy
from bo_ncgp.exceptions import InputDataError, StateError
from bo_ncgp.problems.base import Evaluation, Problem

_log = logging.getLogger(__name__)

__all__ = ["Campaign", "run_seed", "run_seeds"]

STATE = "state.json"
CSV = "evaluations.csv"
FORMAT_VERSION = 2
#: the settings a resumed campaign may change only when asked to (``extend=True``)
SETTINGS = ("budget", "batch_size", "num_initial")


def _seed_everything(seed: int, iteration: int, salt: int) -> np.random.Generator:
    rng = np.random.default_rng([seed, iteration, salt])
    try:
        import torch

        torch.manual_seed(int(rng.integers(2**62)))
    except ImportError:  # pragma: no cover
        pass
    return np.random.default_rng([seed, iteration, salt, 1])


def _evaluate(problem: Problem, point: Any, pool: bool) -> Evaluation:
    return problem.evaluate_index(int(point)) if pool else problem.evaluate(np.asarray(point))


def _to_record(point: Any, ev: Evaluation | None, err: str | None, seconds: float) -> dict:
    value = float("nan") if ev is None else float(ev.value)
    if err is None and not math.isfinite(value):
        err = "evaluation returned a non-finite value"
    return {
        "point": point,
        "value": value if err is None else float("nan"),
        "success": None if ev is None or ev.success is None else bool(ev.success),
        "extra": {} if ev is None else ev.extra,
        "error": err,
        "seconds": seconds,
    }


class Campaign:
    """Ask/tell optimisation or active-learning campaign with checkpointing.

    Args:
        problem: what to evaluate (:class:`~bo_ncgp.problems.base.Problem`).
        strategy: how to choose points (:class:`~bo_ncgp.campaigns.strategies.base.Strategy`).
        budget: total number of evaluations, initial design included.
        batch_size: points per acquisition batch.
        num_initial: size of the initial design (random, identical for every strategy
            with the same seed).
        seed: campaign seed.
        out_dir: folder of ``state.json`` and ``evaluations.csv``.

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import RandomSearch
        >>> from bo_ncgp.problems.synthetic import TestFunction
        >>> out = tempfile.mkdtemp()
        >>> camp = Campaign(TestFunction("branin"), RandomSearch(), budget=12, batch_size=3,
        ...                 num_initial=6, seed=0, out_dir=out)
        >>> state = camp.run(progress=False)
        >>> [len(b) for b in state["batches"]], state["finished"]
        ([6, 3, 3], True)
        >>> again = Campaign.resume(out, TestFunction("branin"), RandomSearch())
        >>> again.run(progress=False)["evaluations"] == state["evaluations"]  # nothing redone
        True
    """

    def __init__(
        self,
        problem: Problem,
        strategy: Strategy,
        budget: int,
        batch_size: int,
        num_initial: int,
        seed: int,
        out_dir: str | Path,
    ) -> None:
        if budget < 1 or batch_size < 1 or num_initial < 1:
            raise InputDataError(
                f"Campaign: budget, batch_size and num_initial must be >= 1, got {budget}, "
                f"{batch_size}, {num_initial}"
            )
        if num_initial > budget:
            raise InputDataError(f"Campaign: num_initial={num_initial} exceeds budget={budget}")
        if int(seed) < 0:
            raise InputDataError(f"Campaign: seed must be >= 0, got {seed}")
        check_name(strategy.name, "strategy name")
        self.problem = problem
        self.strategy = strategy
        self.budget = int(budget)
        self.batch_size = int(batch_size)
        self.num_initial = int(num_initial)
        self.seed = int(seed)
        self.out_dir = Path(out_dir)
        self.pool = getattr(problem, "pool", None) is not None
        self.state: dict[str, Any] = {}
        self._resume: dict[str, Any] | None = None  # resume()'s settings, applied again in run()

    # ---------------------------------------------------------------- state
    @property
    def state_path(self) -> Path:
        return self.out_dir / STATE

    def _fresh_state(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "problem": _jsonable(self.problem.config()),
            "strategy": _jsonable(self.strategy.config()),
            "budget": self.budget,
            "batch_size": self.batch_size,
            "num_initial": self.num_initial,
            "seed": self.seed,
            "evaluations": [],
            "batches": [],
            "iterations": [],
            "pending": None,
            "finished": False,
            "recommendation": None,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }

    def _save(self) -> None:
        write_json(self.state_path, self.state, checksum=True, items_per_line=True)

    def _save_csv(self) -> None:
        write_csv(self.out_dir / CSV, CSV_HEADER, csv_rows(self.state, self.pool))

    @classmethod
    def resume(
        cls,
        out_dir: str | Path,
        problem: Problem,
        strategy: Strategy,
        *,
        budget: int | None = None,
        batch_size: int | None = None,
        num_initial: int | None = None,
        extend: bool = False,
    ) -> Campaign:
        """Reload an interrupted campaign from ``out_dir`` (problem and strategy must be
        constructed as in the original run; their configs are checked, each saved one as
        read by the object's ``read_saved_config`` where it has one, see
        :meth:`~bo_ncgp.campaigns.strategies.base.Strategy.read_saved_config`).

        ``state.json`` and ``evaluations.csv`` are checked first (:mod:`~bo_ncgp.campaigns.state`)
        and again by :meth:`run`, under the folder's lock, before the campaign continues. A
        ``state.json`` of format 1 (no checksum) gets the same checks but the checksum and is
        saved in the current format.

        Args:
            out_dir, problem, strategy: the campaign.
            budget, batch_size, num_initial: the settings of the caller (``None``: the saved
                ones); a value other than the saved one is refused unless ``extend``.
            extend: apply the given settings: a larger budget continues a finished campaign
                (its recommendation is made again at the new end), a smaller one must still
                cover the evaluations done and in flight; a batch size applies to the batches
                not yet proposed; the initial design can change only before it is proposed.

        Raises:
            StateError: naming the file, if ``state.json`` or ``evaluations.csv`` is damaged
                or inconsistent, if the problem or strategy differs from the saved one, or if
                a setting differs and is not (or cannot be) changed.
        """
        given = {"budget": budget, "batch_size": batch_size, "num_initial": num_initial}
        state = _load_state(Path(out_dir), problem, strategy, given, extend)
        camp = cls(
            problem,
            strategy,
            state["budget"],
            state["batch_size"],
            state["num_initial"],
            state["seed"],
            out_dir,
        )
        camp.state = state
        camp._resume = {"given": given, "extend": extend}
        return camp

    def history(self) -> History:
        evs = self.state["evaluations"]
        d = getattr(self.problem, "dim", 0)
        if self.pool:
            idx = np.array([int(e["point"]) for e in evs], dtype=int)
            X = self.problem.pool[idx] if len(idx) else np.zeros((0, self.problem.pool.shape[1]))
        else:
            idx = None
            X = np.array([e["point"] for e in evs], dtype=float).reshape(len(evs), d)
        values = np.array([e["value"] for e in evs], dtype=float)
        success = np.array(
            [np.nan if e["success"] is None else float(e["success"]) for e in evs], dtype=float
        )
        return History(
            X, values, success, idx, [np.array(b, dtype=int) for b in self.state["batches"]]
        )

    # ------------------------------------------------------------------ run
    def run(self, executor: Executor | None = None, progress: bool = True) -> dict[str, Any]:
        """Run (or continue) the campaign until the budget is spent; returns the state."""
        executor = executor or InlineExecutor()
        with FolderLock(self.out_dir):  # one process at a time; released however run ends
            remove_stale_temps(self.out_dir, (STATE, CSV))
            if self._resume is not None:  # read again: another process may have gone on
                self.state = _load_state(
                    self.out_dir,
                    self.problem,
                    self.strategy,
                    self._resume["given"],
                    self._resume["extend"],
                )
                self.budget = self.state["budget"]
                self.batch_size = self.state["batch_size"]
                self.num_initial = self.state["num_initial"]
                self._save()  # the format, checksum and any extension are on disk at once
            elif not self.state:
                if self.state_path.exists():
                    raise FileExistsError(
                        f"{self.state_path} exists: use Campaign.resume(...) to continue it "
                        "or choose another out_dir"
                    )
                self.state = self._fresh_state()
                self._save()
            return self._run(executor, progress)

    def _run(self, executor: Executor, progress: bool) -> dict[str, Any]:
        self.strategy.setup(self.problem, self.seed)
        # rebuild streaming strategy state by replaying the evaluated batches
        for it, batch in enumerate(self.state["batches"]):
            _seed_everything(self.seed, it, 2)
            self._observe(batch, upto=max(batch) + 1)
        bar = _progress(
            progress,
            self.budget,
            len(self.state["evaluations"]),
            f"{self.strategy.name} seed {self.seed}",
        )
        try:
            while len(self.state["evaluations"]) < self.budget:
                it = len(self.state["batches"])
                if self.state["pending"] is None:
                    t0 = time.perf_counter()
                    points = self._propose(it)
                    self.state["pending"] = {
                        "iteration": it,
                        "points": _jsonable(points),
                        "done": {},
                        "acquisition_seconds": time.perf_counter() - t0,
                    }
                    self._save()
                t_eval = self._evaluate_pending(executor, bar)
                pend = self.state["pending"]
                n0 = len(self.state["evaluations"])
                ids = list(range(n0, n0 + len(pend["points"])))
                for j in range(len(pend["points"])):
                    self.state["evaluations"].append(pend["done"][str(j)])
                self.state["batches"].append(ids)
                self.state["pending"] = None
                _seed_everything(self.seed, it, 2)
                t0 = time.perf_counter()
                hist = self._observe(ids, upto=len(self.state["evaluations"]))
                t_update = time.perf_counter() - t0
                metrics = self.strategy.report(hist)
                self.state["iterations"].append(
                    {
                        "iteration": it,
                        "num_evaluations": len(self.state["evaluations"]),
                        "best_value": hist.best_value(),
                        "acquisition_seconds": pend["acquisition_seconds"],
                        "evaluation_seconds": t_eval,
                        "update_seconds": t_update,
                        "metrics": _jsonable(metrics),
                    }
                )
                self._save()
                self._save_csv()
                if bar is not None:
                    bar.set_postfix(best=f"{hist.best_value():.4g}")
            if not self.state["finished"]:
                self._finish(executor)
        finally:
            if bar is not None:
                bar.close()
        return self.state

    def _propose(self, it: int) -> np.ndarray:
        n_done = len(self.state["evaluations"])
        if it == 0:
            rng = np.random.default_rng([self.seed, 0, 0])  # strategy-independent design
            points = self.problem.initial_design(self.num_initial, rng)
        else:
            rng = _seed_everything(self.seed, it, 1)
            q = min(self.batch_size, self.budget - n_done)
            points = np.asarray(self.strategy.ask(self.history(), q, rng))
        if self.pool:
            points = np.asarray(points, dtype=int).reshape(-1)
        else:
            points = np.asarray(points, dtype=float).reshape(-1, self.problem.dim)
        if len(points) == 0:
            raise RuntimeError(f"{self.strategy.name} proposed no points at iteration {it}")
        return points

    def _evaluate_pending(self, executor: Executor, bar) -> float:
        pend = self.state["pending"]
        todo = [j for j in range(len(pend["points"])) if str(j) not in pend["done"]]
        t0 = time.perf_counter()

        def record(fut, j: int) -> None:
            try:
                ev, seconds = fut.result()
                rec = _to_record(pend["points"][j], ev, None, seconds)
            except Exception as err:  # recorded, never fatal
                msg = "".join(traceback.format_exception_only(type(err), err)).strip()
                rec = _to_record(pend["points"][j], None, msg, float("nan"))
                _log.warning("seed %d: an evaluation failed (recorded): %s", self.seed, msg)
            pend["done"][str(j)] = _jsonable(rec)
            self._save()  # every finished evaluation is on disk before the next one starts
            if bar is not None:
                bar.update(1)

        if isinstance(executor, InlineExecutor):  # runs on submit: save after each one
            for j in todo:
                record(
                    executor.submit(_timed_evaluate, self.problem, pend["points"][j], self.pool), j
                )
        else:
            futures = {
                executor.submit(_timed_evaluate, self.problem, pend["points"][j], self.pool): j
                for j in todo
            }
            for fut in as_completed(futures):
                record(fut, futures[fut])
        return time.perf_counter() - t0

    def _observe(self, ids: list[int], upto: int) -> History:
        full = self.history()
        hist = History(
            full.X[:upto],
            full.values[:upto],
            full.success[:upto],
            None if full.indices is None else full.indices[:upto],
            full.batches,
        )
        evs = [
            Evaluation(
                self.state["evaluations"][i]["value"],
                self.state["evaluations"][i]["success"],
                self.state["evaluations"][i]["extra"],
            )
            for i in ids
        ]
        self.strategy.observe(full.X[ids], evs, hist)
        return hist

    def _finish(self, executor: Executor) -> None:
        hist = self.history()
        rec = None
        if not self.pool:
            x = self.strategy.recommend(hist)
            if x is not None:
                try:
                    ev = executor.submit(self.problem.evaluate_heldout, np.asarray(x)).result()
                    rec = _jsonable(
                        {
                            "point": x,
                            "heldout_value": ev.value,
                            "heldout_success": ev.success,
                            "extra": ev.extra,
                        }
                    )
                except Exception as err:
                    rec = {"point": _jsonable(x), "error": repr(err)}
        self.state["recommendation"] = rec
        self.state["finished"] = True
        self._save()
        self._save_csv()


def _timed_evaluate(problem: Problem, point: Any, pool: bool) -> tuple[Evaluation, float]:
    t0 = time.perf_counter()
    ev = _evaluate(problem, point, pool)
    return ev, time.perf_counter() - t0


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if hasattr(obj, "tolist"):  # torch tensors
        return _jsonable(obj.tolist())
    return obj


def _load_state(
    out_dir: Path,
    problem: Problem,
    strategy: Strategy,
    given: dict[str, int | None],
    extend: bool,
) -> dict[str, Any]:
    """The checked state of the campaign in ``out_dir`` (see :meth:`Campaign.resume`)."""
    for k, v in given.items():
        if v is not None and (type(v) is not int or v < 1):
            raise InputDataError(f"Campaign.resume: {k} must be a positive integer, got {v!r}")
    path = out_dir / STATE
    state = read_json(path)
    check_state(state, problem, path)
    if state["format"] == FORMAT_VERSION and CHECKSUM not in state:
        raise StateError(f"{path}: the checksum ({CHECKSUM}) is missing")
    state.pop(CHECKSUM, None)
    state["format"] = FORMAT_VERSION
    check_csv(out_dir / CSV, state, getattr(problem, "pool", None) is not None)
    for key, obj in (("problem", problem), ("strategy", strategy)):
        # a config saved under other settings names, in the terms of the object's config
        want = _jsonable(obj.config())
        read = getattr(obj, "read_saved_config", None)
        saved = _jsonable(read(dict(state[key]))) if callable(read) else state[key]
        if saved != want:
            raise StateError(
                f"{path}: the {key} differs from the saved run: saved {state[key]}, "
                f"given {obj.config()}"
            )
        state[key] = saved
    changed = {k: v for k, v in given.items() if v is not None and v != state[k]}
    if not changed:
        return state
    text = ", ".join(f"{k}={v} (saved {state[k]})" for k, v in changed.items())
    if not extend:
        raise StateError(
            f"{path}: the campaign was saved with other settings than the given {text}; give "
            "the saved ones, or ask for the change (extend=True; --extend on the command line)"
        )
    done = len(state["evaluations"])
    pend = state["pending"]
    flight = len(pend["points"]) if pend is not None else 0
    if "num_initial" in changed and (state["batches"] or pend is not None):
        raise StateError(
            f"{path}: the initial design of {state['num_initial']} points is already proposed; "
            f"num_initial={changed['num_initial']} cannot apply"
        )
    new = {k: changed.get(k, state[k]) for k in SETTINGS}
    if new["budget"] < done + flight or new["num_initial"] > new["budget"]:
        raise StateError(
            f"{path}: budget={new['budget']} is less than the {done + flight} evaluations done "
            f"or in flight (or than num_initial={new['num_initial']})"
        )
    if state["finished"] and new["budget"] > done:
        state["finished"], state["recommendation"] = False, None
    state.update(new)
    return state


def _progress(enabled: bool, total: int, initial: int, desc: str):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="eval")


def run_seeds(
    problem_factory: Callable[[], Problem],
    strategy_factory: Callable[[], Strategy],
    seeds: Iterable[int],
    out_root: str | Path,
    *,
    budget: int,
    batch_size: int,
    num_initial: int,
    workers: int = 1,
    dask_scheduler: str | None = None,
    dask_security: Any = None,
    dask_timeout: float = DASK_TIMEOUT,
    progress: bool = True,
    extend: bool = False,
) -> list[dict]:
    """Run (or resume) one campaign per seed under ``out_root/seed_<k>``, evaluations through
    :func:`~bo_ncgp.campaigns.executors.make_executor` (``workers`` processes or a dask
    cluster, with ``dask_security`` and ``dask_timeout``). A resumed seed must have been saved
    with ``budget``, ``batch_size`` and ``num_initial``, unless ``extend`` (see
    :meth:`Campaign.resume`).

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import RandomSearch
        >>> from bo_ncgp.problems.synthetic import TestFunction
        >>> states = run_seeds(lambda: TestFunction("branin"), RandomSearch, [0, 1],
        ...                    Path(tempfile.mkdtemp()), budget=6, batch_size=2,
        ...                    num_initial=2, progress=False)
        >>> [s["seed"] for s in states], [len(s["evaluations"]) for s in states]
        ([0, 1], [6, 6])
    """
    states = []
    dask = dict(dask_security=dask_security, dask_timeout=dask_timeout)
    with make_executor(workers, dask_scheduler, **dask) as ex:
        for seed in seeds:
            out = Path(out_root) / f"seed_{seed}"
            problem, strategy = problem_factory(), strategy_factory()
            if (out / STATE).exists():
                camp = Campaign.resume(
                    out,
                    problem,
                    strategy,
                    budget=budget,
                    batch_size=batch_size,
                    num_initial=num_initial,
                    extend=extend,
                )
            else:
                camp = Campaign(
                    problem,
                    strategy,
                    budget=budget,
                    batch_size=batch_size,
                    num_initial=num_initial,
                    seed=seed,
                    out_dir=out,
                )
            states.append(camp.run(executor=ex, progress=progress))
    return states


def run_seed(
    problem: str,
    problem_options: dict[str, Any],
    strategy: str,
    strategy_options: dict[str, Any],
    seed: int,
    out_root: str | Path,
    *,
    budget: int,
    batch_size: int,
    num_initial: int,
    threads: int | None = None,
    progress: bool = False,
    read_saved_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    extend: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the campaign of one seed of a registered problem and strategy under
    ``out_root/seed_<seed>``; a picklable job for executors that run whole seeds.

    Args:
        problem, problem_options: :func:`bo_ncgp.problems.registry.make_problem` arguments.
        strategy, strategy_options: :func:`~bo_ncgp.campaigns.strategies.registry.build_strategy`
            arguments (the strategy registered for ``problem``).
        seed: campaign seed (also the problem instance's seed).
        out_root: the strategy's campaign folder.
        budget, batch_size, num_initial: as :class:`Campaign`.
        extend: a resumed seed may change them (see :meth:`Campaign.resume`).
        threads: torch threads of the process (unchanged if ``None``).
        progress: show a progress bar.
        read_saved_config: the strategy's
            :meth:`~bo_ncgp.campaigns.strategies.base.Strategy.read_saved_config` when a
            saved campaign is resumed (picklable, for process executors; default: the
            strategy's own).

    Returns:
        ``{"seed", "seconds", "final"}``: the seed, wall-clock seconds and the metrics of the
        last iteration.

    Example:
        >>> import tempfile
        >>> res = run_seed("synthetic", {"function": "branin"}, "random", {}, 3,
        ...                tempfile.mkdtemp(), budget=4, batch_size=2, num_initial=2)
        >>> res["seed"], res["final"]
        (3, {})
    """
    import torch

    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.problems.registry import make_problem

    if threads is not None:
        torch.set_num_threads(int(threads))

    def make_strategy() -> Strategy:
        built = build_strategy(problem, strategy, **strategy_options)
        if read_saved_config is not None:
            built.read_saved_config = read_saved_config  # type: ignore[method-assign]
        return built

    instance = make_problem(problem, seed=seed, **problem_options)
    t0 = time.perf_counter()
    (state,) = run_seeds(
        lambda: instance,
        make_strategy,
        [seed],
        out_root,
        budget=budget,
        batch_size=batch_size,
        num_initial=num_initial,
        progress=progress,
        extend=extend,
    )
    last = state["iterations"][-1]["metrics"]
    return {"seed": seed, "seconds": time.perf_counter() - t0, "final": last}
