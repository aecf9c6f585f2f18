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
        >>> PLOT.parser().parse_args(["a", "b"]).metric
        'best'
    """
    parser.add_argument(
        "out_dirs", nargs="+", type=Path, help="campaign folders (searched for state.json)"
    )
    parser.add_argument(
        "--output", "-o", type=Path, default=None, help="PNG path (default: first folder/best.png)"
    )
    parser.add_argument(
        "--metric", default="best", help="'best' or a metric logged by the strategy"
    )
    parser.add_argument("--title", default=None)


def run_plot(args: argparse.Namespace) -> int:
    """:func:`~bo_ncgp.campaigns.plotting.plot_campaigns` of the folders (2 if none holds a
    campaign).

    Example:
        >>> run_plot(argparse.Namespace(out_dirs=[Path("/nonexistent")], output=None,
        ...                             metric="best", title=None))
        2
    """
    from bo_ncgp.campaigns.plotting import plot_campaigns

    out = args.output or args.out_dirs[0] / f"{args.metric}.png"
    try:
        path = plot_campaigns(args.out_dirs, out, metric=args.metric, title=args.title)
    except FileNotFoundError as err:
        print(f"bo-ncgp plot: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp compare``.

    Example:
        >>> COMPARE.parser().parse_args(["a", "b"]).at
        '150,199'
    """
    parser.add_argument("a", type=Path, help="campaign folder of strategy A")
    parser.add_argument("b", type=Path, help="campaign folder of strategy B (same seeds)")
    parser.add_argument("--metrics", default="accuracy,mse", help="comma-separated metric names")
    parser.add_argument("--at", default="150,199", help="comma-separated steps (evaluations)")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


def run_compare(args: argparse.Namespace) -> int:
    """Print (and optionally write) :func:`~bo_ncgp.campaigns.compare.paired_differences`.

    Example:
        >>> run_compare(argparse.Namespace(a=Path("/nonexistent"), b=Path("/nonexistent"),
        ...                                metrics="mse", at="5", json=None))
        2
    """
    from bo_ncgp.campaigns.compare import paired_differences
    from bo_ncgp.campaigns.storage import write_json

    try:
        steps = tuple(int(s) for s in args.at.split(",") if s)
        metrics = tuple(m for m in args.metrics.split(",") if m)
        res = paired_differences(args.a, args.b, metrics, steps)
    except (FileNotFoundError, ValueError) as err:
        print(f"bo-ncgp compare: {err}", file=sys.stderr)
        return 2
    seeds = res["seeds"]
    shown = seeds if len(seeds) <= 10 else f"{seeds[:3]}...{seeds[-2:]}"
    print(f"A = {args.a}, B = {args.b}, {len(seeds)} seed(s) in both: {shown}")
    for metric in metrics:
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
