"""``bo-ncgp demo``: the README's main job, a short lunar-lander batch-BO campaign vs random."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["HELP", "add_arguments", "run"]

HELP = "the README's main job: a short lunar-lander batch-BO campaign vs random"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp demo``.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> command_parser("demo").parse_args([]).out
        PosixPath('results/demo')
    """
    parser.add_argument("--out", type=Path, default=Path("results/demo"))


def run(args: argparse.Namespace) -> int:
    """``bo-ncgp lunar-lander --quick`` with ``fantasy-batch`` and ``random``, then the plot.

    Example:
        >>> run(argparse.Namespace(out=Path("results/demo")))  # doctest: +SKIP
        0
    """
    from bo_ncgp.cli import main

    out = str(args.out)
    print("Demo: fantasy-batch BO (DualSVGP reward + DualSVGP success classifier, batches of 3")
    print("built by dual conditioning) against random search on the 12-D lunar lander;")
    print("--quick preset: 2 seeds x 15 evaluations of 3 episodes each.\n")
    for strategy in ("fantasy-batch", "random"):
        code = main(["lunar-lander", "--quick", "--strategy", strategy, "--out", out])
        if code:
            return code
    return main(["plot", out, "--output", f"{out}/best.png", "--title", "lunar lander (demo)"])
