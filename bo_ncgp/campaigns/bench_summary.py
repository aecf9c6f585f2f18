"""The summary of a strategy benchmark (:mod:`bo_ncgp.campaigns.bench`): the metric of
every run after every evaluation, mean +- s.e. over seeds (:mod:`~bo_ncgp.campaigns.stats`),
paired differences against a baseline, timings, ``summary.json``, a markdown table and plots.

**The metric.** After every evaluation ``n``: the *best value so far* -- the value of the best
observed point among the first ``n`` (its noise-free ``extra["true_value"]`` where the problem
logs one) -- or, where the problem knows its optimum (``optimal_value``), the *simple regret*
``optimal_value - best value so far`` (smaller is better). Before the first finite value
(e.g. no feasible point yet) the metric is ``nan`` and that seed is left out there.

**Paired differences.** For every strategy and every budget, over the seeds that both the
strategy and the baseline reached: the mean +- standard error of ``lead = baseline regret -
strategy regret`` (for best values ``strategy best - baseline best``): positive means the
strategy is ahead of the baseline.

**Timings.** Per acquisition step (the initial design excluded): ``fit`` (the model update
after a batch plus any refit inside the acquisition step, logged as ``fit_seconds``),
``acquisition`` (the rest of proposing a batch), ``evaluation`` (evaluating it) and their sum
``iteration``; each the mean over a run's steps, then mean +- s.e. over seeds. ``seconds`` of
a curve is the cumulative run time after each evaluation, averaged over seeds.

**``summary.json``** (strict JSON; a missing number -- a metric before the first finite
value, the standard error of one seed -- is written as the string ``"NaN"``, the convention
of :mod:`~bo_ncgp.campaigns.storage`, and :func:`~bo_ncgp.campaigns.storage.read_json` reads
it back as a float)::

    {"format": "bo-ncgp-bench/1",
     "baseline": str,                       # the strategy the paired differences refer to
     "settings": {"evaluations", "batch_size", "initial", "seeds": [int, ...]},
     "problems": {PROBLEM: {
         "metric": "regret" | "best_value",
         "optimal_value": float | null,
         "budgets": [int, ...],             # evaluations at which the tables are given
         "strategies": {STRATEGY: {
             "seeds": [int, ...],           # seeds with a run
             "finished": int,               # runs that reached the budget
             "config": {...},               # the strategy's configuration
             "curve": {"evaluations": [1..N], "mean": [...], "se": [...], "n": [...],
                       "seconds": [...]},   # metric after every evaluation
             "per_seed": {SEED: [...]},     # the metric of every run, every evaluation
             "final": {"mean", "se", "n"},  # at the last evaluation
             "at": {BUDGET: {"mean", "se", "n"}},
             "paired": {"final" | BUDGET: {"mean", "se", "n"}},   # lead over the baseline
             "seconds": {"fit" | "acquisition" | "evaluation" | "iteration":
                         {"mean", "se", "n"}}}}}}}

:data:`SUMMARY_SCHEMA` is the same as a JSON Schema (draft 2020-12), for validators.

``summary.md`` holds the table that :func:`markdown_table` prints, and ``PROBLEM.png`` the
metric against evaluations and against wall-clock seconds (mean +- s.e. over seeds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bo_ncgp.campaigns.stats import mean_se_curve, mean_se_dict
from bo_ncgp.campaigns.storage import read_json, write_json

__all__ = [
    "FORMAT",
    "SUMMARY_SCHEMA",
    "markdown_table",
    "metric_curve",
    "paired_lead",
    "plot_bench",
    "summarise_bench",
    "timings",
]

STATE = "state.json"
FORMAT = "bo-ncgp-bench/1"
_NUM = {"anyOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]}
_MEAN_SE = {
    "type": "object",
    "required": ["mean", "se", "n"],
    "properties": {"mean": _NUM, "se": _NUM, "n": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}
_SERIES = {"type": "array", "items": _NUM}
_STRATEGY = {
    "type": "object",
    "required": "seeds finished config curve per_seed final at paired seconds".split(),
    "properties": {
        "seeds": {"type": "array", "items": {"type": "integer"}},
        "finished": {"type": "integer", "minimum": 0},
        "config": {"type": "object", "required": ["name"]},
        "curve": {
            "type": "object",
            "required": ["evaluations", "mean", "se", "n", "seconds"],
            "properties": {
                "evaluations": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "mean": _SERIES,
                "se": _SERIES,
                "n": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "seconds": _SERIES,
            },
        },
        "per_seed": {"type": "object", "additionalProperties": _SERIES},
        "final": _MEAN_SE,
        "at": {"type": "object", "additionalProperties": _MEAN_SE},
        "paired": {"type": "object", "required": ["final"], "additionalProperties": _MEAN_SE},
        "seconds": {
            "type": "object",
            "required": ["fit", "acquisition", "evaluation", "iteration"],
            "additionalProperties": _MEAN_SE,
        },
    },
}
#: ``summary.json`` as a JSON Schema (module docstring)
SUMMARY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["format", "baseline", "settings", "problems"],
    "properties": {
        "format": {"const": "bo-ncgp-bench/1"},
        "baseline": {"type": "string"},
        "settings": {"type": "object"},
        "problems": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["metric", "optimal_value", "budgets", "strategies"],
                "properties": {
                    "metric": {"enum": ["regret", "best_value"]},
                    "optimal_value": _NUM,
                    "budgets": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    "strategies": {"type": "object", "additionalProperties": _STRATEGY},
                },
            },
        },
    },
}


def metric_curve(state: dict, optimal_value: float | None = None) -> np.ndarray:
    """The best value so far after every evaluation of a campaign state, or the simple
    regret ``optimal_value - best`` (module docstring); ``nan`` before the first finite
    value.

    Example:
        >>> evs = [{"value": v, "extra": {}} for v in (float("nan"), 1.0, 0.5, 3.0)]
        >>> metric_curve({"evaluations": evs}).tolist()
        [nan, 1.0, 1.0, 3.0]
        >>> metric_curve({"evaluations": evs}, optimal_value=4.0).tolist()
        [nan, 3.0, 3.0, 1.0]
        >>> noisy = [{"value": 2.0, "extra": {"true_value": 1.5}},
        ...          {"value": 1.0, "extra": {"true_value": 1.8}}]
        >>> metric_curve({"evaluations": noisy}).tolist()  # the best *observed* point's truth
        [1.5, 1.5]
    """
    out = np.full(len(state["evaluations"]), np.nan)
    best, best_true = -math.inf, math.nan
    for i, ev in enumerate(state["evaluations"]):
        v = ev["value"]
        if v is not None and math.isfinite(v) and v > best:
            best = v
            best_true = float((ev.get("extra") or {}).get("true_value", v))
        out[i] = best_true
    if optimal_value is not None:
        out = optimal_value - out
    return out


def timings(state: dict) -> dict[str, float]:
    """Mean seconds per acquisition step of a campaign state: ``fit``, ``acquisition``,
    ``evaluation`` and ``iteration`` (module docstring).

    Example:
        >>> its = [{"acquisition_seconds": 0.0, "update_seconds": 1.0,
        ...         "evaluation_seconds": 0.5, "metrics": {}},
        ...        {"acquisition_seconds": 2.0, "update_seconds": 0.5,
        ...         "evaluation_seconds": 0.25, "metrics": {"fit_seconds": 1.5}}]
        >>> timings({"iterations": its})
        {'fit': 2.0, 'acquisition': 0.5, 'evaluation': 0.25, 'iteration': 2.75}
    """
    rows = []
    for it in state["iterations"][1:]:
        inner = float(it.get("metrics", {}).get("fit_seconds", 0.0))
        fit = float(it["update_seconds"]) + inner
        acq = float(it["acquisition_seconds"]) - inner
        ev = float(it["evaluation_seconds"])
        rows.append((fit, acq, ev, fit + acq + ev))
    if not rows:
        return dict.fromkeys(("fit", "acquisition", "evaluation", "iteration"), math.nan)
    m = np.mean(np.array(rows), axis=0)
    return dict(zip(("fit", "acquisition", "evaluation", "iteration"), map(float, m), strict=True))


def _seconds_curve(state: dict) -> np.ndarray:
    """Cumulative run seconds after every evaluation (at the end of its iteration)."""
    out = np.full(len(state["evaluations"]), np.nan)
    total = 0.0
    for it, ids in zip(state["iterations"], state["batches"], strict=False):
        total += sum(float(it[k]) for k in ("acquisition_seconds", "update_seconds"))
        total += float(it["evaluation_seconds"])
        out[np.asarray(ids, dtype=int)] = total
    return out


def paired_lead(
    strategy: dict[int, float], baseline: dict[int, float], regret: bool = True
) -> dict[str, float | int]:
    """Mean +- s.e. over the shared seeds of the strategy's lead over the baseline:
    ``baseline - strategy`` for regrets, ``strategy - baseline`` for best values
    (positive: the strategy is ahead). Seeds where either is not finite are left out.

    Example:
        >>> lead = paired_lead({0: 0.1, 1: 0.2, 2: 0.6}, {0: 0.5, 1: 0.4, 2: 0.9, 3: 1.0})
        >>> lead["mean"], round(lead["se"], 4), lead["n"]  # leads 0.4, 0.2, 0.3
        (0.3, 0.0577, 3)
    """
    seeds = sorted(set(strategy) & set(baseline))
    d = np.array([baseline[s] - strategy[s] for s in seeds], dtype=float)
    if not regret:
        d = -d
    out = mean_se_dict(d)
    if np.isfinite(out["mean"]):
        out["mean"] = round(out["mean"], 12)
    return out


def _budgets(evaluations: int, initial: int) -> list[int]:
    marks = {max(initial, round(evaluations * f)) for f in (0.25, 0.5, 0.75)}
    return sorted(n for n in marks | {evaluations} if 1 <= n <= evaluations)


def _clean(values: Iterable[float]) -> list[float]:
    return [round(float(v), 9) if math.isfinite(v) else float("nan") for v in values]


def summarise_bench(
    out: str | Path,
    baseline: str,
    problems: Sequence[str] | None = None,
    strategies: Sequence[str] | None = None,
    *,
    settings: dict[str, Any] | None = None,
    budgets: Sequence[int] | None = None,
    plot: bool = True,
) -> dict[str, Any]:
    """Summarise the runs under ``out`` (module docstring) into ``out/summary.json``,
    ``out/summary.md`` and one plot per problem.

    Args:
        out: the bench folder (``out/<problem>/<strategy>/seed_<k>/state.json``).
        baseline: the strategy of the paired differences.
        problems, strategies: restrict to these (default: every folder found).
        settings: stored as ``summary["settings"]``.
        budgets: evaluations at which the tables are given (default: a quarter, a half,
            three quarters and all of the runs' budget).
        plot: draw ``out/<problem>.png``.
    """
    from bo_ncgp.problems.registry import make_problem

    out = Path(out)
    problems = list(problems) if problems else sorted(p.name for p in out.iterdir() if p.is_dir())
    summary: dict[str, Any] = {
        "format": FORMAT,
        "baseline": baseline,
        "settings": settings or {},
        "problems": {},
    }
    for prob in problems:
        folder = out / prob
        names = list(strategies) if strategies else sorted(p.name for p in folder.iterdir())
        instance = make_problem(prob)
        opt = getattr(instance, "optimal_value", None)
        entry: dict[str, Any] = {
            "metric": "regret" if opt is not None else "best_value",
            "optimal_value": opt,
            "budgets": [],
            "strategies": {},
        }
        per: dict[str, dict[int, np.ndarray]] = {}
        states: dict[str, list[dict]] = {}
        for name in names:
            runs = sorted((folder / name).glob(f"seed_*/{STATE}"))
            states[name] = [read_json(p) for p in runs]
            per[name] = {st["seed"]: metric_curve(st, opt) for st in states[name]}
        lengths = [len(c) for cs in per.values() for c in cs.values()]
        if not lengths:
            continue
        n_max = max(lengths)
        initial = min(int(st["num_initial"]) for sts in states.values() for st in sts)
        marks = list(budgets) if budgets else _budgets(n_max, initial)
        entry["budgets"] = marks
        for name in names:
            if not states[name]:
                continue
            curves = per[name]
            A = np.full((len(curves), n_max), np.nan)
            secs = np.full((len(curves), n_max), np.nan)
            for row, (seed, c) in enumerate(sorted(curves.items())):
                A[row, : len(c)] = c
                st = next(s for s in states[name] if s["seed"] == seed)
                sc = _seconds_curve(st)
                secs[row, : len(sc)] = sc
            mean, se, n = mean_se_curve(A)
            sec_mean = mean_se_curve(secs)[0]

            def at(k: int, curves=curves) -> dict[int, float]:
                return {s: float(c[k - 1]) if len(c) >= k else math.nan for s, c in curves.items()}

            base = per.get(baseline, {})

            def base_at(k: int, base=base) -> dict[int, float]:
                return {s: float(c[k - 1]) if len(c) >= k else math.nan for s, c in base.items()}

            regret = opt is not None
            final = {s: float(c[-1]) if len(c) == n_max else math.nan for s, c in curves.items()}
            base_final = {s: float(c[-1]) if len(c) == n_max else math.nan for s, c in base.items()}
            tm = [timings(st) for st in states[name]]
            entry["strategies"][name] = {
                "seeds": sorted(curves),
                "finished": sum(bool(st.get("finished")) for st in states[name]),
                "config": states[name][0]["strategy"],
                "curve": {
                    "evaluations": list(range(1, n_max + 1)),
                    "mean": _clean(mean),
                    "se": _clean(se),
                    "n": [int(v) for v in n],
                    "seconds": _clean(sec_mean),
                },
                "per_seed": {str(s): _clean(c) for s, c in sorted(curves.items())},
                "final": mean_se_dict(list(final.values())),
                "at": {str(k): mean_se_dict(list(at(k).values())) for k in marks},
                "paired": {
                    "final": paired_lead(final, base_final, regret),
                    **{str(k): paired_lead(at(k), base_at(k), regret) for k in marks},
                },
                "seconds": {
                    key: mean_se_dict([t[key] for t in tm])
                    for key in ("fit", "acquisition", "evaluation", "iteration")
                },
            }
        summary["problems"][prob] = entry
        if plot:
            plot_bench(entry, out / f"{prob}.png", title=prob)
    write_json(out / "summary.json", summary)
    (out / "summary.md").write_text(markdown_table(summary) + "\n")
    return summary


def _fmt(v: float | None, digits: int = 3) -> str:
    return "nan" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def _pm(d: dict[str, Any], sign: bool = False) -> str:
    mean, se = d["mean"], d["se"]
    if mean is None or not math.isfinite(mean):
        return "n/a"
    m = f"{mean:+.3g}" if sign else f"{mean:.3g}"
    return f"{m} ± {_fmt(se, 2)} (n={d['n']})"


def markdown_table(summary: dict[str, Any]) -> str:
    """The markdown table of a bench summary: per problem and strategy the final metric,
    the paired lead over the baseline at the final evaluation and at the middle budget,
    and the seconds per iteration (fit / acquisition / evaluation).

    Example:
        >>> s = {"baseline": "b", "problems": {"p": {"metric": "regret", "budgets": [5],
        ...      "strategies": {"a": {"final": {"mean": 0.1, "se": 0.01, "n": 2},
        ...      "paired": {"final": {"mean": 0.2, "se": 0.1, "n": 2},
        ...                 "5": {"mean": 0.3, "se": 0.1, "n": 2}},
        ...      "seconds": {k: {"mean": 0.5, "se": 0.1, "n": 2}
        ...                  for k in ("fit", "acquisition", "evaluation", "iteration")}}}}}}
        >>> markdown_table(s).splitlines()[2].split(" | ")[2:5]
        ['0.1 ± 0.01 (n=2)', '+0.2 ± 0.1 (n=2)', '+0.3 ± 0.1 (n=2) @5']
    """
    base = summary["baseline"]
    lines = [
        f"| problem (metric) | strategy | final, mean ± s.e. | lead over {base}, final "
        f"(paired) | lead over {base} @ mid budget | s / iteration: fit / acq. / eval. |",
        "|---|---|---|---|---|---|",
    ]
    for prob, entry in summary["problems"].items():
        marks = entry["budgets"]
        mid = str(marks[(len(marks) - 1) // 2])
        for name, st in entry["strategies"].items():
            sec = st["seconds"]
            times = " / ".join(
                _fmt(sec[k]["mean"], 2) for k in ("fit", "acquisition", "evaluation")
            )
            if name == base:
                leads = "baseline | baseline"
            else:
                final, at_mid = st["paired"]["final"], st["paired"][mid]
                leads = f"{_pm(final, sign=True)} | {_pm(at_mid, sign=True)} @{mid}"
            lines.append(
                f"| {prob} ({entry['metric']}) | {name} | {_pm(st['final'])} | {leads} | {times} |"
            )
    return "\n".join(lines)


def plot_bench(entry: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Two panels for one problem of a summary: the metric against the number of
    evaluations and against mean wall-clock seconds (mean +- s.e. over seeds, one line per
    strategy; a log axis for positive regrets).

    Example:
        >>> import tempfile
        >>> e = {"metric": "regret", "strategies": {"a": {"seeds": [0, 1], "curve": {
        ...      "evaluations": [1, 2], "mean": [1.0, 0.5], "se": [0.1, None],
        ...      "seconds": [0.1, 0.2]}}}}
        >>> plot_bench(e, Path(tempfile.mkdtemp()) / "p.png").suffix
        '.png'
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    regret = entry["metric"] == "regret"
    lowest = math.inf
    for name, st in sorted(entry["strategies"].items()):
        c = st["curve"]
        mean = np.array([np.nan if v is None else v for v in c["mean"]], dtype=float)
        se = np.array([np.nan if v is None else v for v in c["se"]], dtype=float)
        secs = np.array([np.nan if v is None else v for v in c["seconds"]], dtype=float)
        label = f"{name} ({len(st['seeds'])} seeds)"
        if np.isfinite(mean).any():
            lowest = min(lowest, float(np.nanmin(mean - np.nan_to_num(se))))
        for ax, x in zip(axes, (np.asarray(c["evaluations"]), secs), strict=True):
            (line,) = ax.plot(x, mean, label=label)
            band = np.isfinite(se)
            ax.fill_between(x, mean - se, mean + se, where=band, alpha=0.2, color=line.get_color())
    ylabel = "simple regret" if regret else "best value so far"
    for ax, xlabel in zip(
        axes, ("evaluations", "wall-clock seconds (mean over seeds)"), strict=True
    ):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if regret and lowest > 0:  # a log axis, unless a band reaches zero
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
