"""Summaries of campaign metrics over seeds: every metric a strategy logs, at chosen steps and
as curves, mean +- standard error (:mod:`bo_ncgp.campaigns.stats`) per strategy.

:func:`summarise_campaigns` collects the states under a folder (full ``state.json`` files and
archived seeds), rewrites each strategy's archive, and writes ``summary.json``:
``{strategy: {"seeds", "finished", "config", metric: {step: {"mean", "se", "n"}},
"step_seconds" | "acquisition_seconds" | "update_seconds": {"mean", "se", "n"},
"curves": {metric: {"steps", "mean", "se", "seeds"}}}}``. A "step" is the number of
evaluations after which the metric was logged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.campaigns.archive import write_archive
from bo_ncgp.campaigns.plotting import collect, metric_at, metric_curve, plot_metrics
from bo_ncgp.campaigns.stats import mean_se_curve, mean_se_dict
from bo_ncgp.campaigns.storage import inside, write_json

__all__ = ["TIMINGS", "curve_over_seeds", "summarise_campaigns", "summarise_metrics"]

#: per-step timings logged by strategies, summarised as their mean over a campaign's steps
TIMINGS = ("step_seconds", "acquisition_seconds", "update_seconds")


def _at_step(states: list[dict], metric: str, step: int) -> np.ndarray:
    """The metric after ``step`` evaluations of every campaign that logged it there."""
    vals = np.array([metric_at(st, metric, step) for st in states], dtype=float)
    return vals[~np.isnan(vals)]


def curve_over_seeds(
    states: list[dict], metric: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Steps, mean and s.e. over seeds of ``metric`` on the steps all seeds reached, and the
    number of seeds (0 if no seed logged the metric). Timings (``*_seconds``) start after
    the initial fit, which is not an acquisition step.

    Example:
        >>> its = lambda v: [{"num_evaluations": n, "metrics": {"m": v * n}} for n in (1, 2)]
        >>> x, mean, se, k = curve_over_seeds([{"iterations": its(1.0)},
        ...                                    {"iterations": its(3.0)}], "m")
        >>> x.tolist(), mean.tolist(), se.tolist(), k
        ([1, 2], [2.0, 4.0], [1.0, 2.0], 2)
    """
    first = 1 if metric.endswith("_seconds") else 0
    curves = [(x[first:], y[first:]) for x, y in (metric_curve(s, metric) for s in states)]
    curves = [c for c in curves if len(c[0])]
    if not curves:
        empty = np.zeros(0)
        return empty, empty, empty, 0
    n = min(len(c[0]) for c in curves)
    mean, se, _ = mean_se_curve(np.stack([c[1][:n] for c in curves]))
    return curves[0][0][:n], mean, se, len(curves)


def _step_seconds(st: dict, key: str) -> float:
    """Mean of ``key`` over the acquisition steps of one campaign (initial fit excluded)."""
    vals = [it["metrics"][key] for it in st["iterations"][1:] if key in it.get("metrics", {})]
    return float(np.mean(vals)) if vals else float("nan")


def summarise_metrics(
    groups: dict[str, list[dict]], metrics: Sequence[str], at: Sequence[int]
) -> dict[str, Any]:
    """The summary (module docstring) of campaign states grouped by strategy.

    Example:
        >>> its = [{"num_evaluations": n, "metrics": {"mse": n / 10}} for n in (4, 5)]
        >>> st = {"strategy": {"name": "s"}, "iterations": its, "finished": True}
        >>> s = summarise_metrics({"s": [st]}, ["mse"], [5])["s"]
        >>> s["mse"]["5"], s["curves"]["mse"]["steps"]
        ({'mean': 0.5, 'se': nan, 'n': 1}, [4, 5])
    """
    summary: dict[str, Any] = {}
    for name, states in sorted(groups.items()):
        entry: dict[str, Any] = {
            "seeds": len(states),
            "finished": sum(bool(s.get("finished")) for s in states),
            "config": states[0]["strategy"],
        }
        for metric in metrics:
            entry[metric] = {str(s): mean_se_dict(_at_step(states, metric, s)) for s in at}
        for key in TIMINGS:
            entry[key] = mean_se_dict([_step_seconds(s, key) for s in states])
        entry["curves"] = {}  # every step, for re-plotting without the campaign states
        for metric in metrics:
            x, mean, se, k = curve_over_seeds(states, metric)
            entry["curves"][metric] = {
                "steps": x.astype(int).tolist(),
                "mean": [round(float(v), 6) for v in mean],
                "se": [round(float(v), 6) for v in se],
                "seeds": k,
            }
        summary[name] = entry
    return summary


def summarise_campaigns(
    out: str | Path,
    metrics: Sequence[str],
    at: Sequence[int],
    *,
    optional_metrics: Sequence[str] = (),
    annotate: Callable[[list[dict]], Sequence[str]] | None = None,
    plot: bool = True,
    plot_name: str = "metrics.png",
    plot_skip: Sequence[str] = (),
    labels: dict[str, str] | None = None,
    xlabel: str = "steps",
) -> dict[str, Any]:
    """Summarise every strategy's campaigns under ``out`` into ``out/summary.json`` (and plot
    them into ``out/<plot_name>``).

    Args:
        out: folder searched recursively for ``state.json`` files and archives (seeds kept
            only in an archive are included); each strategy's archive is rewritten to
            ``out/<strategy>/archive`` (before ``annotate`` runs).
        metrics: metrics summarised for every strategy.
        at: steps at which they are summarised.
        optional_metrics: metrics summarised only when some state logged them.
        annotate: ``annotate(states)`` may add metrics to the states in memory (or refuse
            them with an error) and returns the names of the metrics it added.
        plot: draw the metrics and ``step_seconds`` against the steps.
        plot_name, labels, xlabel: file name of the plot, axis labels of the metrics and of
            the steps.
        plot_skip: metrics summarised but not plotted.

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import Campaign, RandomSearch
        >>> from bo_ncgp.problems.synthetic import TestFunction
        >>> out = Path(tempfile.mkdtemp())
        >>> for seed in (0, 1):
        ...     _ = Campaign(TestFunction("branin"), RandomSearch(), budget=4, batch_size=2,
        ...                  num_initial=2, seed=seed, out_dir=out / "random" / f"s{seed}"
        ...                  ).run(progress=False)
        >>> s = summarise_campaigns(out, [], [4], plot=False)
        >>> s["random"]["seeds"], (out / "summary.json").is_file()
        (2, True)
    """
    out = Path(out)
    groups = collect([out])
    for name, states in groups.items():  # per-seed records that survive a fresh clone
        write_archive(inside(out, name), states)
    metrics = list(metrics)
    every_state = [st for states in groups.values() for st in states]
    metrics += [  # absent from states written before they were logged
        m for m in optional_metrics if any(len(metric_curve(st, m)[0]) for st in every_state)
    ]
    if annotate is not None:
        metrics += list(annotate(every_state))
    summary = summarise_metrics(groups, metrics, at)
    write_json(out / "summary.json", summary)
    if plot:
        panels = [*(m for m in metrics if m not in plot_skip), "step_seconds"]
        curves = {
            name: {m: curve_over_seeds(states, m) for m in panels}
            for name, states in groups.items()
        }
        plot_metrics(curves, out / plot_name, panels, labels=labels, xlabel=xlabel)
    return summary
