"""Damaged campaign files for the corruption tests: each case turns the files of a campaign
stopped mid-batch (``state.json``, ``evaluations.csv``) into a damaged copy that a resume must
refuse, naming the damaged file.

``CASES[name] = (file, kind, damage)``: ``kind`` ``"text"`` damages the file's bytes (the
checksum no longer fits); ``"state"`` edits the parsed state, which is then written with a
valid checksum (a crafted file: only the checks of the content can refuse it); ``"csv"``
edits the text of ``evaluations.csv``.
"""

from __future__ import annotations

import re


def _set(path, value):
    def damage(st):
        *keys, last = path
        obj = st
        for k in keys:
            obj = obj[k]
        obj[last] = value

    return damage


def _drop(key):
    def damage(st):
        del st[key]

    return damage


def _swap_batches(st):
    st["batches"][1], st["batches"][0] = st["batches"][0], st["batches"][1]


def _drop_last_batch(st):
    st["batches"].pop()


def _finished(st):
    st["finished"] = True


def _done_point(st):
    st["pending"]["done"]["0"]["point"] = [0.5, 0.5]


def _done_key(st):
    st["pending"]["done"]["7"] = st["pending"]["done"]["0"]


def _nan_value(st):
    st["evaluations"][2]["value"] = float("nan")


def _tamper_value(text):
    return re.sub(r'"value": -?[0-9.e-]+', '"value": 952.7', text, count=1)


def _tamper_budget(text):
    return text.replace('"budget": 10', '"budget": 12')


def _drop_checksum(text):
    return re.sub(r',\n "_checksum": "[^"]*"', "", text)


def _csv_value(text):
    lines = text.splitlines()
    cells = lines[2].split(",")
    cells[3] = "952.7"
    lines[2] = ",".join(cells)
    return "\n".join(lines) + "\n"


def _csv_drop_rows(text):
    return "\n".join(text.splitlines()[:3]) + "\n"


def _csv_extra_row(text):
    return text + "99,9,0.5 0.5,-0.08,True,,0.000\n"


CASES = {
    "empty file": ("state.json", "text", lambda t: ""),
    "truncated in half": ("state.json", "text", lambda t: t[: len(t) // 2]),
    "last brace missing": ("state.json", "text", lambda t: t.rstrip()[:-1]),
    "binary garbage": ("state.json", "text", lambda t: b"\x00\x9f\xff\x10" * 64),
    "invalid UTF-8": ("state.json", "text", lambda t: t.encode()[:40] + b"\xff" + t.encode()[40:]),
    "a JSON list": ("state.json", "text", lambda t: "[1, 2, 3]"),
    "value tampered (checksum)": ("state.json", "text", _tamper_value),
    "budget tampered (checksum)": ("state.json", "text", _tamper_budget),
    "checksum removed": ("state.json", "text", _drop_checksum),
    "key missing": ("state.json", "state", _drop("evaluations")),
    "budget a string": ("state.json", "state", _set(("budget",), "10")),
    "batch size zero": ("state.json", "state", _set(("batch_size",), 0)),
    "seed negative": ("state.json", "state", _set(("seed",), -3)),
    "num_initial above budget": ("state.json", "state", _set(("num_initial",), 20)),
    "format unknown": ("state.json", "state", _set(("format",), 99)),
    "point out of bounds": ("state.json", "state", _set(("evaluations", 5, "point"), [7.5, 0.2])),
    "point of wrong dimension": ("state.json", "state", _set(("evaluations", 1, "point"), [0.2])),
    "point not numbers": ("state.json", "state", _set(("evaluations", 0, "point"), ["a", "b"])),
    "value a string": ("state.json", "state", _set(("evaluations", 3, "value"), "high")),
    "NaN value without error": ("state.json", "state", _nan_value),
    "success not a flag": ("state.json", "state", _set(("evaluations", 4, "success"), "yes")),
    "batches out of order": ("state.json", "state", _swap_batches),
    "a batch missing": ("state.json", "state", _drop_last_batch),
    "iteration count wrong": ("state.json", "state", _set(("iterations", 1, "num_evaluations"), 9)),
    "pending point out of bounds": (
        "state.json",
        "state",
        _set(("pending", "points", 1), [0.5, -4.0]),
    ),
    "pending result for no point": ("state.json", "state", _done_key),
    "pending result of another point": ("state.json", "state", _done_point),
    "finished too early": ("state.json", "state", _finished),
    "more evaluations than budget": ("state.json", "state", _set(("budget",), 5)),
    "strategy name escapes": ("state.json", "state", _set(("strategy", "name"), "../../escape")),
    "csv value changed": ("evaluations.csv", "csv", _csv_value),
    "csv rows missing": ("evaluations.csv", "csv", _csv_drop_rows),
    "csv extra row": ("evaluations.csv", "csv", _csv_extra_row),
    "csv header garbage": ("evaluations.csv", "csv", lambda t: "garbage\n" + t),
    "csv empty": ("evaluations.csv", "csv", lambda t: ""),
}
