"""Locating and verifying the shared data sets.

Every loader resolves its folder with :func:`resolve_root` -- the ``root`` argument, else the
environment variable ``BO_NCGP_DATA``, else ``<project>/../shared/data`` -- and opens files
through :func:`data_file`, which raises a :class:`FileNotFoundError` that names the missing
file and where to obtain it, and verifies the file against ``SHA256SUMS`` when that list is
present in the root (a mismatch raises :class:`DataChecksumError`).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from bo_ncgp.exceptions import InputDataError

__all__ = ["DataChecksumError", "data_file", "resolve_root", "sha256"]

ENV_VAR = "BO_NCGP_DATA"
_PROJECT = Path(__file__).resolve().parents[2]


class DataChecksumError(InputDataError):
    """A data file does not match the checksum recorded in ``SHA256SUMS``.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> _ = (root / "x.csv").write_text("a,b")
        >>> _ = (root / "SHA256SUMS").write_text("0" * 64 + "  x.csv")
        >>> data_file("x.csv", root=root)
        Traceback (most recent call last):
        ...
        bo_ncgp.data._paths.DataChecksumError: ...
    """


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root``, else ``$BO_NCGP_DATA``, else ``<project>/../shared/data``.

    Example:
        >>> resolve_root("/data/sets").as_posix()  # an explicit root always wins
        '/data/sets'
    """
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return _PROJECT.parent / "shared" / "data"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _checksums(root: Path) -> dict[str, str]:
    f = root / "SHA256SUMS"
    if not f.is_file():
        return {}
    out = {}
    for line in f.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[1].lstrip("*").removeprefix("./")] = parts[0].lower()
    return out


@functools.lru_cache(maxsize=256)
def _verified_cached(path: Path, expected: str, mtime_ns: int, size: int) -> bool:
    return sha256(path) == expected


def _verified(path: Path, expected: str) -> bool:
    st = path.stat()  # re-hash whenever the file changes on disk
    return _verified_cached(path, expected, st.st_mtime_ns, st.st_size)


def data_file(
    relpath: str, root: str | os.PathLike | None = None, hint: str = "", verify: bool = True
) -> Path:
    """Path of ``<root>/<relpath>`` after checking it exists (and its checksum).

    Args:
        relpath: path relative to the data root, e.g. ``"hotspots/civ_data.csv"``.
        root: data root (see :func:`resolve_root`).
        hint: where to obtain the file, appended to the error message.
        verify: check ``SHA256SUMS`` when the root has one listing this file.

    Example:
        >>> data_file("nothing/here.csv", root="/nonexistent")
        Traceback (most recent call last):
        ...
        FileNotFoundError: data file not found: /nonexistent/nothing/here.csv ...
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
    if verify:
        expected = _checksums(base.resolve()).get(relpath)
        if expected is not None and not _verified(path.resolve(), expected):
            raise DataChecksumError(
                f"checksum mismatch for {path}: expected sha256 {expected[:12]}..., the file "
                "is corrupted or a different version; restore it from the original source"
            )
    return path
