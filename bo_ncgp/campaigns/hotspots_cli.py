"""``bo-ncgp hotspots``: the schistosomiasis hotspot active-learning campaign (Chang et al.
2023, Sec. 4.1, Fig. 4).

    bo-ncgp hotspots --country civ --strategy entropy --seeds 50 --workers 2 --out results/hotspots

runs (or resumes) one campaign per seed under ``OUT/<strategy>/seed_<k>`` through the generic
runner (:func:`bo_ncgp.campaigns.cli.run_seeds`: checkpoint after every survey, resume by
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
:mod:`bo_ncgp.campaigns.archive`): small tables to commit, so that seeds run on another machine
are pooled with them and compared seed by seed after the ``state.json`` files are gone.

Bad arguments (non-positive counts, a threshold outside ``(0, 1)``, more villages than the
file has, a missing or malformed data file) are reported before any seed starts.

"Step" = number of surveyed villages the model has seen when the metrics are taken (the
initial 100 give step 100; the last acquisition gives step 200).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.campaigns.archive import write_archive
from bo_ncgp.campaigns.executors import make_executor
from bo_ncgp.campaigns.plotting import collect, metric_at, metric_curve
from bo_ncgp.cli import command

__all__ = [
    "HOTSPOT_STRATEGIES",
    "add_hotspots_found",
    "make_strategy",
    "run_hotspot_seed",
    "summarise_hotspots",
]

HOTSPOT_STRATEGIES = ("entropy", "random", "refit-entropy", "svgp-entropy", "svgp-random")
#: scores over every village, surveyed ones included (Andrade-Pacheco et al. 2020); summarised
#: and plotted when the campaign states contain them
FULL_SET_METRICS = ("accuracy_all", "mse_all")
_QUICK = {
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


def add_acquisition_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--criterion`` and ``--clamp-per-village`` of ``entropy`` and ``svgp-entropy``
    (shared by ``bo-ncgp hotspots`` and ``experiments/hotspots_timing.py``)."""
    from bo_ncgp.bo.acquisition import CRITERIA

    parser.add_argument(
        "--criterion",
        default="exceedance",
        choices=CRITERIA,
        help="entropy, svgp-entropy: pool uncertainty (spiked = Maddox et al.'s script's "
        "criterion; refit-entropy always uses exceedance)",
    )
    parser.add_argument(
        "--clamp-per-village",
        action="store_true",
        help="entropy, svgp-entropy: count only per-village entropy decreases (as Maddox et "
        "al.'s script; with --criterion spiked: their acquisition)",
    )


def make_strategy(cfg: dict[str, Any]):
    """The strategy named ``cfg["strategy"]`` with the settings of ``cfg`` (parsed CLI).

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> _args(parser)  # the options of ``bo-ncgp hotspots``
        >>> cfg = vars(parser.parse_args(["--strategy", "random", "--rho", "0.25"]))
        >>> strat = make_strategy(cfg)
        >>> type(strat).__name__, strat.rho, strat.config()["hyper_objective"]
        ('RandomPoolStrategy', 0.25, 'elbo')
        >>> make_strategy({**cfg, "strategy": "refit-entropy"}).config()["num_candidates"]
        16
    """
    from bo_ncgp.campaigns.hotspot_strategies import EntropyStrategy, RandomPoolStrategy

    dual = dict(
        num_inner_steps=cfg["inner_steps"],
        num_hyper_steps=cfg["hyper_steps"],
        lr=cfg["lr"],
        init_rounds=cfg["init_rounds"],
        init_hyper_steps=cfg["init_hyper_steps"],
        init_lr=cfg["init_lr"],
        hyper_objective=cfg["hyper_objective"],
        rho=cfg["rho"],
    )
    kernel = dict(
        constant_mean=cfg.get("mean", "zero") == "constant",
        outputscale_prior=cfg.get("outputscale_prior") != "none",  # default: gamma
    )
    dual.update(kernel)
    name = cfg["strategy"]
    if name == "entropy":
        return EntropyStrategy(
            num_fantasies=cfg["fantasies"],
            compute_dtype=cfg["compute_dtype"],
            criterion=cfg.get("criterion", "exceedance"),
            clamp=cfg.get("clamp_per_village", False),
            **dual,
        )
    if name == "random":
        return RandomPoolStrategy(**dual)
    if name == "refit-entropy":
        from bo_ncgp.campaigns.hotspot_refit import RefitEntropyStrategy

        return RefitEntropyStrategy(
            num_candidates=cfg["refit_candidates"],
            num_fantasies=cfg["refit_fantasies"],
            num_steps=cfg["refit_steps"],
            fantasy_steps=cfg["refit_fantasy_steps"],
            **kernel,
        )
    if name in ("svgp-entropy", "svgp-random"):
        from bo_ncgp.campaigns.hotspot_svgp import SVGPEntropyStrategy, SVGPRandomStrategy

        refit = dict(
            num_steps=cfg.get("svgp_steps", 1000),
            lr=cfg.get("svgp_lr", 0.01),
            beta=cfg.get("svgp_beta", 1.0),
            rel_tol=cfg.get("svgp_rel_tol", 1e-5) or None,  # 0: no early stopping
            outputscale_prior=cfg.get("outputscale_prior") == "gamma",  # default: none
        )
        if name == "svgp-random":
            return SVGPRandomStrategy(**refit)
        return SVGPEntropyStrategy(
            num_fantasies=cfg["fantasies"],
            compute_dtype=cfg["compute_dtype"],
            criterion=cfg.get("criterion", "exceedance"),
            clamp=cfg.get("clamp_per_village", False),
            **refit,
        )
    raise ValueError(f"unknown hotspot strategy {name!r} (choose from {HOTSPOT_STRATEGIES})")


def run_hotspot_seed(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    """Run (or resume) the campaign of one seed; picklable entry point of the workers.

    Example:
        >>> import tempfile, torch
        >>> from bo_ncgp.data.hotspots import FEATURES
        >>> root = Path(tempfile.mkdtemp())  # data root with a synthetic 30-village country
        >>> rows = [",".join((*FEATURES, "disease", "theta"))]
        >>> rows += [f"{i % 5},{i // 5},1,2,3,4,5,6,SM,{i / 100}" for i in range(30)]
        >>> (root / "hotspots").mkdir()
        >>> _ = (root / "hotspots" / "xyz_data.csv").write_text("\\n".join(rows))
        >>> parser = argparse.ArgumentParser()
        >>> _args(parser)
        >>> cfg = vars(parser.parse_args(f"--country xyz --threshold 0.1 --data-root {root} "
        ...   f"--out {root}/out --strategy random --initial 8 --steps 2 --init-rounds 1 "
        ...   f"--init-hyper-steps 0 --hyper-steps 0 --threads {torch.get_num_threads()}".split()))
        >>> res = run_hotspot_seed({**cfg, "progress": False}, seed=3)  # 8 + 2 villages
        >>> res["seed"], res["final"]["num_remaining"], (root / "out/random/seed_3").is_dir()
        (3, 20.0, True)
    """
    import torch

    from bo_ncgp.campaigns.cli import run_seeds
    from bo_ncgp.problems.hotspots import HotspotPool

    torch.set_num_threads(int(cfg["threads"]))
    problem = HotspotPool.from_country(
        cfg["country"], seed=seed, root=cfg["data_root"], threshold=cfg["threshold"]
    )
    t0 = time.perf_counter()
    (state,) = run_seeds(
        lambda: problem,
        lambda: make_strategy(cfg),
        [seed],
        Path(cfg["out"]) / cfg["strategy"],
        budget=cfg["initial"] + cfg["steps"],
        batch_size=1,
        num_initial=cfg["initial"],
        progress=cfg["progress"],
    )
    last = state["iterations"][-1]["metrics"]
    return {"seed": seed, "seconds": time.perf_counter() - t0, "final": last}


# ------------------------------------------------------------------------- summary
def _at_step(states: list[dict], metric: str, step: int) -> np.ndarray:
    """The metric after ``step`` evaluations of every campaign that logged it there."""
    vals = np.array([metric_at(st, metric, step) for st in states], dtype=float)
    return vals[~np.isnan(vals)]


def _mean_se(v: np.ndarray) -> dict[str, float]:
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"mean": float("nan"), "se": float("nan"), "n": 0}
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")
    return {"mean": float(v.mean()), "se": se, "n": int(v.size)}


def _curve(states: list[dict], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Steps, mean and s.e. over seeds of ``metric`` on the steps all seeds reached, and the
    number of seeds (0 if no seed logged the metric). Timings (``*_seconds``) start after
    the initial fit, which is not an acquisition step."""
    first = 1 if metric.endswith("_seconds") else 0
    curves = [(x[first:], y[first:]) for x, y in (metric_curve(s, metric) for s in states)]
    curves = [c for c in curves if len(c[0])]
    if not curves:
        empty = np.zeros(0)
        return empty, empty, empty, 0
    n = min(len(c[0]) for c in curves)
    Y = np.stack([c[1][:n] for c in curves])
    se = Y.std(0, ddof=1) / math.sqrt(len(Y)) if len(Y) > 1 else np.full(n, np.nan)
    return curves[0][0][:n], Y.mean(0), se, len(Y)


def _step_seconds(st: dict, key: str) -> float:
    """Mean of ``key`` over the acquisition steps of one campaign (initial fit excluded)."""
    vals = [it["metrics"][key] for it in st["iterations"][1:] if key in it.get("metrics", {})]
    return float(np.mean(vals)) if vals else float("nan")


def add_hotspots_found(state: dict, theta: np.ndarray, threshold: float) -> None:
    """Add ``hotspots_found`` (true hotspots among the surveyed villages so far) to the logged
    metrics of every iteration of ``state`` (in memory; the file is not changed).

    Args:
        state: a campaign state (``state.json``) of a :class:`HotspotPool` campaign.
        theta: ``(P,)`` true prevalences of the pool the campaign ran on.
        threshold: hotspot threshold (``theta > threshold``).

    Example:
        >>> st = {"evaluations": [{"point": 0}, {"point": 2}],
        ...       "iterations": [{"num_evaluations": 1, "metrics": {}},
        ...                      {"num_evaluations": 2, "metrics": {}}]}
        >>> add_hotspots_found(st, np.array([0.5, 0.0, 0.3]), 0.1)
        >>> [it["metrics"]["hotspots_found"] for it in st["iterations"]]
        [1.0, 2.0]
    """
    points = np.array([int(e["point"]) for e in state["evaluations"]], dtype=int)
    if points.size and (points.min() < 0 or points.max() >= len(theta)):
        raise ValueError(
            f"add_hotspots_found: village indices outside 0..{len(theta) - 1} (wrong country?)"
        )
    found = np.cumsum(np.asarray(theta)[points] > threshold)
    for it in state["iterations"]:
        n = int(it["num_evaluations"])
        if 1 <= n <= found.size:
            it.setdefault("metrics", {})["hotspots_found"] = float(found[n - 1])


def summarise_hotspots(
    out: str | Path,
    at: tuple[int, ...] = (150, 199, 200),
    plot: bool = True,
    pool=None,
) -> dict[str, Any]:
    """Summary of every strategy's campaigns under ``out`` (see module docstring); writes
    ``out/summary.json`` and (``plot``) ``out/hotspots.png``.

    Args:
        out: folder searched recursively for ``state.json`` files and archives (seeds kept
            only in an archive are included); each strategy's archive is rewritten to
            ``out/<strategy>/archive``.
        at: steps (numbers of surveyed villages) at which metrics are summarised.
        plot: also draw ``out/hotspots.png``.
        pool: optional :class:`~bo_ncgp.problems.hotspots.HotspotPool` of the campaigns'
            country; with it the hotspots found are counted (campaigns whose stored data
            hash differs from the pool's are refused).

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns.cli import run_seeds
        >>> from bo_ncgp.campaigns.hotspot_strategies import RandomPoolStrategy
        >>> from bo_ncgp.problems.hotspots import HotspotPool
        >>> pool = HotspotPool(np.random.default_rng(0).random((30, 2)), 0.01 * np.arange(30), 0.1)
        >>> def tiny():  # a fast RandomPoolStrategy (no hyperparameter steps)
        ...     return RandomPoolStrategy(init_rounds=1, init_hyper_steps=0, num_hyper_steps=0)
        >>> out = Path(tempfile.mkdtemp())  # two seeds of 8 + 2 villages under out/random
        >>> _ = run_seeds(lambda: pool, tiny, [0, 1], out / "random", budget=10, batch_size=1,
        ...               num_initial=8, progress=False)
        >>> summary = summarise_hotspots(out, at=(9, 10), plot=False, pool=pool)
        >>> summary["random"]["seeds"], summary["random"]["mse"]["10"]["n"], sorted(summary)
        (2, 2, ['random'])
    """
    out = Path(out)
    groups = collect([out])
    for name, states in groups.items():  # per-seed records that survive a fresh clone
        write_archive(out / name, states)  # (before hotspots_found is added in memory)
    metrics = ["accuracy", "mse", "sensitivity"]
    every_state = [st for states in groups.values() for st in states]
    metrics += [  # absent from states written before they were logged
        m for m in FULL_SET_METRICS if any(len(metric_curve(st, m)[0]) for st in every_state)
    ]
    if pool is not None:
        digest = pool.config()["data_sha256"]
        for states in groups.values():
            for st in states:
                stored = st.get("problem", {}).get("data_sha256")
                if stored != digest:
                    raise ValueError(
                        f"summarise_hotspots: a campaign under {out} ran on other data "
                        f"({st.get('problem', {}).get('name')}, hash {stored}) than "
                        f"{pool.name} (hash {digest})"
                    )
                add_hotspots_found(st, pool.theta, pool.threshold)
        metrics.append("hotspots_found")
    summary: dict[str, Any] = {}
    for name, states in sorted(groups.items()):
        entry: dict[str, Any] = {
            "seeds": len(states),
            "finished": sum(bool(s.get("finished")) for s in states),
            "config": states[0]["strategy"],
        }
        for metric in metrics:
            entry[metric] = {str(s): _mean_se(_at_step(states, metric, s)) for s in at}
        for key in ("step_seconds", "acquisition_seconds", "update_seconds"):
            entry[key] = _mean_se(np.array([_step_seconds(s, key) for s in states]))
        entry["curves"] = {}  # every step, for re-plotting without the campaign states
        for metric in metrics:
            x, mean, se, k = _curve(states, metric)
            entry["curves"][metric] = {
                "steps": x.astype(int).tolist(),
                "mean": [round(float(v), 6) for v in mean],
                "se": [round(float(v), 6) for v in se],
                "seeds": k,
            }
        summary[name] = entry
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if plot:
        panels = ("accuracy", "mse", *metrics[3:], "step_seconds")
        plot_hotspots(groups, out / "hotspots.png", panels)
    return summary


def plot_hotspots(groups: dict[str, list[dict]], path: Path, metrics: tuple[str, ...]) -> Path:
    """Metrics against steps, mean +- s.e. over seeds, one line per strategy (Fig. 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "accuracy": "hotspot accuracy",
        "mse": "prevalence MSE",
        "step_seconds": "seconds per step",
        "hotspots_found": "true hotspots surveyed",
        "accuracy_all": "hotspot accuracy, all villages",
        "mse_all": "prevalence MSE, all villages",
    }
    cols = min(len(metrics), 3 if len(metrics) > 4 else 4)
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[len(metrics) :]:
        ax.set_visible(False)
    for ax, metric in zip(axes.flat, metrics, strict=False):  # spare axes are hidden
        for name, states in sorted(groups.items()):
            x, mean, se, k = _curve(states, metric)
            if not k:
                continue
            ax.plot(x, mean, label=f"{name} ({k} seed{'s' * (k > 1)})")
            if k > 1:
                ax.fill_between(x, mean - se, mean + se, alpha=0.25)
        ax.set_xlabel("steps (villages surveyed)")
        ax.set_ylabel(labels.get(metric, metric))
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- command
def _checked(cast, kind: str, ok, requirement: str, name: str):
    """argparse ``type=``: ``cast(text)`` (else "expected <kind>"), then ``ok(value)``."""

    def parse(text: str):
        try:
            val = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not ok(val):
            raise argparse.ArgumentTypeError(f"{requirement}, got {val}")
        return val

    parse.__name__ = name
    return parse


def _int_at_least(low: int):
    return _checked(int, "an integer", lambda v: v >= low, f"must be >= {low}", f"int>={low}")


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


_POS, _NONNEG = _int_at_least(1), _int_at_least(0)


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--country", default="civ", help="data file hotspots/<country>_data.csv")
    p.add_argument("--data-root", default=None, help="data root (default $BO_NCGP_DATA)")
    p.add_argument(
        "--threshold", type=_open_unit, default=None, help="hotspot prevalence threshold"
    )
    p.add_argument("--strategy", default="entropy", choices=HOTSPOT_STRATEGIES)
    p.add_argument(
        "--seeds", type=_POS, default=None, help="number of seeds from --first-seed (50; quick: 2)"
    )
    p.add_argument("--first-seed", type=_NONNEG, default=0)
    p.add_argument(
        "--initial", type=_int_at_least(2), default=100, help="initial surveyed villages"
    )
    p.add_argument("--steps", type=_POS, default=100, help="acquisition steps per seed")
    p.add_argument("--workers", type=_POS, default=1, help="seeds run in parallel (processes)")
    p.add_argument("--dask-scheduler", default=None, help="run seeds on a dask cluster")
    p.add_argument("--threads", type=_POS, default=1, help="torch threads per worker")
    p.add_argument("--out", type=Path, default=Path("results/hotspots"))
    g = p.add_argument_group("model (all strategies)")
    g.add_argument(
        "--mean",
        default="zero",
        choices=("zero", "constant"),
        help="prior mean of the logit prevalence (constant: a learned ConstantKernel)",
    )
    g.add_argument(
        "--outputscale-prior",
        default=None,
        choices=("gamma", "none"),
        help="Gamma(2, 0.15) prior on the outputscale, or none (as in Maddox et al.'s script); "
        "default gamma, except none for svgp-entropy and svgp-random",
    )
    g = p.add_argument_group("DualSVGP (entropy, random)")
    g.add_argument("--fantasies", type=_POS, default=16, help="QMC fantasies per candidate")
    g.add_argument("--compute-dtype", default="float32", choices=("float32", "float64"))
    add_acquisition_options(g)
    g.add_argument("--inner-steps", type=_POS, default=20, help="site updates per survey")
    g.add_argument("--rho", type=_damping, default=0.5, help="damping of the site updates")
    g.add_argument("--hyper-steps", type=_NONNEG, default=5, help="Adam steps per survey")
    g.add_argument("--lr", type=_positive_float, default=0.01, help="Adam lr per survey")
    g.add_argument("--init-rounds", type=_POS, default=8)
    g.add_argument("--init-hyper-steps", type=_NONNEG, default=50)
    g.add_argument("--init-lr", type=_positive_float, default=0.05)
    g.add_argument(
        "--hyper-objective",
        default="elbo",
        choices=("elbo", "dual"),
        help="hyperparameter objective: ELBO (Eq. 21, as Maddox et al.'s script) or Eq. 26",
    )
    g = p.add_argument_group("refit-entropy")
    g.add_argument("--refit-candidates", type=_POS, default=16)
    g.add_argument("--refit-fantasies", type=_POS, default=8)
    g.add_argument("--refit-steps", type=_POS, default=200, help="NGD + Adam steps per fit")
    g.add_argument("--refit-fantasy-steps", type=_NONNEG, default=4, help="NGD steps per fantasy")
    g = p.add_argument_group(
        "svgp-entropy, svgp-random (Chang et al.'s Fig. 4 loop: refit after every survey; "
        "svgp-entropy adds dual-conditioning fantasies)"
    )
    g.add_argument("--svgp-steps", type=_POS, default=1000, help="Adam steps per refit")
    g.add_argument("--svgp-lr", type=_positive_float, default=0.01, help="Adam lr of the refits")
    g.add_argument(
        "--svgp-beta", type=_positive_float, default=1.0, help="KL weight (1: no tempering)"
    )
    g.add_argument(
        "--svgp-rel-tol",
        type=_nonneg_float,
        default=1e-5,
        help="stop a refit early by BoTorch's ExpMA rule (1e-5, as Maddox et al.'s loop; "
        "0: always --svgp-steps)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny preset (2 seeds unless --seeds, 20 initial villages, 4 steps, short fits)",
    )
    p.add_argument("--summary-only", action="store_true", help="only summarise and plot OUT")
    p.add_argument(
        "--at",
        type=_steps_list,
        default=None,
        help="comma-separated steps (surveyed villages) to summarise (default 150,LAST-1,LAST)",
    )
    p.add_argument("--no-plot", action="store_true", help="write summary.json only")
    p.add_argument("--no-progress", action="store_true")


@command(
    "hotspots", "hotspot active learning with fantasy entropy reduction (Chang et al. Fig. 4)"
)(_args)
def _hotspots(args: argparse.Namespace) -> int:
    if args.quick:
        for key, val in _QUICK.items():
            setattr(args, key, val)
    if args.seeds is None:
        args.seeds = 2 if args.quick else 50
    import sys

    from bo_ncgp.problems.hotspots import HotspotPool

    try:  # the data file and the sizes are checked once, before any seed starts
        pool = HotspotPool.from_country(
            args.country, seed=0, root=args.data_root, threshold=args.threshold
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
        cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        cfg["progress"] = not args.no_progress and args.workers <= 1 and not args.dask_scheduler
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        t0 = time.perf_counter()
        with make_executor(args.workers, args.dask_scheduler) as ex:
            futures = {ex.submit(run_hotspot_seed, cfg, s): s for s in seeds}
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
