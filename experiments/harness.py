"""The pieces every paper reproduction shares: output folders, options, presets, JSON results,
per-unit resume, seed summaries and figures.

* :func:`results_dir` -- ``experiments/<paper>/results/<name>``, the default output folder;
* :func:`parser` -- an ``argparse`` parser with the common options (``--quick``, ``--seeds``,
  ``--root``, ``--out``, ``--threads``, ``--force``, ``--summary-only``);
* :func:`setup` and :func:`preset` -- torch threads / float64, and the configuration of a run
  (quick or full preset with command-line overrides);
* :func:`write_json`, :func:`read_json` -- the atomic, strict JSON writer and its reader of
  :mod:`bo_ncgp.campaigns.storage` (a non-finite number is written as ``"NaN"``,
  ``"Infinity"`` or ``"-Infinity"`` and read back as the float);
* :class:`Store` -- one JSON file per unit of work (seed, fold, configuration), so an
  interrupted run resumes where it stopped;
* :func:`summary`, :func:`fmt` -- mean and standard deviation over seeds, as a table cell;
* :func:`markdown_table`, :func:`save_png`, :func:`log`, :func:`exit_code`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch

from bo_ncgp.campaigns.storage import read_json, write_json
from bo_ncgp.cli.common import DATA_ROOT_HELP, HelpFormatter, add_verify_argument
from bo_ncgp.exceptions import StateError

__all__ = [
    "Store",
    "exit_code",
    "fmt",
    "log",
    "markdown_table",
    "parser",
    "preset",
    "read_json",
    "results_dir",
    "save_png",
    "setup",
    "summary",
    "write_json",
]


def results_dir(module_file: str, name: str = "") -> Path:
    """``experiments/<paper>/results/<name>`` for the experiment module at ``module_file``,
    relative to the working directory: run from the repository root, results land in the
    committed tree; run from an installed package, they land below the current folder (never
    inside the installation).

    Example:
        >>> results_dir("/x/experiments/tatzel/gmm.py").parts
        ('experiments', 'tatzel', 'results')
        >>> str(results_dir("/x/experiments/chang2023/uci.py", "uci"))
        'experiments/chang2023/results/uci'
    """
    folder = Path("experiments") / Path(module_file).resolve().parent.name / "results"
    return folder / name if name else folder


def parser(
    doc: str | None,
    out: Path,
    *,
    seeds: bool = False,
    root: bool = False,
    resume: str | None = None,
    quick_help: str = "tiny configuration (CI)",
    prog: str | None = None,
) -> argparse.ArgumentParser:
    """A parser with ``--quick``, ``--out`` and ``--threads``; ``seeds`` adds ``--seeds``,
    ``root`` the data root ``--root`` and ``--no-verify`` (``args.verify``), and ``resume``
    (the name of what ``--summary-only`` rebuilds) adds ``--force`` and ``--summary-only``.
    The description is the first line of ``doc``; ``prog`` names the command in the usage
    line.

    Example:
        >>> p = parser("Demo.\\n\\nMore.", Path("out"), seeds=True)
        >>> a = p.parse_args(["--quick", "--seeds", "2"])
        >>> a.quick, a.seeds, a.threads, p.description
        (True, 2, 1, 'Demo.')
    """
    description = doc.strip().splitlines()[0] if doc else None
    p = argparse.ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter)
    p.add_argument("--quick", action="store_true", help=quick_help)
    if seeds:
        p.add_argument("--seeds", type=int, default=None, help="number of seeds")
    if root:
        p.add_argument("--root", default=None, help=DATA_ROOT_HELP)
        add_verify_argument(p)
    p.add_argument("--out", type=Path, default=out, help="output folder")
    p.add_argument("--threads", type=int, default=1, help="torch threads (small dense algebra)")
    if resume is not None:
        p.add_argument("--force", action="store_true", help="recompute stored units")
        p.add_argument(
            "--summary-only",
            action="store_true",
            help=f"rebuild {resume} from the stored units, compute nothing",
        )
    return p


def setup(threads: int = 1) -> None:
    """``threads`` torch threads (small dense algebra on a shared machine), float64."""
    torch.set_num_threads(threads)
    torch.set_default_dtype(torch.float64)


def preset(default: dict, quick: dict, args: argparse.Namespace, **overrides) -> dict:
    """A copy of ``quick`` (when ``args.quick``) or ``default``, with the ``overrides`` that
    are not ``None`` applied (``seeds`` from ``args.seeds`` when the parser has it).

    Example:
        >>> a = argparse.Namespace(quick=True, seeds=None)
        >>> preset({"seeds": 5}, {"seeds": 1, "m": 4}, a, m=8)
        {'seeds': 1, 'm': 8}
    """
    cfg = dict(quick if args.quick else default)
    if getattr(args, "seeds", None) is not None:
        cfg["seeds"] = args.seeds
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    return cfg


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table: one ``| a | b |`` line per row under ``header`` and its rule.

    Example:
        >>> print(markdown_table(["q", "s"], [[1, "0.5"], [3, ""]]))
        | q | s |
        |---|---|
        | 1 | 0.5 |
        | 3 |  |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def exit_code(values: Iterable[float]) -> int:
    """``0`` when every value is finite, else ``1`` (the status of an experiment command).

    Example:
        >>> exit_code([0.1, 2.0]), exit_code([float("nan")])
        (0, 1)
    """
    return 0 if all(math.isfinite(v) for v in values) else 1


def log(msg: str) -> None:
    """``msg`` on stderr with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def save_png(fig, path: str | os.PathLike, dpi: int = 100, colors: int = 256) -> None:
    """Save a matplotlib figure as a palette PNG (``colors`` colours): image plots shrink from
    ~1 MB to a few hundred kB, so that result folders stay small."""
    from PIL import Image

    fig.savefig(path, dpi=dpi)
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors)
    small.save(path, optimize=True)


def summary(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "std", "n"}`` (sample std; 0 for a single value).

    Example:
        >>> summary([1.0, 3.0])["mean"], summary([])["n"]
        (2.0, 0)
    """
    v = torch.tensor([float(x) for x in values], dtype=torch.float64)
    if v.numel() == 0:
        return {"mean": float("nan"), "std": float("nan"), "n": 0}
    std = float(v.std()) if v.numel() > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "n": int(v.numel())}


def fmt(s: dict, digits: int = 3) -> str:
    """``mean (std)`` of a :func:`summary`.

    Example:
        >>> fmt(summary([1.0, 3.0]), 2)
        '2.00 (1.41)'
    """
    if s["n"] == 0 or not math.isfinite(s["mean"]):
        return "--"
    if s["n"] == 1:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ({s['std']:.{digits}f})"


class Store:
    """Per-unit JSON results under ``folder`` (atomic writes, config-checked resume).

    Example:
        >>> import tempfile
        >>> s = Store(tempfile.mkdtemp())
        >>> s.put("seed0", {"acc": 0.9}, config={"m": 10})
        >>> s.get("seed0", config={"m": 10})["acc"], s.get("seed0", config={"m": 20})
        (0.9, None)
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def _read(self, key: str) -> dict | None:
        p = self.path(key)
        if not p.is_file():
            return None
        try:
            return read_json(p)
        except StateError:  # damaged or truncated: computed again
            return None

    def get(self, key: str, config: dict | None = None) -> dict | None:
        """The stored result, or ``None`` if absent or computed with another config."""
        data = self._read(key)
        if data is None or (config is not None and data.get("config") != _plain(config)):
            return None
        return data

    def put(self, key: str, result: dict, config: dict | None = None) -> None:
        """Store ``result``; a unit stored under ``key`` with another configuration is never
        overwritten: it is moved to ``superseded/<key>.<time>.json`` (with a message)."""
        old = self._read(key)
        if old is not None and old.get("config") != (None if config is None else _plain(config)):
            keep = self.folder / "superseded" / f"{key}.{time.strftime('%Y%m%dT%H%M%S')}.json"
            keep.parent.mkdir(exist_ok=True)
            self.path(key).replace(keep)
            print(f"{self.path(key)} was computed with another configuration; kept as {keep}",
                  file=sys.stderr)  # fmt: skip
        data = dict(result)
        if config is not None:
            data["config"] = config
        write_json(self.path(key), data)

    def unit(
        self,
        key: str,
        config: dict | None,
        make: Callable[[], dict],
        *,
        force: bool = False,
        compute: bool = True,
    ) -> dict | None:
        """The result stored under ``key`` for ``config``; else (or with ``force``) ``make()``,
        stored before it is returned; ``None`` when nothing is stored and ``compute`` is off
        (summaries of the stored units only).

        Example:
            >>> import tempfile
            >>> s = Store(tempfile.mkdtemp())
            >>> s.unit("seed0", {"m": 1}, lambda: {"acc": 0.9})["acc"]
            0.9
            >>> s.unit("seed0", {"m": 1}, lambda: {"acc": 0.1})["acc"]  # resumed, not rerun
            0.9
            >>> s.unit("seed1", {"m": 1}, lambda: {"acc": 0.1}, compute=False) is None
            True
        """
        result = None if force else self.get(key, config)
        if result is None and compute:
            result = make()
            self.put(key, result, config)
        return result

    def all(self) -> dict[str, dict]:
        """Every stored unit, by key."""
        return {p.stem: read_json(p) for p in sorted(self.folder.glob("*.json"))}


def _plain(config: dict) -> dict:
    """``config`` as it reads back from JSON (tuples become lists, ...)."""
    return json.loads(json.dumps(config))
