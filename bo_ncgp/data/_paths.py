"""Locating and verifying the shared data sets.

Every loader resolves its folder with :func:`resolve_root` -- the ``root`` argument, else the
environment variable ``BO_NCGP_DATA``, else ``<project>/../shared/data`` in a source checkout
and ``./data`` (below the working folder) for an installed package -- and opens files
through :func:`data_file`, which raises a :class:`FileNotFoundError` that names the missing
file and where to obtain it, and verifies the file's SHA-256 checksum:

* a shared data file (a relative path listed in
  :data:`~bo_ncgp.data.checksums.PINNED_SHA256`) must match the checksum pinned in the
  package, whatever folder it is read from and whatever ``SHA256SUMS`` lies beside it;
* any other file (a user's own data) is checked against ``<root>/SHA256SUMS`` when that list
  names it, and loaded as it is otherwise.

A mismatch raises :class:`DataChecksumError` naming the file, both checksums and how to skip
the check; ``verify=False`` skips it as an explicit choice and logs a warning. Each file is
hashed once per process (again only when its size or modification time changes).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import posixpath
from pathlib import Path

from bo_ncgp.data.checksums import PINNED_SHA256
from bo_ncgp.exceptions import InputDataError

__all__ = ["DataChecksumError", "data_file", "resolve_root", "sha256"]

ENV_VAR = "BO_NCGP_DATA"
_PROJECT = Path(__file__).resolve().parents[2]


_log = logging.getLogger(__name__)


class DataChecksumError(InputDataError):
    """A data file does not match its pinned checksum (or the one in ``SHA256SUMS``).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> _ = (root / "x.csv").write_text("a,b")
        >>> _ = (root / "SHA256SUMS").write_text("0" * 64 + "  x.csv")
        >>> data_file("x.csv", root=root)
        Traceback (most recent call last):
        ...
        bo_ncgp.data._paths.DataChecksumError: checksum mismatch for ...x.csv: expected sha256 0...
    """


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root``, else ``$BO_NCGP_DATA``, else ``<project>/../shared/data`` when
    the package runs from a source checkout (``<project>/pyproject.toml`` exists), else
    ``data`` below the working folder (an installed package).

    Example:
        >>> resolve_root("/data/sets").as_posix()  # an explicit root always wins
        '/data/sets'
    """
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    if (_PROJECT / "pyproject.toml").is_file():
        return _PROJECT.parent / "shared" / "data"
    return Path("data")


def sha256(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of the file ``path`` (read in 1 MiB chunks).

    Example:
        >>> import tempfile
        >>> f = Path(tempfile.mkdtemp()) / "x.txt"
        >>> _ = f.write_text("hello\\n")
        >>> sha256(f)[:12]
        '5891b5b522d5'
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=512)
def _sha256_cached(path: Path, mtime_ns: int, size: int) -> str:
    return sha256(path)


def _digest(path: Path) -> str:
    """:func:`sha256` of ``path``, hashed once per process and again when it changes."""
    path = path.resolve()
    st = path.stat()
    return _sha256_cached(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _listed_cached(path: Path, mtime_ns: int, size: int) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[_normalise(parts[1].lstrip("*"))] = parts[0].lower()
    return out


def _listed(root: Path) -> dict[str, str]:
    """The checksums of ``<root>/SHA256SUMS`` (empty when there is none)."""
    f = (root / "SHA256SUMS").resolve()
    if not f.is_file():
        return {}
    st = f.stat()
    return _listed_cached(f, st.st_mtime_ns, st.st_size)


def _normalise(relpath: str) -> str:
    return posixpath.normpath(str(relpath).replace("\\", "/")).removeprefix("./")


@functools.cache
def _warn_unverified(path: Path) -> None:
    _log.warning(
        "data file %s: checksum verification skipped (verify=False / --no-verify); the file "
        "is used as it is",
        path,
    )


def data_file(
    relpath: str, root: str | os.PathLike | None = None, hint: str = "", verify: bool = True
) -> Path:
    """Path of ``<root>/<relpath>`` after checking that it exists and its checksum.

    A shared data file (``relpath`` listed in :data:`~bo_ncgp.data.checksums.PINNED_SHA256`)
    must match its pinned checksum; another file is checked against ``<root>/SHA256SUMS``
    when that list names it and is used as it is otherwise.

    Args:
        relpath: path relative to the data root, e.g. ``"hotspots/civ_data.csv"``.
        root: data root (see :func:`resolve_root`).
        hint: where to obtain the file, appended to the error message.
        verify: check the checksum; ``False`` skips the check as an explicit choice and logs a
            warning (once per file and process).

    Raises:
        FileNotFoundError: the file does not exist (the message names it and the data root).
        DataChecksumError: the file's SHA-256 differs from the pinned (or listed) one; the
            message names the file, both checksums and how to skip the check.

    Example:
        >>> data_file("nothing/here.csv", root="/nonexistent")
        Traceback (most recent call last):
        ...
        FileNotFoundError: data file not found: /nonexistent/nothing/here.csv ...
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())  # a copy of a shared file, one byte changed
        >>> (root / "hotspots").mkdir()
        >>> _ = (root / "hotspots" / "civ_data.csv").write_text("lng,lat")
        >>> data_file("hotspots/civ_data.csv", root=root)
        Traceback (most recent call last):
        ...
        bo_ncgp.data._paths.DataChecksumError: checksum mismatch for .../civ_data.csv: ...
        >>> data_file("hotspots/civ_data.csv", root=root, verify=False).name
        'civ_data.csv'
    """
    base = resolve_root(root)
    path = base / relpath
    if not path.is_file():
        msg = (
            f"data file not found: {path} (data root {base}; pass root=... or set "
            f"{ENV_VAR} to the folder holding the shared data sets)"
        )
        if hint:
            msg += f". {hint}"
        raise FileNotFoundError(msg)
    if not verify:
        _warn_unverified(path.resolve())
        return path
    key = _normalise(relpath)
    expected, source = PINNED_SHA256.get(key), "pinned in bo_ncgp.data.checksums"
    if expected is None:
        expected, source = _listed(base).get(key), f"listed in {base / 'SHA256SUMS'}"
    if expected is not None:
        actual = _digest(path)
        if actual != expected:
            raise DataChecksumError(
                f"checksum mismatch for {path}: expected sha256 {expected} ({source}), got "
                f"{actual}; the file is corrupted, altered or a different version: restore it "
                "from its original source, or skip the check explicitly with verify=False "
                "(on the command line: --no-verify)"
            )
    return path
