"""IterNCGP as the feasibility classifier in constrained BO: the table of a
``bo-ncgp bench --suite constrained`` run, and the classifiers' update times replayed.

Reads the bench output folder (``summary.json`` and every run's ``state.json``) and reports,
per problem: the final regret of every strategy (mean +- s.e. over seeds), the paired leads
of ``dual-iterncgp`` over ``dual`` and over ``botorch-labels`` and of ``dual-iterncgp`` over
its ablation ``dual-iterncgp-math`` (positive: ``dual-iterncgp`` ahead), the mean share of the
computational part in the latent variance at the chosen points, and the first evaluation at
which ``dual-iterncgp`` and the ablation chose different points (the two are identical until
the computational uncertainty changes a decision).

Replayed timings: the evaluations of ``dual-iterncgp``'s first run on each problem are replayed
through the two classifiers (the label model of ``dual``: one ``DualSVGP.update`` with its own
hyperparameter fit, not the strategy's second fit from the prior's mode; the IterNCGP
classifier: one recycled ``IterNCGP.condition``), then one acquisition step (``ask``) of each
strategy is timed on all the run's data (median of 3); the two strategies are timed alternately
in one process, so that the machine's load hits both (the bench's own seconds come from runs at
other times).

Usage::

    python -m experiments.tatzel.constrained --bench OUT

Results: ``experiments/tatzel/results/constrained_iterncgp/table.json`` and a markdown table
on stdout.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from experiments import harness

OUT = harness.results_dir(__file__, "constrained_iterncgp")
OURS, MATH, DUAL, LABELS = "dual-iterncgp", "dual-iterncgp-math", "dual", "botorch-labels"
ORDER = ("random", LABELS, DUAL, OURS, MATH)


def _final(entry: dict) -> dict[int, float]:
    return {int(s): float(v[-1]) for s, v in entry["per_seed"].items()}


def paired(a: dict[int, float], b: dict[int, float]) -> dict[str, float]:
    """Mean +- s.e. of ``a - b`` over the seeds both have (``a`` and ``b``: regrets, so
    ``lead = baseline - strategy`` is ``paired(baseline, strategy)``).

    Example:
        >>> paired({0: 2.0, 1: 3.0}, {0: 1.0, 1: 1.0, 2: 5.0})
        {'mean': 1.5, 'se': 0.5, 'n': 2}
    """
    d = np.array([a[s] - b[s] for s in sorted(set(a) & set(b))])
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
    return {"mean": float(d.mean()), "se": se, "n": len(d)}


def _runs(folder: Path, problem: str, strategy: str) -> dict[int, dict]:
    out = {}
    for path in sorted((folder / problem / strategy).glob("seed_*/state.json")):
        state = json.loads(path.read_text())
        if state.get("finished"):  # a run still going is left out
            out[int(path.parent.name.split("_")[1])] = state
    return out


def divergence(a: dict, b: dict) -> int | None:
    """The first evaluation (1-based) at which two runs chose different points (``None``:
    never).

    Example:
        >>> run = lambda *xs: {"evaluations": [{"point": [x]} for x in xs]}
        >>> divergence(run(0.1, 0.2, 0.3), run(0.1, 0.2, 0.4))
        3
    """
    for i, (ea, eb) in enumerate(zip(a["evaluations"], b["evaluations"], strict=False)):
        if not np.allclose(ea["point"], eb["point"], rtol=0, atol=1e-6):
            return i + 1
    return None


def _share(run: dict) -> float:
    v = [it["metrics"].get("computational_share") for it in run["iterations"]]
    v = [x for x in v if x is not None]
    return float(np.mean(v)) if v else math.nan


def replay_seconds(run: dict, problem: str, reps: int = 3) -> dict[str, dict[str, float]]:
    """Mean seconds of one classifier update and of one acquisition step (``ask``), ``dual``
    vs ``dual-iterncgp``, on ``run``'s evaluations, the two strategies timed alternately."""
    from bo_ncgp.campaigns.strategies.base import History
    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.problems.registry import make_problem

    inst = make_problem(problem, seed=0)
    X = np.array([e["point"] for e in run["evaluations"]], dtype=float)
    evs = [inst.evaluate(x) for x in X]
    n0 = len(run["batches"][0])
    names = (DUAL, OURS)
    strategies = {name: build_strategy("constrained", name) for name in names}
    for s in strategies.values():
        s.setup(inst, 0)
        s.observe(X[:n0], evs[:n0], None)
    U = strategies[OURS]._unit(X)
    y = torch.tensor([float(bool(e.success)) for e in evs], dtype=torch.float64)
    update: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n0, len(U)):
        for name, s in strategies.items():
            t0 = time.perf_counter()
            if name == OURS:
                s._update_classifier(U[i : i + 1], y[i : i + 1])
            else:  # the DualSVGP classifier of ConstrainedBO
                s.classifier.update(U[i : i + 1], y[i : i + 1])
            update[name].append(time.perf_counter() - t0)
    for s in strategies.values():  # the value model too, for the acquisition steps
        s.reward_model.observe(
            U[n0:],
            s._standardise(np.array([e.value for e in evs[n0:]])),
            torch.as_tensor(np.isfinite([e.value for e in evs[n0:]])),
        )
    values = np.array([e.value for e in evs], dtype=float)
    success = np.array([float(bool(e.success)) for e in evs])
    history = History(X, values, success, None, [np.arange(len(X))])
    ask: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name, s in strategies.items():
            t0 = time.perf_counter()
            s.ask(history, 1, np.random.default_rng(rep))
            ask[name].append(time.perf_counter() - t0)
    return {
        "classifier_update": {name: float(np.mean(t)) for name, t in update.items()},
        "acquisition": {name: float(np.median(t)) for name, t in ask.items()},
    }


def _cell(s: dict, digits: int = 3) -> str:
    if not s or s.get("n", 0) == 0 or not math.isfinite(s["mean"]):
        return "--"
    if not math.isfinite(s.get("se", math.nan)):
        return f"{s['mean']:.{digits}g}"
    return f"{s['mean']:.{digits}g} ± {s['se']:.2g}"


def summarise(folder: Path, replay: bool = True) -> dict:
    """The table's numbers for the bench output ``folder``."""
    from bo_ncgp.campaigns.storage import read_json

    summary = read_json(folder / "summary.json")
    out = {"settings": summary["settings"], "problems": {}}
    for problem, entry in summary["problems"].items():
        st = entry["strategies"]
        finals = {name: _final(st[name]) for name in ORDER if name in st}
        row = {
            "final": {name: st[name]["final"] for name in ORDER if name in st},
            "seconds_per_iteration": {
                name: st[name]["seconds"]["iteration"] for name in ORDER if name in st
            },
        }
        if OURS in finals:
            for other in (DUAL, LABELS, MATH):
                if other in finals:
                    row[f"lead_over_{other}"] = paired(finals[other], finals[OURS])
            ours, ablation = _runs(folder, problem, OURS), _runs(folder, problem, MATH)
            row["computational_share"] = harness.summary([_share(r) for r in ours.values()])
            row["first_divergent_evaluation"] = {
                s: divergence(ours[s], ablation[s]) for s in sorted(set(ours) & set(ablation))
            }
            if replay and ours:
                row["replayed_seconds"] = replay_seconds(ours[min(ours)], problem)
        out["problems"][problem] = row
    return out


def table(result: dict) -> str:
    """The markdown table of :func:`summarise`'s result."""
    header = [
        "problem",
        *ORDER,
        "lead over dual",
        "lead over botorch-labels",
        "lead over ablation",
        "comp. share",
        "diverges at (median)",
        "s/it dual / ours (bench)",
        "clf update s: DualSVGP / IterNCGP",
        "acq. s: dual / ours",
    ]
    rows = []
    for problem, r in result["problems"].items():
        div = [v for v in r.get("first_divergent_evaluation", {}).values() if v is not None]
        sec = r["seconds_per_iteration"]
        rep = r.get("replayed_seconds", {})
        upd, acq = rep.get("classifier_update", {}), rep.get("acquisition", {})
        rows.append(
            [
                problem,
                *(_cell(r["final"].get(n, {})) for n in ORDER),
                _cell(r.get(f"lead_over_{DUAL}", {}), 2),
                _cell(r.get(f"lead_over_{LABELS}", {}), 2),
                _cell(r.get(f"lead_over_{MATH}", {}), 2),
                harness.fmt(r.get("computational_share", {"n": 0}), 2),
                f"{np.median(div):.0f}" if div else "never",
                f"{sec.get(DUAL, {}).get('mean', math.nan):.2f} / "
                f"{sec.get(OURS, {}).get('mean', math.nan):.2f}",
                f"{upd.get(DUAL, math.nan):.3f} / {upd.get(OURS, math.nan):.4f}",
                f"{acq.get(DUAL, math.nan):.2f} / {acq.get(OURS, math.nan):.2f}",
            ]
        )
    return harness.markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT)
    p.add_argument("--bench", type=Path, required=True, help="the bench output folder")
    p.add_argument("--no-replay", action="store_true", help="skip the update-time replay")
    args = p.parse_args(argv)
    harness.setup(args.threads)
    result = summarise(args.bench, replay=not args.no_replay)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.json").write_text(json.dumps(result, indent=1, default=str))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
