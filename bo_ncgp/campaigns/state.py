"""Checks of a saved campaign (``state.json`` and ``evaluations.csv``) before it is resumed.

:func:`check_state` checks the structure of a state read from ``state.json`` against the
problem it is resumed with: every key and type, positive settings, the evaluations and their
batches (consecutive, none missing or repeated), the per-iteration log, the batch in flight,
every point inside the problem's bounds (or its pool), values consistent with their errors and
the strategy name safe as a folder name. :func:`check_csv` checks that ``evaluations.csv``
agrees with the state (it may lag one batch behind, as it is written after ``state.json``).
Each raises :class:`~bo_ncgp.exceptions.StateError` naming the file and what is wrong;
the checksum of ``state.json`` is checked when it is read
(:func:`~bo_ncgp.campaigns.storage.read_json`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.campaigns.storage import check_name
from bo_ncgp.exceptions import StateError
from bo_ncgp.problems.base import Problem

__all__ = ["CSV_HEADER", "check_csv", "check_state", "csv_rows"]

#: columns of ``evaluations.csv``
CSV_HEADER = ["index", "batch", "point", "value", "success", "error", "seconds"]
_KEYS = {
    "format": int,
    "problem": dict,
    "strategy": dict,
    "budget": int,
    "batch_size": int,
    "num_initial": int,
    "seed": int,
    "evaluations": list,
    "batches": list,
    "iterations": list,
    "finished": bool,
}
_RECORD_KEYS = ("point", "value", "success", "extra", "error", "seconds")


class _Checker:
    def __init__(self, path: Path, problem: Problem) -> None:
        self.path = path
        self.pool = getattr(problem, "pool", None)
        self.dim = getattr(problem, "dim", None)
        bounds = getattr(problem, "bounds", None)
        self.bounds = None if bounds is None else np.asarray(bounds, dtype=float)

    def fail(self, where: str, msg: str) -> None:
        raise StateError(f"{self.path}: {where} {msg}")

    def integer(self, v: Any, where: str, low: int | None = None) -> int:
        if type(v) is not int:
            self.fail(where, f"must be an integer, got {v!r}")
        if low is not None and v < low:
            self.fail(where, f"must be >= {low}, got {v}")
        return v

    def number(self, v: Any, where: str) -> float:
        if type(v) not in (int, float):
            self.fail(where, f"must be a number, got {v!r}")
        return float(v)

    def point(self, p: Any, where: str) -> None:
        if self.pool is not None:
            n = len(self.pool)
            if type(p) is not int or not 0 <= p < n:
                self.fail(where, f"must be an index of the problem's pool of {n}, got {p!r}")
            return
        if not isinstance(p, list) or len(p) != self.dim:
            self.fail(where, f"must be a list of {self.dim} numbers, got {p!r}")
        x = np.array([self.number(v, where) for v in p])
        if not np.isfinite(x).all():
            self.fail(where, f"must be finite, got {p}")
        if self.bounds is not None:
            lo, hi = self.bounds
            tol = 1e-9 * np.maximum(hi - lo, 1.0)
            bad = np.flatnonzero((x < lo - tol) | (x > hi + tol))
            if bad.size:
                k = int(bad[0])
                self.fail(
                    where,
                    f"lies outside the problem's bounds: coordinate {k} = {x[k]!r} is not in "
                    f"[{lo[k]!r}, {hi[k]!r}]",
                )

    def record(self, r: Any, where: str) -> None:
        if not isinstance(r, dict) or set(r) != set(_RECORD_KEYS):
            keys = sorted(r) if isinstance(r, dict) else type(r).__name__
            self.fail(where, f"must be a record with keys {list(_RECORD_KEYS)}, got {keys}")
        self.point(r["point"], f"{where}.point")
        value = self.number(r["value"], f"{where}.value")
        err = r["error"]
        if err is not None and not isinstance(err, str):
            self.fail(f"{where}.error", f"must be null or a message, got {err!r}")
        if err is None and not math.isfinite(value):
            self.fail(f"{where}.value", f"is {value} without an error message")
        if err is not None and not math.isnan(value):
            self.fail(f"{where}.value", f"must be NaN for a failed evaluation, got {value}")
        if r["success"] is not None and type(r["success"]) is not bool:
            self.fail(f"{where}.success", f"must be null, true or false, got {r['success']!r}")
        if not isinstance(r["extra"], dict):
            self.fail(f"{where}.extra", f"must be an object, got {r['extra']!r}")
        seconds = self.number(r["seconds"], f"{where}.seconds")
        if seconds < 0:
            self.fail(f"{where}.seconds", f"must not be negative, got {seconds}")


def check_state(state: Any, problem: Problem, path: Path | str) -> None:
    """Check a campaign state read from ``path`` for resuming it with ``problem`` (see the
    module docstring).

    Raises:
        StateError: naming ``path``, the offending entry and what is wrong.

    Example:
        >>> from bo_ncgp.problems.synthetic import TestFunction
        >>> st = {"format": 2, "problem": {}, "strategy": {"name": "random"}, "budget": 4,
        ...       "batch_size": 2, "num_initial": 2, "seed": 0, "evaluations": [],
        ...       "batches": [], "iterations": [], "finished": False, "pending": None,
        ...       "recommendation": None}
        >>> check_state(st, TestFunction("branin"), "state.json")
        >>> check_state({**st, "budget": "4"}, TestFunction("branin"), "state.json")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.StateError: state.json: budget must be an integer, got '4'
    """
    c = _Checker(Path(path), problem)
    if not isinstance(state, dict):
        c.fail("the content", f"must be a JSON object, got {type(state).__name__}")
    for key, kind in _KEYS.items():
        if key not in state:
            c.fail(f"the key {key!r}", "is missing")
        v = state[key]
        if kind is int:
            c.integer(v, key)
        elif not isinstance(v, kind) or (kind is bool and type(v) is not bool):
            c.fail(key, f"must be a {kind.__name__}, got {v!r}"[:300])
    for key in ("pending", "recommendation"):
        if key not in state:
            c.fail(f"the key {key!r}", "is missing")
    if state["format"] not in (1, 2):
        c.fail("format", f"must be 1 or 2, got {state['format']}")
    check_name(state["strategy"].get("name"), "strategy name", c.path)
    budget = c.integer(state["budget"], "budget", 1)
    c.integer(state["batch_size"], "batch_size", 1)
    num_initial = c.integer(state["num_initial"], "num_initial", 1)
    c.integer(state["seed"], "seed", 0)
    if num_initial > budget:
        c.fail("num_initial", f"= {num_initial} exceeds the budget {budget}")
    evs, batches = state["evaluations"], state["batches"]
    for i, e in enumerate(evs):
        c.record(e, f"evaluations[{i}]")
    if len(evs) > budget:
        c.fail("evaluations", f"hold {len(evs)} entries, more than the budget {budget}")
    n = 0
    for b, batch in enumerate(batches):
        if not isinstance(batch, list) or not batch:
            c.fail(f"batches[{b}]", f"must be a non-empty list, got {batch!r}")
        if batch != list(range(n, n + len(batch))):
            want = f"{n}..{n + len(batch) - 1}"
            c.fail(f"batches[{b}]", f"must be the evaluations {want}, got {batch}")
        n += len(batch)
    if n != len(evs):
        c.fail("batches", f"cover {n} evaluations, but the file holds {len(evs)}")
    if batches and len(batches[0]) != num_initial:
        c.fail("batches[0]", f"holds {len(batches[0])} points, not num_initial = {num_initial}")
    its = state["iterations"]
    if len(its) != len(batches):
        c.fail("iterations", f"hold {len(its)} entries for {len(batches)} batches")
    total = 0
    for k, it in enumerate(its):
        total += len(batches[k])
        if not isinstance(it, dict):
            c.fail(f"iterations[{k}]", f"must be an object, got {it!r}")
        if it.get("iteration") != k or it.get("num_evaluations") != total:
            c.fail(
                f"iterations[{k}]",
                f"must be iteration {k} after {total} evaluations, got iteration "
                f"{it.get('iteration')!r} after {it.get('num_evaluations')!r}",
            )
        if not isinstance(it.get("metrics", {}), dict):
            c.fail(f"iterations[{k}].metrics", "must be an object")
    pend = state["pending"]
    if pend is not None:
        if not isinstance(pend, dict) or not {"iteration", "points", "done"} <= set(pend):
            c.fail("pending", f"must be null or a batch in flight, got {pend!r}"[:300])
        if pend["iteration"] != len(batches):
            c.fail("pending.iteration", f"must be {len(batches)}, got {pend['iteration']!r}")
        pts = pend["points"]
        if not isinstance(pts, list) or not pts:
            c.fail("pending.points", f"must be a non-empty list, got {pts!r}"[:300])
        if len(evs) + len(pts) > budget:
            c.fail("pending.points", f"({len(pts)}) exceed the budget left ({budget - len(evs)})")
        if not batches and len(pts) != num_initial:
            c.fail("pending.points", f"({len(pts)}) must be the {num_initial} initial points")
        for j, p in enumerate(pts):
            c.point(p, f"pending.points[{j}]")
        done = pend["done"]
        if not isinstance(done, dict):
            c.fail("pending.done", f"must be an object, got {done!r}"[:300])
        for key, rec in done.items():
            if key not in {str(j) for j in range(len(pts))}:
                c.fail("pending.done", f"names point {key!r} of a batch of {len(pts)}")
            c.record(rec, f"pending.done[{key}]")
            if rec["point"] != pts[int(key)]:
                c.fail(f"pending.done[{key}].point", "differs from the point in flight")
        if "acquisition_seconds" in pend:
            c.number(pend["acquisition_seconds"], "pending.acquisition_seconds")
    if state["finished"]:
        if len(evs) != budget or pend is not None:
            c.fail("finished", f"is true, but {len(evs)} of {budget} evaluations are done")
    elif state["recommendation"] is not None:
        c.fail("recommendation", "is set, but the campaign is not finished")
    rec = state["recommendation"]
    if rec is not None and not isinstance(rec, dict):
        c.fail("recommendation", f"must be null or an object, got {rec!r}"[:300])


def _cell(v: Any) -> str:
    return "" if v is None else str(v)


def csv_rows(state: dict[str, Any], pool: bool, num_batches: int | None = None) -> list[list[str]]:
    """The rows of ``evaluations.csv`` for the first ``num_batches`` batches (all by default)
    of ``state``, as the strings written.

    Example:
        >>> st = {"batches": [[0]], "evaluations": [{"point": [0.5, 1.0], "value": -1.25,
        ...       "success": True, "error": None, "seconds": 0.01}]}
        >>> csv_rows(st, pool=False)
        [['0', '0', '0.5 1', '-1.25', 'True', '', '0.010']]
    """
    rows = []
    for b, batch in enumerate(state["batches"][:num_batches]):
        for i in batch:
            e = state["evaluations"][i]
            point = str(e["point"]) if pool else " ".join(f"{v:.6g}" for v in e["point"])
            rows.append(
                [
                    str(i),
                    str(b),
                    point,
                    _cell(e["value"]),
                    _cell(e["success"]),
                    e["error"] or "",
                    f"{e['seconds']:.3f}",
                ]
            )
    return rows


def check_csv(path: Path | str, state: dict[str, Any], pool: bool) -> None:
    """Check that ``evaluations.csv`` at ``path`` (if it exists) holds the rows of all batches
    of ``state`` or of all but the last one (it is written after ``state.json``).

    Raises:
        StateError: naming ``path`` and the first row that disagrees.

    Example:
        >>> import tempfile
        >>> st = {"batches": [[0]], "evaluations": [{"point": 3, "value": 0.5,
        ...       "success": None, "error": None, "seconds": 0.0}]}
        >>> p = Path(tempfile.mkdtemp()) / "evaluations.csv"
        >>> _ = p.write_text("index,batch,point,value,success,error,seconds\\n0,0,3,0.7,,,0.000\\n")
        >>> check_csv(p, st, pool=True)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.StateError: ...evaluations.csv: row 1 disagrees with state.json: ...
    """
    path = Path(path)
    if not path.exists():
        return
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except (UnicodeDecodeError, csv.Error) as err:
        raise StateError(f"{path}: not a readable CSV file ({err})") from None
    if not rows or rows[0] != CSV_HEADER:
        got = rows[0] if rows else "nothing"
        raise StateError(f"{path}: the header must be {','.join(CSV_HEADER)}, got {got}")
    body = rows[1:]
    nb = len(state["batches"])
    options = [csv_rows(state, pool, k) for k in (nb, nb - 1) if k >= 0]
    if any(body == want for want in options):
        return
    want = options[0]
    for r, (got, exp) in enumerate(zip(body, want, strict=False), start=1):
        if got != exp:
            raise StateError(
                f"{path}: row {r} disagrees with state.json: {','.join(got)} (state.json: "
                f"{','.join(exp)})"
            )
    raise StateError(
        f"{path}: holds {len(body)} rows, but state.json holds {len(want)} evaluations in "
        f"{nb} finished batches"
    )
