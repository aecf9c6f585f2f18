"""``bo-ncgp plot``: campaign results, mean +- s.e. over seeds, one line per strategy."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["HELP", "add_arguments", "run"]

HELP = "plot campaign results (mean +- s.e. over seeds, one line per strategy)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp plot``.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> command_parser("plot").parse_args(["a", "b"]).metric
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


def run(args: argparse.Namespace) -> int:
    """:func:`~bo_ncgp.campaigns.plotting.plot_campaigns` of the folders (2 if none holds a
    campaign).

    Example:
        >>> run(argparse.Namespace(out_dirs=[Path("/nonexistent")], output=None,
        ...                        metric="best", title=None))
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
