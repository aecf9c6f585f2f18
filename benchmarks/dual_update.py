"""Time of one DualSVGP.update with default settings against an SVGP refit on the same data.

Setting: a 4-D problem, ``x ~ U[0, 1]^4``, either Bernoulli (``y = 1[sum_j sin(6 x_j) > 0]``,
one ``ScaleKernel(RBF, ARD)``) or a 3-class Softmax (``y = argmax_c sin(6 x_c + c)``, one
``ScaleKernel(RBF, ARD)`` per latent: batch shape ``(3,)``), and m inducing points (100; 300
in the case where choosing many inducing points from a small batch dominates). A
:class:`~bo_ncgp.models.DualSVGP` with its default settings (pivoted-Cholesky inducing update
on ``[Z, X_new]``, 10 memory points, 10 inner steps, 10 hyperparameter steps, lr 0.01) is
streamed ``n0`` points in batches of 1,000; then one ``update`` with the next batch (100
points; 20 with m = 300) is timed against

* ``update, fixed Z``: the same update with ``inducing_update="fixed"`` (no selection);
* ``inducing selection``: the pivoted Cholesky of
  :func:`~bo_ncgp.models.dual.select_inducing_points` on ``[Z, X_new]`` alone, with blocked
  row requests (the default) and with one row request per pivot (``block_entries=1``); both
  must choose the same inducing points;
* ``SVGP refit``: :class:`~bo_ncgp.models.baselines.OfflineSVGP` (GPyTorch's SVGP) started at
  the model's kernel and inducing inputs, refitted on all ``n0 + batch`` points by full-batch
  Adam with as many optimiser steps as the update takes (10 + 10, lr 0.01).

All variants are timed in one process, interleaved (A, B, C, ... A, B, C, ...) after one
warm-up each, 1 thread; reported are medians, minima and ratios to the SVGP refit. Results:
``benchmarks/results/dual_update.json`` and a markdown table on stdout.

Usage::

    python -m benchmarks.dual_update            # Bernoulli n0 = 1,000, 10,000; Softmax 1,000
    python -m benchmarks.dual_update --quick    # n0 = 200, m = 20 (smoke test)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Bernoulli, Likelihood, Softmax
from bo_ncgp.linalg import pivoted_cholesky
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.baselines import OfflineSVGP
from bo_ncgp.models.dual.inducing import _SummedRows
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results" / "dual_update.json"


def _data(model: str, n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    if model == "softmax":
        return X, torch.sin(6 * X[:, :3] + torch.arange(3.0)).argmax(-1)
    return X, (torch.sin(6 * X).sum(-1) > 0).to(X.dtype)


def _prior(model: str, d: int) -> tuple[gpytorch.kernels.Kernel, Likelihood]:
    if model == "softmax":
        b = torch.Size([3])
        rbf = gpytorch.kernels.RBFKernel(ard_num_dims=d, batch_shape=b)
        return gpytorch.kernels.ScaleKernel(rbf, batch_shape=b).double(), Softmax(3)
    rbf = gpytorch.kernels.RBFKernel(ard_num_dims=d)
    return gpytorch.kernels.ScaleKernel(rbf).double(), Bernoulli()


def _streamed_model(name: str, X: torch.Tensor, y: torch.Tensor, m: int, chunk: int) -> DualSVGP:
    kernel, likelihood = _prior(name, X.shape[1])
    model = DualSVGP(kernel, likelihood, X[:m], generator=torch.Generator().manual_seed(0))
    for idx in torch.arange(X.shape[0]).split(chunk):
        model.update(X[idx], y[idx])
    return model


def _interleaved(fns: dict, reps: int) -> dict[str, list[float]]:
    for fn in fns.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return times


def case(name: str, n0: int, m: int, b: int, cfg: dict) -> dict:
    """Time the variants of one model (``"bernoulli"`` or ``"softmax"``) with ``m`` inducing
    points after ``n0`` points, updated with ``b`` more; returns medians, minima, ratios to the
    refit and the selection check."""
    X, y = _data(name, n0 + b, cfg["d"])
    model = _streamed_model(name, X[:n0], y[:n0], m, cfg["chunk"])
    Xn, yn = X[n0:], y[n0:]
    steps = model.num_inner_steps + model.num_hyper_steps

    def update(inducing: str):
        def fn():
            mm = model.copy()
            mm.inducing_update = inducing
            mm.update(Xn, yn)

        return fn

    candidates = torch.cat([model.Z, Xn])

    def select(block_entries: int):
        def fn():
            with torch.no_grad():
                op = _SummedRows(model.kernel, candidates)
                return pivoted_cholesky(op, model.max_inducing, block_entries=block_entries)

        return fn

    def refit():
        likelihood = copy.deepcopy(model.likelihood)
        svgp = OfflineSVGP(copy.deepcopy(model.kernel), likelihood, model.Z, backend="gpytorch")
        svgp.fit(X, y, num_steps=steps, lr=model.lr)

    fns = {
        "update (default)": update("pivoted_cholesky"),
        "update, fixed Z": update("fixed"),
        "inducing selection, blocked rows": select(2**18),
        "inducing selection, one row per pivot": select(1),
        "SVGP refit": refit,
    }
    times = _interleaved(fns, cfg["reps"])
    fast, ref = select(2**18)(), select(1)()
    base = statistics.median(times["SVGP refit"])
    base_min = min(times["SVGP refit"])
    return {
        "model": name,
        "n0": n0,
        "m": m,
        "batch": b,
        "candidates": candidates.shape[0],
        "pivots": len(fast.pivots),
        "refit_steps": steps,
        "seconds_median": {k: statistics.median(v) for k, v in times.items()},
        "seconds_min": {k: min(v) for k, v in times.items()},
        "ratio_to_refit": {k: statistics.median(v) / base for k, v in times.items()},
        "ratio_to_refit_min": {k: min(v) / base_min for k, v in times.items()},
        "selection_pivots_equal": fast.pivots.tolist() == ref.pivots.tolist(),
        "selection_max_abs_L_diff": float((fast.L - ref.L).abs().max()),
    }


def table(out: dict) -> str:
    """Markdown table: one row per ``n0`` and variant (median, min, ratios to the refit)."""
    header = ["model", "n0", "m", "batch", "operation", "median s", "min s",
              "median / SVGP refit", "min / SVGP refit"]  # fmt: skip
    rows = [
        [c["model"], f"{c['n0']:,}", c["m"], c["batch"], k, f"{v:.4g}",
         f"{c['seconds_min'][k]:.4g}", f"{c['ratio_to_refit'][k]:.3g}",
         f"{c['ratio_to_refit_min'][k]:.3g}"]
        for c in out["cases"] for k, v in c["seconds_median"].items()
    ]  # fmt: skip
    return markdown_table(header, rows)


# cases: [model, n0, m, batch]
DEFAULT = {"cases": [["bernoulli", 1000, 100, 100], ["bernoulli", 10000, 100, 100],
                     ["softmax", 1000, 100, 100], ["bernoulli", 1000, 300, 20]],
           "d": 4, "chunk": 1000, "reps": 7}  # fmt: skip
QUICK = dict(DEFAULT, cases=[["bernoulli", 200, 20, 100], ["softmax", 200, 20, 100]], chunk=100,
             reps=2)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = QUICK if args.quick else DEFAULT
    out = {
        "benchmark": "dual_update",
        "config": cfg,
        "threads": torch.get_num_threads(),
        "cases": [case(name, n0, m, b, cfg) for name, n0, m, b in cfg["cases"]],
    }
    write_json(args.out, out)
    print(table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
