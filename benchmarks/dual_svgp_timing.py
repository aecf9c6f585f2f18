"""Time of DualSVGP.update and DualSVGP.condition against an offline refit.

Setting: the streaming banana model of ``experiments/chang2023/banana.py`` (Bernoulli,
m = 25 inducing points, 5 BLS memory points per batch, 20 damped inner steps, 2 rounds of 50
Adam steps) after three batches of 100 sorted points. Measured in one process, as medians over
repetitions:

* ``update``: one streaming step (Algorithm 1) with the fourth batch of 100 points (also
  without the hyperparameter steps);
* ``condition q``: ``condition(X_q, y_q)`` for q = 1, 10, 100 new points, plus the first
  prediction that factorises the conditioned posterior (``condition+predict``);
* ``fantasy 1000x16``: the hotspot pattern, 1,000 candidates x 16 fantasy targets, one point
  each (one batched ``condition`` + predicting each fantasy model at its candidate);
* baselines: an offline refit of the same model on all 400 points (same inner/hyper settings,
  from scratch), and the same refit without hyperparameter steps (sites only).

Ratios are ``time / offline refit``. Results: ``benchmarks/results/dual_svgp_timing.json``
and a markdown table on stdout.

Usage::

    python benchmarks/dual_svgp_timing.py            # full
    python benchmarks/dual_svgp_timing.py --quick    # smoke test (fewer repetitions, smaller)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.data import load_banana
from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.models import DualSVGP
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results"


def _model(Z0, hyper_steps: int, cfg: dict) -> DualSVGP:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2))
    return DualSVGP(
        k, Bernoulli(), Z0, memory_size=cfg["memory_size"], rho=0.8,
        num_inner_steps=cfg["inner_steps"], num_hyper_steps=hyper_steps,
        num_rounds=cfg["rounds"], lr=0.05, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip


def _time(fn, reps: int) -> tuple[float, float]:
    """``(median, min)`` wall time over ``reps`` calls after one warm-up call (the machine is
    shared, so the minimum is the better estimate of the intrinsic cost)."""
    fn()  # warm-up (caches, lazy imports)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out), min(out)


def run(cfg: dict, root=None) -> dict:
    data = load_banana(root=root)
    order = torch.argsort(data.X_train[:, 0])
    X, y = data.X_train[order][: cfg["n"]], data.y_train[order][: cfg["n"]]
    batches = torch.arange(X.shape[0]).tensor_split(4)
    model = _model(X[: cfg["m"]], cfg["hyper_steps"], cfg)
    for idx in batches[:3]:
        model.update(X[idx], y[idx])
    last = batches[3]
    reps = cfg["reps"]
    res: dict[str, tuple[float, float]] = {}
    res["update"] = _time(lambda: model.copy().update(X[last], y[last]), reps)

    def update_sites_only():
        m = model.copy()
        m.num_hyper_steps = 0
        m.update(X[last], y[last])

    res["update, no hyper steps"] = _time(update_sites_only, reps)
    res["copy (included in update)"] = _time(model.copy, reps)

    def refit(h):
        return lambda: _model(X[: cfg["m"]], h, cfg).update(X, y)

    res["offline refit"] = _time(refit(cfg["hyper_steps"]), reps)
    res["offline refit, no hyper steps"] = _time(refit(0), reps)
    g = torch.Generator().manual_seed(1)
    Xt = data.X_test
    with torch.no_grad():
        for q in (1, 10, 100):
            idx = torch.randperm(Xt.shape[0], generator=g)[:q]
            xq, yq = Xt[idx], data.y_test[idx]
            res[f"condition q={q}"] = _time(lambda xq=xq, yq=yq: model.condition(xq, yq), reps)
            res[f"condition+predict q={q}"] = _time(
                lambda xq=xq, yq=yq: model.condition(xq, yq).predict_f(Xt[:1]), reps
            )
        nc, nf = cfg["candidates"], 16
        cand = Xt[torch.randperm(Xt.shape[0], generator=g)[:nc]].unsqueeze(-2)  # (nc, 1, 2)
        fant = torch.bernoulli(torch.full((nf, nc, 1), 0.5), generator=g)
        res[f"fantasy condition {nc}x{nf}"] = _time(lambda: model.condition(cand, fant), reps)
        res[f"fantasy condition+predict {nc}x{nf}"] = _time(
            lambda: model.condition(cand, fant).predict_f(cand), reps
        )
        res["predict 1000 points (unconditioned)"] = _time(lambda: model.predict_f(Xt[:1000]), reps)
    base_med, base_min = res["offline refit"]
    return {
        "benchmark": "dual_svgp_timing",
        "config": cfg,
        "threads": torch.get_num_threads(),
        "seconds_median": {k: v[0] for k, v in res.items()},
        "seconds_min": {k: v[1] for k, v in res.items()},
        "ratio_to_offline_refit": {k: v[0] / base_med for k, v in res.items()},
        "ratio_to_offline_refit_min": {k: v[1] / base_min for k, v in res.items()},
    }


def table(out: dict) -> str:
    """Markdown table of the medians, minima and their ratios to the offline refit."""
    header = ["operation", "median s", "min s", "median / offline refit", "min / offline refit"]
    rows = [
        [k, f"{v:.4g}", f"{out['seconds_min'][k]:.4g}", f"{out['ratio_to_offline_refit'][k]:.3g}",
         f"{out['ratio_to_offline_refit_min'][k]:.3g}"]
        for k, v in out["seconds_median"].items()
    ]  # fmt: skip
    return markdown_table(header, rows)


DEFAULT = {"n": 400, "m": 25, "memory_size": 5, "inner_steps": 20, "hyper_steps": 50,
           "rounds": 2, "reps": 7, "candidates": 1000}  # fmt: skip
QUICK = dict(DEFAULT, n=80, m=10, inner_steps=3, hyper_steps=3, rounds=1, reps=1, candidates=50)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--root", default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT / "dual_svgp_timing.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    out = run(QUICK if args.quick else DEFAULT, root=args.root)
    write_json(args.out, out)
    print(table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
