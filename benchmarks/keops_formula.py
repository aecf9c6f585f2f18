"""Speed of the KeOps kernel formulas of :mod:`bo_ncgp.linalg._keops` against GPyTorch's.

For RBF and Matern-1/2, 3/2, 5/2 kernels (ARD lengthscales, d = 3, inputs uniform on the unit
cube), N points, k right-hand-side columns, float32 and float64, times one ``K @ V`` product
with three formulas on the same data, interleaved (old, new, gpytorch, old, new, ...) after one
warm-up each, with one torch thread and one OpenMP thread:

* ``new``: :func:`bo_ncgp.linalg._keops.keops_matmul` (inputs scaled once per point by
  ``c / lengthscale``; per-pair formula without constants);
* ``old``: the formula of the preceding version of ``_keops`` (inputs divided by the
  lengthscale, constants such as ``sqrt(5)`` and ``5/3`` multiplied per pair), reproduced in
  :func:`old_matmul` of this script;
* ``gpytorch``: ``gpytorch.kernels.keops.RBFKernel`` / ``MaternKernel`` with KeOps forced on
  (``max_cholesky_size(0)``), ``kernel(X, X) @ V``.

Ratios are ``median time / median time of gpytorch``; the spread is ``min-max`` of the ratios
of the individual interleaved rounds. ``% peak`` relates ``N^2 (3 d + 2 k)`` floating-point
operations (differences, squares and sums of the distance, multiply-adds of the product;
square roots and exponentials not counted) to the matmul peak measured in the same process.
The ``new`` products are checked against GPyTorch's (relative max difference in the table).
Results go to ``benchmarks/results/keops_formula.json`` and a markdown table on stdout.

Usage::

    python -m benchmarks.keops_formula            # N = 10,000 and 40,000, k = 1 and 16
    python -m benchmarks.keops_formula --quick    # N = 2,000, k = 1 (smoke test)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results"
KERNELS = ("rbf", "m12", "m32", "m52")
FULL = {"n": [10_000, 40_000], "k": [1, 16], "dtypes": ["float32", "float64"], "reps": 3}
QUICK = {"n": [2_000], "k": [1], "dtypes": ["float32", "float64"], "reps": 2}


def _kernels(name: str, dtype):
    """``(ours, gpytorch_keops)``: the same kernel as a plain GPyTorch kernel and as
    GPyTorch's KeOps kernel, with ARD lengthscales (0.2, 0.3, 0.25)."""
    import gpytorch
    import torch
    from gpytorch.kernels import keops as gk

    if name == "rbf":
        ours, theirs = gpytorch.kernels.RBFKernel(ard_num_dims=3), gk.RBFKernel(ard_num_dims=3)
    else:
        nu = {"m12": 0.5, "m32": 1.5, "m52": 2.5}[name]
        ours = gpytorch.kernels.MaternKernel(nu=nu, ard_num_dims=3)
        theirs = gk.MaternKernel(nu=nu, ard_num_dims=3)
    ell = torch.tensor([0.2, 0.3, 0.25], dtype=dtype)
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    ours.lengthscale = ell
    theirs.lengthscale = ell
    return ours, theirs


def old_matmul(kernel, X1, X2, V):
    """``K(X1, X2) @ V`` with the preceding formula of ``bo_ncgp.linalg._keops`` (RBF and
    Matern kernels only): inputs divided by the lengthscale, constants applied per pair."""
    import gpytorch
    import torch
    from pykeops.torch import LazyTensor

    ell = kernel.lengthscale
    x1 = LazyTensor((X1 / ell).unsqueeze(-2))
    x2 = LazyTensor((X2 / ell).unsqueeze(-3))
    d2 = ((x1 - x2) ** 2).sum(-1)
    if isinstance(kernel, gpytorch.kernels.RBFKernel):
        return (-0.5 * d2).exp() @ V.contiguous()
    nu = float(kernel.nu)
    r = (d2 + torch.finfo(X1.dtype).tiny * 1e4).sqrt()
    if nu == 0.5:
        K = (-r).exp()
    elif nu == 1.5:
        c = math.sqrt(3.0)
        K = (1.0 + c * r) * (-c * r).exp()
    else:
        c = math.sqrt(5.0)
        K = (1.0 + c * r + (5.0 / 3.0) * d2) * (-c * r).exp()
    return K @ V.contiguous()


def peak_flops(dtype_name: str, size: int = 2000) -> float:
    """Best-of-three FLOP/s of a ``size x size`` matmul (one thread in :func:`main`)."""
    import torch

    dtype = getattr(torch, dtype_name)
    A = torch.randn(size, size, dtype=dtype)
    B = torch.randn(size, size, dtype=dtype)
    A @ B
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def run_case(kernel_name: str, n: int, k: int, dtype_name: str, reps: int) -> dict:
    """Times old, new and GPyTorch's formula on one configuration (interleaved rounds)."""
    import gpytorch
    import torch

    from bo_ncgp.linalg._keops import keops_matmul

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(n, 3, dtype=dtype, generator=gen)
    V = torch.randn(n, k, dtype=dtype, generator=gen)
    ours, theirs = _kernels(kernel_name, dtype)
    variants = {
        "old": lambda: old_matmul(ours, X, X, V),
        "new": lambda: keops_matmul(ours, X, X, V),
        "gpytorch": lambda: theirs(X, X) @ V,
    }
    times: dict[str, list[float]] = {v: [] for v in variants}
    with torch.no_grad(), gpytorch.settings.max_cholesky_size(0):
        results = {v: f() for v, f in variants.items()}  # warm-up (compiles / loads)
        for _ in range(reps):
            for v, f in variants.items():
                t0 = time.perf_counter()
                f()
                times[v].append(time.perf_counter() - t0)
    ref = results["gpytorch"]
    scale = float(ref.abs().max())
    med = {v: statistics.median(t) for v, t in times.items()}
    rounds = {
        v: [a / b for a, b in zip(t, times["gpytorch"], strict=True)] for v, t in times.items()
    }
    return {
        "kernel": kernel_name,
        "n": n,
        "k": k,
        "dtype": dtype_name,
        "seconds_median": med,
        "seconds": times,
        "ratio_to_gpytorch": {v: med[v] / med["gpytorch"] for v in variants},
        "ratio_spread": {v: [min(q), max(q)] for v, q in rounds.items()},
        "new_vs_gpytorch_rel_diff": float((results["new"] - ref).abs().max()) / scale,
        "old_vs_gpytorch_rel_diff": float((results["old"] - ref).abs().max()) / scale,
        "flops": float(n) * n * (3 * 3 + 2 * k),
    }


def table(result: dict) -> str:
    """Markdown table of the rows of a result."""
    peak = result["peak_matmul_flops"]
    lines = [
        f"matmul peak (1 thread): float32 {peak['float32'] / 1e9:.1f} GFLOP/s, "
        f"float64 {peak['float64'] / 1e9:.1f} GFLOP/s; ratios are time / GPyTorch's time",
        "",
        "| kernel | N | k | dtype | old s | new s | gpytorch s | old / gpyt | new / gpyt "
        "(spread) | new % peak | gpyt % peak | new rel. diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        s, q = r["seconds_median"], r["ratio_to_gpytorch"]
        lo, hi = r["ratio_spread"]["new"]
        pk = peak[r["dtype"]]
        lines.append(
            f"| {r['kernel']} | {r['n']} | {r['k']} | {r['dtype']} | {s['old']:.3g} | "
            f"{s['new']:.3g} | {s['gpytorch']:.3g} | {q['old']:.2f} | {q['new']:.2f} "
            f"({lo:.2f}-{hi:.2f}) | {100 * r['flops'] / s['new'] / pk:.1f} | "
            f"{100 * r['flops'] / s['gpytorch'] / pk:.1f} | {r['new_vs_gpytorch_rel_diff']:.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N = 2000, k = 1, 2 repetitions")
    p.add_argument("--n", type=int, nargs="+", help="numbers of points (overrides preset)")
    p.add_argument("--k", type=int, nargs="+", help="numbers of columns (overrides preset)")
    p.add_argument("--dtypes", nargs="+", choices=["float32", "float64"])
    p.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS))
    p.add_argument("--reps", type=int, help="interleaved rounds after the warm-up")
    p.add_argument("--out", type=Path, default=OUT / "keops_formula.json")
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("n", "k", "dtypes", "reps"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # KeOps' CPU loop (before its first load)
    import torch

    from bo_ncgp.campaigns.storage import write_json

    torch.set_num_threads(1)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "config": cfg,
        "omp_num_threads": os.environ["OMP_NUM_THREADS"],
        "peak_matmul_flops": {d: peak_flops(d) for d in ("float32", "float64")},
        "rows": [],
    }
    for n in cfg["n"]:
        for dtype_name in cfg["dtypes"]:
            for k in cfg["k"]:
                for name in args.kernels:
                    row = run_case(name, n, k, dtype_name, cfg["reps"])
                    result["rows"].append(row)
                    print(
                        f"{name} N={n} k={k} {dtype_name}: new/gpytorch "
                        f"{row['ratio_to_gpytorch']['new']:.2f}, old/gpytorch "
                        f"{row['ratio_to_gpytorch']['old']:.2f}",
                        flush=True,
                    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
