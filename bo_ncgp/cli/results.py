"""The commands that read campaign results (the ``state.json`` files of campaign folders):

* ``bo-ncgp plot``: mean +- s.e. over seeds, one line per strategy;
* ``bo-ncgp compare``: paired differences A - B of campaign metrics over the seeds both ran::

    bo-ncgp compare results/hotspots/entropy results/hotspots/random \\
        --metrics accuracy,mse --at 150,199 --json paired.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bo_ncgp.cli import Command

__all__ = [
    "COMPARE",
    "PLOT",
    "add_compare_arguments",
    "add_plot_arguments",
    "run_compare",
    "run_plot",
]


def add_plot_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp plot``.

    Example:
        >>> PLOT.parser().parse_args(["a", "b"]).metric is None  # chosen from the runs
        True
    """
    parser.add_argument(
        "out_dirs", nargs="+", type=Path, help="campaign folders (searched for state.json)"
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        default=None,
        help="PNG path (default: <first folder>/<metric>.png)",
    )
    parser.add_argument(
        "--metric",
        default=None,
        help="'best' (best value so far) or a metric the strategies logged (default: 'best' "
        "for optimisation runs, 'accuracy' for active-learning runs)",
    )
    parser.add_argument("--title", default=None, help="figure title (default: the problem's name)")


def _states(folders: list[Path]) -> list[dict]:
    from bo_ncgp.campaigns.plotting import collect

    return [st for group in collect(folders).values() for st in group]


def run_plot(args: argparse.Namespace) -> int:
    """:func:`~bo_ncgp.campaigns.plotting.plot_campaigns` of the folders (2 if none holds a
    campaign, or they hold no such metric).

    Example:
        >>> run_plot(argparse.Namespace(out_dirs=[Path("/nonexistent")], output=None,
        ...                             metric=None, title=None))
        2
    """
    from bo_ncgp.campaigns.plotting import BEST, default_metrics, plot_campaigns

    try:
        metric = args.metric or next(iter(default_metrics(_states(args.out_dirs))), BEST)
        out = args.output or args.out_dirs[0] / f"{metric}.png"
        path = plot_campaigns(args.out_dirs, out, metric=metric, title=args.title)
    except (FileNotFoundError, ValueError) as err:
        print(f"bo-ncgp plot: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def _list(text: str) -> tuple[str, ...]:
    return tuple(v for v in (v.strip() for v in text.split(",")) if v)


def _steps(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in _list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers of evaluations such as 150,199, got {text!r}"
        ) from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"steps must be positive integers, got {text!r}")
    return vals


def _metrics(text: str) -> tuple[str, ...]:
    vals = _list(text)
    if not vals:
        raise argparse.ArgumentTypeError(f"expected comma-separated metric names, got {text!r}")
    return vals


_steps.__name__, _metrics.__name__ = "steps", "metrics"


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp compare``.

    Example:
        >>> a = COMPARE.parser().parse_args(["a", "b", "--at", "150,199"])
        >>> a.at, a.metrics  # metrics None: chosen by the runs' problem type
        ((150, 199), None)
    """
    parser.add_argument("a", type=Path, help="campaign folder of strategy A")
    parser.add_argument("b", type=Path, help="campaign folder of strategy B (same seeds)")
    parser.add_argument(
        "--metrics",
        type=_metrics,
        default=None,
        help="comma-separated metric names: 'best' (best value so far) or metrics the "
        "strategies logged (default: 'best' for optimisation runs, 'accuracy,mse' for "
        "active-learning runs)",
    )
    parser.add_argument(
        "--at",
        type=_steps,
        default=None,
        help="comma-separated steps (numbers of evaluations) (default: the last step every "
        "seed of both folders reached)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


def run_compare(args: argparse.Namespace) -> int:
    """Print (and optionally write) :func:`~bo_ncgp.campaigns.compare.paired_differences`;
    2 (with a one-line message) if a folder holds no campaign, the folders share no seed or
    do not hold a metric asked for.

    Example:
        >>> run_compare(argparse.Namespace(a=Path("/nonexistent"), b=Path("/nonexistent"),
        ...                                metrics=("mse",), at=(5,), json=None))
        2
    """
    from bo_ncgp.campaigns.compare import paired_differences
    from bo_ncgp.campaigns.storage import write_json

    try:
        res = paired_differences(args.a, args.b, args.metrics, args.at)
    except (FileNotFoundError, ValueError) as err:
        print(f"bo-ncgp compare: {err}", file=sys.stderr)
        return 2
    seeds = res["seeds"]
    shown = seeds if len(seeds) <= 10 else f"{seeds[:3]}...{seeds[-2:]}"
    print(f"A = {args.a}, B = {args.b}, {len(seeds)} seed(s) in both: {shown}")
    for metric in res["metrics"]:
        for step, d in res[metric].items():
            print(
                f"{metric}@{step}: A - B = {d['mean']:+.4g} +- {d['se']:.2g} "
                f"(n={d['n']}, A lower on {d['a_lower']})"
            )
    if args.json is not None:
        write_json(args.json, res)
        print(f"wrote {args.json}")
    return 0


#: ``bo-ncgp plot``
PLOT = Command(
    "plot campaign results (mean +- s.e. over seeds, one line per strategy)",
    add_plot_arguments,
    run_plot,
)
#: ``bo-ncgp compare``
COMPARE = Command(
    "paired differences A - B of campaign metrics over the seeds both ran",
    add_compare_arguments,
    run_compare,
)
