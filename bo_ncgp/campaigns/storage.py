"""Crash-safe campaign files: atomic JSON/CSV writes (write to a temp file, fsync, rename),
strict JSON with checksums, safe names and paths, and the lock of a campaign folder.

* A reader (or a resumed run) only ever sees a complete previous version of ``state.json`` or
  ``evaluations.csv``, even when the writer is killed with SIGKILL; a write that fails (full
  disk, read-only folder, no permission) removes its temporary file and raises
  :class:`~bo_ncgp.exceptions.StorageError` naming the file and the cause, and temporary files
  left by a killed writer are removed by :func:`remove_stale_temps`.
* JSON is strict (no bare ``NaN``/``Infinity`` tokens): a non-finite float is written as one
  of the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (which Python's ``float()`` also
  reads) and read back as that float; finite floats are written with ``repr``, so every value
  reads back bit for bit. These three strings are therefore reserved: a string value equal to
  one of them is refused on writing.
* ``write_json(..., checksum=True)`` adds a SHA-256 of the content under the key
  :data:`CHECKSUM`; :func:`read_json` checks it whenever it is present, so a file edited or
  damaged outside the library is refused (:class:`~bo_ncgp.exceptions.StateError`) with its
  name, as is a file that is truncated or not JSON.
* :func:`check_name` and :func:`inside` keep names taken from files (strategy names) from
  reaching outside a results folder; :class:`FolderLock` lets one process at a time work in a
  campaign folder.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import hashlib
import io
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from bo_ncgp.exceptions import InputDataError, StateError, StorageError

__all__ = [
    "CHECKSUM",
    "LOCK",
    "SAFE_NAME",
    "FolderLock",
    "atomic_write_text",
    "check_name",
    "dumps",
    "inside",
    "loads",
    "read_json",
    "remove_stale_temps",
    "storage_error",
    "write_csv",
    "write_json",
]

#: key of the content checksum in files written with ``write_json(..., checksum=True)``
CHECKSUM = "_checksum"
#: lock file of a campaign folder (see :class:`FolderLock`)
LOCK = ".campaign.lock"
#: names that may become a file or folder name: a letter or digit, then letters, digits and
#: ``._+-`` (no path separator, no ``..`` component), at most 100 characters
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
_TMP_SUFFIX = ".tmp"
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


def storage_error(path: Path | str, err: OSError, doing: str = "write") -> StorageError:
    """A :class:`~bo_ncgp.exceptions.StorageError` for ``err`` raised while ``doing`` (write,
    lock, ...) ``path``: the file, the cause in words and its errno name.

    Example:
        >>> storage_error("out/state.json", OSError(errno.ENOSPC, "No space left on device"))
        StorageError('cannot write out/state.json: no space left on the device (ENOSPC)')
    """
    code = err.errno
    reason = _REASONS.get(code) or err.strerror or str(err) or type(err).__name__
    name = errno.errorcode.get(code, "") if code is not None else ""
    return StorageError(f"cannot {doing} {path}: {reason}" + (f" ({name})" if name else ""))


@functools.cache
def _default_mode() -> int:
    """Mode of a new file under the process umask (``0o644`` under the usual ``022``); read
    once, as setting the umask to read it is process-wide."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically (write a temporary file ``.<name>.*.tmp`` in the
    same folder, fsync, rename), so a reader or a crash never sees a half-written file.

    Raises:
        StorageError: if the folder or file cannot be written (the temporary file is removed).

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
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else _default_mode()
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TMP_SUFFIX, dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            os.chmod(tmp, mode)  # mkstemp makes 0600; keep the file's mode or the umask's
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        raise storage_error(path, err) from err
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def remove_stale_temps(folder: Path | str, names: tuple[str, ...]) -> list[Path]:
    """Remove the temporary files that :func:`atomic_write_text` leaves when it is killed
    (``.<name>.*`` for each of ``names``) from ``folder``; call it only while no other
    process writes there (under the folder's :class:`FolderLock`).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / ".state.json.k2j4x.tmp").write_text("{")
        >>> [p.name for p in remove_stale_temps(d, ("state.json",))], list(d.iterdir())
        (['.state.json.k2j4x.tmp'], [])
    """
    removed = []
    for name in names:
        for p in Path(folder).glob(f".{name}.*"):
            if p.is_file() and not p.is_symlink():
                try:
                    p.unlink()
                except FileNotFoundError:
                    continue
                except OSError as err:
                    raise storage_error(p, err, "remove the temporary file") from err
                removed.append(p)
    return removed


# ------------------------------------------------------------------------------ JSON
def _encode(obj: Any) -> Any:
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, str):
        if obj in _NONFINITE:
            raise InputDataError(
                f"the string {obj!r} is reserved in JSON files for the non-finite number; "
                "store it under another spelling"
            )
        return obj
    if isinstance(obj, dict):
        return {k: _encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_encode(v) for v in obj]
    return obj


def _decode(obj: Any) -> Any:
    if isinstance(obj, str):
        return _NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """Strict JSON of ``obj`` (non-finite floats as ``"NaN"``/``"Infinity"``/``"-Infinity"``,
    see the module docstring); ``kwargs`` go to :func:`json.dumps`.

    Example:
        >>> dumps({"best": float("nan"), "low": -float("inf"), "x": 0.1})
        '{"best": "NaN", "low": "-Infinity", "x": 0.1}'
    """
    return json.dumps(_encode(obj), allow_nan=False, **kwargs)


def loads(text: str) -> Any:
    """Read JSON written by :func:`dumps` (the non-finite strings become floats again).

    Example:
        >>> loads('{"best": "NaN", "x": [1, "Infinity"]}')
        {'best': nan, 'x': [1, inf]}
    """
    return _decode(json.loads(text))


def _digest(obj: dict) -> str:
    return _digest_encoded(_encode({k: v for k, v in obj.items() if k != CHECKSUM}))


def _digest_encoded(body: dict) -> str:
    """The checksum of ``body``, already passed through :func:`_encode` (no checksum key)."""
    text = json.dumps(body, allow_nan=False, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _items_per_line(obj: dict) -> str:
    """JSON text of the encoded dict ``obj`` with one key per line and one item per line in
    its non-empty list values (a campaign's evaluations, batches, iterations), written by
    the C encoder; every line is compact JSON."""
    lines = []
    for key, value in obj.items():
        name = json.dumps(key)
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(v, allow_nan=False) for v in value)
            lines.append(f" {name}: [\n  {items}\n ]")
        else:
            lines.append(f" {name}: {json.dumps(value, allow_nan=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_json(
    path: Path, obj: Any, *, checksum: bool = False, items_per_line: bool = False
) -> None:
    """Write ``obj`` as indented strict JSON atomically (:func:`dumps`); with ``checksum``
    (``obj`` a dict) the SHA-256 of the content is stored under :data:`CHECKSUM`; with
    ``items_per_line`` (``obj`` a dict) each key, and each item of a list value, takes one
    line (a campaign's ``state.json``: readable, and written several times faster than
    indented JSON, which matters when it is saved after every evaluation).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "s.json"
        >>> write_json(p, {"best": float("nan"), "n": 3}, checksum=True)
        >>> "NaN," in p.read_text(), read_json(p)["n"]
        (False, 3)
        >>> write_json(p, {"n": 2, "evaluations": [{"x": [0.5, 1.0]}, {"x": [0.25, 2.0]}]},
        ...            checksum=True, items_per_line=True)
        >>> print(p.read_text())  # doctest: +ELLIPSIS
        {
         "n": 2,
         "evaluations": [
          {"x": [0.5, 1.0]},
          {"x": [0.25, 2.0]}
         ],
         "_checksum": "sha256:..."
        }
        <BLANKLINE>
        >>> read_json(p)["evaluations"][1]["x"]
        [0.25, 2.0]
    """
    enc = _encode(obj)
    if checksum:
        body = {k: v for k, v in enc.items() if k != CHECKSUM}
        enc = {**body, CHECKSUM: _digest_encoded(body)}
    if items_per_line and isinstance(enc, dict):
        text = _items_per_line(enc)
    else:
        text = json.dumps(enc, allow_nan=False, indent=1)
    atomic_write_text(path, text)


def read_json(path: Path, *, require_checksum: bool = False) -> Any:
    """Read a JSON file written by :func:`write_json`; non-finite numbers come back as floats
    (bare ``NaN`` tokens are read as well), and a stored checksum is verified (the key stays
    in the returned dict).

    Raises:
        StateError: naming the file, if it is empty, truncated, not JSON or not UTF-8, if its
            checksum disagrees with its content, or if ``require_checksum`` and it has none.
        FileNotFoundError: if it does not exist.

    Example:
        >>> import math, tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     write_json(Path(tmp) / "state.json", {"best": float("nan"), "batches": [[0, 1]]})
        ...     state = read_json(Path(tmp) / "state.json")
        >>> math.isnan(state["best"]), state["batches"]
        (True, [[0, 1]])
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise storage_error(path, err, "read") from err
    if not raw.strip():
        raise StateError(f"{path}: the file is empty")
    try:
        obj = loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise StateError(
            f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})"
        ) from None
    except json.JSONDecodeError as err:
        raise StateError(
            f"{path}: truncated or not valid JSON ({err.msg} at line {err.lineno}, "
            f"column {err.colno})"
        ) from None
    except RecursionError:
        raise StateError(f"{path}: JSON nested too deeply") from None
    if isinstance(obj, dict) and CHECKSUM in obj:
        stored = obj[CHECKSUM]
        if stored != _digest(obj):
            raise StateError(
                f"{path}: the content disagrees with its checksum (stored {str(stored)[:19]}..."
                "): the file was changed outside bo_ncgp or damaged"
            )
    elif require_checksum:
        raise StateError(f"{path}: the checksum ({CHECKSUM}) is missing")
    return obj


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


# ------------------------------------------------------------------- names and paths
def check_name(name: Any, what: str, source: Path | str | None = None) -> str:
    """``name`` if it is safe as a file or folder name (:data:`SAFE_NAME`).

    Raises:
        StateError: naming ``source`` (the file the name was read from), if it is not.
        InputDataError: if it is not and no ``source`` is given.

    Example:
        >>> check_name("fantasy-batch", "strategy name")
        'fantasy-batch'
        >>> check_name("../../etc", "strategy name", "out/seed_0/state.json")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.StateError: out/seed_0/state.json: the strategy name '../../etc' is ...
    """
    if isinstance(name, str) and SAFE_NAME.fullmatch(name):
        return name
    msg = (
        f"the {what} {name!r} is not a safe name (a letter or digit, then letters, digits "
        "and ._+-, at most 100 characters)"
    )
    if source is None:
        raise InputDataError(msg)
    raise StateError(f"{source}: {msg}")


def inside(root: Path | str, *parts: str) -> Path:
    """``root / parts...``, refused unless it resolves to a path inside ``root``.

    Example:
        >>> inside("results", "random", "archive").as_posix()
        'results/random/archive'
        >>> inside("results", "../elsewhere")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: results/../elsewhere lies outside results
    """
    root = Path(root)
    path = root.joinpath(*parts)
    if not path.resolve().is_relative_to(root.resolve()):
        raise InputDataError(f"{path} lies outside {root}")
    return path


# ------------------------------------------------------------------------------ lock
class FolderLock:
    """Exclusive lock of a campaign folder for one process: ``flock`` on the file
    :data:`LOCK` in it, which holds the holder's pid. The operating system releases the lock
    when the holder ends, even by SIGKILL, so a killed run never blocks its resume.

    Raises:
        StorageError: on entering, naming the folder and the holder's pid, if another process
            (or another lock object of this one) holds it; or if the folder cannot be written.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> with FolderLock(d):
        ...     FolderLock(d).acquire()
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.StorageError: ... is in use by another campaign process (pid ...)...
        >>> with FolderLock(d):  # released on leaving
        ...     pass
    """

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        """Take the lock (see the class docstring)."""
        import fcntl

        path = self.folder / LOCK
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise storage_error(path, err, "create the lock file") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StorageError(
                f"{self.folder} is in use by another campaign process (pid {holder}); wait "
                "for it to end or stop it, then run again"
            ) from None
        except OSError as err:
            os.close(fd)
            raise storage_error(path, err, "lock") from err
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is only shown to a second process
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (the lock file stays)."""
        import fcntl

        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
