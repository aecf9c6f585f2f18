"""Throughput and peak memory of KernelOperator's backends.

For N in {1e4, 4e4}, D = 3, an RBF kernel, float32 and float64, k in {1, 16} right-hand
sides, measures kernel evaluations per second (N^2 / seconds per ``K @ V``) and the peak
resident memory of one product for the dense, chunked and KeOps backends, plus the machine's
rough peak FLOP/s from a large matmul in the same run. Each configuration runs in its own
subprocess so that its peak memory is isolated (``/proc/self/clear_refs`` resets the peak
after set-up). Results go to ``benchmarks/results/kernel_mvm.json`` and a markdown table.

Usage::

    python benchmarks/kernel_mvm.py                # full grid
    python benchmarks/kernel_mvm.py --quick        # N = 2000 only (smoke test)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results"
DENSE_LIMIT_BYTES = 12 * 2**30  # skip dense when K plus temporaries would exceed this


def _peak_rss_reset() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(backend: str, n: int, dtype_name: str, k: int, reps: int) -> dict:
    import gpytorch
    import torch

    from bo_ncgp.linalg import KernelOperator

    torch.manual_seed(0)
    dtype = getattr(torch, dtype_name)
    X = torch.rand(n, 3, dtype=dtype)
    V = torch.randn(n, k, dtype=dtype)
    kernel = gpytorch.kernels.RBFKernel().to(dtype)
    kernel.lengthscale = 0.2
    op = KernelOperator(kernel, X, backend=backend)
    with torch.no_grad():
        if backend == "keops":  # compile / load outside the timed region
            KernelOperator(kernel, X[:100], backend="keops") @ V[:100]
        base = _rss_mb()
        _peak_rss_reset()
        times = []
        for _ in range(reps):
            op._dense_cache = None  # time the full product, kernel evaluation included
            t0 = time.perf_counter()
            out = op @ V
            times.append(time.perf_counter() - t0)
        peak = _peak_rss_mb()
    assert torch.isfinite(out).all()
    t = sorted(times)[len(times) // 2]
    return {
        "backend": op.backend,
        "n": n,
        "dtype": dtype_name,
        "k": k,
        "seconds": t,
        "kernel_evals_per_s": n * n / t,
        "peak_mb_above_inputs": max(0.0, peak - base),
    }


def peak_flops(dtype_name: str, size: int = 3000) -> float:
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N = 2000 only")
    p.add_argument("--worker", nargs=4, metavar=("BACKEND", "N", "DTYPE", "K"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path, default=OUT / "kernel_mvm.json")
    args = p.parse_args(argv)
    if args.worker:
        b, n, d, k = args.worker
        print(json.dumps(worker(b, int(n), d, int(k), args.reps)))
        return 0
    from tqdm import tqdm

    from bo_ncgp.linalg._keops import keops_available

    ns = [2000] if args.quick else [10_000, 40_000]
    backends = ["dense", "chunked"] + (["keops"] if keops_available() else [])
    grid = [
        (b, n, d, k) for n in ns for d in ("float32", "float64") for k in (1, 16) for b in backends
    ]
    rows = []
    for b, n, d, k in tqdm(grid, desc="kernel MVM benchmark"):
        itemsize = 4 if d == "float32" else 8
        if b == "dense" and 3 * n * n * itemsize > DENSE_LIMIT_BYTES:
            rows.append(
                {
                    "backend": b,
                    "n": n,
                    "dtype": d,
                    "k": k,
                    "skipped": (
                        f"dense K needs ~{3 * n * n * itemsize / 2**30:.0f} GiB with temporaries"
                    ),
                }
            )
            continue
        reps = 1 if (n >= 40_000 and b != "keops") else args.reps
        cmd = [sys.executable, __file__, "--worker", b, str(n), d, str(k), "--reps", str(reps)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            rows.append({"backend": b, "n": n, "dtype": d, "k": k, "error": res.stderr[-500:]})
            continue
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    flops = {d: peak_flops(d) for d in ("float32", "float64")}
    result = {"date": time.strftime("%Y-%m-%d"), "peak_matmul_flops": flops, "rows": rows}
    from bo_ncgp.campaigns.storage import write_json  # not at the top: workers stay lean

    write_json(args.out, result)
    print(table(result))
    return 0


def table(result: dict) -> str:
    """The machine's matmul peak and a markdown table of the rows (KeOps against chunked)."""
    from experiments.harness import markdown_table  # not at the top: workers stay lean

    head = (
        f"peak matmul: float32 {result['peak_matmul_flops']['float32'] / 1e9:.1f} GFLOP/s, "
        f"float64 {result['peak_matmul_flops']['float64'] / 1e9:.1f} GFLOP/s\n\n"
    )
    header = ["N", "dtype", "k", "backend", "s / MVM", "kernel evals/s", "peak MB",
              "keops / chunked"]  # fmt: skip
    rows = result["rows"]
    cells = []
    for r in rows:
        if "seconds" not in r:
            cells.append([r["n"], r["dtype"], r["k"], r["backend"], r.get("skipped", "error"),
                          "", "", ""])  # fmt: skip
            continue
        ratio = ""
        if r["backend"] == "keops":
            ch = [
                c
                for c in rows
                if c.get("backend") == "chunked"
                and c["n"] == r["n"]
                and c["dtype"] == r["dtype"]
                and c["k"] == r["k"]
                and "seconds" in c
            ]
            if ch:
                ratio = f"{r['kernel_evals_per_s'] / ch[0]['kernel_evals_per_s']:.2f}x"
        cells.append([r["n"], r["dtype"], r["k"], r["backend"], f"{r['seconds']:.3f}",
                      f"{r['kernel_evals_per_s']:.3g}", f"{r['peak_mb_above_inputs']:.0f}",
                      ratio])  # fmt: skip
    return head + markdown_table(header, cells)


if __name__ == "__main__":
    raise SystemExit(main())
