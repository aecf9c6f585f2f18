"""Ax optimisation of Branin: Ax's default surrogate against bo_ncgp's DualSVGP.

Setting: Ax's ``Client`` minimises the Branin function on ``[-5, 10] x [0, 15]`` in
``--trials`` sequential trials: the center of the search space, ``--init - 1`` Sobol points,
then Modular BoTorch (Ax's default acquisition, ``qLogNEI``, and Ax's transforms). The two
arms differ only in the surrogate's ``ModelConfig``:

* ``ax-default``: ``ModelConfig()`` (Ax's ``SingleTaskGP`` with its defaults);
* ``dual-svgp``: ``ModelConfig(botorch_model_class=DualSVGPModel)`` (import
  :mod:`bo_ncgp.ax`; the adapter's defaults, Ax rebuilds and refits it at every trial).

Each seed runs both arms with the same Sobol seed, interleaved (A, B, A, B, ...). Reported:
the simple regret ``min_t f(x_t) - f*`` after the last trial (mean +- standard error over
seeds), the paired difference ``dual - default`` over the seeds both arms ran, and the mean
time of a model trial (fit + candidate generation). Results:
``benchmarks/results/ax_branin.json`` and a markdown table on stdout. ``--arms`` runs a
subset of the arms (e.g. the DualSVGP arm again after a change of bo_ncgp, which leaves
Ax's default arm as it was); ``--merge`` tabulates saved runs together, pairing the arms
by seed.

Usage::

    python benchmarks/ax_branin.py                 # 10 seeds x 20 trials
    python benchmarks/ax_branin.py --quick         # smoke test (2 seeds x 7 trials)
    python benchmarks/ax_branin.py --seeds 5 --first-seed 5 --out b.json   # a share of the seeds
    python benchmarks/ax_branin.py --arms dual-svgp --seeds 1 --first-seed 3 --out d3.json
    python benchmarks/ax_branin.py --merge a.json b.json                   # tabulated together
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import time
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "results"
BRANIN_MIN = 0.397887357729739
ARMS = ("ax-default", "dual-svgp")


def branin(x1: float, x2: float) -> float:
    """The Branin function (minimum 0.397887 at three points)."""
    b, c = 5.1 / (4 * math.pi**2), 5 / math.pi
    t = 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def run_arm(arm: str, seed: int, trials: int, init: int) -> dict:
    """One Ax optimisation; the best value after each trial and the time of each trial."""
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig
    from ax.generators.torch.botorch_modular.utils import ModelConfig

    from bo_ncgp.ax import generation_strategy
    from bo_ncgp.bo import DualSVGPModel

    config = (
        ModelConfig() if arm == "ax-default" else ModelConfig(botorch_model_class=DualSVGPModel)
    )
    client = Client()
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x1", parameter_type="float", bounds=(-5.0, 10.0)),
            RangeParameterConfig(name="x2", parameter_type="float", bounds=(0.0, 15.0)),
        ]
    )
    client.configure_optimization(objective="-branin")
    client.set_generation_strategy(
        generation_strategy(config, initialization_budget=init, seed=seed)
    )
    torch.manual_seed(seed)
    best, values, seconds = math.inf, [], []
    for _ in range(trials):
        t0 = time.perf_counter()
        ((index, params),) = client.get_next_trials(max_trials=1).items()
        seconds.append(time.perf_counter() - t0)
        y = branin(params["x1"], params["x2"])
        client.complete_trial(index, raw_data={"branin": y})
        best = min(best, y)
        values.append(best - BRANIN_MIN)
    return {"seed": seed, "regret": values, "seconds": seconds}


def _mean_se(xs: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(xs)
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
    return mean, se


def _by_seed(runs: list[dict]) -> dict[int, dict]:
    """Runs keyed by their seed."""
    return {r["seed"]: r for r in runs}


def summarise(runs: dict, init: int) -> dict:
    """Final regret and model-trial time per arm (mean, s.e.), the paired difference over the
    seeds both arms ran and on how many of them the DualSVGP ended worse."""
    out = {}
    for arm in ARMS:
        final = [r["regret"][-1] for r in runs[arm]]
        model_time = [statistics.fmean(r["seconds"][init:]) for r in runs[arm]]
        out[arm] = {"n": len(final)}
        if final:
            out[arm].update(regret=_mean_se(final), seconds=_mean_se(model_time))
    a, b = (_by_seed(runs[arm]) for arm in ARMS)
    diff = [b[k]["regret"][-1] - a[k]["regret"][-1] for k in sorted(a.keys() & b.keys())]
    out["difference"] = _mean_se(diff) if diff else (math.nan, math.nan)
    out["pairs"], out["dual_worse"] = len(diff), sum(d > 0 for d in diff)
    return out


def table(summary: dict, seeds: int, trials: int) -> str:
    """The markdown table of :func:`summarise`."""
    rows = [
        f"| surrogate | regret after {trials} trials (mean +- s.e., {seeds} seeds) "
        "| seconds per model trial |",
        "|---|---|---|",
    ]
    for arm in ARMS:
        if not summary[arm]["n"]:
            continue
        (m, s), (tm, ts) = summary[arm]["regret"], summary[arm]["seconds"]
        rows.append(f"| {arm} | {m:.3f} +- {s:.3f} | {tm:.2f} +- {ts:.2f} |")
    m, s = summary["difference"]
    rows.append(
        f"| paired difference dual - default | {m:+.3f} +- {s:.3f} (dual worse on "
        f"{summary['dual_worse']} of {summary['pairs']}) | |"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds (default: 10)")
    parser.add_argument("--trials", type=int, default=20, help="trials per run (default: 20)")
    parser.add_argument("--init", type=int, default=5, help="initial trials (default: 5)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default: 0)")
    parser.add_argument("--quick", action="store_true", help="2 seeds x 7 trials")
    parser.add_argument(
        "--arms", nargs="+", choices=ARMS, default=list(ARMS), help="arms to run (default: both)"
    )
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="tabulate the runs of these JSON results together"
    )
    parser.add_argument("--out", type=Path, default=OUT / "ax_branin.json", help="JSON result")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.trials = 2, 7
    torch.set_num_threads(1)
    logging.disable(logging.INFO)  # Ax logs every trial
    from bo_ncgp.campaigns.storage import write_json

    runs: dict[str, list] = {arm: [] for arm in ARMS}
    if args.merge:  # a later file's run of an arm and seed replaces an earlier file's
        import json

        merged: dict[str, dict[int, dict]] = {arm: {} for arm in ARMS}
        for path in args.merge:
            saved = json.loads(path.read_text())
            first = saved["setting"].get("first_seed", 0)
            for arm in ARMS:
                for i, run in enumerate(saved["runs"].get(arm, [])):
                    merged[arm][run.get("seed", first + i)] = {"seed": first + i, **run}
            args.trials, args.init = saved["setting"]["trials"], saved["setting"]["init"]
        runs = {arm: [merged[arm][k] for k in sorted(merged[arm])] for arm in ARMS}
        args.seeds = len(set().union(*(merged[arm] for arm in ARMS)))
    for seed in range(args.first_seed, args.first_seed + (0 if args.merge else args.seeds)):
        for arm in args.arms:
            runs[arm].append(run_arm(arm, seed, args.trials, args.init))
    summary = summarise(runs, args.init)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(
        args.out,
        {
            "setting": {
                "seeds": args.seeds,
                "first_seed": min((r["seed"] for v in runs.values() for r in v), default=0),
                "trials": args.trials,
                "init": args.init,
            },
            "runs": runs,
            "summary": {k: list(v) if isinstance(v, tuple) else v for k, v in summary.items()},
        },
    )
    print(table(summary, args.seeds, args.trials))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
