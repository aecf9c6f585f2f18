"""``bo-ncgp lunar-lander``: batch BO of the lunar-lander controller (Chang et al. 2023, Sec.
4.1), one campaign per seed under ``OUT/<strategy>/seed_<k>``, then a summary
(``OUT/<strategy>/summary.json``), the per-seed archive and the plot ``OUT/best.png``.

The strategies are those registered for ``lunar-lander`` in
:mod:`bo_ncgp.campaigns.strategies.registry`; their model options default to the values of
their config dataclasses.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bo_ncgp.cli import Command
from bo_ncgp.cli.argtypes import NONNEGATIVE_INT, POSITIVE_INT, number_in
from bo_ncgp.cli.common import add_dask_arguments, dask_options

__all__ = ["DEFAULT_STRATEGY", "FULL", "HELP", "LUNAR_LANDER", "QUICK", "add_arguments", "run"]

HELP = "batch BO of the lunar-lander controller (Chang et al. Sec. 4.1)"
#: the run settings: full preset, and the ``--quick`` preset (each used unless given)
FULL = {"seeds": 5, "evaluations": 90, "initial": 24, "episodes": 10, "heldout_episodes": 50}
QUICK = {"seeds": 2, "evaluations": 15, "initial": 6, "episodes": 3, "heldout_episodes": 10}
#: model settings of the ``--quick`` preset, used unless given
QUICK_MODEL = {"hyper_steps": 20, "num_restarts": 2, "raw_samples": 128}
#: command-line option -> strategy option (config field)
MODEL_OPTIONS = {
    "--num-inducing": ("num_inducing", POSITIVE_INT, "model inducing points"),
    "--hyper-steps": (
        "hyper_steps",
        NONNEGATIVE_INT,
        "hyperparameter steps per model update (Adam steps; dual: L-BFGS iterations)",
    ),
    "--num-restarts": ("num_restarts", POSITIVE_INT, "optimize_acqf restarts"),
    "--raw-samples": ("raw_samples", POSITIVE_INT, "optimize_acqf raw samples"),
}
#: the strategy run unless ``--strategy`` names another: the toolkit's fantasy batches
DEFAULT_STRATEGY = "fantasy-batch"


def _preset_help(text: str, key: str) -> str:
    return f"{text} (default: {FULL[key]}; --quick: {QUICK[key]})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp lunar-lander``; the run settings default to ``None`` (filled
    from :data:`FULL` or :data:`QUICK` by :func:`run`), the model options to the strategy
    config's defaults.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> p = command_parser("lunar-lander")
        >>> a = p.parse_args([])
        >>> a.strategy, a.batch_size, a.num_inducing, a.seeds  # None: the default applies
        ('fantasy-batch', 3, None, None)
    """
    from bo_ncgp.campaigns.strategies.registry import get_strategy_spec, strategy_names

    defaults = get_strategy_spec("lunar-lander", DEFAULT_STRATEGY).defaults()
    parser.add_argument(
        "--strategy",
        default=DEFAULT_STRATEGY,
        choices=strategy_names("lunar-lander"),
        help="fantasy-batch: DualSVGP reward and success models, batches by dual "
        "conditioning (posterior-mean fantasies); fantasy-batch-sampled: the same with "
        "sampled fantasies; dual: the constrained suite's DualSVGP models (converged fits, "
        "Gaussian success labels) with fantasy batches; sequential: the fantasy-batch models, "
        "one point per batch; kriging-believer: exact GP with Kriging-believer batches; "
        "random: random search",
    )
    parser.add_argument(
        "--batch-size", type=POSITIVE_INT, default=3, help="evaluations proposed per batch"
    )
    parser.add_argument(
        "--evaluations",
        type=POSITIVE_INT,
        default=None,
        help=_preset_help("total evaluations per seed", "evaluations"),
    )
    parser.add_argument(
        "--initial",
        type=POSITIVE_INT,
        default=None,
        help=_preset_help("initial random evaluations", "initial"),
    )
    parser.add_argument(
        "--extend",
        action="store_true",
        help="let resumed seeds take an --evaluations or --batch-size other than the saved "
        "one (--initial cannot change once the initial design is proposed)",
    )
    parser.add_argument(
        "--seeds",
        type=POSITIVE_INT,
        default=None,
        help=_preset_help("number of seeds, from --first-seed on", "seeds"),
    )
    parser.add_argument(
        "--first-seed", type=NONNEGATIVE_INT, default=0, help="the first seed of the campaigns"
    )
    parser.add_argument(
        "--episodes",
        type=POSITIVE_INT,
        default=None,
        help=_preset_help("episodes per evaluation (K)", "episodes"),
    )
    parser.add_argument(
        "--heldout-episodes",
        type=POSITIVE_INT,
        default=None,
        help=_preset_help(
            "episodes that score the final recommendation of each seed", "heldout_episodes"
        ),
    )
    parser.add_argument(
        "--success-fraction",
        type=number_in(0.0, 1.0, low_open=True),
        default=1.0,
        help="fraction of the episodes that must land for a success",
    )
    parser.add_argument("--workers", type=POSITIVE_INT, default=1, help="evaluation processes")
    add_dask_arguments(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/lunar"),
        help="output folder: campaigns in OUT/<strategy>/seed_<k>, the plot OUT/best.png",
    )
    for flag, (key, cast, help_) in MODEL_OPTIONS.items():
        quick = f"; --quick: {QUICK_MODEL[key]}" if key in QUICK_MODEL else ""
        parser.add_argument(
            flag,
            type=cast,
            default=None,
            help=f"{help_} (default: {defaults[key]}{quick}; model strategies only)",
        )
    parser.add_argument(
        "--threads",
        type=POSITIVE_INT,
        default=1,
        help="torch threads (1 is fastest for these models)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small preset (2 seeds, 15 evaluations, 3 episodes) finishing in ~2 min; "
        "options given explicitly override it",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def strategy_options(args: argparse.Namespace) -> dict:
    """The strategy options given on the command line (or by the quick preset) that the
    chosen strategy has.

    Example:
        >>> strategy_options(argparse.Namespace(strategy="random", num_inducing=8,
        ...                                     hyper_steps=None, num_restarts=None,
        ...                                     raw_samples=None))
        {}
    """
    from bo_ncgp.campaigns.strategies.registry import get_strategy_spec

    known = get_strategy_spec("lunar-lander", args.strategy).options()
    options = {key: getattr(args, key, None) for key, _, _ in MODEL_OPTIONS.values()}
    return {k: v for k, v in options.items() if v is not None and k in known}


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the campaigns, summarise, archive and plot them.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> p = command_parser("lunar-lander")
        >>> run(p.parse_args(["--quick"]))  # doctest: +SKIP
        0
    """
    import torch

    from bo_ncgp.campaigns.archive import write_archive
    from bo_ncgp.campaigns.executors import load_security
    from bo_ncgp.campaigns.plotting import collect, plot_campaigns, summarise
    from bo_ncgp.campaigns.runner import run_seeds
    from bo_ncgp.campaigns.stats import mean_se
    from bo_ncgp.campaigns.storage import write_json
    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.exceptions import InputDataError
    from bo_ncgp.problems.registry import make_problem

    torch.set_num_threads(args.threads)
    for key, val in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    if args.quick:
        for key, val in QUICK_MODEL.items():
            if getattr(args, key) is None:
                setattr(args, key, val)
    options = strategy_options(args)
    problem_options = dict(
        episodes=args.episodes,
        heldout_episodes=args.heldout_episodes,
        success_fraction=args.success_fraction,
    )
    t0 = time.perf_counter()
    try:
        load_security(args.dask_security)  # a bad TLS file is reported before any seed runs
        states = run_seeds(
            lambda: make_problem("lunar-lander", **problem_options),
            lambda: build_strategy("lunar-lander", args.strategy, **options),
            range(args.first_seed, args.first_seed + args.seeds),
            args.out / args.strategy,
            budget=args.evaluations,
            batch_size=args.batch_size,
            num_initial=args.initial,
            workers=args.workers,
            dask_scheduler=args.dask_scheduler,
            **dask_options(args),
            progress=not args.no_progress,
            extend=args.extend,
        )
    except (ConnectionError, TimeoutError, FileNotFoundError, InputDataError) as err:
        if args.dask_scheduler is None and args.dask_security is None:
            raise
        print(f"bo-ncgp lunar-lander: {err}", file=sys.stderr)  # no scheduler, no worker, TLS
        return 2
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
    heldout_mean = mean_se(heldout)[0] if heldout else None
    summary = {
        "strategy": args.strategy,
        "seeds": args.seeds,
        "best_at": {str(n): {"mean": m, "se": se, "n": k} for n, (m, se, k) in summ.items()},
        "heldout_mean": heldout_mean,
        "wall_seconds": wall,
    }
    write_json(args.out / args.strategy / "summary.json", summary)
    print(
        f"{args.strategy}: "
        + ", ".join(f"best@{n} = {m:.1f} +- {se:.1f}" for n, (m, se, _) in summ.items())
    )
    if heldout:
        print(f"held-out reward of the final recommendations: {heldout_mean:.1f}")
    png = plot_campaigns([args.out], args.out / "best.png", title="lunar lander")
    print(f"results in {args.out} (plot {png})")
    return 0


#: ``bo-ncgp lunar-lander``
LUNAR_LANDER = Command(HELP, add_arguments, run)
