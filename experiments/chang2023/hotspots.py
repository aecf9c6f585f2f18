"""Hotspot active learning of Chang et al. (2023), Fig. 4, with Maddox et al.'s acquisition.

The library's campaign command ``bo-ncgp hotspots`` (:mod:`bo_ncgp.cli.hotspots`: the same
options, strategies, output folders, summary and plot), with the criterion and the gain of
Maddox et al.'s script registered (:mod:`experiments.chang2023.maddox_acquisition`), so that
``--criterion`` also offers ``spiked`` and ``--gain`` also offers ``clamped``;
``--clamp-per-village`` is the name of ``--gain clamped`` in this reproduction's results.
Their acquisition on their model loop (Chang et al.'s Fig. 4 runs):

    python -m experiments.chang2023.hotspots --strategy svgp-entropy --criterion spiked \\
        --clamp-per-village --out experiments/chang2023/results/hotspots/svgp_entropy_spiked

Campaign states whose configuration says ``"clamp": true/false`` instead of ``"gain"`` and
has no ``rel_tol`` (the committed archives of the results page) resume and pool: their
configurations are read by :func:`experiments.chang2023.legacy.upgrade_config`.
"""

from __future__ import annotations

import argparse

from bo_ncgp.cli.common import DATA_ROOT_HELP, add_verify_argument
from experiments import harness

__all__ = ["RESULTS", "build_parser", "main", "script_parser"]

PROG = "bo-ncgp chang2023-hotspots"
#: the default folder of the hotspot results
RESULTS = harness.results_dir(__file__, "hotspots")


def script_parser(doc: str, out_name: str, prog: str) -> argparse.ArgumentParser:
    """The options every hotspot analysis script has: :func:`experiments.harness.parser`'s
    (``--quick`` for tiny sizes, ``--out`` defaulting to ``RESULTS/out_name``, ``--threads``)
    and the data file's ``--country``, ``--data-root`` and ``--no-verify``.

    Example:
        >>> args = script_parser("Demo.", "demo.json", "demo").parse_args([])
        >>> args.country, args.out.name
        ('civ', 'demo.json')
    """
    p = harness.parser(doc, RESULTS / out_name, quick_help="tiny sizes for a smoke test", prog=prog)
    p.add_argument("--country", default="civ", help="data file hotspots/<country>_data.csv")
    p.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    add_verify_argument(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``bo-ncgp hotspots`` with Maddox et al.'s criterion and gain registered,
    plus ``--clamp-per-village`` (``--gain clamped``).

    Example:
        >>> args = build_parser().parse_args(["--criterion", "spiked", "--clamp-per-village"])
        >>> args.criterion, args.gain
        ('spiked', 'clamped')
    """
    from bo_ncgp.cli.common import HelpFormatter
    from bo_ncgp.cli.hotspots import HELP, add_arguments
    from experiments.chang2023 import maddox_acquisition  # noqa: F401 (registers both)

    parser = argparse.ArgumentParser(
        prog=PROG, description=f"{HELP}; Maddox et al.'s knobs", formatter_class=HelpFormatter
    )
    add_arguments(parser)
    group = parser.add_argument_group("Maddox et al.'s acquisition")
    group.add_argument(
        "--clamp-per-village",
        dest="gain",
        action="store_const",
        const="clamped",
        help="entropy, svgp-entropy: count only per-village entropy decreases, as Maddox et "
        "al.'s script (= --gain clamped; with --criterion spiked: their acquisition)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command with ``argv`` (default: the process arguments); the exit code of
    :func:`bo_ncgp.cli.hotspots.run`.

    Example:
        >>> main(["--quick", "--data-root", "/nonexistent"])  # doctest: +ELLIPSIS
        2
    """
    from bo_ncgp.cli.hotspots import run
    from experiments.chang2023.legacy import upgrade_config

    args = build_parser().parse_args(argv)
    return run(args, read_saved_config=upgrade_config)


if __name__ == "__main__":
    raise SystemExit(main())
