"""Compact per-seed records of campaigns that survive a fresh clone (``<folder>/archive/``).

A campaign's ``state.json`` (~90 KB for one hotspot seed) is its resumable record; results
folders keep those files local (``.gitignore``), so on a new machine the per-seed results of
earlier runs are gone and new seeds can neither be pooled with them nor compared seed by seed.
:func:`write_archive` keeps what the summaries, plots and paired comparisons read, in three
files under ``<folder>/archive/`` small enough to commit (~25 KB per hotspot seed):

* ``evaluations.csv`` -- one row per evaluation: ``seed, index, point, value, success, error``
  (``point`` as JSON: a village index or a parameter vector);
* ``iterations.csv`` -- one row per iteration (batch): ``seed, iteration, num_evaluations`` and
  every metric the strategy logged (empty where it logged none);
* ``campaigns.json`` -- per seed, what a table cannot hold: the problem and strategy
  configurations, budget, batch size, initial design size, ``finished`` and the recommendation.

Floats are written with ``repr``, so they read back bit for bit. :func:`load_states` returns the
campaign states under a folder -- full ``state.json`` files plus archived seeds that have no
``state.json`` any more, rebuilt as *lean* states (the keys above; no pending batch, no
per-evaluation timings, no strategy checkpoint, so an archived seed cannot be resumed).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from bo_ncgp.campaigns.storage import (
    check_name,
    dumps,
    inside,
    loads,
    read_json,
    write_csv,
    write_json,
)
from bo_ncgp.exceptions import InputDataError, StateError

__all__ = ["ARCHIVE", "load_states", "read_archive", "write_archive"]

ARCHIVE = "archive"
_META_KEYS = ("problem", "strategy", "budget", "batch_size", "num_initial", "finished")
#: per-iteration values of the runner, stored beside the strategy's metrics in columns named
#: ``run:<key>`` (absent in older archives, which read back without them)
_ITERATION_KEYS = ("best_value", "update_seconds", "acquisition_seconds", "evaluation_seconds")
_RUN = "run:"


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _float(s: str) -> float:
    return float(s) if s != "" else math.nan


def write_archive(folder: str | Path, states: list[dict[str, Any]]) -> Path:
    """Write the archive of ``states`` (one strategy, distinct seeds) to ``folder/archive``.

    Args:
        folder: the strategy's campaign folder (e.g. ``results/hotspots/entropy``).
        states: campaign states (full or lean), one per seed.

    Returns:
        The archive folder.

    Raises:
        InputDataError: if ``states`` is empty, mixes strategies, repeats a seed or names its
            strategy with a name that is not safe as a folder name.

    Example:
        >>> import tempfile
        >>> st = {"seed": 3, "strategy": {"name": "s"}, "problem": {"name": "p"},
        ...       "budget": 2, "batch_size": 1, "num_initial": 1, "finished": True,
        ...       "evaluations": [{"point": 7, "value": 0.1, "success": None, "error": None},
        ...                       {"point": [0.5, 1.0], "value": 2.0, "success": True,
        ...                        "error": None}],
        ...       "iterations": [{"iteration": 0, "num_evaluations": 1, "metrics": {"mse": 1 / 3}},
        ...                      {"iteration": 1, "num_evaluations": 2, "metrics": {}}]}
        >>> folder = Path(tempfile.mkdtemp())
        >>> sorted(p.name for p in write_archive(folder, [st]).iterdir())
        ['campaigns.json', 'evaluations.csv', 'iterations.csv']
        >>> back = read_archive(folder)[3]
        >>> back["iterations"][0]["metrics"]["mse"] == 1 / 3, back["evaluations"][1]["point"]
        (True, [0.5, 1.0])
    """
    if not states:
        raise InputDataError("write_archive: no campaign states given")
    names = {st["strategy"]["name"] for st in states}
    if len(names) > 1:
        raise InputDataError(f"write_archive: states of several strategies {sorted(names)}")
    check_name(next(iter(names)), "strategy name")
    seeds = [int(st["seed"]) for st in states]
    if len(set(seeds)) != len(seeds):
        raise InputDataError(f"write_archive: a seed appears twice in {sorted(seeds)}")
    states = sorted(states, key=lambda st: int(st["seed"]))
    metrics = sorted({m for st in states for it in st["iterations"] for m in it.get("metrics", {})})
    logged = [
        k for k in _ITERATION_KEYS if any(k in it for st in states for it in st["iterations"])
    ]
    ev_rows, it_rows = [], []
    meta: dict[str, Any] = {}
    for st in states:
        seed = int(st["seed"])
        for i, e in enumerate(st["evaluations"]):
            ev_rows.append(
                [
                    str(seed),
                    str(i),
                    dumps(e.get("point")),
                    _cell(e.get("value")),
                    _cell(e.get("success")),
                    e.get("error") or "",
                ]
            )
        for k, it in enumerate(st["iterations"]):
            m = it.get("metrics", {})
            it_rows.append(
                [str(seed), str(it.get("iteration", k)), str(int(it["num_evaluations"]))]
                + [_cell(it.get(name)) for name in logged]
                + [_cell(m.get(name)) for name in metrics]
            )
        meta[str(seed)] = {k: st.get(k) for k in _META_KEYS}
        meta[str(seed)]["recommendation"] = st.get("recommendation")
    arch = inside(folder, ARCHIVE)
    ev_header = ["seed", "index", "point", "value", "success", "error"]
    write_csv(arch / "evaluations.csv", ev_header, ev_rows)
    it_header = ["seed", "iteration", "num_evaluations", *(_RUN + k for k in logged), *metrics]
    write_csv(arch / "iterations.csv", it_header, it_rows)
    write_json(arch / "campaigns.json", meta)
    return arch


def _bool(s: str) -> bool | None:
    return None if s == "" else s == "True"


def read_archive(folder: str | Path) -> dict[int, dict[str, Any]]:
    """Lean campaign states ``{seed: state}`` from ``folder/archive`` (see the module docstring).

    Raises:
        FileNotFoundError: if ``folder/archive/campaigns.json`` does not exist.
        StateError: naming the file, if a file is damaged (not JSON, a seed or number that
            does not parse, an unsafe strategy name) or the tables name a seed that
            ``campaigns.json`` does not hold.
    """
    arch = Path(folder) / ARCHIVE
    meta = read_json(arch / "campaigns.json")
    if not isinstance(meta, dict):
        raise StateError(f"{arch / 'campaigns.json'}: must hold an object of seeds")
    states: dict[int, dict[str, Any]] = {}
    for seed, m in meta.items():
        if not seed.isdigit() or not isinstance(m, dict) or not isinstance(m.get("strategy"), dict):
            raise StateError(f"{arch / 'campaigns.json'}: entry {seed!r} is not a seed's record")
        check_name(m["strategy"].get("name"), "strategy name", arch / "campaigns.json")
        st = {k: m.get(k) for k in _META_KEYS}
        st.update(
            seed=int(seed),
            recommendation=m.get("recommendation"),
            evaluations=[],
            iterations=[],
            pending=None,
            archived=True,
        )
        states[int(seed)] = st

    def owner(row: dict[str, str], table: str) -> dict[str, Any]:
        seed = int(row["seed"])
        if seed not in states:
            raise StateError(f"{arch / table}: seed {seed} is not in campaigns.json")
        return states[seed]

    try:
        _read_tables(arch, owner)
    except StateError:
        raise
    except (ValueError, KeyError, TypeError, csv.Error) as err:
        what = f"{type(err).__name__}: {err}"
        raise StateError(f"{arch}: a table of the archive does not parse ({what})") from None
    return states


def _read_tables(arch: Path, owner) -> None:
    """Append the rows of ``evaluations.csv`` and ``iterations.csv`` to their seeds' states."""
    with open(arch / "evaluations.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            owner(row, "evaluations.csv")["evaluations"].append(
                {
                    "point": loads(row["point"]),
                    "value": _float(row["value"]),
                    "success": _bool(row["success"]),
                    "error": row["error"] or None,
                }
            )
    with open(arch / "iterations.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        keys = ("seed", "iteration", "num_evaluations")
        fields = reader.fieldnames or []
        logged = [f for f in fields if f.startswith(_RUN)]
        names = [f for f in fields if f not in keys and not f.startswith(_RUN)]
        for row in reader:
            owner(row, "iterations.csv")["iterations"].append(
                {
                    "iteration": int(row["iteration"]),
                    "num_evaluations": int(row["num_evaluations"]),
                    **{n[len(_RUN) :]: _float(row[n]) for n in logged if row[n] != ""},
                    "metrics": {n: float(row[n]) for n in names if row[n] != ""},
                }
            )


def load_states(folder: str | Path) -> list[dict[str, Any]]:
    """Every campaign state under ``folder``: each ``state.json`` (searched recursively) and,
    for archives found under ``folder``, the archived seeds of that strategy that have no
    ``state.json`` (a seed's full state wins over its archived copy).

    Example:
        >>> import tempfile
        >>> load_states(tempfile.mkdtemp())
        []
    """
    folder = Path(folder)
    files = [folder] if folder.is_file() else sorted(folder.rglob("state.json"))
    states = []
    for f in files:
        st = read_json(f)
        if not isinstance(st, dict) or not isinstance(st.get("strategy"), dict):
            raise StateError(f"{f}: not a campaign state (no strategy record)")
        check_name(st["strategy"].get("name"), "strategy name", f)
        states.append(st)
    if folder.is_file():
        return states
    have = {(st["strategy"]["name"], int(st["seed"])) for st in states}
    for meta in sorted(folder.rglob(f"{ARCHIVE}/campaigns.json")):
        for seed, st in sorted(read_archive(meta.parent.parent).items()):
            key = (st["strategy"]["name"], seed)
            if key not in have:
                have.add(key)
                states.append(st)
    return states
