"""``bo-ncgp hotspots``: the schistosomiasis hotspot active-learning campaign (Chang et al.
2023, Sec. 4.1, Fig. 4).

    bo-ncgp hotspots --country civ --strategy entropy --seeds 50 --workers 2 --out results/hotspots

runs (or resumes) one campaign per seed under ``OUT/<strategy>/seed_<k>`` through the generic
runner (:func:`bo_ncgp.campaigns.runner.run_seed`: checkpoint after every survey, resume by
replay). Seeds run in parallel: ``--workers N`` processes (or a dask cluster with
``--dask-scheduler``) each run whole seeds, one BLAS thread each by default. Afterwards the
states of *all* strategies found under ``OUT`` are summarised into ``OUT/summary.json``
(accuracy and MSE at the reported steps, mean +- s.e. over seeds; mean seconds per step) and
plotted into ``OUT/hotspots.png`` (both metrics against the number of surveyed villages, mean
+- s.e., like Fig. 4, and the seconds per step; also on all villages, surveyed ones included,
when the states log it). The summary also counts the *hotspots found*:
surveyed villages whose true prevalence exceeds the threshold (derived from the saved survey
order and the country file, whose hash is checked against the one stored in each campaign).
Each strategy's per-seed results are also written to ``OUT/<strategy>/archive/`` (see
`bo_ncgp.campaigns.archive`): small tables to commit, so that seeds run on another machine
are pooled with them and compared seed by seed after the ``state.json`` files are gone.

``--criterion`` and ``--gain`` offer the criteria and gains registered in
:mod:`bo_ncgp.bo.acquisition.pool` when the arguments are parsed (the library's, plus those of
any module imported before, such as an experiment's).

Bad arguments (non-positive counts, a threshold outside ``(0, 1)``, more villages than the
file has, a missing or malformed data file) are reported before any seed starts.

"Step" = number of surveyed villages the model has seen when the metrics are taken (the
initial 100 give step 100; the last acquisition gives step 200).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bo_ncgp.cli import Command
from bo_ncgp.cli.argtypes import NONNEGATIVE_INT, POSITIVE_INT, int_at_least
from bo_ncgp.cli.argtypes import checked as _checked
from bo_ncgp.cli.common import (
    DATA_ROOT_HELP,
    add_dask_arguments,
    add_verify_argument,
    dask_options,
)

__all__ = [
    "HELP",
    "HOTSPOTS",
    "QUICK",
    "add_arguments",
    "run",
    "strategy_options",
    "summarise_hotspots",
]

HELP = "hotspot active learning with fantasy entropy reduction (Chang et al. Fig. 4)"
#: the run settings of the full preset, used unless given
FULL = {"initial": 100, "steps": 100}
#: the ``--quick`` preset, each setting used unless given
QUICK = {
    "initial": 20,
    "steps": 4,
    "init_rounds": 2,
    "init_hyper_steps": 10,
    "hyper_steps": 2,
    "refit_candidates": 4,
    "refit_fantasies": 2,
    "refit_steps": 30,
    "refit_fantasy_steps": 2,
    "svgp_steps": 20,
}


_open_unit = _checked(
    float, "a number", lambda v: 0.0 < v < 1.0, "must lie in (0, 1)", "number in (0, 1)"
)
_positive_float = _checked(
    float,
    "a number",
    lambda v: math.isfinite(v) and v > 0,
    "must be a positive number",
    "positive number",
)

_nonneg_float = _checked(
    float,
    "a number",
    lambda v: math.isfinite(v) and v >= 0,
    "must be a non-negative number",
    "non-negative number",
)


def _damping(text: str) -> float:
    val = _positive_float(text)
    if val > 1.0:
        raise argparse.ArgumentTypeError(f"the damping rho must lie in (0, 1], got {val}")
    return val


def _steps_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated step numbers such as 150,199, got {text!r}"
        ) from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"steps must be positive integers, got {text!r}")
    return vals


_POS, _NONNEG = POSITIVE_INT, NONNEGATIVE_INT


def _bool_choice(true: str, false: str):
    def parse(text: str) -> bool:
        if text not in (true, false):
            raise argparse.ArgumentTypeError(f"expected {true} or {false}, got {text!r}")
        return text == true

    parse.__name__ = f"{true} or {false}"
    parse.names = {True: true, False: false}  # type: ignore[attr-defined]
    return parse


def _options():
    """Command-line options of the strategies: ``(flag, dest, [(config, field)], argparse
    keywords, help)``. Each reaches the config fields listed (of the strategy chosen) and
    defaults to those fields' defaults (``None`` in the parsed arguments: not given)."""
    from bo_ncgp.bo.acquisition import CRITERIA, GAINS
    from bo_ncgp.campaigns.strategies import hotspot_models as hm
    from bo_ncgp.campaigns.strategies import hotspots as hs

    dual, svgp, refit = hs.StreamingDualConfig, hs.RefittedSVGPConfig, hm.RefitGPConfig
    ent, rent = hs.EntropyConfig, hs.RefitEntropyConfig
    return {
        "model (all strategies)": [
            ("--mean", "mean", [(dual, "constant_mean"), (refit, "constant_mean")],
             dict(type=_bool_choice("constant", "zero"), metavar="{zero,constant}"),
             "prior mean of the logit prevalence (constant: a learned ConstantKernel)"),
            ("--outputscale-prior", "outputscale_prior",
             [(dual, "outputscale_prior"), (refit, "outputscale_prior"),
              (svgp, "outputscale_prior")],
             dict(type=_bool_choice("gamma", "none"), metavar="{gamma,none}"),
             "Gamma(2, 0.15) prior on the outputscale, or none (as in Maddox et al.'s script)"),
        ],
        "DualSVGP (entropy, random)": [
            ("--fantasies", "fantasies", [(ent, "num_fantasies")], dict(type=_POS),
             "QMC fantasies per candidate (entropy, svgp-entropy)"),
            ("--compute-dtype", "compute_dtype", [(ent, "compute_dtype")],
             dict(choices=("float32", "float64")), "dtype of the entropy sums"),
            ("--criterion", "criterion", [(ent, "criterion")], dict(choices=CRITERIA),
             "entropy, svgp-entropy: per-village uncertainty summed over the pool, a "
             "registered criterion (refit-entropy always uses exceedance)"),
            ("--gain", "gain", [(ent, "gain")], dict(choices=GAINS),
             "entropy, svgp-entropy: how each village's entropy change counts, a registered "
             "gain (reduction: the decrease of the summed entropy)"),
            ("--candidates", "candidates", [(ent, "num_candidates")], dict(type=_POS),
             "entropy, svgp-entropy: score by --criterion and --gain only this many remaining "
             "villages, those of largest exceedance-entropy reduction (None: every one)"),
            ("--mean-constant", "mean_constant", [(dual, "learn_mean_constant")],
             dict(type=_bool_choice("learned", "zero"), metavar="{zero,learned}"),
             "prior mean of the DualSVGP's logit prevalence: zero, or a constant learned with "
             "the hyperparameters"),
            ("--inner-steps", "inner_steps", [(dual, "num_inner_steps")], dict(type=_POS),
             "site updates per survey"),
            ("--rho", "rho", [(dual, "rho")], dict(type=_damping),
             "damping of the site updates"),
            ("--hyper-steps", "hyper_steps", [(dual, "num_hyper_steps")], dict(type=_NONNEG),
             "Adam steps per survey"),
            ("--lr", "lr", [(dual, "lr")], dict(type=_positive_float), "Adam lr per survey"),
            ("--init-rounds", "init_rounds", [(dual, "init_rounds")], dict(type=_POS),
             "rounds of the first fit"),
            ("--init-hyper-steps", "init_hyper_steps", [(dual, "init_hyper_steps")],
             dict(type=_NONNEG), "Adam steps per round of the first fit"),
            ("--init-lr", "init_lr", [(dual, "init_lr")], dict(type=_positive_float),
             "Adam lr of the first fit"),
            ("--hyper-objective", "hyper_objective", [(dual, "hyper_objective")],
             dict(choices=("elbo", "dual")),
             "hyperparameter objective: ELBO (Eq. 21, as Maddox et al.'s script) or Eq. 26"),
        ],
        "refit-entropy": [
            ("--refit-candidates", "refit_candidates", [(rent, "num_candidates")],
             dict(type=_POS), "candidates scored per step"),
            ("--refit-fantasies", "refit_fantasies", [(rent, "num_fantasies")],
             dict(type=_POS), "fantasies per candidate"),
            ("--refit-steps", "refit_steps", [(refit, "num_steps")], dict(type=_POS),
             "NGD + Adam steps per fit"),
            ("--refit-fantasy-steps", "refit_fantasy_steps", [(refit, "fantasy_steps")],
             dict(type=_NONNEG), "NGD steps per fantasy"),
        ],
        "svgp-entropy, svgp-random (Chang et al.'s Fig. 4 loop: refit after every survey; "
        "svgp-entropy adds dual-conditioning fantasies)": [
            ("--svgp-steps", "svgp_steps", [(svgp, "num_steps")], dict(type=_POS),
             "Adam steps per refit"),
            ("--svgp-lr", "svgp_lr", [(svgp, "lr")], dict(type=_positive_float),
             "Adam lr of the refits"),
            ("--svgp-beta", "svgp_beta", [(svgp, "beta")], dict(type=_positive_float),
             "KL weight (1: no tempering)"),
            ("--svgp-rel-tol", "svgp_rel_tol", [(svgp, "rel_tol")],
             dict(type=_nonneg_float),
             "stop a refit early by BoTorch's ExpMA rule (as Maddox et al.'s loop; 0: always "
             "--svgp-steps)"),
            ("--svgp-refit-every", "svgp_refit_every", [(svgp, "refit_every")],
             dict(type=_POS),
             "refit after every k-th survey, streaming DualSVGP updates in between (1: "
             "after every survey, as Maddox et al.'s loop)"),
        ],
    }  # fmt: skip


def _default_text(targets, kwargs: dict) -> str:
    """``default ...`` from the config dataclasses (per config where they differ)."""
    names = getattr(kwargs.get("type"), "names", None)
    vals: dict[str, list[str]] = {}
    for cls, name in targets:
        (f,) = [f for f in dataclasses.fields(cls) if f.name == name]
        shown = names[f.default] if names else repr(f.default)
        vals.setdefault(shown, []).append(cls.__name__)
    if len(vals) == 1:
        return f"default {next(iter(vals))}"
    return "default " + ", ".join(f"{v} ({'/'.join(c)})" for v, c in vals.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp hotspots``; strategy options default to their config
    dataclasses' defaults (module :mod:`bo_ncgp.campaigns.strategies.hotspots`).

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> p = command_parser("hotspots")
        >>> a = p.parse_args(["--strategy", "random", "--rho", "0.25"])
        >>> a.rho, a.fantasies  # None: not given, the strategy config's default applies
        (0.25, None)
    """
    from bo_ncgp.campaigns.strategies.registry import strategy_names

    p = parser
    p.add_argument("--country", default="civ", help="data file hotspots/<country>_data.csv")
    p.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    add_verify_argument(p)
    p.add_argument(
        "--threshold",
        type=_open_unit,
        default=None,
        help="hotspot prevalence threshold (default: the country's, see "
        "bo_ncgp.data.hotspots.HOTSPOT_THRESHOLDS)",
    )
    p.add_argument(
        "--strategy",
        default="entropy",
        choices=strategy_names("hotspots"),
        help="entropy: streaming DualSVGP, fantasy entropy reduction; svgp-entropy: SVGP "
        "refitted after every survey, dual-conditioning fantasies; refit-entropy: fantasies "
        "by refitting; random, svgp-random: random surveys with either model",
    )
    p.add_argument(
        "--seeds",
        type=_POS,
        default=None,
        help="number of seeds from --first-seed on (default: 50; --quick: 2)",
    )
    p.add_argument("--first-seed", type=_NONNEG, default=0, help="the first seed of the campaigns")
    p.add_argument(
        "--initial",
        type=int_at_least(2),
        default=None,
        help=f"initial surveyed villages (default: {FULL['initial']}; --quick: {QUICK['initial']})",
    )
    p.add_argument(
        "--steps",
        type=_POS,
        default=None,
        help=f"acquisition steps per seed (default: {FULL['steps']}; --quick: {QUICK['steps']})",
    )
    p.add_argument(
        "--extend",
        action="store_true",
        help="let resumed seeds take a --steps other than the saved one (--initial cannot "
        "change once the initial villages are chosen)",
    )
    p.add_argument("--workers", type=_POS, default=1, help="seeds run in parallel (processes)")
    add_dask_arguments(p, "seeds")
    p.add_argument("--threads", type=_POS, default=1, help="torch threads per worker")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("results/hotspots"),
        help="output folder: campaigns in OUT/<strategy>/seed_<k>, OUT/summary.json, "
        "OUT/hotspots.png",
    )
    for title, options in _options().items():
        g = p.add_argument_group(title)
        for flag, dest, targets, kwargs, help_ in options:
            help_ = f"{help_} ({_default_text(targets, kwargs)})"
            g.add_argument(flag, dest=dest, default=None, help=help_, **kwargs)
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny preset (2 seeds, 20 initial villages, 4 steps, short fits); options given "
        "explicitly override it",
    )
    p.add_argument("--summary-only", action="store_true", help="only summarise and plot OUT")
    p.add_argument(
        "--at",
        type=_steps_list,
        default=None,
        help="comma-separated steps (surveyed villages) to summarise (default 150,LAST-1,LAST)",
    )
    p.add_argument("--no-plot", action="store_true", help="write summary.json only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def strategy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options given on the command line (or by the quick preset) that reach the chosen
    strategy's configs, as ``{config field: value}`` for
    :func:`~bo_ncgp.campaigns.strategies.registry.build_strategy`.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> p = command_parser("hotspots")
        >>> strategy_options(p.parse_args(["--strategy", "svgp-random", "--svgp-steps", "9",
        ...                                "--fantasies", "4", "--mean", "constant"]))
        {'num_steps': 9}
    """
    from bo_ncgp.campaigns.strategies.registry import get_strategy_spec

    configs = get_strategy_spec("hotspots", args.strategy).configs
    out: dict[str, Any] = {}
    for options in _options().values():
        for _, dest, targets, _, _ in options:
            val = getattr(args, dest, None)
            if val is None:
                continue
            if dest == "svgp_rel_tol":
                val = val or None  # 0: no early stopping
            for cls, name in targets:
                if cls in configs:
                    out[name] = val
    return out


def summarise_hotspots(
    out: str | Path, at: tuple[int, ...] = (150, 199, 200), plot: bool = True, pool=None
) -> dict[str, Any]:
    """Summary of every strategy's campaigns under ``out`` into ``out/summary.json`` and (with
    ``plot``) ``out/hotspots.png``: the hotspot metrics at the steps ``at`` (and as curves),
    mean +- s.e. over seeds; with ``pool`` (the campaigns' country) also the hotspots found
    (campaigns whose stored data hash differs from the pool's are refused).

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> summarise_hotspots(out, plot=False)
        Traceback (most recent call last):
        ...
        FileNotFoundError: no state.json or archive found under ...
    """
    from bo_ncgp.campaigns.summary import summarise_campaigns
    from bo_ncgp.problems.hotspots import FULL_SET_METRICS, METRIC_LABELS, METRICS

    return summarise_campaigns(
        out,
        METRICS,
        at,
        optional_metrics=FULL_SET_METRICS,
        annotate=None if pool is None else pool.add_hotspots_found,
        plot=plot,
        plot_name="hotspots.png",
        plot_skip=("sensitivity",),
        labels=METRIC_LABELS,
        xlabel="steps (villages surveyed)",
    )


def run(
    args: argparse.Namespace,
    *,
    read_saved_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> int:
    """Run (or resume) the seeds in parallel, then summarise and plot ``OUT``.

    ``read_saved_config`` (picklable) reads the strategy configurations of resumed campaigns,
    see :func:`bo_ncgp.campaigns.runner.run_seed`.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> p = command_parser("hotspots")
        >>> run(p.parse_args(["--quick", "--data-root", "/nonexistent"]))  # doctest: +ELLIPSIS
        2
    """
    from concurrent.futures import as_completed

    from bo_ncgp.campaigns.executors import make_executor
    from bo_ncgp.campaigns.runner import run_seed
    from bo_ncgp.exceptions import StateError, StorageError
    from bo_ncgp.problems.hotspots import FULL_SET_METRICS, HotspotPool

    for key, val in ({**FULL, **QUICK} if args.quick else FULL).items():
        if getattr(args, key) is None:  # an option given explicitly wins over the preset
            setattr(args, key, val)
    if args.seeds is None:
        args.seeds = 2 if args.quick else 50
    try:  # the data file and the sizes are checked once, before any seed starts
        pool = HotspotPool.from_country(
            args.country, seed=0, root=args.data_root, threshold=args.threshold, verify=args.verify
        )
    except (OSError, ValueError) as err:
        print(f"bo-ncgp hotspots: {err}", file=sys.stderr)
        return 2
    if args.initial + args.steps > len(pool.theta):
        print(
            f"bo-ncgp hotspots: --initial {args.initial} + --steps {args.steps} villages exceed "
            f"the {len(pool.theta)} villages of {pool.config()['country']}",
            file=sys.stderr,
        )
        return 2
    failed: list[int] = []
    if not args.summary_only:
        problem_options = dict(country=args.country, root=args.data_root, threshold=args.threshold)
        problem_options["verify"] = args.verify  # the seeds read the file again
        options = strategy_options(args)
        progress = not args.no_progress and args.workers <= 1 and not args.dask_scheduler
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            try:
                ex = stack.enter_context(
                    make_executor(args.workers, args.dask_scheduler, **dask_options(args))
                )
            except (OSError, ValueError) as err:  # bad TLS settings, no scheduler, no worker
                print(f"bo-ncgp hotspots: {err}", file=sys.stderr)
                return 2
            futures = {
                ex.submit(
                    run_seed,
                    "hotspots",
                    problem_options,
                    args.strategy,
                    options,
                    s,
                    str(args.out / args.strategy),
                    budget=args.initial + args.steps,
                    batch_size=1,
                    num_initial=args.initial,
                    threads=args.threads,
                    progress=progress,
                    read_saved_config=read_saved_config,
                    extend=args.extend,
                ): s
                for s in seeds
            }
            for fut in as_completed(futures):
                seed = futures[fut]
                try:
                    res = fut.result()
                    fin = res["final"]
                    print(
                        f"{args.strategy} seed {seed}: accuracy {fin['accuracy']:.3f}, "
                        f"MSE {fin['mse']:.4f} ({res['seconds']:.0f} s)",
                        flush=True,
                    )
                except (StateError, StorageError) as err:  # a refused folder: one line
                    failed.append(seed)
                    print(f"{args.strategy} seed {seed} FAILED: {err}", flush=True)
                except Exception as err:  # report, keep the other seeds running
                    failed.append(seed)
                    print(f"{args.strategy} seed {seed} FAILED: {err!r}", flush=True)
                    traceback.print_exc()
        print(f"{len(seeds) - len(failed)} seed(s) in {time.perf_counter() - t0:.0f} s")
    last = args.initial + args.steps
    at = args.at or tuple(sorted({150, last - 1, last}))
    summary = summarise_hotspots(args.out, at=at, plot=not args.no_plot, pool=pool)
    for name, entry in summary.items():
        parts = [
            f"{m}@{s} = {v['mean']:.4g} +- {v['se']:.2g} (n={v['n']})"
            for m in ("accuracy", "mse", *FULL_SET_METRICS, "hotspots_found")
            for s, v in entry.get(m, {}).items()
            if v["n"]
        ]
        sec = entry["step_seconds"]
        print(f"{name}: " + ", ".join(parts) + f"; {sec['mean']:.2f} s/step")
    print(
        f"summary {args.out / 'summary.json'}"
        + ("" if args.no_plot else f", plot {args.out / 'hotspots.png'}")
    )
    return 1 if failed else 0


#: ``bo-ncgp hotspots``
HOTSPOTS = Command(HELP, add_arguments, run)
