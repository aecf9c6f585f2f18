"""``bo-ncgp compare``: paired differences A - B of campaign metrics over the seeds both ran.

    bo-ncgp compare results/hotspots/entropy results/hotspots/random \\
        --metrics accuracy,mse --at 150,199 --json paired.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["HELP", "add_arguments", "run"]

HELP = "paired differences A - B of campaign metrics over the seeds both ran"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp compare``.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> command_parser("compare").parse_args(["a", "b"]).at
        '150,199'
    """
    parser.add_argument("a", type=Path, help="campaign folder of strategy A")
    parser.add_argument("b", type=Path, help="campaign folder of strategy B (same seeds)")
    parser.add_argument("--metrics", default="accuracy,mse", help="comma-separated metric names")
    parser.add_argument("--at", default="150,199", help="comma-separated steps (evaluations)")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


def run(args: argparse.Namespace) -> int:
    """Print (and optionally write) :func:`~bo_ncgp.campaigns.compare.paired_differences`.

    Example:
        >>> run(argparse.Namespace(a=Path("/nonexistent"), b=Path("/nonexistent"),
        ...                        metrics="mse", at="5", json=None))
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
