"""Lunar-lander report (Chang et al. 2023, Sec. 4.1, Fig. 3).

Reads the campaigns written by ``bo-ncgp lunar-lander --strategy S --out DIR`` (or by
``bo-ncgp bench --suite lunar``) under one or more folders and reports per strategy and batch
size: best observed reward after 30, 60 and 90 evaluations (mean +- s.e. over seeds), the
held-out reward of the final recommendation, and the mean time per BO iteration split into
model update, acquisition optimisation and evaluation (the initial design is excluded); then
the paired differences of every pair of strategies (A - B over the seeds both ran, mean +- s.e.,
seeds where A is ahead) in best@90 and in the held-out reward.

``--measure`` additionally measures, in this process:

* the reference scores of gymnasium's hand-tuned heuristic weights and of uniformly random
  weights on the held-out episode seeds of the campaigns' problem (with its wind, if any);
* the wall-clock speed-up of evaluating one batch of lunar-lander evaluations with a process
  pool of 2 workers over 1 worker (the same points, the same episodes).

    bo-ncgp lunar-report experiments/chang2023/results/lunar
    bo-ncgp lunar-report experiments/chang2023/results/lunar --measure
    bo-ncgp lunar-report experiments/chang2023/results/bench_lunar/lunar-lander-wind \
        experiments/chang2023/results/bench_lunar_q1/lunar-lander-wind \
        --out experiments/chang2023/results/bench_lunar/report.json

Writes ``report.json`` into the first folder (``--out`` to change) and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from bo_ncgp.campaigns.stats import mean_se, mean_se_dict
from bo_ncgp.cli.common import HelpFormatter
from experiments.harness import read_json, write_json

AT = [30, 60, 90]
SPLIT = ("update_seconds", "acquisition_seconds", "evaluation_seconds")


def _label(state: dict) -> str:
    return f"{state['strategy']['name']} (q={state['batch_size']})"


def _heldout(state: dict) -> float | None:
    rec = state.get("recommendation") if state.get("finished") else None
    return rec["heldout_value"] if rec else None


def summarise_strategy(states: list[dict]) -> dict:
    """Best-so-far at :data:`AT`, held-out score and per-iteration timing of one strategy."""
    from bo_ncgp.campaigns.plotting import summarise

    name = states[0]["strategy"]["name"]
    best = summarise({name: states}, AT)[name]
    heldout = [v for v in map(_heldout, states) if v is not None]
    # iteration 0 is the initial design (no model, no acquisition)
    its = [it for s in states for it in s["iterations"] if it["iteration"] > 0]
    timing = {k: mean_se_dict([it[k] for it in its]) for k in SPLIT} if its else {}
    return {
        "strategy": name,
        "label": _label(states[0]),
        "seeds": len(states),
        "finished": sum(bool(s.get("finished")) for s in states),
        "best_at": {str(n): {"mean": m, "se": se, "n": c} for n, (m, se, c) in best.items()},
        "heldout": mean_se_dict(heldout) if heldout else None,
        "seconds_per_iteration": timing,
        "batch_size": states[0]["batch_size"],
    }


def _final_best(state: dict) -> float | None:
    from bo_ncgp.campaigns.plotting import best_so_far

    if not state.get("finished") or not state["evaluations"]:
        return None
    best = float(best_so_far(state)[-1])
    return best if np.isfinite(best) else None


def paired(groups: dict[str, list[dict]]) -> list[dict]:
    """A - B in best@90 (the final best observed reward) and in the held-out reward, paired
    over the seeds both strategies finished, for every pair of strategies."""
    rows = []
    labels = list(groups)
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            row: dict = {"a": a, "b": b}
            for metric, value in (("best_final", _final_best), ("heldout", _heldout)):
                va = {s["seed"]: value(s) for s in groups[a]}
                vb = {s["seed"]: value(s) for s in groups[b]}
                seeds = sorted(k for k in va if va[k] is not None and vb.get(k) is not None)
                diff = [va[k] - vb[k] for k in seeds]
                m, se, n = mean_se(diff) if diff else (float("nan"), float("nan"), 0)
                row[metric] = {"mean": m, "se": se, "n": n, "a_ahead": sum(d > 0 for d in diff)}
            rows.append(row)
    return rows


def _evaluate_value(problem, x: np.ndarray) -> float:
    return problem.evaluate(x).value


def measure(num_points: int, num_random: int, problem: dict, seed: int = 0) -> dict:
    """Reference scores on ``problem`` (a campaign's saved problem settings) and the
    2-worker over 1-worker evaluation speed-up."""
    from bo_ncgp.campaigns.executors import make_executor
    from bo_ncgp.problems.lunar_lander import DEFAULT_WEIGHTS, LunarLander

    fields = set(LunarLander.__dataclass_fields__) - {"name", "dim"}
    prob = LunarLander(**{k: v for k, v in problem.items() if k in fields})
    rng = np.random.default_rng(seed)
    default = prob.evaluate_heldout(DEFAULT_WEIGHTS).value
    rand = [prob.evaluate_heldout(rng.uniform(0.0, 1.2, 12)).value for _ in range(num_random)]
    X = rng.uniform(0.0, 1.2, (num_points, 12))
    seconds, values = {}, {}
    for workers in (1, 2):
        with make_executor(workers) as ex:
            if workers > 1:  # start the worker processes before timing
                list(ex.map(int, range(workers)))
            t0 = time.perf_counter()
            values[workers] = list(ex.map(_evaluate_value, [prob] * len(X), X))
            seconds[workers] = time.perf_counter() - t0
    if not np.allclose(values[1], values[2]):
        raise RuntimeError("1-worker and 2-worker evaluations disagree")
    return {
        "default_weights_heldout": default,
        "random_weights_heldout": mean_se_dict(rand),
        "workers": {
            "points": num_points,
            "episodes_per_point": len(prob.episode_seeds),
            "seconds_1_worker": seconds[1],
            "seconds_2_workers": seconds[2],
            "speedup": seconds[1] / seconds[2],
            "load_average_1min": os.getloadavg()[0],
        },
    }


def markdown(report: dict) -> str:
    rows = [
        "| strategy | seeds | best@30 | best@60 | best@90 | held-out | "
        "update s/it | acquisition s/it | evaluation s/it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["strategies"]:

        def cell(d):
            return f"{d['mean']:.1f} ± {d['se']:.1f}" if d else "–"

        best = [cell(r["best_at"].get(str(n))) for n in AT]
        t = r["seconds_per_iteration"]
        tt = [f"{t[k]['mean']:.2f}" if t else "–" for k in SPLIT]
        rows.append(
            f"| {r['label']} | {r['finished']}/{r['seeds']} | "
            + " | ".join(best)
            + f" | {cell(r['heldout'])} | "
            + " | ".join(tt)
            + " |"
        )
    rows += [
        "",
        "| A - B (paired) | best@90 | A ahead | held-out | A ahead |",
        "|---|---|---|---|---|",
    ]
    for r in report["paired"]:
        cells = []
        for k in ("best_final", "heldout"):
            d = r[k]
            cells += [f"{d['mean']:+.1f} ± {d['se']:.1f} (n={d['n']})", f"{d['a_ahead']}/{d['n']}"]
        rows.append(f"| {r['a']} - {r['b']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bo-ncgp lunar-report",
        description=__doc__.split("\n")[0],
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "folders", type=Path, nargs="+", help="campaign folders (contain <strategy>/seed_*/)"
    )
    p.add_argument("--out", type=Path, default=None, help="default FOLDERS[0]/report.json")
    p.add_argument("--measure", action="store_true", help="reference scores and worker speed-up")
    p.add_argument("--points", type=int, default=8, help="points per worker-speed-up batch")
    p.add_argument("--random", type=int, default=20, help="random weight vectors scored")
    args = p.parse_args(argv)

    from bo_ncgp.campaigns.plotting import collect

    states = [s for group in collect(args.folders).values() for s in group]
    groups: dict[str, list[dict]] = {}
    for s in states:
        groups.setdefault(_label(s), []).append(s)
    report: dict = {
        "folders": [str(f) for f in args.folders],
        "strategies": [summarise_strategy(s) for s in groups.values()],
        "paired": paired(groups),
    }
    out = args.out or args.folders[0] / "report.json"
    if args.measure:
        report["measured"] = measure(args.points, args.random, states[0]["problem"])
    elif out.exists():  # keep the last measurement
        old = read_json(out)
        if "measured" in old:
            report["measured"] = old["measured"]
    write_json(out, report)
    print(markdown(report))
    if "measured" in report:
        m = report["measured"]
        w = m["workers"]
        print(
            f"\ndefault weights (held-out): {m['default_weights_heldout']:.1f}; random weights: "
            f"{m['random_weights_heldout']['mean']:.1f} ± {m['random_weights_heldout']['se']:.1f}"
            f"\n2 workers over 1: {w['speedup']:.2f}x "
            f"({w['seconds_1_worker']:.1f} s vs {w['seconds_2_workers']:.1f} s)"
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
