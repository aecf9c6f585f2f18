"""Plots of campaign results: a metric against the number of evaluations, mean +- s.e. over
seeds (:mod:`bo_ncgp.campaigns.stats`), one line per strategy (``bo-ncgp plot OUT_DIR...``).

Figures use matplotlib's object API (no ``pyplot``), so they neither need a display nor change
the backend of a notebook they are drawn from."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from bo_ncgp.campaigns.archive import load_states
from bo_ncgp.campaigns.stats import mean_se, mean_se_curve
from bo_ncgp.exceptions import InputDataError

#: the metric name of the best value so far (optimisation campaigns), computed from the
#: evaluations rather than logged by the strategy
BEST = "best"
#: the metrics an active-learning (pool) campaign is compared on by default, when logged
POOL_METRICS = ("accuracy", "mse")

__all__ = [
    "BEST",
    "available_metrics",
    "best_so_far",
    "check_metrics",
    "collect",
    "default_metrics",
    "metric_at",
    "metric_curve",
    "plot_campaigns",
    "plot_metrics",
    "summarise",
]


def best_so_far(state: dict) -> np.ndarray:
    """Best finite value after each evaluation (``nan`` until the first success).

    Example:
        >>> st = {"evaluations": [{"value": v} for v in (float("nan"), 1.0, 0.5, 3.0)]}
        >>> best_so_far(st).tolist()
        [nan, 1.0, 1.0, 3.0]
    """
    vals = np.array([e["value"] for e in state["evaluations"]], dtype=float)
    out = np.full(vals.shape, np.nan)
    best = -np.inf
    for i, v in enumerate(vals):
        if np.isfinite(v):
            best = max(best, v)
        out[i] = best if np.isfinite(best) else np.nan
    return out


def metric_curve(state: dict, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(num_evaluations, values)`` of a strategy metric logged after every batch."""
    its = [it for it in state["iterations"] if metric in it.get("metrics", {})]
    return (
        np.array([it["num_evaluations"] for it in its]),
        np.array([it["metrics"][metric] for it in its], dtype=float),
    )


def metric_at(state: dict, metric: str, step: int) -> float:
    """Value of a logged metric after ``step`` evaluations (``nan`` if not logged there);
    :data:`BEST` is the best value so far (:func:`best_so_far`).

    Example:
        >>> its = [{"num_evaluations": n, "metrics": {"mse": n / 10}} for n in (4, 5)]
        >>> st = {"iterations": its, "evaluations": [{"value": v} for v in (2.0, 1.0)]}
        >>> metric_at(st, "mse", 5), metric_at(st, "mse", 6), metric_at(st, "best", 2)
        (0.5, nan, 2.0)
    """
    if metric == BEST:
        curve = best_so_far(state)
        return float(curve[step - 1]) if 1 <= step <= len(curve) else float("nan")
    x, y = metric_curve(state, metric)
    hit = np.flatnonzero(x == step)
    return float(y[hit[0]]) if hit.size else float("nan")


def _is_pool(state: dict) -> bool:
    """Whether the campaign chose points of a finite pool (active learning: the points are
    indices) rather than optimised over a box (the points are vectors)."""
    points = [e.get("point") for e in state.get("evaluations", [])]
    return bool(points) and all(isinstance(p, int) for p in points)


def available_metrics(states: list[dict]) -> list[str]:
    """The metrics the campaign ``states`` hold: :data:`BEST` for optimisation campaigns
    (points in a box), then every metric their strategies logged, sorted.

    Example:
        >>> opt = {"evaluations": [{"point": [0.1, 0.2], "value": 1.0}], "iterations": []}
        >>> its = [{"num_evaluations": 3, "metrics": {"mse": 0.1, "accuracy": 0.9}}]
        >>> pool = {"evaluations": [{"point": 7, "value": 2.0}], "iterations": its}
        >>> available_metrics([opt]), available_metrics([pool])
        (['best'], ['accuracy', 'mse'])
    """
    logged = sorted(
        {m for st in states for it in st.get("iterations", []) for m in it.get("metrics", {})}
    )
    optimisation = any(st.get("evaluations") and not _is_pool(st) for st in states)
    return [BEST, *logged] if optimisation else logged


def default_metrics(states: list[dict]) -> tuple[str, ...]:
    """The metrics compared or plotted when none is named, by the campaigns' problem type:
    :data:`BEST` for optimisation, :data:`POOL_METRICS` (those logged; else every logged
    metric) for active learning on a pool.

    Example:
        >>> its = [{"num_evaluations": 3, "metrics": {"mse": 0.1, "accuracy": 0.9}}]
        >>> default_metrics([{"evaluations": [{"point": 7, "value": 2.0}], "iterations": its}])
        ('accuracy', 'mse')
    """
    available = available_metrics(states)
    if BEST in available:
        return (BEST,)
    preferred = tuple(m for m in POOL_METRICS if m in available)
    return preferred or tuple(available)


def check_metrics(metrics: tuple[str, ...], states: list[dict], where: str) -> None:
    """Raise :class:`~bo_ncgp.exceptions.InputDataError` naming the metrics of ``metrics``
    that the campaign ``states`` (found under ``where``) do not hold, and the ones they hold.

    Example:
        >>> opt = {"evaluations": [{"point": [0.1], "value": 1.0}], "iterations": []}
        >>> check_metrics(("accuracy",), [opt], "results/lunar")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: the campaigns under results/lunar hold no metric ...
    """
    available = available_metrics(states)
    missing = [m for m in metrics if m not in available]
    if missing:
        raise InputDataError(
            f"the campaigns under {where} hold no metric {', '.join(missing)}; available: "
            f"{', '.join(available) or 'none'}"
        )


def collect(paths: list[str | Path]) -> dict[str, list[dict]]:
    """Campaign states found under ``paths`` (files or folders), grouped by strategy.

    Example:
        >>> collect(["/nonexistent"])
        Traceback (most recent call last):
        ...
        FileNotFoundError: no state.json or archive found under /nonexistent
    """
    groups: dict[str, list[dict]] = defaultdict(list)
    for p in paths:
        for st in load_states(p):
            groups[st["strategy"]["name"]].append(st)
    if not groups:
        where = ", ".join(map(str, paths))
        raise FileNotFoundError(f"no state.json or archive found under {where}")
    return dict(groups)


def _mean_se(curves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = min(len(c) for c in curves)
    mean, se, _ = mean_se_curve(np.stack([c[:n] for c in curves]))
    return np.arange(1, n + 1), mean, se


def summarise(groups: dict[str, list[dict]], at: list[int]) -> dict[str, dict[int, tuple]]:
    """Best value after ``at`` evaluations: ``{strategy: {n: (mean, se, num_seeds)}}`` over
    the seeds that reached ``n`` evaluations and found a finite value (:func:`mean_se`).

    Example:
        >>> runs = [{"evaluations": [{"value": v} for v in vals]} for vals in ([1, 3], [2, 2])]
        >>> summarise({"random": runs}, at=[1, 2])
        {'random': {1: (1.5, 0.5, 2), 2: (2.5, 0.5, 2)}}
    """
    out = {}
    for name, states in groups.items():
        curves = [best_so_far(s) for s in states]
        out[name] = {}
        for n in at:
            vals = [c[n - 1] for c in curves if len(c) >= n]
            if vals:
                out[name][n] = mean_se(vals)
    return out


def plot_campaigns(
    paths: list[str | Path],
    out: str | Path,
    metric: str | None = None,
    title: str | None = None,
) -> Path:
    """Draw ``metric`` (``"best"`` = best value so far, or a logged strategy metric; ``None``:
    the first of :func:`default_metrics`) against the number of evaluations, mean +- s.e.
    over seeds per strategy, into the PNG ``out``.

    Raises:
        FileNotFoundError: no campaign under ``paths``.
        InputDataError: the campaigns hold no ``metric`` (the message names the ones they hold).

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import Campaign, RandomSearch
        >>> from bo_ncgp.problems.synthetic import TestFunction
        >>> out = Path(tempfile.mkdtemp())
        >>> _ = Campaign(TestFunction("branin"), RandomSearch(), budget=6, batch_size=2,
        ...              num_initial=2, seed=0, out_dir=out / "random").run(progress=False)
        >>> plot_campaigns([out], out / "best.png").name
        'best.png'
    """
    from matplotlib.figure import Figure

    groups = collect(paths)
    states = [st for group in groups.values() for st in group]
    metric = metric or next(iter(default_metrics(states)), BEST)
    check_metrics((metric,), states, ", ".join(map(str, paths)))
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for name, states in sorted(groups.items()):
        if metric == BEST:
            x, mean, se = _mean_se([best_so_far(s) for s in states])
        else:
            curves = [metric_curve(s, metric) for s in states]
            curves = [c for c in curves if len(c[0])]
            if not curves:
                continue
            n = min(len(c[0]) for c in curves)
            x = curves[0][0][:n]
            _, mean, se = _mean_se([c[1] for c in curves])
        ax.plot(x, mean, label=f"{name} ({len(states)} seeds)")
        ax.fill_between(x, mean - se, mean + se, alpha=0.25)  # no band where se is nan
    ax.set_xlabel("number of evaluations")
    ax.set_ylabel("best value so far" if metric == BEST else metric)
    ax.set_title(title or groups[next(iter(groups))][0]["problem"].get("name", ""))
    ax.grid(alpha=0.3)
    ax.legend()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return out


def plot_metrics(
    curves: dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]],
    path: str | Path,
    metrics: list[str],
    labels: dict[str, str] | None = None,
    xlabel: str = "steps",
) -> Path:
    """One panel per metric, one line per strategy: ``curves[strategy][metric] = (steps,
    mean, se, num_seeds)`` (as :func:`~bo_ncgp.campaigns.summary.curve_over_seeds` returns),
    the band mean +- s.e. where there are several seeds.

    Example:
        >>> import tempfile
        >>> c = {"a": {"mse": (np.arange(3), np.ones(3), np.full(3, 0.1), 2)}}
        >>> plot_metrics(c, Path(tempfile.mkdtemp()) / "m.png", ["mse"]).suffix
        '.png'
    """
    from matplotlib.figure import Figure

    labels = labels or {}
    cols = min(len(metrics), 3 if len(metrics) > 4 else 4)
    rows = -(-len(metrics) // cols)
    fig = Figure(figsize=(4.6 * cols, 3.8 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(metrics) :]:
        ax.set_visible(False)
    for ax, metric in zip(axes.flat, metrics, strict=False):  # spare axes are hidden
        for name in sorted(curves):
            x, mean, se, k = curves[name][metric]
            if not k:
                continue
            ax.plot(x, mean, label=f"{name} ({k} seed{'s' * (k > 1)})")
            if k > 1:
                ax.fill_between(x, mean - se, mean + se, alpha=0.25)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(labels.get(metric, metric))
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
