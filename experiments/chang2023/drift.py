"""Hyperparameter drift of the streaming dual SVGP against offline fits (Chang et al. 2023,
Sec. 3.4).

After every update of a streaming :class:`~bo_ncgp.models.DualSVGP` the hyperparameters are
recorded beside those of the optimum of the model's own objective and of an offline fit of
the same model class on all data seen so far, with the objective gap between them
(:class:`bo_ncgp.models.dual.diagnostics.DriftTracker`). Streams:

* ``bernoulli`` -- a stationary synthetic Bernoulli stream on ``[0, 1]^2`` (batches of
  ``batch`` points, RBF-ARD with BoTorch's ``Gamma(3, 6)`` lengthscale and ``Gamma(2, 0.15)``
  outputscale priors -- without them a first batch of 20 binary labels has no finite
  maximum-likelihood lengthscale --, ``m`` pivoted-Cholesky inducing points,
  ``memory_size`` BLS memory points per batch, the library's other defaults); test accuracy
  on 1,000 points;
* ``drifting`` -- the same with covariate drift: the first input of each batch in a window
  of width 0.3 sliding across ``[0, 1]`` over the stream;
* ``hotspots`` -- the CIV hotspot pool, surveyed one village at a time in the seed's random
  order after ``initial`` villages, with the ``svgp-entropy`` surrogate
  (:class:`~bo_ncgp.campaigns.strategies.hotspots.StreamingDual`, its default settings);
  prevalence MSE and hotspot accuracy on the villages not surveyed.

Each stream runs once per hyperparameter variant (:data:`VARIANTS`): ``paper`` -- Eq. 26 as
written (memory scaled by ``n_old / n_M``, the summarised old data held fixed as a dual pair)
with 10 Adam steps from a fresh state per update; ``paper_lbfgs`` -- the same objective
optimised to convergence by L-BFGS; ``default`` -- the library's defaults (L-BFGS to
convergence, the summarised old data held on ``f(Z)``, memory points counted once). On the
hotspot stream every point stays in memory, so the variants differ only in the optimiser
(:data:`HOTSPOT_VARIANTS`: the surrogate's 5 Adam steps, or L-BFGS). Results:
``experiments/chang2023/results/drift/<stream>.json`` and ``<stream>.png``.

Usage::

    bo-ncgp streaming-drift --quick                       # both streams, a few updates (< 1 min)
    bo-ncgp streaming-drift --streams bernoulli --updates 100
    python -m experiments.chang2023.drift --streams hotspots --updates 100 --every 5
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import gpytorch
import numpy as np
import torch
from gpytorch.priors import GammaPrior

from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.dual.diagnostics import DriftTracker
from experiments import harness

OUT = harness.results_dir(__file__, "drift")

PAPER = {"hyper_optimizer": "adam", "rest_factor": "dual", "memory_scaling": True}
VARIANTS = {
    "paper": dict(PAPER, num_hyper_steps=10),
    "paper_lbfgs": dict(PAPER, hyper_optimizer="lbfgs", num_hyper_steps=50),
    "default": {},
    "default_random_stratified": {"memory_selection": "random_stratified"},
    "default_reservoir_stratified": {"memory_selection": "reservoir_stratified"},
}
#: the hotspot surrogate's variants: its own Adam steps, or L-BFGS to convergence
HOTSPOT_VARIANTS = {
    "paper": {},
    "paper_lbfgs": {"hyper_optimizer": "lbfgs", "num_hyper_steps": 50},
    "default": {"hyper_optimizer": "lbfgs", "num_hyper_steps": 50},
    # every village stays in memory: no memory rule to vary
    "default_random_stratified": {"hyper_optimizer": "lbfgs", "num_hyper_steps": 50},
    "default_reservoir_stratified": {"hyper_optimizer": "lbfgs", "num_hyper_steps": 50},
}


def latent(X: torch.Tensor) -> torch.Tensor:
    """The latent function of the synthetic stream."""
    return 3.0 * torch.sin(2 * math.pi * X[:, 0]) * torch.cos(math.pi * X[:, 1])


def bernoulli_batches(cfg: dict, seed: int, drifting: bool = False):
    """``(X, y)`` batches of the synthetic stream and a test set on ``[0, 1]^2``. Drifting:
    the first input of batch ``t`` lies in a window of width 0.3 that slides from
    ``[0, 0.3]`` to ``[0.7, 1]`` over the stream (covariate drift; the test set covers the
    whole square, so forgetting shows)."""
    g = torch.Generator().manual_seed(seed)
    T = cfg["updates"]

    def draw(n: int, t: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        X = torch.rand(n, 2, generator=g, dtype=torch.float64)
        if t is not None:
            X[:, 0] = 0.7 * t / max(T, 1) + 0.3 * X[:, 0]
        return X, torch.bernoulli(torch.sigmoid(latent(X)), generator=g)

    test = draw(1000)
    return [draw(cfg["batch"], t if drifting else None) for t in range(T + 1)], test


def run_bernoulli(cfg: dict, variant: dict, seed: int, drifting: bool = False) -> dict:
    batches, (Xt, yt) = bernoulli_batches(cfg, seed, drifting)
    kernel = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.RBFKernel(ard_num_dims=2, lengthscale_prior=GammaPrior(3.0, 6.0)),
        outputscale_prior=GammaPrior(2.0, 0.15),
    ).double()
    X0, y0 = batches[0]
    model = DualSVGP(
        kernel, Bernoulli(), X0[: cfg["m"]], memory_size=cfg["memory_size"],
        generator=torch.Generator().manual_seed(seed), **variant,
    )  # fmt: skip
    tracker = DriftTracker(own=cfg["own"], starts=(model.copy(),), **_options(cfg))

    def metric(m: DualSVGP) -> dict:
        with torch.no_grad():
            p = m.predict_y(Xt)
        return {"accuracy": float(((p > 0.5).double() == yt).double().mean())}

    model.update(X0, y0)

    def step(t: int) -> DualSVGP:
        return model.update(*batches[t]) if t > 0 else model

    return _loop(cfg, tracker, metric, batches, step)


def _options(cfg: dict) -> dict:
    """Keywords of :func:`~bo_ncgp.models.dual.diagnostics.fit_offline` from ``cfg``."""
    return {"max_rounds": cfg["offline_rounds"]} if cfg.get("offline_rounds") else {}


def _loop(cfg: dict, tracker: DriftTracker, metric, batches: list, step) -> dict:
    """Update with batch ``t = 1, 2, ...`` (``step(t)`` returns the model), recording the
    drift every ``cfg["every"]`` updates and after the last."""
    rows, all_seconds, memory, finite = [], [], [], True
    Xs, ys = batches[0]
    for t in range(len(batches)):
        seconds = float("nan")
        if t > 0:
            t0 = time.perf_counter()
            model = step(t)
            seconds = time.perf_counter() - t0
            all_seconds.append(seconds)
            memory.append(len(model.memory))
            Xs, ys = torch.cat([Xs, batches[t][0]]), torch.cat([ys, batches[t][1]])
            with torch.no_grad():
                mean, var = model.predict_f(batches[t][0])
            finite = finite and bool(torch.isfinite(mean).all() and torch.isfinite(var).all())
        else:
            model = step(0)
        if t % cfg["every"] and t != len(batches) - 1:
            continue
        rec = tracker.record(model, Xs, ys)
        row = {"t": t, "update_seconds": seconds, "stream_metrics": metric(model),
               "offline_metrics": metric(tracker.offline)}  # fmt: skip
        rows.append(row)
        harness.log(
            f"t={t} n={rec.num_data} gap/n={rec.gap_per_point:.4f} "
            f"d(stream,off)={rec.distance_stream_offline:.3f} {row['stream_metrics']}"
        )
    return {"rows": rows, "records": tracker.as_dicts(), "update_seconds": all_seconds,
            "memory": memory, "finite": finite}  # fmt: skip


def run_hotspots(cfg: dict, variant: dict, seed: int, root=None, verify: bool = True) -> dict:
    from bo_ncgp.campaigns.strategies.hotspots import (
        HotspotStrategy,
        RandomVillage,
        StreamingDual,
        StreamingDualConfig,
    )
    from bo_ncgp.problems.hotspots import HotspotPool

    pool = HotspotPool.from_country(cfg["country"], seed=seed, root=root, verify=verify)
    strat = HotspotStrategy("drift", StreamingDual(StreamingDualConfig()), RandomVillage())
    strat.setup(pool, seed)
    order = pool.permutation[: cfg["initial"] + cfg["updates"]]
    init = order[: cfg["initial"]]
    strat.scale_pool(pool.pool[init])
    counts = torch.tensor([float(pool.observe(i)) for i in order], dtype=torch.float64)
    strat.fit(init, counts[: cfg["initial"]])
    for key, value in variant.items():
        setattr(strat.model, key, value)

    def metric(m: DualSVGP) -> dict:
        with torch.no_grad():
            prev = torch.sigmoid(m.predict_f(strat.U)[0]).numpy()
        out = pool.metrics(prev, np.asarray(strat.observed))
        return {"mse": float(out["mse"]), "accuracy": float(out["accuracy"])}

    tracker = DriftTracker(own=cfg["own"], **_options(cfg))
    idx = [init] + [[int(i)] for i in order[cfg["initial"] :]]
    ys = [counts[: cfg["initial"]]] + [counts[cfg["initial"] + k].reshape(1)
                                       for k in range(len(idx) - 1)]  # fmt: skip
    batches = [(strat.U[torch.as_tensor(np.asarray(i))], y) for i, y in zip(idx, ys, strict=True)]

    def step(t: int) -> DualSVGP:
        if t > 0:
            strat.fit(np.asarray(idx[t]), ys[t])
        return strat.model

    return _loop(cfg, tracker, metric, batches, step)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["variants"])
    keys = list(results["variants"][names[0]]["records"][0]["stream"])
    cols = len(keys) + 2
    fig, axes = plt.subplots(1, cols, figsize=(4 * cols, 3.6))
    for v, style in zip(names, ("-", "--", ":", "-."), strict=False):
        recs = results["variants"][v]["records"]
        n = [r["num_data"] for r in recs]
        for ax, key in zip(axes, keys, strict=False):
            stream = np.array([r["stream"][key] for r in recs])
            off = np.array([r["offline"][key] for r in recs])
            for j in range(stream.shape[1]):
                ax.plot(n, stream[:, j], style, color=f"C{j}", label=f"{v} [{j}]")
                if v == names[0]:
                    ax.plot(n, off[:, j], "k" + style, lw=0.8, label=f"offline [{j}]")
                if recs[0]["own"] is not None:
                    own = np.array([r["own"][key] for r in recs])
                    ax.plot(n, own[:, j], style, color=f"C{j}", alpha=0.35)
            ax.set_yscale("log")
            ax.set_title(key, fontsize=9)
            ax.set_xlabel("data seen")
        axes[-2].plot(n, [max(r["gap_per_point"], 1e-8) for r in recs], style, label=v)
        metric = next(iter(results["variants"][v]["rows"][0]["stream_metrics"]))
        axes[-1].plot(n, [r["stream_metrics"][metric] for r in results["variants"][v]["rows"]],
                      style, label=f"{v}")  # fmt: skip
        if v == names[0]:
            axes[-1].plot(n, [r["offline_metrics"][metric] for r in
                              results["variants"][v]["rows"]], "k:", label="offline")  # fmt: skip
    axes[-2].set_yscale("log")
    axes[-2].set_title("objective gap per point (nats)", fontsize=9)
    axes[-1].set_title(metric, fontsize=9)
    for ax in axes:
        ax.legend(fontsize=6)
    fig.tight_layout()
    harness.save_png(fig, path, dpi=90)
    plt.close(fig)


def summary_rows(results: dict) -> list[list]:
    """Per variant: first and last record's hyperparameter distance to the offline fit, its
    largest value, the objective gap per point, the metric and the median update seconds."""
    rows = []
    for v, res in results["variants"].items():
        recs, mrows = res["records"], res["rows"]
        metric = next(iter(mrows[0]["stream_metrics"]))
        secs = res["update_seconds"]
        first, last = secs[:100], secs[-100:]
        rows.append([
            results["stream"], v, recs[-1]["num_data"],
            f"{recs[0]['distance_stream_offline']:.3f} -> {recs[-1]['distance_stream_offline']:.3f}"
            f" (max {max(r['distance_stream_offline'] for r in recs):.3f})",
            "" if recs[-1]["distance_own_offline"] is None
            else f"{recs[-1]['distance_stream_own']:.3f} / {recs[-1]['distance_own_offline']:.3f}",
            f"{recs[-1]['gap_per_point']:.2e}",
            f"{mrows[-1]['stream_metrics'][metric]:.4f} ({metric}; offline "
            f"{mrows[-1]['offline_metrics'][metric]:.4f})",
            f"{np.median(first):.4f} / {np.median(last):.4f}" if secs else "",
            max(res["memory"], default=0), "yes" if res["finite"] else "NO",
        ])  # fmt: skip
    return rows


HEADER = ["stream", "variant", "data seen", "d(stream, offline) first -> last",
          "d(stream, own) / d(own, offline) last", "gap per point last", "metric last",
          "median update s first / last 100", "max memory", "finite"]  # fmt: skip

DEFAULT = {
    "streams": ["bernoulli", "hotspots"],
    "variants": ["paper", "paper_lbfgs", "default"],
    "updates": 100,
    "every": 5,
    "batch": 20,
    "m": 20,
    "memory_size": 5,
    "country": "civ",
    "initial": 100,
    "own": True,
    "seed": 0,
}
QUICK = dict(DEFAULT, updates=4, every=2, batch=10, m=8, initial=20)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, root=True)
    p.add_argument(
        "--streams",
        nargs="+",
        choices=["bernoulli", "drifting", "hotspots"],
        default=None,
        help="streams to run (default: the preset's)",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=None,
        help="hyperparameter-learning variants to compare (default: all)",
    )
    p.add_argument("--updates", type=int, default=None, help="streaming updates")
    p.add_argument("--every", type=int, default=None, help="record every this many updates")
    p.add_argument("--seed", type=int, default=None, help="seed of the stream (default 0)")
    p.add_argument("--no-own", action="store_true", help="skip the optimum of the own objective")
    p.add_argument("--batch", type=int, default=None, help="points per synthetic batch")
    p.add_argument("--offline-rounds", type=int, default=None,
                   help="most rounds of each offline fit (default 30)")  # fmt: skip
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(DEFAULT, QUICK, args, streams=args.streams, variants=args.variants,
                         updates=args.updates, every=args.every, seed=args.seed,
                         own=False if args.no_own else None, batch=args.batch,
                         offline_rounds=args.offline_rounds)  # fmt: skip
    values, table = [], []
    for stream in cfg["streams"]:
        results = {"experiment": "dual_svgp_drift", "stream": stream, "config": cfg,
                   "variants": {}}  # fmt: skip
        for v in cfg["variants"]:
            harness.log(f"{stream} / {v}")
            if stream in ("bernoulli", "drifting"):
                res = run_bernoulli(cfg, VARIANTS[v], cfg["seed"], stream == "drifting")
            else:
                res = run_hotspots(cfg, HOTSPOT_VARIANTS[v], cfg["seed"], args.root, args.verify)
            results["variants"][v] = res
            values += [r["gap"] for r in res["records"]]
        harness.write_json(args.out / f"{stream}.json", results)
        plot(results, args.out / f"{stream}.png")
        table += summary_rows(results)
    print(harness.markdown_table(HEADER, table))
    print(f"results written to {args.out}", file=sys.stderr)
    return harness.exit_code(values)


if __name__ == "__main__":
    raise SystemExit(main())
