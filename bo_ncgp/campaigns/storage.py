"""Crash-safe campaign files: atomic JSON/CSV writes (write to a temp file, fsync, rename).

A reader (or a resumed run) therefore only ever sees a complete previous version of
``state.json`` or ``evaluations.csv``, even when the writer is killed with SIGKILL.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_text", "read_json", "write_csv", "write_json"]


@functools.cache
def _default_mode() -> int:
    """Mode of a new file under the process umask (``0o644`` under the usual ``022``); read
    once, as setting the umask to read it is process-wide."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically (write a temporary file in the same folder,
    fsync, rename), so a reader or a crash never sees a half-written file.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "sub" / "state.txt"
        >>> atomic_write_text(p, "done")
        >>> p.read_text(), [f.name for f in p.parent.iterdir()]  # no temporary left behind
        ('done', ['state.txt'])
        >>> oct(p.stat().st_mode & 0o777) == oct(_default_mode())  # not mkstemp's 0600
        True
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else _default_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(tmp, mode)  # mkstemp makes 0600; keep the file's mode or the umask's default
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (``NaN`` allowed).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "s.json"
        >>> write_json(p, {"best": float("nan"), "n": 3})
        >>> read_json(p)["n"]
        3
    """
    atomic_write_text(path, json.dumps(obj, indent=1, allow_nan=True))


def read_json(path: Path) -> Any:
    """Read a JSON file written by :func:`write_json`; ``NaN`` values come back as ``nan``.

    Example:
        >>> import math, tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     write_json(Path(tmp) / "state.json", {"best": float("nan"), "batches": [[0, 1]]})
        ...     state = read_json(Path(tmp) / "state.json")
        >>> math.isnan(state["best"]), state["batches"]
        (True, [[0, 1]])
    """
    return json.loads(Path(path).read_text())


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    """Write a CSV file (header + rows) atomically.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "log.csv"
        >>> write_csv(p, ["i", "value"], [[0, 1.5], [1, 2.0]])
        >>> p.read_text().splitlines()
        ['i,value', '0,1.5', '1,2.0']
    """
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())
