"""Options shared by the ``bo-ncgp`` commands: the dask cluster (``--dask-scheduler``,
``--dask-security``, ``--dask-timeout``) and ``--no-verify`` for the shared data."""

from __future__ import annotations

import argparse
import math
from typing import Any

__all__ = ["add_dask_arguments", "add_verify_argument", "dask_options"]


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
