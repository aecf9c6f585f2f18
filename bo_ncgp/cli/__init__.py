"""Command line entry point: ``bo-ncgp <command> ...``.

Commands come from two places:

* the package's own commands, listed in :data:`COMMANDS` (name -> ``"module:ATTRIBUTE"``, a
  :class:`Command` of that module: one-line help, ``add_arguments(parser)`` and
  ``run(args) -> int``); only the module of the command being run is imported;
* experiment commands, registered by installed distributions in the entry-point group
  ``bo_ncgp.commands`` (:data:`ENTRY_POINT_GROUP`). An entry point's value is
  ``"module:main"`` with ``main(argv: list[str] | None) -> int``; ``bo-ncgp NAME ARGS...``
  passes ``ARGS`` through unchanged (``bo-ncgp NAME --help`` shows the experiment's own help).

``bo-ncgp --help`` lists both, an experiment command with the first line of its module's
docstring (read from the source file, without importing the module); ``bo-ncgp --version``
prints the installed version. ``-v``/``--verbose`` and ``-q``/``--quiet`` (before the command
name, or among a package command's options) set the level of the library's log messages on
stderr. A missing optional dependency, or a campaign folder that cannot be used, is reported
in one line with exit code 2.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import NamedTuple

__all__ = [
    "COMMANDS",
    "ENTRY_POINT_GROUP",
    "Command",
    "command",
    "command_parser",
    "experiment_commands",
    "main",
]

#: the package's commands: name -> ``"module:ATTRIBUTE"``, a :class:`Command` of that module
COMMANDS: dict[str, str] = {
    "bench": "bo_ncgp.cli.bench:BENCH",
    "compare": "bo_ncgp.cli.results:COMPARE",
    "core-demo": "bo_ncgp.cli.demo:CORE_DEMO",
    "demo": "bo_ncgp.cli.demo:DEMO",
    "hotspots": "bo_ncgp.cli.hotspots:HOTSPOTS",
    "lunar-lander": "bo_ncgp.cli.lunar_lander:LUNAR_LANDER",
    "plot": "bo_ncgp.cli.results:PLOT",
    "survey": "bo_ncgp.cli.survey:SURVEY",
}
#: entry-point group through which installed experiment packages add commands
ENTRY_POINT_GROUP = "bo_ncgp.commands"

# pykeops prints its CUDA status when imported (GPyTorch imports it): a banner on every
# CPU-only machine. Its verbosity variables silence it unless the user set them.
os.environ.setdefault("PYKEOPS_VERBOSE", "0")
os.environ.setdefault("KEOPS_VERBOSE", os.environ["PYKEOPS_VERBOSE"])


def experiment_commands() -> dict[str, EntryPoint]:
    """The experiment commands registered in :data:`ENTRY_POINT_GROUP`, by name (a name
    that is also a package command is left to the package command).

    Example:
        >>> cmds = experiment_commands()
        >>> isinstance(cmds, dict) and not set(cmds) & set(COMMANDS)
        True
    """
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in COMMANDS}


class Command(NamedTuple):
    """A package command: its one-line ``help``, ``add_arguments(parser)`` adding its options
    to an ``argparse`` parser, and ``run(args) -> int`` (the exit code).

    Example:
        >>> def greet(args):
        ...     print(f"hello {args.name}")
        ...     return 0
        >>> hello = Command("greet", lambda parser: parser.add_argument("--name"), greet)
        >>> hello.run(hello.parser().parse_args(["--name", "you"]))
        hello you
        0
    """

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]

    def parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        """A parser of the command's options, described by its help.

        Example:
            >>> Command("greet", lambda parser: None, lambda args: 0).parser("greet").description
            'greet'
        """
        from bo_ncgp.cli.common import HelpFormatter, add_logging_arguments

        parser = argparse.ArgumentParser(
            prog=prog, description=self.help, formatter_class=HelpFormatter
        )
        self.add_arguments(parser)
        add_logging_arguments(parser)
        return parser


def command(name: str) -> Command:
    """The :class:`Command` of the package command ``name`` (:data:`COMMANDS`), importing its
    module.

    Example:
        >>> command("plot").help
        'plot campaign results (mean +- s.e. over seeds, one line per strategy)'
    """
    module, _, attribute = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def command_parser(name: str) -> argparse.ArgumentParser:
    """The argument parser of the package command ``name`` (:data:`COMMANDS`).

    Example:
        >>> command_parser("compare").parse_args(["a", "b", "--at", "150,199"]).at
        (150, 199)
    """
    return command(name).parser(prog=f"bo-ncgp {name}")


def _summary(ep: EntryPoint) -> str:
    """First line of the entry point's module docstring, read from its source file."""
    try:
        spec = importlib.util.find_spec(ep.module)
        origin = spec.origin if spec is not None else None
        with open(origin) as fh:  # type: ignore[arg-type]
            doc = ast.get_docstring(ast.parse(fh.read())) or ""
    except (ImportError, OSError, SyntaxError, TypeError, ValueError):
        doc = ""
    first = " ".join(doc.strip().split("\n\n")[0].split()).rstrip(".")
    return f"{first} ({ep.value})" if first else ep.value


def _run_experiment(ep: EntryPoint, argv: list[str]) -> int:
    """Run an experiment's ``main(argv)`` with ``sys.argv[0]`` set to ``bo-ncgp NAME``, so that
    its argparse usage and error lines name the command the user typed."""
    program = sys.argv[0]
    sys.argv[0] = f"bo-ncgp {ep.name}"
    try:
        return int(ep.load()(argv) or 0)
    finally:
        sys.argv[0] = program


def _overview() -> argparse.ArgumentParser:
    from bo_ncgp import __version__
    from bo_ncgp.cli.common import add_logging_arguments

    parser = argparse.ArgumentParser(
        prog="bo-ncgp", description="bo_ncgp: BO and active learning with non-conjugate GPs"
    )
    parser.add_argument(
        "--version", action="version", version=f"bo-ncgp {__version__}", help="print the version"
    )
    add_logging_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in sorted(COMMANDS):
        sub.add_parser(name, help=command(name).help, add_help=False)
    for name, ep in sorted(experiment_commands().items()):
        sub.add_parser(name, help=_summary(ep), add_help=False)
    return parser


#: the options before the command name that :func:`main` reads itself: flag -> (verbose, quiet)
_LEADING = {"-v": (1, False), "--verbose": (1, False), "-q": (0, True), "--quiet": (0, True)}


def main(argv: list[str] | None = None) -> int:
    """Run ``bo-ncgp`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code; a
    campaign folder that cannot be used (:class:`~bo_ncgp.exceptions.StateError`,
    :class:`~bo_ncgp.exceptions.StorageError`) or a missing optional dependency
    (:class:`~bo_ncgp.exceptions.MissingExtraError`) is reported in one line, exit code 2.

    Example:
        >>> main(["plot", "/nonexistent"])  # errors are reported, not raised
        2
    """
    from bo_ncgp.cli.common import configure_logging
    from bo_ncgp.exceptions import MissingExtraError, StateError, StorageError

    argv = list(sys.argv[1:] if argv is None else argv)
    verbose, quiet = 0, False
    while argv and argv[0] in _LEADING:
        v, q = _LEADING[argv.pop(0)]
        verbose, quiet = verbose + v, quiet or q
    name = argv[0] if argv and not argv[0].startswith("-") else None
    try:
        if name in COMMANDS:
            args = command_parser(name).parse_args(argv[1:])
            with configure_logging(verbose + args.verbose, quiet or args.quiet):
                return int(command(name).run(args) or 0)
        experiments = experiment_commands() if name is not None else {}
        if name in experiments:
            with configure_logging(verbose, quiet):
                return _run_experiment(experiments[name], argv[1:])
    except (StateError, StorageError, MissingExtraError) as err:  # one line, no traceback
        print(f"bo-ncgp {name}: {err}", file=sys.stderr)
        return 2
    parser = _overview()
    args = parser.parse_args(argv)  # --help exits here; an unknown command is an error
    if args.command is None:
        parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
