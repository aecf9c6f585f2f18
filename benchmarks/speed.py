"""Every speed ratio against its peer, in one command (``make bench``).

Runs the speed benchmarks, each in its own process (1 thread; the ratios inside a benchmark are
measured in that one process, interleaved), reads their JSON results and prints one table:
what is timed, our time, the peer and its time, the ratio (ours / peer, median over
repetitions) and the target the ratio is judged by. The benchmarks and their peers:

* ``dual_update``: one default ``DualSVGP.update`` against an SVGP refitted on all the data
  (target: faster, ratio < 1);
* ``adapter_overhead``: one posterior through the BoTorch adapter against the bare
  ``predict_f`` (target <= 1.2; where the acquisition samples, against ``predict_f`` + one
  Cholesky factor + the samples, the least a sampler computes), and qKnowledgeGradient at
  m = 500 against m = 100 (<= 3);
* ``dual_svgp_timing``: the streaming update and dual conditioning against an offline refit
  of the same model on the banana stream (no target; the paper's claim is < 1);
* ``iterncgp_backend``: an IterNCGP fit at N = 10,000 with ``backend="auto"`` against the
  fastest backend (target <= 1.2), and IterNCGP's time to the exact-Laplace NLL + 0.002
  against a GPyTorch SVGP's (target <= 1; an SVGP that misses the target within its budget
  counts with its budget);
* ``keops_formula``: our KeOps kernel products against GPyTorch's KeOps kernels (<= 1);
* ``hipgp_time_to_rmse``: HIP-GP's time to a test RMSE against an SVGP's (<= 2 below
  M = 4,096, <= 1 from there).

Results: ``benchmarks/results/speed/<benchmark>.json`` (``--quick``: ``speed_quick/``),
the table in ``speed.md`` beside them and ``speed.json``.

Usage::

    python -m benchmarks.speed                          # every benchmark, full presets
    python -m benchmarks.speed --quick                  # small presets, < 2 min
    python -m benchmarks.speed --only adapter_overhead  # one of them
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Row:
    """One ratio of the table: ``ours_s / peer_s`` for ``case`` of ``benchmark``."""

    benchmark: str
    case: str
    ours: str
    ours_s: float
    peer: str
    peer_s: float
    ratio: float
    target: float | None  # the ratio must not exceed it; None: no target

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        return "met" if self.ratio <= self.target else "missed"


def _dual_update(res: dict) -> Iterator[Row]:
    for c in res["cases"]:
        sec = c["seconds_median"]
        yield Row(
            "dual_update",
            f"{c['model']}, n0 = {c['n0']}, m = {c['m']}, batch {c['batch']}",
            "update (default)",
            sec["update (default)"],
            "SVGP refit",
            sec["SVGP refit"],
            c["ratio_to_refit"]["update (default)"],
            1.0,
        )


def _adapter_overhead(res: dict) -> Iterator[Row]:
    for c in res["posterior"]:
        sec = c["seconds_median"]
        case = f"{c['case']} ({'x'.join(map(str, c['shape']))})"
        sampled = c.get("adapter_over_bare_factor") is not None
        # rows that sample: the reference is predict_f + one factor + the samples (the bare
        # predict_f computes neither); the ratio to predict_f alone is listed without target
        yield Row(
            "adapter_overhead",
            case,
            "adapter posterior",
            sec["adapter"],
            "bare predict_f",
            sec["bare"],
            c["adapter_over_bare"]["median"],
            None if sampled else 1.2,
        )
        if sampled:
            yield Row(
                "adapter_overhead",
                case,
                "adapter posterior",
                sec["adapter"],
                "bare predict_f + factor + samples",
                sec["bare + factor + samples"],
                c["adapter_over_bare_factor"]["median"],
                1.2,
            )
    small, large = res["qkg"][0], res["qkg"][-1]
    for key in ("forward", "forward + backward"):
        yield Row(
            "adapter_overhead",
            f"qKnowledgeGradient {key}",
            f"m = {large['m']}",
            large["seconds_median"][key],
            f"m = {small['m']}",
            small["seconds_median"][key],
            res["qkg_large_over_small"][key],
            3.0,
        )


def _dual_svgp_timing(res: dict) -> Iterator[Row]:
    sec, ratio = res["seconds_median"], res["ratio_to_offline_refit"]
    for key in sec:
        if key != "offline refit" and not key.startswith("offline"):
            yield Row(
                "dual_svgp_timing",
                "banana stream",
                key,
                sec[key],
                "offline refit",
                sec["offline refit"],
                ratio[key],
                None,
            )


def _iterncgp_backend(res: dict) -> Iterator[Row]:
    for block in res["backends"]:
        rows = {r["backend"]: r for r in block["rows"]}
        fastest = min(rows.values(), key=lambda r: r["median_s"])
        auto = rows["auto"]
        yield Row(
            "iterncgp_backend",
            f"{block['task']} fit, N = {block['n']}",
            f"auto ({auto['resolved']})",
            auto["median_s"],
            f"fastest ({fastest['backend']})",
            fastest["median_s"],
            auto["ratio_to_fastest"],
            1.2,
        )
    for t in res["time_to_target"]:
        ours, svgp = t["iterncgp"], t["svgp"]
        if ours["seconds_to_target"] is None:
            continue
        peer_s = svgp["seconds_to_target"]
        peer = "SVGP"
        if peer_s is None:
            peer_s = max(r["train_seconds"] for r in svgp["runs"])
            peer = "SVGP (not reached; its budget)"
        yield Row(
            "iterncgp_backend",
            f"{t['task']}, N = {t['n']}: time to exact-Laplace NLL + 0.002",
            "IterNCGP",
            ours["seconds_to_target"],
            peer,
            peer_s,
            ours["seconds_to_target"] / peer_s,
            1.0,
        )


def _keops_formula(res: dict) -> Iterator[Row]:
    for r in res["rows"]:
        sec = r["seconds_median"]
        yield Row(
            "keops_formula",
            f"{r['kernel']}, N = {r['n']}, k = {r['k']}, {r['dtype']}",
            "bo_ncgp KeOps",
            sec["new"],
            "GPyTorch KeOps",
            sec["gpytorch"],
            r["ratio_to_gpytorch"]["new"],
            1.0,
        )


def _hipgp_time_to_rmse(res: dict) -> Iterator[Row]:
    for r in res["rows"]:
        ours, svgp = r["hipgp"], r["svgp"]
        if ours["seconds_to_target"] is None or svgp["seconds_to_target"] is None:
            continue  # a run that missed the RMSE target has no time to compare
        yield Row(
            "hipgp_time_to_rmse",
            f"time to RMSE target, M = {r['M']}",
            "HIP-GP",
            ours["seconds_to_target"],
            "SVGP",
            svgp["seconds_to_target"],
            ours["seconds_to_target"] / svgp["seconds_to_target"],
            2.0 if r["M"] < 4096 else 1.0,
        )


#: name -> (extra arguments, extractor of the rows from the benchmark's JSON)
BENCHMARKS: dict[str, tuple[list[str], Callable[[dict], Iterator[Row]]]] = {
    "dual_update": ([], _dual_update),
    "adapter_overhead": ([], _adapter_overhead),
    "dual_svgp_timing": ([], _dual_svgp_timing),
    "iterncgp_backend": ([], _iterncgp_backend),
    "keops_formula": ([], _keops_formula),
    "hipgp_time_to_rmse": ([], _hipgp_time_to_rmse),
}


def rows_of(name: str, result: dict) -> list[Row]:
    """The table rows of benchmark ``name`` from its JSON ``result``.

    Example:
        >>> res = {"seconds_median": {"update": 0.2, "offline refit": 1.0},
        ...        "ratio_to_offline_refit": {"update": 0.2, "offline refit": 1.0}}
        >>> [(r.ours, r.ratio, r.verdict) for r in rows_of("dual_svgp_timing", res)]
        [('update', 0.2, '')]
    """
    if name not in BENCHMARKS:
        raise KeyError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}")
    return list(BENCHMARKS[name][1](result))


def markdown(rows: list[Row]) -> str:
    """The rows as a markdown table (times in ms)."""
    lines = [
        "| benchmark | case | ours | ms | peer | ms | ours / peer | target | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = "" if r.target is None else f"<= {r.target:g}"
        lines.append(
            f"| {r.benchmark} | {r.case} | {r.ours} | {1e3 * r.ours_s:.3g} | {r.peer} | "
            f"{1e3 * r.peer_s:.3g} | {r.ratio:.2f} | {target} | {r.verdict} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the benchmarks' small presets")
    p.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these")
    p.add_argument("--out", type=Path, default=None, help="folder of the results")
    args = p.parse_args(argv)
    out = args.out or RESULTS / ("speed_quick" if args.quick else "speed")
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(BENCHMARKS)
    rows: list[Row] = []
    failed: list[str] = []
    for i, name in enumerate(names, 1):
        extra, _ = BENCHMARKS[name]
        target = out / f"{name}.json"
        cmd = [sys.executable, "-m", f"benchmarks.{name}", "--out", str(target), *extra]
        cmd += ["--quick"] if args.quick else []
        print(f"[{i}/{len(names)}] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], check=False)
        print(f"      {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if proc.returncode != 0:
            failed.append(name)
            continue
        rows += rows_of(name, json.loads(target.read_text()))
    table = markdown(rows)
    (out / "speed.md").write_text(table + "\n")
    (out / "speed.json").write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    print(table)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
