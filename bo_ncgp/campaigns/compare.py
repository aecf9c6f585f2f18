"""Paired comparison of two sets of campaigns run on the same seeds (``bo-ncgp compare``).

Two strategies run on the same seeds see the same problem instance (for the hotspots, the same
initial villages and the same survey counts), so the per-seed difference of a metric removes
the seed-to-seed spread that dominates the unpaired s.e. of either mean. For every metric and
step this module reports the mean +- s.e. of ``a - b`` over the seeds present in both folders
and how many seeds have ``a < b``.

    bo-ncgp compare results/hotspots/entropy results/hotspots/random \\
        --metrics accuracy,mse --at 150,199 --json paired.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.campaigns.archive import load_states
from bo_ncgp.campaigns.plotting import check_metrics, default_metrics, metric_at
from bo_ncgp.campaigns.stats import mean_se
from bo_ncgp.exceptions import InputDataError

__all__ = ["paired_differences"]


def _by_seed(folder: str | Path) -> dict[int, dict]:
    states = load_states(folder)
    if not states:
        raise FileNotFoundError(f"no state.json or archive found under {folder}")
    names = {st["strategy"]["name"] for st in states}
    if len(names) > 1:
        raise InputDataError(f"{folder} holds campaigns of several strategies {sorted(names)}")
    return {int(st["seed"]): st for st in states}


def _last_step(state: dict) -> int:
    """The number of evaluations the campaign reached (the last logged step)."""
    logged = [int(it["num_evaluations"]) for it in state.get("iterations", [])]
    return max([len(state.get("evaluations", [])), *logged])


def paired_differences(
    a: str | Path,
    b: str | Path,
    metrics: tuple[str, ...] | None = None,
    steps: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Per-seed differences ``a - b`` of campaign metrics at given steps.

    Args:
        a, b: folders searched recursively for ``state.json`` (one strategy each).
        metrics: metric names logged by the strategies (e.g. ``accuracy``, ``mse``) or
            ``best`` (the best value so far of an optimisation campaign); ``None``: by the
            problem type (:func:`~bo_ncgp.campaigns.plotting.default_metrics`).
        steps: numbers of evaluations at which the metrics are compared; ``None``: the last
            number of evaluations that every seed of both folders reached.

    Returns:
        ``{"seeds": [...], "metrics": [...], metric: {str(step): {"mean", "se", "n",
        "a_lower"}}}`` over the seeds
        found in both folders that reached the step (``a_lower``: seeds with ``a < b``).

    Raises:
        InputDataError: if the folders share no seed, their campaigns ran on different data,
            or they do not hold one of ``metrics`` (the message names those they hold).

    Example:
        >>> import json, tempfile
        >>> def state(seed, mse):  # a hand-made campaign state with one logged metric
        ...     its = [{"num_evaluations": 5, "metrics": {"mse": mse}}]
        ...     return {"seed": seed, "strategy": {"name": "s"}, "iterations": its}
        >>> root = Path(tempfile.mkdtemp())
        >>> for name, values in (("a", (0.1, 0.4)), ("b", (0.2, 0.2))):
        ...     for seed, v in enumerate(values):
        ...         (root / name / f"seed_{seed}").mkdir(parents=True)
        ...         _ = (root / name / f"seed_{seed}" / "state.json").write_text(
        ...             json.dumps(state(seed, v)))
        >>> d = paired_differences(root / "a", root / "b", ("mse",), (5,))["mse"]["5"]
        >>> round(d["mean"], 3), round(d["se"], 3), d["n"], d["a_lower"]
        (0.05, 0.15, 2, 1)
    """
    sa, sb = _by_seed(a), _by_seed(b)
    seeds = sorted(set(sa) & set(sb))
    if not seeds:
        raise InputDataError(f"{a} and {b} share no seed ({sorted(sa)} vs {sorted(sb)})")
    for s in seeds:
        ha = sa[s].get("problem", {}).get("data_sha256")
        hb = sb[s].get("problem", {}).get("data_sha256")
        if ha != hb:
            raise InputDataError(f"seed {s}: the campaigns ran on different data ({ha} vs {hb})")
    states = [sa[s] for s in seeds] + [sb[s] for s in seeds]
    if metrics is None:
        metrics = default_metrics(states)
    check_metrics(metrics, [sa[s] for s in seeds], str(a))
    check_metrics(metrics, [sb[s] for s in seeds], str(b))
    if steps is None:
        steps = (min(_last_step(st) for st in states),)
    out: dict[str, Any] = {"a": str(a), "b": str(b), "seeds": seeds, "metrics": list(metrics)}
    for metric in metrics:
        out[metric] = {}
        for step in steps:
            d = np.array(
                [metric_at(sa[s], metric, step) - metric_at(sb[s], metric, step) for s in seeds]
            )
            mean, se, n = mean_se(d)
            out[metric][str(step)] = {
                "mean": mean,
                "se": se,
                "n": n,
                "a_lower": int((d[np.isfinite(d)] < 0).sum()),
            }
    return out
