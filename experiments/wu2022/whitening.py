"""Whitening time, HIP-GP (FFT + PCG) against Cholesky (Wu et al. 2022, Sec. 5.2, Table 1).

For a 1-D grid of ``M`` evenly spaced inducing points on [0, 1] and 200 random observation
locations, compute all whitened correlations ``k_n`` (Eq. 20) with

* ``hipgp``    -- circulant embedding, PCG with the circulant preconditioner (Eqs. 21-22) to
  a relative residual of 1e-10, then ``R^T`` by FFT;
* ``cholesky`` -- ``L = chol(K_uu)`` and ``k_n = L^{-1} k_un`` (only where ``K_uu`` fits).

Kernel: Matern-5/2, outputscale 0.1, lengthscale ``1 / M`` (the paper's ``L / M``). Both
timings include forming ``K_uu`` (resp. its first row) and ``k_un``; best of 3 runs for
``M <= 1e4``, one run above; one torch thread (the machine is shared). Results:
``experiments/wu2022/results/whitening.json``.

Usage::

    bo-ncgp hipgp-whitening            # M = 1e3 ... 1e6
    bo-ncgp hipgp-whitening --quick    # tiny configuration for CI
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import gpytorch
import torch
from tqdm import tqdm

from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.linalg.toeplitz import CirculantEmbedding, Grid, circulant_first_row
from experiments import harness

OUT = harness.results_dir(__file__)
PAPER = {"hipgp": [0.0045, 0.0185, 0.3475, 1.4595], "cholesky": [0.0175, 0.1745, None, None]}


def _kernel(M: int) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    k.outputscale = 0.1
    k.base_kernel.lengthscale = 1.0 / M
    return k


@torch.no_grad()
def time_hipgp(M: int, X: torch.Tensor, chunk: int) -> dict:
    k = _kernel(M)
    grid = Grid([0.0], [1.0], (M,))
    t0 = time.perf_counter()
    emb = CirculantEmbedding(circulant_first_row(k, grid))
    Z = grid.points()
    iters = 0
    norms = []
    for s in range(0, X.shape[0], chunk):
        k_un = k(X[s : s + chunk], Z).to_dense()  # (chunk, M)
        sol, res = emb.solve(k_un, tol=1e-10)
        kn = emb.root_t_mv(sol)
        iters = max(iters, res.iterations)
        norms.append((kn * kn).sum(-1))
    t = time.perf_counter() - t0
    return {"seconds": t, "pcg_iterations": iters, "knorm2_mean": float(torch.cat(norms).mean())}


@torch.no_grad()
def time_cholesky(M: int, X: torch.Tensor) -> dict:
    k = _kernel(M)
    Z = Grid([0.0], [1.0], (M,)).points()
    t0 = time.perf_counter()
    L = stable_cholesky(k(Z).to_dense(), name="K_uu")
    kn = torch.linalg.solve_triangular(L, k(Z, X).to_dense(), upper=False)
    t = time.perf_counter() - t0
    return {"seconds": t, "knorm2_mean": float((kn * kn).sum(0).mean())}


def run(cfg: dict, out: Path) -> dict:
    torch.manual_seed(0)
    X = torch.rand(cfg["num_obs"], 1)
    time_hipgp(64, X[:4], 4)  # warm-up: first FFT / kernel calls pay one-off set-up costs
    time_cholesky(64, X[:4])
    rows = []
    for M in tqdm(cfg["sizes"], desc="M"):
        reps = cfg["repeats"] if M <= cfg.get("repeat_max_M", 10000) else 1
        row = {
            "M": M,
            "hipgp": min(
                (time_hipgp(M, X, cfg["chunk"]) for _ in range(reps)), key=lambda r: r["seconds"]
            ),
        }
        if M <= cfg["max_cholesky"]:
            row["cholesky"] = min(
                (time_cholesky(M, X) for _ in range(reps)), key=lambda r: r["seconds"]
            )
            row["ratio_cholesky_over_hipgp"] = row["cholesky"]["seconds"] / row["hipgp"]["seconds"]
        rows.append(row)
        print(row, file=sys.stderr)
    res = {"config": cfg, "rows": rows, "paper_v100_seconds": PAPER}
    harness.write_json(out / cfg["file"], res)
    return res


DEFAULT = {
    "sizes": [1000, 10000, 100000, 1000000],
    "num_obs": 200,
    "max_cholesky": 10000,
    "chunk": 50,
    "repeats": 3,
    "repeat_max_M": 10000,
    "file": "whitening.json",
}
QUICK = dict(
    DEFAULT, sizes=[64, 256], num_obs=20, max_cholesky=256, repeats=1, file="whitening_quick.json"
)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT)
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="grid sizes M")
    p.add_argument(
        "--repeat-max-m", type=int, default=None, help="best of 3 runs only up to this M"
    )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(
        DEFAULT, QUICK, args, sizes=args.sizes or None, repeat_max_M=args.repeat_max_m
    )
    res = run(cfg, args.out)
    for r in res["rows"]:
        ch = r.get("cholesky", {}).get("seconds")
        print(f"M={r['M']:>8d}  hipgp {r['hipgp']['seconds']:.4f}s  cholesky {ch}")
    return harness.exit_code(r["hipgp"]["seconds"] for r in res["rows"])


if __name__ == "__main__":
    raise SystemExit(main())
