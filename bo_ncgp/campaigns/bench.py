"""The strategy benchmark (``bo-ncgp bench``): problems x strategies x seeds, each run a
crash-safe campaign (:class:`~bo_ncgp.campaigns.runner.Campaign`) under
``OUT/<problem>/<strategy>/seed_<k>``, then a summary with paired differences, plots and a
markdown table.

Problems are the names of :data:`bo_ncgp.problems.registry.PROBLEMS`; strategies the names
registered for the problem's family in :data:`bo_ncgp.campaigns.strategies.registry.STRATEGIES`
(the family is the problem's ``strategy_family`` attribute -- ``"continuous"``,
``"constrained"``, ``"counts"``, ``"lunar-lander"`` --, else its registry name where
strategies are registered under it, else ``"continuous"`` for a problem with bounds). Runs go
through any executor of :func:`~bo_ncgp.campaigns.executors.make_executor` (processes or a
dask cluster), one run per task; running the same command again skips finished runs and
resumes interrupted ones.

The summary (:mod:`~bo_ncgp.campaigns.bench_summary`): the metric after every evaluation,
mean +- s.e. over seeds, paired differences against a baseline, timings, ``summary.json``,
``summary.md`` and one plot per problem.

A problem or strategy of your own is a registry entry (in the process that runs the bench;
process pools on Linux inherit it):

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from bo_ncgp.campaigns.strategies.base import RandomSearch
    >>> from bo_ncgp.campaigns.strategies.registry import STRATEGIES, StrategySpec
    >>> from bo_ncgp.problems.registry import PROBLEMS
    >>> from bo_ncgp.problems.benchmarks import UnitCubeFunction
    >>> PROBLEMS["my-rosenbrock"] = lambda seed=0: UnitCubeFunction("rosenbrock", dim=3)
    >>> STRATEGIES[("continuous", "my-random")] = StrategySpec(
    ...     "continuous", "my-random", "random search, mine", (), RandomSearch)
    >>> out = Path(tempfile.mkdtemp())
    >>> s = run_bench(["my-rosenbrock"], ["my-random", "sobol"], [0, 1], out,
    ...               evaluations=10, batch_size=2, baseline="sobol", progress=None)
    >>> sorted(s["problems"]["my-rosenbrock"]["strategies"]), (out / "summary.md").is_file()
    (['my-random', 'sobol'], True)
    >>> del PROBLEMS["my-rosenbrock"], STRATEGIES[("continuous", "my-random")]
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

from bo_ncgp.campaigns.bench_summary import STATE, metric_curve, summarise_bench
from bo_ncgp.campaigns.executors import DASK_TIMEOUT, InlineExecutor, make_executor
from bo_ncgp.campaigns.storage import dumps, loads, read_json
from bo_ncgp.exceptions import InputDataError

__all__ = ["SUITES", "bench_job", "run_bench", "strategy_family"]

_UNCONSTRAINED = ("branin", "hartmann6", "ackley5", "levy4")
#: named benchmark suites: the problems, strategies, baseline and run settings of each
SUITES: dict[str, dict[str, Any]] = {
    "unconstrained": {
        "problems": _UNCONSTRAINED,
        "strategies": ("random", "botorch", "dual"),
        "baseline": "botorch",
        "evaluations": 50,
        "batch_size": 1,
    },
    "q4": {
        "problems": _UNCONSTRAINED,
        "strategies": (
            "random",
            "botorch",
            "botorch-believer",
            "dual",
            "dual-std",
            "dual-fantasy",
            "dual-fantasy-mean",
            "dual-std-fantasy-mean",
        ),
        "baseline": "botorch",
        "evaluations": 62,
        "batch_size": 4,
    },
    "constrained": {
        "problems": ("branin-halfplane", "branin-disc", "hartmann6-ring", "levy4-corner"),
        "strategies": (
            "random",
            "botorch-labels",
            "botorch-bernoulli",
            "dual",
            "dual-long-labels",
            "dual-iterncgp",
            "dual-iterncgp-math",
        ),
        "baseline": "botorch-labels",
        "evaluations": 50,
        "batch_size": 1,
    },
    "counts": {
        "problems": ("branin-poisson",),
        "strategies": ("random", "botorch", "dual", "dual-poisson"),
        "baseline": "botorch",
        "evaluations": 40,
        "batch_size": 1,
    },
    "long": {
        "problems": ("hartmann6-noisy",),
        "strategies": ("random", "botorch", "dual", "dual-fantasy"),
        "baseline": "botorch",
        "evaluations": 1000,
        "batch_size": 25,
    },
    "lunar": {
        "problems": ("lunar-lander-wind",),
        "strategies": (
            "random",
            "fantasy-batch",
            "fantasy-batch-sampled",
            "kriging-believer",
            "dual",
        ),
        "baseline": "random",
        "evaluations": 90,
        "batch_size": 3,
        "initial": 24,
    },
}


def strategy_family(name: str, problem: Any) -> str:
    """The strategy family of the registered problem ``name`` (module docstring).

    Example:
        >>> from bo_ncgp.problems.registry import make_problem
        >>> strategy_family("branin-disc", make_problem("branin-disc"))
        'constrained'
        >>> strategy_family("synthetic", make_problem("synthetic"))  # registered by name
        'synthetic'
    """
    from bo_ncgp.campaigns.strategies.registry import strategy_names

    family = getattr(problem, "strategy_family", None)
    if family:
        return family
    if strategy_names(name) or getattr(problem, "bounds", None) is None:
        return name
    return "continuous"


def _settings_match(state: dict, evaluations: int, batch_size: int, initial: int) -> bool:
    want = {"budget": evaluations, "batch_size": batch_size, "num_initial": initial}
    return all(state.get(k) == v for k, v in want.items())


def bench_job(
    problem: str,
    strategy: str,
    seed: int,
    out_root: str | Path,
    *,
    evaluations: int,
    batch_size: int,
    initial: int | None = None,
    threads: int | None = 1,
) -> dict[str, Any]:
    """Run (or resume) one campaign of the bench, ``out_root/<problem>/<strategy>/seed_<k>``;
    a finished run with the same settings and configurations is not run again (one with
    others goes to the runner, which refuses it with a
    :class:`~bo_ncgp.exceptions.StateError` naming the difference). Picklable (a task for process
    pools and dask).

    Returns:
        ``{"problem", "strategy", "seed", "seconds", "skipped", "final"}`` (``final``: the
        metric at the last evaluation).

    Example:
        >>> import tempfile
        >>> out = tempfile.mkdtemp()
        >>> r = bench_job("branin", "random", 0, out, evaluations=6, batch_size=2)
        >>> r["skipped"], bench_job("branin", "random", 0, out, evaluations=6,
        ...                         batch_size=2)["skipped"]
        (False, True)
    """
    from bo_ncgp.campaigns.runner import run_seeds
    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.problems.registry import make_problem

    if threads is not None:
        import torch

        torch.set_num_threads(int(threads))
    instance = make_problem(problem, seed=seed)
    family = strategy_family(problem, instance)
    n0 = min(initial if initial is not None else 2 * instance.dim + 2, evaluations)
    folder = Path(out_root) / problem / strategy
    path = folder / f"seed_{seed}" / STATE
    t0 = time.perf_counter()
    skipped = False
    state = None
    if path.is_file():
        saved = read_json(path)
        same = _settings_match(saved, evaluations, batch_size, n0) and all(
            saved.get(key) == loads(dumps(obj.config()))
            for key, obj in (("problem", instance), ("strategy", build_strategy(family, strategy)))
        )
        if saved.get("finished") and same:  # otherwise the runner resumes it, or refuses
            state, skipped = saved, True
    if state is None:
        (state,) = run_seeds(
            lambda: instance,
            lambda: build_strategy(family, strategy),
            [seed],
            folder,
            budget=evaluations,
            batch_size=batch_size,
            num_initial=n0,
            progress=False,
        )
    curve = metric_curve(state, getattr(instance, "optimal_value", None))
    return {
        "problem": problem,
        "strategy": strategy,
        "seed": seed,
        "seconds": time.perf_counter() - t0,
        "skipped": skipped,
        "final": float(curve[-1]) if curve.size else float("nan"),
    }


def _line(r: dict[str, Any], done: int, total: int) -> str:
    head = f"[{done}/{total}] {r['problem']} / {r['strategy']} seed {r['seed']}:"
    if "error" in r:
        return f"{head} FAILED {r['error']}"
    what = "skipped (finished)" if r.get("skipped") else f"{r['seconds']:.1f} s"
    return f"{head} final {r['final']:.4g} ({what})"


def _guarded(job: dict[str, Any]) -> dict[str, Any]:
    """:func:`bench_job` that reports an exception instead of raising it."""
    try:
        return bench_job(**job)
    except Exception as err:  # one failed run does not stop the bench
        msg = "".join(traceback.format_exception_only(type(err), err)).strip()
        keys = ("problem", "strategy", "seed")
        return {**{k: job[k] for k in keys}, "error": msg, "seconds": math.nan}


def run_bench(
    problems: Sequence[str],
    strategies: Sequence[str],
    seeds: Iterable[int],
    out: str | Path,
    *,
    evaluations: int,
    batch_size: int = 1,
    initial: int | None = None,
    baseline: str | None = None,
    budgets: Sequence[int] | None = None,
    workers: int = 1,
    dask_scheduler: str | None = None,
    dask_security: Any = None,
    dask_timeout: float = DASK_TIMEOUT,
    threads: int | None = 1,
    progress: Callable[[str], Any] | None = print,
    plot: bool = True,
) -> dict[str, Any]:
    """Run every (problem, strategy, seed) campaign under ``out`` and summarise them
    (:func:`summarise_bench`); see the module docstring for the folder and the summary.

    Args:
        problems: names in :data:`~bo_ncgp.problems.registry.PROBLEMS`.
        strategies: names registered for every problem's family.
        seeds: campaign seeds.
        out: the bench folder.
        evaluations, batch_size: budget and batch size of every run.
        initial: size of the random initial design (default ``2 d + 2``).
        baseline: the strategy of the paired differences (default: the first strategy).
        budgets: evaluations of the tables (default: see :func:`summarise_bench`).
        workers, dask_scheduler, dask_security, dask_timeout: where runs execute
            (:func:`~bo_ncgp.campaigns.executors.make_executor`; one run per task).
        threads: torch threads of each run.
        progress: called with one line per finished run (``None``: silent).
        plot: draw the plots.

    Raises:
        InputDataError: an unknown problem or strategy, or a baseline not among the
            strategies, before anything runs.
    """
    from bo_ncgp.campaigns.strategies.registry import get_strategy_spec
    from bo_ncgp.problems.registry import make_problem

    problems, strategies, seeds = list(problems), list(strategies), [int(s) for s in seeds]
    if not (problems and strategies and seeds):
        raise InputDataError("run_bench: give at least one problem, strategy and seed")
    baseline = strategies[0] if baseline is None else baseline
    if baseline not in strategies:
        raise InputDataError(f"baseline {baseline!r} is not among the strategies {strategies}")
    if evaluations < 1 or batch_size < 1 or (initial is not None and initial < 1):
        raise InputDataError(
            f"run_bench: evaluations, batch_size and initial must be >= 1, got {evaluations}, "
            f"{batch_size}, {initial}"
        )
    for prob in problems:
        family = strategy_family(prob, make_problem(prob))
        for name in strategies:
            get_strategy_spec(family, name)  # an unknown name fails here, before any run
    jobs = [
        dict(
            problem=p,
            strategy=s,
            seed=seed,
            out_root=str(out),
            evaluations=evaluations,
            batch_size=batch_size,
            initial=initial,
            threads=threads,
        )
        for seed in seeds
        for p in problems
        for s in strategies
    ]
    say = progress or (lambda line: None)
    done = 0
    with make_executor(
        workers, dask_scheduler, dask_security=dask_security, dask_timeout=dask_timeout
    ) as ex:
        if isinstance(ex, InlineExecutor):
            for job in jobs:
                done += 1
                say(_line(_guarded(job), done, len(jobs)))
        else:
            for fut in as_completed([ex.submit(_guarded, job) for job in jobs]):
                done += 1
                say(_line(fut.result(), done, len(jobs)))
    settings = {
        "evaluations": evaluations,
        "batch_size": batch_size,
        "initial": initial,
        "seeds": seeds,
    }
    return summarise_bench(
        out, baseline, problems, strategies, settings=settings, budgets=budgets, plot=plot
    )
