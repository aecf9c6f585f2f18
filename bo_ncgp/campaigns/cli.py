"""``bo-ncgp`` commands for campaigns: ``plot`` and the experiment runners.

Experiments register their strategies in :data:`LUNAR_STRATEGIES` (name -> factory taking the
parsed arguments), so ``bo-ncgp lunar-lander --strategy NAME`` lists whatever is available.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bo_ncgp.campaigns.archive import write_archive
from bo_ncgp.campaigns.executors import make_executor
from bo_ncgp.campaigns.plotting import collect, plot_campaigns, summarise
from bo_ncgp.campaigns.runner import Campaign
from bo_ncgp.campaigns.strategy import RandomSearch, Strategy
from bo_ncgp.cli import command

__all__ = ["LUNAR_STRATEGIES", "run_seeds"]

#: strategy name -> factory(args) for the lunar-lander experiment
LUNAR_STRATEGIES: dict[str, Callable[[argparse.Namespace], Strategy]] = {
    "random": lambda args: RandomSearch(),
}


def _register_model_strategies() -> None:
    import importlib

    try:  # model-based strategies need the BoTorch layer
        importlib.import_module("bo_ncgp.campaigns.lunar_strategies")
    except ModuleNotFoundError as err:
        if err.name != "bo_ncgp.campaigns.lunar_strategies":
            raise


def run_seeds(
    problem_factory,
    strategy_factory,
    seeds,
    out_root: Path,
    *,
    budget: int,
    batch_size: int,
    num_initial: int,
    workers: int = 1,
    dask_scheduler: str | None = None,
    progress: bool = True,
) -> list[dict]:
    """Run (or resume) one campaign per seed under ``out_root/seed_<k>``.

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
    with make_executor(workers, dask_scheduler) as ex:
        for seed in seeds:
            out = out_root / f"seed_{seed}"
            problem, strategy = problem_factory(), strategy_factory()
            if (out / "state.json").exists():
                camp = Campaign.resume(out, problem, strategy)
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


# ------------------------------------------------------------------------- plot
def _plot_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "out_dirs", nargs="+", type=Path, help="campaign folders (searched for state.json)"
    )
    p.add_argument(
        "--output", "-o", type=Path, default=None, help="PNG path (default: first folder/best.png)"
    )
    p.add_argument("--metric", default="best", help="'best' or a metric logged by the strategy")
    p.add_argument("--title", default=None)


@command("plot", "plot campaign results (mean +- s.e. over seeds, one line per strategy)")(
    _plot_args
)
def _plot(args: argparse.Namespace) -> int:
    out = args.output or args.out_dirs[0] / f"{args.metric}.png"
    try:
        path = plot_campaigns(args.out_dirs, out, metric=args.metric, title=args.title)
    except FileNotFoundError as err:
        print(f"bo-ncgp plot: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


# ------------------------------------------------------------------ lunar lander
def _lunar_args(p: argparse.ArgumentParser) -> None:
    _register_model_strategies()
    p.add_argument("--strategy", default="random", choices=sorted(LUNAR_STRATEGIES))
    p.add_argument("--batch-size", type=int, default=3)
    p.add_argument("--evaluations", type=int, default=90, help="total evaluations per seed")
    p.add_argument("--initial", type=int, default=24, help="initial random evaluations")
    p.add_argument("--seeds", type=int, default=5, help="number of seeds (0..S-1)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=10, help="episodes per evaluation (K)")
    p.add_argument("--heldout-episodes", type=int, default=50)
    p.add_argument("--success-fraction", type=float, default=1.0)
    p.add_argument("--workers", type=int, default=1, help="evaluation processes")
    p.add_argument("--dask-scheduler", default=None, help="address of a dask scheduler")
    p.add_argument("--out", type=Path, default=Path("results/lunar"))
    p.add_argument("--num-inducing", type=int, default=None, help="model inducing points")
    p.add_argument("--hyper-steps", type=int, default=None, help="Adam steps per model update")
    p.add_argument("--num-restarts", type=int, default=None, help="optimize_acqf restarts")
    p.add_argument("--raw-samples", type=int, default=None, help="optimize_acqf raw samples")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest for these models)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small preset (2 seeds, 15 evaluations, 3 episodes) finishing in ~2 min",
    )
    p.add_argument("--no-progress", action="store_true")


@command("lunar-lander", "batch BO of the lunar-lander controller (Chang et al. Sec. 4.1)")(
    _lunar_args
)
def _lunar(args: argparse.Namespace) -> int:
    import torch

    from bo_ncgp.problems.lunar_lander import LunarLander

    torch.set_num_threads(args.threads)
    if args.quick:
        args.seeds, args.evaluations, args.initial = 2, 15, 6
        args.episodes, args.heldout_episodes = 3, 10
        args.hyper_steps = args.hyper_steps or 20
        args.num_restarts = args.num_restarts or 2
        args.raw_samples = args.raw_samples or 128
    problem_factory = lambda: LunarLander(  # noqa: E731
        episode_seeds=list(range(args.episodes)),
        heldout_seeds=list(range(10_000, 10_000 + args.heldout_episodes)),
        success_fraction=args.success_fraction,
    )
    strategy_factory = lambda: LUNAR_STRATEGIES[args.strategy](args)  # noqa: E731
    t0 = time.perf_counter()
    states = run_seeds(
        problem_factory,
        strategy_factory,
        range(args.first_seed, args.first_seed + args.seeds),
        args.out / args.strategy,
        budget=args.evaluations,
        batch_size=args.batch_size,
        num_initial=args.initial,
        workers=args.workers,
        dask_scheduler=args.dask_scheduler,
        progress=not args.no_progress,
    )
    wall = time.perf_counter() - t0
    at = sorted({n for n in (30, 60, 90, args.evaluations) if n <= args.evaluations})
    groups = collect([args.out / args.strategy])
    name = states[0]["strategy"]["name"]
    write_archive(args.out / args.strategy, groups[name])  # per-seed records to commit
    summ = summarise(groups, at)[name]
    heldout = [
        s["recommendation"]["heldout_value"]
        for s in states
        if s.get("recommendation") and "heldout_value" in s["recommendation"]
    ]
    summary = {
        "strategy": args.strategy,
        "seeds": args.seeds,
        "best_at": {str(n): {"mean": m, "se": se, "n": k} for n, (m, se, k) in summ.items()},
        "heldout_mean": sum(heldout) / len(heldout) if heldout else None,
        "wall_seconds": wall,
    }
    (args.out / args.strategy / "summary.json").write_text(json.dumps(summary, indent=1))
    print(
        f"{args.strategy}: "
        + ", ".join(f"best@{n} = {m:.1f} +- {se:.1f}" for n, (m, se, _) in summ.items())
    )
    if heldout:
        print(f"held-out reward of the final recommendations: {summary['heldout_mean']:.1f}")
    png = plot_campaigns([args.out], args.out / "best.png", title="lunar lander")
    print(f"results in {args.out} (plot {png})")
    return 0
