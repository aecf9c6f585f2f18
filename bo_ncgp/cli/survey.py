"""``bo-ncgp survey``: where a magnetometer survey measures next, spatial active learning with
HIP-GP on the indoor magnetometer data (Solin et al. 2018; Wu et al. 2022).

    bo-ncgp survey --seeds 10 --steps 80 --out results/survey

runs (or resumes) one campaign per strategy and seed under ``OUT/<strategy>/seed_<k>``
through the generic runner (:func:`bo_ncgp.campaigns.runner.run_seed`). The problem
(:class:`~bo_ncgp.problems.survey.MagnetometerSurvey`): a pool of candidate locations with
hidden field values and held-out test readings; the metric is the test RMSE of the field
map after every step. The strategies (:mod:`bo_ncgp.campaigns.strategies.survey`):

* ``hip-variance`` -- HIP-GP conditioned on every survey, the location of largest posterior
  variance next;
* ``random`` -- the same model, uniformly random locations;
* ``svgp-variance`` -- a Cholesky-whitened SVGP on the same grid, refitted after every
  survey, the location of largest posterior variance next.

The hyperparameters are learned once on the initial design (an exact GP's marginal
likelihood) and fixed afterwards. Afterwards every strategy found under ``OUT`` is summarised
into ``OUT/summary.json`` (RMSE and MAE at the first and last step, mean +- s.e.) and
``OUT/survey.png``, and every strategy is compared with ``random`` seed by seed: the paired
difference of the final RMSE and of the area under the RMSE curve (the mean RMSE over the
steps), mean +- s.e., in ``OUT/paired.json`` and as a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.cli import Command
from bo_ncgp.cli.argtypes import NONNEGATIVE_INT, POSITIVE_INT, int_at_least
from bo_ncgp.cli.common import add_verify_argument

__all__ = ["DEFAULTS", "HELP", "QUICK", "SURVEY", "add_arguments", "paired_against", "run"]

HELP = "magnetometer survey active learning with HIP-GP (where to measure next)"
#: the defaults of the sizes, and the ``--quick`` preset of those not given
DEFAULTS = {"initial": 20, "steps": 80, "pool": 800, "test": 400, "grid_size": 32}
QUICK = {"initial": 10, "steps": 3, "pool": 150, "test": 80, "grid_size": 12}
STRATEGIES = ("hip-variance", "random", "svgp-variance")


def _paths(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated robot path numbers in 1..9, got {text!r}"
        ) from None
    if not vals or min(vals) < 1 or max(vals) > 9:
        raise argparse.ArgumentTypeError(f"robot path numbers must lie in 1..9, got {text!r}")
    return vals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp survey``.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> a = command_parser("survey").parse_args(["--seeds", "3", "--strategy", "random"])
        >>> a.seeds, a.strategy, a.steps  # None: not given, DEFAULTS or QUICK apply
        (3, ['random'], None)
    """
    p = parser
    p.add_argument(
        "--strategy",
        action="append",
        choices=STRATEGIES,
        default=None,
        help="strategy to run; repeat for several (default: all of " + ", ".join(STRATEGIES) + ")",
    )
    p.add_argument(
        "--seeds", type=POSITIVE_INT, default=None, help="seeds from --first-seed (10; quick: 2)"
    )
    p.add_argument("--first-seed", type=NONNEGATIVE_INT, default=0, help="first seed (0)")
    sizes = (
        ("--initial", "initial", int_at_least(3), "initial surveyed locations, where the "
         "hyperparameters are learned"),
        ("--steps", "steps", POSITIVE_INT, "surveys chosen per seed"),
        ("--pool", "pool", POSITIVE_INT, "candidate locations"),
        ("--test", "test", POSITIVE_INT, "held-out test readings"),
        ("--grid-size", "grid_size", int_at_least(4), "grid points per axis"),
    )  # fmt: skip
    for flag, dest, kind, text in sizes:
        p.add_argument(
            flag,
            dest=dest,
            type=kind,
            default=None,
            help=f"{text} ({DEFAULTS[dest]}; quick: {QUICK[dest]})",
        )
    p.add_argument(
        "--paths", type=_paths, default=tuple(range(1, 10)), help="robot paths used (1,...,9)"
    )
    p.add_argument("--data-root", default=None, help="data root (default $BO_NCGP_DATA)")
    add_verify_argument(p)
    p.add_argument("--workers", type=POSITIVE_INT, default=1, help="seeds run in parallel (1)")
    p.add_argument("--threads", type=POSITIVE_INT, default=1, help="torch threads per worker (1)")
    p.add_argument("--out", type=Path, default=Path("results/survey"), help="(results/survey)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny preset of the sizes not given (2 seeds unless --seeds, 10 initial "
        "locations, 3 steps, a pool of 150, 80 test readings, a 12 x 12 grid)",
    )
    p.add_argument("--summary-only", action="store_true", help="only summarise OUT")
    p.add_argument("--no-plot", action="store_true", help="write summary.json only")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def paired_against(out: str | Path, baseline: str = "random") -> dict[str, Any]:
    """Every strategy under ``out`` against ``baseline`` on the seeds both ran: the per-seed
    difference (strategy - baseline) of the final RMSE and of the area under the RMSE curve
    (mean RMSE over the logged steps), mean +- s.e. and the seeds where the strategy is lower.

    Example:
        >>> import tempfile
        >>> paired_against(tempfile.mkdtemp())
        Traceback (most recent call last):
        ...
        FileNotFoundError: no state.json or archive found under ...
    """
    from bo_ncgp.campaigns.plotting import collect, metric_curve
    from bo_ncgp.campaigns.stats import mean_se

    groups = collect([Path(out)])

    def scores(states: list[dict]) -> dict[int, tuple[float, float]]:
        res = {}
        for st in states:
            _, rmse = metric_curve(st, "rmse")
            if st.get("finished") and rmse.size:
                res[int(st["seed"])] = (float(rmse[-1]), float(np.mean(rmse)))
        return res

    if baseline not in groups:
        raise FileNotFoundError(f"no {baseline!r} campaigns under {out}")
    base = scores(groups[baseline])
    table: dict[str, Any] = {}
    for name, states in sorted(groups.items()):
        mine = scores(states)
        seeds = sorted(set(mine) & set(base))
        entry: dict[str, Any] = {"seeds": seeds}
        for k, metric in enumerate(("final_rmse", "auc_rmse")):
            own = np.array([mine[s][k] for s in seeds])
            diff = own - np.array([base[s][k] for s in seeds])
            m, se, n = mean_se(own)
            dm, dse, _ = mean_se(diff)
            entry[metric] = {"mean": m, "se": se, "n": n}
            entry[f"{metric}_minus_{baseline}"] = {
                "mean": dm,
                "se": dse,
                "lower": int((diff < 0).sum()),
            }
        table[name] = entry
    return table


def _markdown(table: dict[str, Any], summary: dict[str, Any], baseline: str) -> str:
    rows = [
        f"| strategy | seeds | final RMSE | AUC RMSE | final - {baseline} | AUC - {baseline} "
        "| s/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in table.items():
        f, a = e["final_rmse"], e["auc_rmse"]
        df, da = e[f"final_rmse_minus_{baseline}"], e[f"auc_rmse_minus_{baseline}"]
        sec = summary.get(name, {}).get("step_seconds", {}).get("mean", float("nan"))
        n = len(e["seeds"])
        rows.append(
            f"| {name} | {n} | {f['mean']:.3f} +- {f['se']:.3f} | {a['mean']:.3f} +- "
            f"{a['se']:.3f} | {df['mean']:+.3f} +- {df['se']:.3f} ({df['lower']}/{n} lower) | "
            f"{da['mean']:+.3f} +- {da['se']:.3f} ({da['lower']}/{n} lower) | {sec:.3f} |"
        )
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the campaigns, then summarise and compare them with ``random``."""
    from bo_ncgp.campaigns.executors import make_executor
    from bo_ncgp.campaigns.runner import run_seed
    from bo_ncgp.campaigns.storage import write_json
    from bo_ncgp.campaigns.summary import summarise_campaigns
    from bo_ncgp.exceptions import StateError, StorageError
    from bo_ncgp.problems.survey import METRIC_LABELS, METRICS, MagnetometerSurvey

    for key, val in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, QUICK[key] if args.quick else val)
    if args.seeds is None:
        args.seeds = 2 if args.quick else 10
    strategies = args.strategy or list(STRATEGIES)
    problem_options = dict(
        num_pool=args.pool,
        num_test=args.test,
        paths=list(args.paths),
        root=args.data_root,
        verify=args.verify,
    )
    try:  # the data files and the sizes are checked once, before any seed starts
        MagnetometerSurvey.from_data(**problem_options)
    except (OSError, ValueError) as err:
        print(f"bo-ncgp survey: {err}", file=sys.stderr)
        return 2
    if args.initial + args.steps > args.pool:
        print(
            f"bo-ncgp survey: --initial {args.initial} + --steps {args.steps} exceed the pool of "
            f"{args.pool} locations",
            file=sys.stderr,
        )
        return 2
    failed: list[tuple[str, int]] = []
    if not args.summary_only:
        progress = not args.no_progress and args.workers <= 1
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            ex = stack.enter_context(make_executor(args.workers))
            futures = {
                ex.submit(
                    run_seed,
                    "survey",
                    problem_options,
                    name,
                    {"grid_size": args.grid_size},
                    s,
                    str(args.out / name),
                    budget=args.initial + args.steps,
                    batch_size=1,
                    num_initial=args.initial,
                    threads=args.threads,
                    progress=progress,
                ): (name, s)
                for s in seeds
                for name in strategies
            }
            for fut in as_completed(futures):
                name, seed = futures[fut]
                try:
                    res = fut.result()
                    print(
                        f"{name} seed {seed}: RMSE {res['final']['rmse']:.3f} "
                        f"({res['seconds']:.0f} s)",
                        flush=True,
                    )
                except (StateError, StorageError) as err:  # a refused folder: one line
                    failed.append((name, seed))
                    print(f"{name} seed {seed} FAILED: {err}", flush=True)
                except Exception as err:  # report, keep the other seeds running
                    failed.append((name, seed))
                    print(f"{name} seed {seed} FAILED: {err!r}", flush=True)
                    traceback.print_exc()
        print(f"{len(futures) - len(failed)} campaign(s) in {time.perf_counter() - t0:.0f} s")
    last = args.initial + args.steps
    summary = summarise_campaigns(
        args.out,
        METRICS,
        (args.initial, last),
        plot=not args.no_plot,
        plot_name="survey.png",
        labels=METRIC_LABELS,
        xlabel="locations surveyed",
    )
    try:
        table = paired_against(args.out)
    except FileNotFoundError as err:
        print(f"bo-ncgp survey: {err}; no paired comparison", file=sys.stderr)
    else:
        write_json(args.out / "paired.json", table)
        print(_markdown(table, summary, "random"))
    print(f"summary {args.out / 'summary.json'}, paired {args.out / 'paired.json'}")
    return 1 if failed else 0


#: ``bo-ncgp survey``
SURVEY = Command(HELP, add_arguments, run)
