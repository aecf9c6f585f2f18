"""Where evaluations run: any :class:`concurrent.futures.Executor`.

* ``workers <= 1`` and no scheduler: :class:`InlineExecutor` (same process, no pickling);
* ``workers >= 2``: a :class:`~concurrent.futures.ProcessPoolExecutor`;
* ``dask_scheduler="tls://host:8786"``: ``distributed.Client(address).get_executor()``, so a
  campaign spreads episodes and seeds over a dask cluster without code changes.

A dask client unpickles what the workers send back, so whoever can join the scheduler as a
worker can run code in the campaign's process. On a network, run the cluster with TLS and
client certificates signed by your own CA (``dask scheduler --tls-ca-file ... --tls-cert ...
--tls-key ...``, the same for every worker) and give the client the matching settings
(:func:`load_security`): with ``require_encryption`` it refuses unencrypted addresses, and
only holders of a certificate signed by that CA can join. A plain ``tcp://`` address of
another machine is accepted with a logged warning and a :class:`UserWarning`. Connecting, and
waiting for the first worker, each give up after ``dask_timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bo_ncgp._extras import require
from bo_ncgp.exceptions import InputDataError

if TYPE_CHECKING:  # pragma: no cover
    from distributed import Security

__all__ = ["DASK_TIMEOUT", "InlineExecutor", "load_security", "make_executor"]

#: seconds to wait for the dask scheduler to answer, and again for its first worker
DASK_TIMEOUT = 60.0

_log = logging.getLogger(__name__)

#: keys of a ``--dask-security`` file in the flat form (``distributed.Security`` arguments)
_SECURITY_KEYS = ("require_encryption", "tls_ca_file", "tls_client_cert", "tls_client_key")
_FILE_KEYS = ("tls_ca_file", "tls_client_cert", "tls_client_key")
_ENCRYPTED_SCHEMES = ("tls", "wss", "inproc")  # inproc: the same process, nothing on the wire


class InlineExecutor(Executor):
    """Runs each submitted call immediately in the calling process (``--workers 1``);
    an exception is stored in the future, as a process pool would.

    Example:
        >>> fut = InlineExecutor().submit(divmod, 7, 0)
        >>> type(fut.exception()).__name__
        'ZeroDivisionError'
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Call ``fn(*args, **kwargs)`` now; return a done future holding its result or error.

        Example:
            >>> InlineExecutor().submit(divmod, 7, 2).result()
            (3, 1)
        """
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as err:  # the campaign records failures
            fut.set_exception(err)
        return fut


def _import_distributed():
    return require("distributed", "distributed", "dask", needed_by="a dask cluster")


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in tree.items():
        name = f"{prefix}{key}"
        if isinstance(val, Mapping):
            out.update(_flatten(val, name + "."))
        else:
            out[name] = val
    return out


def load_security(spec: str | os.PathLike | Security | None) -> Security | None:
    """The ``distributed.Security`` of a dask client: ``spec`` itself, or built from a YAML
    file (``--dask-security``); ``None`` gives ``None`` (dask's own configuration applies).

    The file holds either the TLS arguments of :class:`distributed.Security` ::

        tls_ca_file: ca.pem            # the CA that signed the scheduler's and workers' certs
        tls_client_cert: client.pem
        tls_client_key: client-key.pem
        require_encryption: true       # the default

    or a dask configuration with the same settings under ``distributed.comm``
    (``require-encryption``, ``tls.ca-file``, ``tls.client.cert``, ``tls.client.key``).
    Relative paths are taken from the file's folder. ``require_encryption`` is true unless
    the file sets it to false; the CA file and the client certificate are required.

    Raises:
        FileNotFoundError: the file, or a certificate or key it names, does not exist.
        InputDataError: the file is not a mapping, has unknown keys, or lacks the CA file or
            the client certificate.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> for name in ("ca.pem", "client.pem", "client-key.pem"):
        ...     _ = (folder / name).write_text("-----BEGIN CERTIFICATE-----")
        >>> _ = (folder / "tls.yaml").write_text(
        ...     "tls_ca_file: ca.pem\\n"
        ...     "tls_client_cert: client.pem\\n"
        ...     "tls_client_key: client-key.pem\\n"
        ... )
        >>> sec = load_security(folder / "tls.yaml")
        >>> sec.require_encryption, Path(sec.tls_ca_file).name
        (True, 'ca.pem')
        >>> _ = (folder / "bad.yaml").write_text("tls_ca: ca.pem\\n")
        >>> load_security(folder / "bad.yaml")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: dask security file ...: unknown key(s) tls_ca; ...
    """
    if spec is None or not isinstance(spec, (str, os.PathLike)):
        return spec
    distributed = _import_distributed()
    import dask
    import yaml

    path = Path(spec).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"dask security file not found: {path}")
    try:
        tree = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise InputDataError(f"dask security file {path}: not valid YAML ({err})") from err
    if not isinstance(tree, Mapping):
        raise InputDataError(
            f"dask security file {path}: expected a mapping of TLS settings, got "
            f"{type(tree).__name__}"
        )
    if "distributed" in tree:  # a dask configuration file: read it as dask would
        flat = _flatten(tree)
        with dask.config.set(flat):
            cfg = distributed.Security()
        settings = {k: getattr(cfg, k) for k in _FILE_KEYS}
        req = flat.get("distributed.comm.require-encryption")
        allowed = "the distributed.comm settings of a dask configuration"
    else:
        unknown = sorted(set(tree) - set(_SECURITY_KEYS))
        if unknown:
            raise InputDataError(
                f"dask security file {path}: unknown key(s) {', '.join(map(str, unknown))}; "
                f"allowed: {', '.join(_SECURITY_KEYS)} (or a dask configuration under "
                "'distributed')"
            )
        settings = {k: tree.get(k) for k in _FILE_KEYS}
        req = tree.get("require_encryption")
        allowed = ", ".join(_SECURITY_KEYS)
    for key in ("tls_ca_file", "tls_client_cert"):
        if not settings.get(key):
            raise InputDataError(
                f"dask security file {path}: {key} is missing; a TLS client needs the CA file "
                f"and its certificate ({allowed})"
            )
    for key in _FILE_KEYS:
        if settings.get(key):
            file = (path.parent / Path(str(settings[key])).expanduser()).resolve()
            if not file.is_file():
                raise FileNotFoundError(f"dask security file {path}: {key} {file} not found")
            settings[key] = str(file)
    if req is not None and not isinstance(req, bool):
        raise InputDataError(
            f"dask security file {path}: require_encryption must be true or false, got {req!r}"
        )
    return distributed.Security(
        require_encryption=True if req is None else req,
        **{k: v for k, v in settings.items() if v},
    )


def _check_address(address: str, security: Security) -> None:
    """Refuse an unencrypted address when ``security`` requires encryption; warn about an
    unencrypted one of another machine."""
    from distributed.comm.addressing import get_address_host, parse_address

    scheme, _ = parse_address(address)
    if scheme == "tls" and not (security.tls_ca_file and security.tls_client_cert):
        raise InputDataError(
            f"dask scheduler address {address!r} needs TLS settings: the CA file and a client "
            "certificate signed by it (--dask-security FILE, or dask's distributed.comm.tls "
            "configuration)"
        )
    if scheme in _ENCRYPTED_SCHEMES:
        return
    if security.require_encryption:
        raise InputDataError(
            f"dask scheduler address {address!r} is not encrypted ({scheme}://) but the "
            "security settings require encryption; use the scheduler's tls:// address"
        )
    host = get_address_host(address).strip("[]")
    try:
        local = ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = host == "localhost"
    if not local:
        msg = (
            f"dask scheduler {address!r} is an unencrypted, unauthenticated {scheme}:// address "
            "of another machine: anyone who can reach it can join as a worker, and the results "
            "workers send back are unpickled in this process (they can run code here); run the "
            "cluster with TLS and client certificates (--dask-security)"
        )
        _log.warning(msg)
        warnings.warn(msg, UserWarning, stacklevel=2)


def _check_timeout(timeout: float) -> float:
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputDataError(f"dask_timeout must be a positive number of seconds, got {timeout!r}")
    return value


@contextlib.contextmanager
def _dask_executor(
    address: str, security: str | os.PathLike | Security | None, timeout: float
) -> Iterator[Executor]:
    distributed = _import_distributed()
    timeout = _check_timeout(timeout)
    sec = load_security(security) or distributed.Security()
    _check_address(address, sec)
    try:
        client = distributed.Client(address, security=sec, timeout=timeout)
    except OSError as err:  # no answer in time, or a refused TLS handshake
        raise ConnectionError(
            f"could not connect to the dask scheduler at {address} (waited up to {timeout:g} s, "
            f"--dask-timeout): {err}; check the address and the TLS settings (--dask-security)"
        ) from err
    try:
        try:
            client.wait_for_workers(n_workers=1, timeout=timeout)
        except TimeoutError as err:
            raise TimeoutError(
                f"no dask worker joined the scheduler at {address} within {timeout:g} s "
                f"(--dask-timeout); start workers with `dask worker {address}` (with the same "
                "TLS settings as the scheduler) or allow more time"
            ) from err
        yield client.get_executor()
    finally:
        client.close()


@contextlib.contextmanager
def make_executor(
    workers: int = 1,
    dask_scheduler: str | None = None,
    *,
    dask_security: str | os.PathLike | Security | None = None,
    dask_timeout: float = DASK_TIMEOUT,
) -> Iterator[Executor]:
    """Context manager yielding the executor for ``workers`` / ``dask_scheduler``.

    Args:
        workers: processes (``<= 1``: run inline).
        dask_scheduler: address of a dask scheduler (overrides ``workers``).
        dask_security: a ``distributed.Security`` or a YAML file of TLS settings (see
            :func:`load_security`); ``None``: dask's configuration.
        dask_timeout: seconds to wait for the scheduler to answer, and again for its first
            worker.

    Raises:
        InputDataError: a non-positive timeout, an unencrypted address while the security
            settings require encryption, or a ``tls://`` address without TLS settings.
        ConnectionError: the scheduler does not answer in time, or refuses the TLS handshake.
        TimeoutError: no worker joins in time.

    Example:
        >>> with make_executor(1) as ex:
        ...     ex.submit(sum, [1, 2]).result()
        3
    """
    if dask_scheduler:
        with _dask_executor(dask_scheduler, dask_security, dask_timeout) as ex:
            yield ex
    elif workers <= 1:
        yield InlineExecutor()
    else:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            yield ex
