"""Options shared by the ``bo-ncgp`` commands: the dask cluster (``--dask-scheduler``,
``--dask-security``, ``--dask-timeout``), ``--no-verify`` for the shared data, the logging
options (``--verbose``, ``--quiet``) and the help formatter that shows defaults."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import sys
from collections.abc import Iterator
from typing import Any

__all__ = [
    "DATA_ROOT_HELP",
    "HelpFormatter",
    "add_dask_arguments",
    "add_logging_arguments",
    "add_verify_argument",
    "configure_logging",
    "dask_options",
]


#: the help text of the data-root options (the rule of :func:`bo_ncgp.data.resolve_root`)
DATA_ROOT_HELP = (
    "folder of the data sets (default: $BO_NCGP_DATA, else ../shared/data beside a source "
    "checkout, else ./data)"
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The help formatter of every ``bo-ncgp`` command: descriptions as written, and
    ``(default: X)`` after the help of an option that takes a value and has a default (not
    ``None`` or suppressed) which its help does not already state.

    Example:
        >>> p = argparse.ArgumentParser(prog="x", formatter_class=HelpFormatter)
        >>> _ = p.add_argument("--steps", type=int, default=100, help="steps per seed")
        >>> _ = p.add_argument("--out", default=None, help="output folder")
        >>> _ = p.add_argument("--no-plot", dest="plot", action="store_false", help="no plot")
        >>> help_ = " ".join(p.format_help().split())
        >>> "steps per seed (default: 100)" in help_, "(default" in help_.split("100)")[1]
        (True, False)
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        help_ = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or action.nargs == 0  # a flag: --quick, --no-verify, -v
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or "default" in help_
        ):
            return help_
        return f"{help_} (default: %(default)s)"


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """``--verbose/-v`` (repeatable: ``-v`` shows debug messages) and ``--quiet/-q`` (warnings
    and errors only), read by :func:`configure_logging`.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_logging_arguments(p)
        >>> a = p.parse_args(["-v"])
        >>> a.verbose, a.quiet
        (1, False)
    """
    g = parser.add_argument_group("messages")
    g.add_argument("--verbose", "-v", action="count", default=0, help="also show debug messages")
    g.add_argument("--quiet", "-q", action="store_true", help="show only warnings and errors")


@contextlib.contextmanager
def configure_logging(verbose: int = 0, quiet: bool = False) -> Iterator[int]:
    """While the context is open, send the log records of ``bo_ncgp`` and ``experiments`` to
    stderr, one line each, at INFO (``verbose`` >= 1: DEBUG; ``quiet``: WARNING); yields the
    level and restores the loggers' levels and handlers on exit. Only the command-line entry
    point uses it: the library itself never configures logging.

    Example:
        >>> import logging
        >>> with configure_logging(verbose=1) as level:
        ...     logging.getLogger("bo_ncgp").level == level == logging.DEBUG
        True
        >>> logging.getLogger("bo_ncgp").level == logging.NOTSET  # restored
        True
    """
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    loggers = [logging.getLogger(name) for name in ("bo_ncgp", "experiments")]
    saved = [(logger.level, list(logger.handlers)) for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
        if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
    try:
        yield level
    finally:
        for logger, (old_level, handlers) in zip(loggers, saved, strict=True):
            logger.setLevel(old_level)
            logger.handlers[:] = handlers


class _StderrHandler(logging.StreamHandler):
    """A stream handler writing to the ``sys.stderr`` of the moment (not the one of its
    creation), so that a redirected stderr receives the records."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _seconds(text: str) -> float:
    try:
        val = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(val) and val > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {val}")
    return val


_seconds.__name__ = "seconds"


def add_dask_arguments(parser: argparse.ArgumentParser, what: str = "evaluations") -> None:
    """``--dask-scheduler ADDRESS``, ``--dask-security FILE`` and ``--dask-timeout SECONDS``.

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_dask_arguments(p, "seeds")
        >>> a = p.parse_args(["--dask-scheduler", "tls://10.0.0.5:8786", "--dask-timeout", "5"])
        >>> dask_options(a)
        {'dask_security': None, 'dask_timeout': 5.0}
    """
    from bo_ncgp.campaigns.executors import DASK_TIMEOUT

    g = parser.add_argument_group("dask cluster")
    g.add_argument(
        "--dask-scheduler",
        default=None,
        metavar="ADDRESS",
        help=f"run {what} on the dask cluster of this scheduler, e.g. tls://host:8786 (a plain "
        "tcp:// address of another machine lets anyone who reaches it run code in this "
        "process: use TLS)",
    )
    g.add_argument(
        "--dask-security",
        default=None,
        metavar="FILE",
        help="YAML file of the client's TLS settings (tls_ca_file, tls_client_cert, "
        "tls_client_key; require_encryption defaults to true) or a dask configuration with "
        "them; default: dask's own configuration",
    )
    g.add_argument(
        "--dask-timeout",
        type=_seconds,
        default=DASK_TIMEOUT,
        metavar="SECONDS",
        help=f"give up when the scheduler does not answer, or no worker joins, within this "
        f"time (default {DASK_TIMEOUT:g})",
    )


def dask_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``dask_security`` and ``dask_timeout`` keywords of
    :func:`~bo_ncgp.campaigns.executors.make_executor` from the parsed options.

    Example:
        >>> dask_options(argparse.Namespace(dask_security="tls.yaml", dask_timeout=60.0))
        {'dask_security': 'tls.yaml', 'dask_timeout': 60.0}
    """
    return {"dask_security": args.dask_security, "dask_timeout": args.dask_timeout}


def add_verify_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-verify`` (``args.verify`` is ``False`` when given).

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_verify_argument(p)
        >>> p.parse_args([]).verify, p.parse_args(["--no-verify"]).verify
        (True, False)
    """
    parser.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="load the data files without checking their checksums (the shared data sets "
        "are pinned in bo_ncgp.data.checksums; a warning is logged)",
    )
