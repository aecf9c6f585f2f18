"""Pool hotspot summaries of disjoint seed sets into one (exact mean +- s.e. over all seeds).

Seeds summarised before per-seed archives existed (:mod:`bo_ncgp.campaigns.archive`) survive
only as ``summary.json`` entries ``{"mean", "se", "n"}``. Those three numbers determine the
sum and the sum of squares of the seeds' values, so two summaries of *disjoint* seed sets pool
exactly: with ``S_i = n_i m_i`` and ``Q_i = (n_i - 1) n_i se_i^2 + n_i m_i^2``,

    m = sum S_i / N,    s^2 = (sum Q_i - N m^2) / (N - 1),    se = s / sqrt(N).

    python -m experiments.chang2023.pool_summaries old/summary.json new/ \\
        --strategy svgp-entropy --out pooled.json

(a folder stands for its ``summary.json``). Only the summarised steps (``--at`` of the
summaries) are pooled; the per-step curves are not. Configurations stored under older
settings names are read in today's terms (:func:`experiments.chang2023.legacy.upgrade_config`).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bo_ncgp.cli.common import HelpFormatter
from experiments.harness import read_json, write_json


def pool_mean_se(parts: list[dict[str, float]]) -> dict[str, float]:
    """Exact mean +- s.e. over the union of disjoint samples given as ``{"mean","se","n"}``.

    Example:
        >>> a = {"mean": 1.5, "se": 0.5, "n": 2}     # values 1, 2
        >>> b = {"mean": 4.0, "se": 1.0, "n": 3}     # values 3, 4, 5 (sd 1, se 1/sqrt 3)
        >>> b["se"] = 1 / math.sqrt(3)
        >>> p = pool_mean_se([a, b])                 # values 1..5: mean 3, sd sqrt(2.5)
        >>> p["n"], round(p["mean"], 12), round(p["se"], 12) == round(math.sqrt(0.5), 12)
        (5, 3.0, True)
    """
    parts = [p for p in parts if p.get("n", 0) > 0]
    if not parts:
        raise ValueError("pool_mean_se: no part with n > 0")
    n = sum(int(p["n"]) for p in parts)
    s = sum(p["n"] * p["mean"] for p in parts)
    q = 0.0
    for p in parts:
        k, m, se = int(p["n"]), float(p["mean"]), float(p["se"])
        if k > 1 and not math.isfinite(se):
            raise ValueError(f"pool_mean_se: part {p} has n > 1 but no finite s.e.")
        q += (k - 1) * k * (se**2 if k > 1 else 0.0) + k * m * m
    mean = s / n
    var = max(q - n * mean * mean, 0.0) / (n - 1) if n > 1 else math.nan
    return {"mean": mean, "se": math.sqrt(var / n), "n": n}


def pool_entries(
    entries: list[dict[str, Any]],
    read_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Pool one strategy's summary entries (see ``bo-ncgp hotspots --summary-only``) of
    disjoint seed sets: every ``{metric: {step: {mean, se, n}}}`` at the steps all entries
    share, and the per-step timings; ``seeds`` and ``finished`` are added up.

    ``read_config``: reads each entry's stored configuration in today's terms before they are
    compared (e.g. :func:`experiments.chang2023.legacy.upgrade_config`); default: as stored.

    Raises:
        ValueError: if the entries' strategy configurations differ (naming the keys).

    Example:
        >>> entry = lambda m, cfg: {"seeds": 1, "finished": 1, "config": cfg,
        ...                         "mse": {"200": {"mean": m, "se": math.nan, "n": 1}}}
        >>> pooled = pool_entries([entry(0.1, {"clamp": True}), entry(0.3, {"gain": "clamped"})],
        ...                       lambda c: {"gain": "clamped"} if c.get("clamp") else c)
        >>> pooled["config"], pooled["mse"]["200"]["mean"], pooled["seeds"]
        ({'gain': 'clamped'}, 0.2, 2)
    """
    read = read_config or dict
    configs = [read(dict(e["config"])) for e in entries]
    differ = sorted(
        k for k in set().union(*configs) if len({json.dumps(c.get(k)) for c in configs}) > 1
    )
    if differ:
        raise ValueError(
            f"pool_entries: the summaries ran different strategy configurations (keys {differ})"
        )
    out: dict[str, Any] = {
        "seeds": sum(e["seeds"] for e in entries),
        "finished": sum(e["finished"] for e in entries),
        "config": configs[-1],
        "pooled_from": [e["seeds"] for e in entries],
    }
    for key, val in entries[0].items():
        if key in out or key == "curves" or not isinstance(val, dict):
            continue
        if not all(key in e for e in entries):
            continue
        if "mean" in val:  # a timing: {mean, se, n}
            out[key] = pool_mean_se([e[key] for e in entries])
            continue
        steps = set(val).intersection(*(e[key] for e in entries))
        out[key] = {
            st: pool_mean_se([e[key][st] for e in entries]) for st in sorted(steps, key=int)
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bo-ncgp pool-summaries",
        description=__doc__.splitlines()[0],
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "summaries",
        nargs="+",
        type=Path,
        help="summary.json files or folders holding one (disjoint seeds)",
    )
    p.add_argument("--strategy", required=True, help="strategy name in the summaries")
    p.add_argument("--out", type=Path, required=True, help="pooled summary (JSON)")
    args = p.parse_args(argv)
    entries = []
    args.summaries = [f / "summary.json" if f.is_dir() else f for f in args.summaries]
    for f in args.summaries:
        if not f.is_file():
            p.error(f"no summary file {f}")
        summary = read_json(f)
        if args.strategy not in summary:
            p.error(f"{f} has no strategy {args.strategy!r} (has {sorted(summary)})")
        entries.append(summary[args.strategy])
    from experiments.chang2023.legacy import upgrade_config

    read = functools.partial(upgrade_config, strategy=args.strategy)
    pooled = {args.strategy: pool_entries(entries, read)}
    pooled[args.strategy]["sources"] = [str(f) for f in args.summaries]
    write_json(args.out, pooled)
    e = pooled[args.strategy]
    for metric in ("accuracy", "mse"):
        for step, v in e.get(metric, {}).items():
            print(f"{metric}@{step}: {v['mean']:.4f} +- {v['se']:.4f} (n={v['n']})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
