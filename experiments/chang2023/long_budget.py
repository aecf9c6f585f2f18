"""Long-budget report (``bo-ncgp bench --suite long``): regret at several budgets and the time
per iteration as the number of evaluations grows, for runs of several bench folders, plus a
timing of one iteration of each strategy at a given number of evaluations.

The report reads the runs ``DIR/<problem>/<strategy>/seed_<k>/state.json`` of every folder
given (a strategy's runs may sit in different folders, e.g. a baseline run to a smaller
budget) and gives, per strategy: the simple regret at every budget (mean +- s.e. over the
seeds that reached it), the paired lead over the baseline there (baseline regret - strategy
regret over the seeds both reached; positive: the strategy is ahead) and the seconds per
iteration split into ``fit`` (model update after a batch plus any refit inside the
acquisition step), ``acquisition`` and ``evaluation``, by the number of evaluations the
iteration started from (the bench's split, :func:`bo_ncgp.campaigns.bench_summary.timings`,
per iteration instead of the run's mean).

The report also gives, per strategy and by the same bins, how its batches spread: the share of
its proposals with a near-duplicate in their own batch (another point closer than
:data:`DUPLICATE` in the unit cube) and the share on the box's boundary (a coordinate within
:data:`DUPLICATE` of a bound), over every seed (:func:`batch_spread`).

``--step RUN`` times one iteration at ``n`` evaluations on a fixed design (the first ``n`` points
of a finished run): every strategy observes the first ``n - q`` points as one batch (not
timed), then the last ``q`` (timed: ``fit``), then proposes a batch of ``q`` (timed:
``acquisition``, its ``fit_seconds`` counted as ``fit``); the strategies alternate, in the
same process, one torch thread.

    bo-ncgp long-budget experiments/chang2023/results/bench_long
    bo-ncgp long-budget --step RUN_DIR --n 1000 --strategies botorch,dual
    bo-ncgp long-budget --probe RUN_DIR --n 1000 --strategies dual-fantasy

``--probe RUN`` builds one batch of the first strategy on the same design and reports what its
model says at the batch's points (:func:`probe`).

``--noise RUN`` (repeatable) compares, at the evaluations of ``--budgets``, the noise variance
and outputscale the run's streaming model recorded with those of the same strategy's model
fitted on the run's first ``n`` points at once, both in the problem's units
(:func:`noise_record`): a campaign standardises by its first values, a fit at once by all
``n``, so the recorded values compare only after that conversion.

    bo-ncgp long-budget --noise RUN_DIR --noise RUN_DIR2 --budgets 139,514,1000

Prints a Markdown table and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.campaigns.bench_summary import metric_curve, paired_lead
from bo_ncgp.campaigns.stats import mean_se_dict
from bo_ncgp.campaigns.storage import read_json, write_json

PROBLEM = "hartmann6-noisy"
SPLIT = ("fit", "acquisition", "evaluation", "iteration")
#: distance in the unit cube below which two points of a batch count as one point repeated
DUPLICATE = 1e-3


def spread(U: np.ndarray) -> dict[str, int]:
    """``{duplicate, boundary, points}`` of one batch ``U`` in the unit cube: how many of its
    points have another point of the batch within :data:`DUPLICATE` and how many lie within it
    of the cube's boundary.

    Example:
        >>> spread(np.array([[0.2, 0.3], [0.2, 0.3], [1.0, 0.4]]))
        {'duplicate': 2, 'boundary': 1, 'points': 3}
    """
    from bo_ncgp.campaigns.strategies.blackbox import nearest_distances

    return {
        "duplicate": int((nearest_distances(U) < DUPLICATE).sum()),
        "boundary": int(((U < DUPLICATE) | (U > 1 - DUPLICATE)).any(1).sum()),
        "points": len(U),
    }


def batch_spread(state: dict, lo: np.ndarray, hi: np.ndarray) -> list[tuple[int, dict[str, int]]]:
    """``(evaluations before the batch, spread)`` of every batch of a campaign state after the
    initial design (:func:`spread`, the points scaled from the box ``[lo, hi]`` to the unit
    cube).

    Example:
        >>> st = {"evaluations": [{"point": p} for p in
        ...       ([0.5, 0.5], [0.2, 0.3], [0.2, 0.3], [1.0, 0.4], [0.6, 0.6])],
        ...       "batches": [[0], [1, 2, 3], [4]]}
        >>> for n, r in batch_spread(st, np.zeros(2), np.ones(2)):
        ...     print(n, r)
        1 {'duplicate': 2, 'boundary': 1, 'points': 3}
        4 {'duplicate': 0, 'boundary': 0, 'points': 1}
    """
    X = np.array([ev["point"] for ev in state["evaluations"]], dtype=float)
    if not len(X):
        return []
    U = (X - lo) / (hi - lo)
    return [(int(b[0]), spread(U[b])) for b in state["batches"][1:]]


def iteration_seconds(state: dict) -> list[tuple[int, dict[str, float]]]:
    """``(evaluations before the iteration, {fit, acquisition, evaluation, iteration})`` of
    every acquisition step of a campaign state (the initial design excluded).

    Example:
        >>> its = [{"num_evaluations": 4, "acquisition_seconds": 0.0, "update_seconds": 1.0,
        ...         "evaluation_seconds": 0.5, "metrics": {}},
        ...        {"num_evaluations": 6, "acquisition_seconds": 2.0, "update_seconds": 0.5,
        ...         "evaluation_seconds": 0.25, "metrics": {"fit_seconds": 1.5}}]
        >>> iteration_seconds({"iterations": its})
        [(4, {'fit': 2.0, 'acquisition': 0.5, 'evaluation': 0.25, 'iteration': 2.75})]
    """
    out = []
    its = state["iterations"]
    for before, it in itertools.pairwise(its):
        inner = float(it.get("metrics", {}).get("fit_seconds", 0.0))
        fit = float(it["update_seconds"]) + inner
        acq = float(it["acquisition_seconds"]) - inner
        ev = float(it["evaluation_seconds"])
        row = {"fit": fit, "acquisition": acq, "evaluation": ev, "iteration": fit + acq + ev}
        out.append((int(before["num_evaluations"]), row))
    return out


def _runs(folders: list[Path], problem: str) -> dict[str, dict[int, dict]]:
    """``{strategy: {seed: state}}`` over the folders (the run with more evaluations wins)."""
    runs: dict[str, dict[int, dict]] = {}
    for folder in folders:
        for path in sorted((folder / problem).glob("*/seed_*/state.json")):
            state = read_json(path)
            strategy, seed = path.parent.parent.name, int(path.parent.name.split("_")[1])
            old = runs.setdefault(strategy, {}).get(seed)
            if old is None or len(state["evaluations"]) > len(old["evaluations"]):
                runs[strategy][seed] = state
    return runs


def report(
    folders: list[Path],
    baseline: str = "botorch",
    budgets: tuple[int, ...] = (114, 139, 214, 514, 1000),
    bins: tuple[int, ...] = (0, 100, 200, 400, 700, 900),
    problem: str = PROBLEM,
) -> dict[str, Any]:
    """Regret at ``budgets``, paired leads over ``baseline`` and seconds per iteration by the
    evaluations it started from (``bins``: left edges) of every strategy (module docstring)."""
    from bo_ncgp.problems.registry import make_problem

    spec = make_problem(problem)
    optimum, (box_lo, box_hi) = spec.optimal_value, np.asarray(spec.bounds, dtype=float)
    runs = _runs(folders, problem)
    curves = {s: {k: metric_curve(st, optimum) for k, st in r.items()} for s, r in runs.items()}
    out: dict[str, Any] = {"problem": problem, "baseline": baseline, "strategies": {}}
    edges = [*bins, math.inf]
    for strategy, per_seed in sorted(curves.items()):
        at, paired = {}, {}
        for b in budgets:
            vals = {k: float(c[b - 1]) for k, c in per_seed.items() if len(c) >= b}
            if not vals:
                continue
            at[b] = mean_se_dict(list(vals.values()))
            base = {k: float(c[b - 1]) for k, c in curves.get(baseline, {}).items() if len(c) >= b}
            if base and strategy != baseline and set(base) & set(vals):
                paired[b] = paired_lead(vals, base)
        rows = [r for st in runs[strategy].values() for r in iteration_seconds(st)]
        by_bin = {}
        for lo, hi in itertools.pairwise(edges):
            sel = [r for n, r in rows if lo <= n < hi]
            if sel:
                by_bin[lo] = {k: mean_se_dict([r[k] for r in sel]) for k in SPLIT}
                by_bin[lo]["steps"] = len(sel)
        batches = [r for st in runs[strategy].values() for r in batch_spread(st, box_lo, box_hi)]
        spread_by_bin = {}
        for lo_n, hi_n in itertools.pairwise(edges):
            sel = [r for n, r in batches if lo_n <= n < hi_n]
            if sel:
                total = sum(r["points"] for r in sel)
                spread_by_bin[lo_n] = {
                    "duplicate_share": sum(r["duplicate"] for r in sel) / total,
                    "boundary_share": sum(r["boundary"] for r in sel) / total,
                    "points": total,
                }
        out["strategies"][strategy] = {
            "seeds": sorted(per_seed),
            "evaluations": {k: len(c) for k, c in per_seed.items()},
            "at": at,
            "paired": paired,
            "seconds_by_evaluations": by_bin,
            "spread_by_evaluations": spread_by_bin,
        }
    return out


def _pm(d: dict[str, float], digits: int = 3) -> str:
    if not math.isfinite(d["mean"]):
        return "-"
    se = d["se"] if math.isfinite(d["se"]) else float("nan")
    return f"{d['mean']:.{digits}g} ± {se:.2g} (n={d['n']})"


def report_markdown(rep: dict[str, Any]) -> str:
    """Three Markdown tables of :func:`report`: regret (paired lead) by budget; seconds per
    iteration (fit / acquisition / evaluation) by evaluations; the batches' spread by
    evaluations."""
    lines = [f"Regret on {rep['problem']} (lead over {rep['baseline']}, paired):", ""]
    budgets = sorted({int(b) for s in rep["strategies"].values() for b in s["at"]})
    lines += ["| strategy | " + " | ".join(f"@{b}" for b in budgets) + " |"]
    lines += ["|---" * (len(budgets) + 1) + "|"]
    for name, s in rep["strategies"].items():
        cells = []
        for b in budgets:
            a = s["at"].get(b) or s["at"].get(str(b))
            p = s["paired"].get(b) or s["paired"].get(str(b))
            cell = _pm(a) if a else "-"
            if p:
                cell += f" [{_pm(p)}]"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    base = rep["strategies"].get(rep["baseline"], {}).get("seconds_by_evaluations", {})
    lines += ["", "Seconds per iteration (fit / acquisition / evaluation; steps):", ""]
    lines += [
        "| strategy | from n | fit | acquisition | evaluation | iteration | steps | "
        f"{rep['baseline']}'s iteration / this one |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for name, s in rep["strategies"].items():
        for lo, t in s["seconds_by_evaluations"].items():
            cells = [f"{t[k]['mean']:.2f}" for k in SPLIT]
            b = base.get(lo)
            ratio = f"{b['iteration']['mean'] / t['iteration']['mean']:.1f}" if b else "-"
            lines.append(f"| {name} | {lo} | " + " | ".join(cells) + f" | {t['steps']} | {ratio} |")
    lines += ["", "Batch spread (share of the proposals; points):", ""]
    lines += ["| strategy | from n | near-duplicate in its batch | on the boundary | points |"]
    lines += ["|---|---|---|---|---|"]
    for name, s in rep["strategies"].items():
        for lo, t in s.get("spread_by_evaluations", {}).items():
            lines.append(
                f"| {name} | {lo} | {t['duplicate_share']:.3f} | {t['boundary_share']:.3f} "
                f"| {t['points']} |"
            )
    return "\n".join(lines)


def _design(run: Path, n: int) -> tuple[np.ndarray, list, Any]:
    """The first ``n`` points and evaluations of the finished run ``run``, and an empty
    history (what :func:`step` and :func:`probe` give the strategies)."""
    from bo_ncgp.campaigns.strategies.base import History
    from bo_ncgp.problems.base import Evaluation

    state = read_json(run / "state.json")
    if len(state["evaluations"]) < n:
        raise ValueError(f"{run} has {len(state['evaluations'])} evaluations, fewer than {n}")
    X = np.array([ev["point"] for ev in state["evaluations"][:n]], dtype=float)
    evs = [Evaluation(ev["value"]) for ev in state["evaluations"][:n]]
    return X, evs, History(np.zeros((0, X.shape[1])), np.zeros(0), np.zeros(0), None, [])


def step(
    run: Path,
    n: int,
    strategies: list[str],
    q: int = 25,
    repeats: int = 1,
    problem: str = PROBLEM,
    baseline: str = "botorch",
) -> dict[str, Any]:
    """Seconds of one iteration (``fit``, ``acquisition``) of every strategy at ``n``
    evaluations on the design of the finished run ``run`` (module docstring), and with
    ``baseline`` among them each strategy's ``speedup``: the baseline's iteration over the
    strategy's, paired by repeat."""
    import torch

    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.problems.registry import make_problem

    torch.set_num_threads(1)
    X, evs, empty = _design(run, n)
    rows: dict[str, list[dict[str, float]]] = {s: [] for s in strategies}
    for r in range(repeats):
        for name in strategies:  # alternated, so that load hits every strategy alike
            instance = make_problem(problem, seed=0)
            strat = build_strategy("continuous", name)
            strat.setup(instance, 0)
            strat.observe(X[: n - q], evs[: n - q], empty)
            t0 = time.perf_counter()
            strat.observe(X[n - q :], evs[n - q :], empty)
            update = time.perf_counter() - t0
            t0 = time.perf_counter()
            strat.ask(empty, q, np.random.default_rng(r))
            ask = time.perf_counter() - t0
            inner = float(getattr(strat, "fit_seconds", None) or 0.0)
            rows[name].append(
                {"fit": update + inner, "acquisition": ask - inner, "iteration": update + ask}
            )
    out = {
        "n": n,
        "q": q,
        "run": str(run),
        "load_average": os.getloadavg()[0],
        "strategies": {
            s: {k: mean_se_dict([x[k] for x in v]) for k in v[0]} for s, v in rows.items()
        },
    }
    if baseline in rows:  # the baseline's iteration over each strategy's, repeat by repeat
        for s, v in rows.items():
            pairs = zip(rows[baseline], v, strict=True)
            ratios = [b["iteration"] / x["iteration"] for b, x in pairs]
            out["strategies"][s]["speedup"] = mean_se_dict(ratios)
    return out


def probe(
    run: Path, n: int, strategy: str = "dual-fantasy", q: int = 25, problem: str = PROBLEM
) -> dict[str, Any]:
    """One batch of ``strategy`` on the design of the finished run ``run`` at ``n``
    evaluations, and what its model says there: the batch's spread (:func:`spread`),
    the incumbent it is given (the best observed standardised value) beside the best posterior
    mean at the observed points, and at the batch's points log EI against that incumbent on the
    model before the batch, the posterior variance ``v`` of the
    objective and the noise variance ``s2`` of an observation, with the share of ``v`` that one
    noisy observation at the same point removes (``v / (v + s2)``, the exact Gaussian update):
    where it is small, conditioning on a fantasy there leaves the acquisition nearly as it
    was. The model is the strategy's after observing the design (a refitted exact GP is
    fitted once more for it)."""
    import torch
    from botorch.acquisition import LogExpectedImprovement

    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.problems.registry import make_problem

    torch.set_num_threads(1)
    X, evs, empty = _design(run, n)
    instance = make_problem(problem, seed=0)
    strat = build_strategy("continuous", strategy)
    strat.setup(instance, 0)
    strat.observe(X, evs, empty)
    if not hasattr(strat, "surrogate"):
        raise ValueError(f"strategy {strategy!r} has no objective model to probe")
    torch.manual_seed(0)  # the sampled fantasies and BoTorch's raw samples: one batch per call
    batch = strat.ask(empty, q, np.random.default_rng(0))
    model = strat.surrogate.botorch_model()
    U = strat._unit(batch)
    with torch.no_grad():
        observed_mean = model.posterior(strat.U).mean
        log_ei = LogExpectedImprovement(model, best_f=float(strat.Y.max()))(U.unsqueeze(-2))
        post = model.posterior(U)
        v = post.variance.squeeze(-1)
        s2 = model.posterior(U, observation_noise=True).variance.squeeze(-1) - v
    removed = (v / (v + s2)).numpy()
    return {
        "run": str(run),
        "n": n,
        "q": q,
        "strategy": strategy,
        "spread": spread(U.numpy()),
        "incumbent_observed": float(strat.Y.max()),
        "best_posterior_mean": float(observed_mean.max()),
        "log_ei_at_batch": {"median": float(log_ei.median()), "max": float(log_ei.max())},
        "posterior_variance_median": float(v.median()),
        "noise_variance_median": float(s2.median()),
        "removed_by_one_observation": {
            "median": float(np.median(removed)),
            "min": float(removed.min()),
            "max": float(removed.max()),
        },
    }


def noise_record(run: Path, budgets: list[int], problem: str = PROBLEM) -> list[dict[str, float]]:
    """For the finished streaming run ``run`` and every ``n`` of ``budgets``: the noise variance
    and outputscale its model recorded after the update that reached ``n`` evaluations (the
    last one at or below ``n``) and those of the same strategy's model fitted on the run's
    first ``n`` points in one update, all multiplied by the square of the standard deviation
    the values were divided by (the problem's units; the run's ``value_scale``, or the
    first batch's spread for runs recorded before it was logged)."""
    import torch

    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.problems.registry import make_problem

    torch.set_num_threads(1)
    state = read_json(run / "state.json")
    name = state["strategy"]["name"]
    values = np.array([ev["value"] for ev in state["evaluations"]], dtype=float)
    first = values[state["batches"][0]]
    recorded = {
        it["num_evaluations"]: it["metrics"]
        for it in state["iterations"]
        if "noise" in it.get("metrics", {})
    }
    if not recorded:
        raise ValueError(f"{run} recorded no model fit (noise) in its iterations")
    rows = []
    for n in budgets:
        X, evs, empty = _design(run, n)
        at = max((k for k in recorded if k <= n), default=None)
        if at is None:
            raise ValueError(f"{run} recorded no model fit at or below {n} evaluations")
        metrics = recorded[at]
        scale = metrics.get("value_scale", float(first[np.isfinite(first)].std()))
        strat = build_strategy("continuous", name)
        strat.setup(make_problem(problem, seed=0), 0)
        strat.observe(X, evs, empty)
        model = strat.surrogate.model
        once = float(strat.y_std) ** 2
        with torch.no_grad():
            rows.append(
                {
                    "n": n,
                    "recorded_at": at,
                    "streamed_noise": metrics["noise"] * scale**2,
                    "streamed_outputscale": metrics["outputscale"] * scale**2,
                    "at_once_noise": float(model.likelihood.noise.reshape(-1)[0]) * once,
                    "at_once_outputscale": float(model.kernel.outputscale.reshape(-1)[0]) * once,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    from bo_ncgp.cli.common import HelpFormatter

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument(
        "folders", nargs="*", type=Path, help="bench folders of the report (not with --step)"
    )
    p.add_argument("--baseline", default="botorch", help="strategy the report's leads refer to")
    p.add_argument(
        "--step",
        type=Path,
        metavar="RUN",
        help="time one iteration of each strategy on this finished run folder (seed_<k>)",
    )
    p.add_argument(
        "--probe",
        type=Path,
        metavar="RUN",
        help="one batch of the first of --strategies on this finished run's design, with the "
        "spread of the batch and its model's variance and noise at the batch's points",
    )
    p.add_argument(
        "--noise",
        type=Path,
        action="append",
        metavar="RUN",
        help="a finished streaming run whose recorded noise is compared with a fit at once "
        "(repeatable; at the evaluations of --budgets)",
    )
    p.add_argument(
        "--budgets", default="139,514,1000", help="evaluation counts of --noise (comma-separated)"
    )
    p.add_argument("--n", type=int, default=1000, help="evaluations before the timed iteration")
    p.add_argument(
        "--strategies", default="botorch,dual,dual-fantasy", help="strategies --step times"
    )
    p.add_argument("--repeats", type=int, default=1, help="timed iterations per strategy")
    p.add_argument("--out", type=Path, help="JSON file to write")
    args = p.parse_args(argv)
    modes = (args.step is not None, args.probe is not None, bool(args.noise), bool(args.folders))
    if sum(modes) != 1:
        p.error(
            "give bench folders for the report, --step RUN, --probe RUN or --noise RUN "
            "(one of them)"
        )
    if args.noise:
        budgets = [int(b) for b in args.budgets.split(",")]
        rep = {str(run): noise_record(run, budgets) for run in args.noise}
        print("| run | n | noise: streamed / at once | outputscale: streamed / at once |")
        print("|---|---|---|---|")
        for run, rows in rep.items():
            for r in rows:
                print(
                    f"| {run} | {r['n']} | {r['streamed_noise']:.4f} / {r['at_once_noise']:.4f} "
                    f"| {r['streamed_outputscale']:.4f} / {r['at_once_outputscale']:.4f} |"
                )
    elif args.probe is not None:
        rep = probe(args.probe, args.n, args.strategies.split(",")[0])
        for key, value in rep.items():
            print(f"{key}: {value}")
    elif args.step is None:
        rep = report(list(args.folders), baseline=args.baseline)
        print(report_markdown(rep))
    else:
        rep = step(
            args.step,
            args.n,
            args.strategies.split(","),
            repeats=args.repeats,
            baseline=args.baseline,
        )
        print(f"n = {rep['n']}, q = {rep['q']}, load average {rep['load_average']:.1f}")
        print(f"| strategy | fit | acquisition | iteration | {args.baseline} / strategy |")
        print("|---|---|---|---|---|")
        for name, t in rep["strategies"].items():
            cells = " | ".join(_pm(t[k], 3) for k in ("fit", "acquisition", "iteration"))
            ratio = _pm(t["speedup"], 3) if "speedup" in t else "-"
            print(f"| {name} | {cells} | {ratio} |")
    if args.out:
        write_json(args.out, rep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
