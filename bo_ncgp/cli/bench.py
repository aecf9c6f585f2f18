"""``bo-ncgp bench``: compare BO strategies on benchmark problems, problems x strategies x
seeds through the crash-safe campaign runner (:mod:`bo_ncgp.campaigns.bench`), writing
``OUT/summary.json``, ``OUT/summary.md``, one plot per problem, and printing the table.

``--suite NAME`` takes the problems, strategies, baseline and run settings of a suite of
:data:`bo_ncgp.campaigns.bench.SUITES`; any option given overrides the suite's. ``--list``
shows the registered problems and strategies. Running the same command again skips finished
runs and resumes interrupted ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bo_ncgp.cli import Command
from bo_ncgp.cli.argtypes import NONNEGATIVE_INT, POSITIVE_INT
from bo_ncgp.cli.common import add_dask_arguments, dask_options

__all__ = ["BENCH", "HELP", "add_arguments", "run"]

HELP = "compare BO strategies: problems x strategies x seeds, paired against a baseline"


def _names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


_names.__name__ = "names"


def _budgets(text: str) -> list[int]:
    try:
        vals = [int(t) for t in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated evaluation counts, got {text!r}"
        ) from None
    if min(vals) < 1:
        raise argparse.ArgumentTypeError(f"budgets must be >= 1, got {text!r}")
    return vals


_budgets.__name__ = "budgets"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp bench``.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> a = command_parser("bench").parse_args(["--problems", "branin,levy4"])
        >>> a.problems, a.suite, a.seeds
        (['branin', 'levy4'], 'unconstrained', None)
    """
    from bo_ncgp.campaigns.bench import SUITES

    parser.add_argument(
        "--suite",
        default="unconstrained",
        choices=sorted(SUITES),
        help="preset problems, strategies, baseline and run settings (default unconstrained)",
    )
    parser.add_argument("--problems", type=_names, help="comma-separated problem names")
    parser.add_argument("--strategies", type=_names, help="comma-separated strategy names")
    parser.add_argument("--baseline", help="strategy the paired differences refer to")
    parser.add_argument("--seeds", type=POSITIVE_INT, help="number of seeds (default 5)")
    parser.add_argument(
        "--first-seed", type=NONNEGATIVE_INT, default=0, help="first seed of every run"
    )
    parser.add_argument("--evaluations", type=POSITIVE_INT, help="evaluations per run")
    parser.add_argument("--batch-size", type=POSITIVE_INT, help="points per batch")
    parser.add_argument(
        "--initial", type=POSITIVE_INT, help="random initial points (default 2 d + 2)"
    )
    parser.add_argument(
        "--budgets", type=_budgets, help="evaluation counts of the tables, e.g. 20,30,50"
    )
    parser.add_argument(
        "--workers", type=POSITIVE_INT, default=1, help="processes, one run each (default 1)"
    )
    add_dask_arguments(parser, "the runs")
    parser.add_argument("--threads", type=POSITIVE_INT, default=1, help="torch threads per run")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/bench"),
        help="output folder: runs, summary, plots",
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the plots")
    parser.add_argument(
        "--list", action="store_true", help="list the problems and strategies, run nothing"
    )


def _list() -> int:
    from bo_ncgp.campaigns.bench import SUITES
    from bo_ncgp.campaigns.strategies.registry import STRATEGIES
    from bo_ncgp.problems.registry import PROBLEMS

    print("problems:", ", ".join(sorted(PROBLEMS)))
    for (family, name), spec in sorted(STRATEGIES.items()):
        print(f"  strategy {family}/{name}: {spec.help}")
    for name, suite in sorted(SUITES.items()):
        print(
            f"suite {name}: {', '.join(suite['problems'])} x {', '.join(suite['strategies'])} "
            f"(baseline {suite['baseline']}, {suite['evaluations']} evaluations, batches of "
            f"{suite['batch_size']})"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the bench, write the summary and print its table.

    Example:
        >>> import tempfile
        >>> from bo_ncgp.cli import command_parser
        >>> out = tempfile.mkdtemp()
        >>> a = command_parser("bench").parse_args(
        ...     ["--problems", "branin", "--strategies", "random,sobol", "--seeds", "2",
        ...      "--evaluations", "8", "--no-plot", "--out", out])
        >>> run(a)  # doctest: +ELLIPSIS
        [1/4] branin / random seed 0: ...
        0
    """
    from bo_ncgp.campaigns.bench import SUITES, run_bench
    from bo_ncgp.campaigns.bench_summary import markdown_table
    from bo_ncgp.campaigns.executors import load_security
    from bo_ncgp.exceptions import InputDataError

    if args.list:
        return _list()
    suite = SUITES[args.suite]

    def pick(key: str, default=None):
        val = getattr(args, key, None)
        return val if val is not None else suite.get(key, default)

    strategies = pick("strategies")
    baseline = args.baseline or (suite["baseline"] if suite["baseline"] in strategies else None)
    settings = dict(
        evaluations=pick("evaluations"),
        batch_size=pick("batch_size"),
        initial=pick("initial"),
    )
    seeds = range(args.first_seed, args.first_seed + (args.seeds or 5))
    try:
        load_security(args.dask_security)
        summary = run_bench(
            pick("problems"),
            strategies,
            seeds,
            args.out,
            baseline=baseline,
            budgets=args.budgets,
            workers=args.workers,
            dask_scheduler=args.dask_scheduler,
            **dask_options(args),
            threads=args.threads,
            plot=not args.no_plot,
            **settings,
        )
    except InputDataError as err:
        print(f"bo-ncgp bench: {err}", file=sys.stderr)
        return 2
    print()
    print(markdown_table(summary))
    print(f"\nresults in {args.out} (summary.json, summary.md, one PNG per problem)")
    return 0


#: ``bo-ncgp bench``
BENCH = Command(HELP, add_arguments, run)
