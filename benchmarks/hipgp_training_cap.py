"""How accurate HIP-GP's whitened rows ``k_n`` are after a few PCG iterations from the
interpolation start: the evidence behind the training solves of minibatch steps
(:data:`bo_ncgp.models.hipgp.model.MINIBATCH_PCG_MAX_ITERS`,
:func:`bo_ncgp.models.hipgp.model.minibatch_start_tol`).

For ``n`` random points in ``[0, 1]^2`` and a ``G x G`` grid on ``[-0.02, 1.02]^2`` (M = G^2,
FFT whitening with the default embedding), the relative error ``|k_n - k_n*| / |k_n*|`` of
the rows after ``c`` PCG iterations started at the cubic interpolation weights
(:func:`~bo_ncgp.models.hipgp.whitening.interpolation_guess`), against a solve to ``1e-10``;
"zero 20": 20 iterations from zero. Kernels: Matern-5/2 at 6, 3 and 1.5 grid spacings,
Matern-3/2 at 3 and RBF at 2. Medians and maxima over the points; "estimate": the
start's estimated error that ``pcg_train_max_iters="auto"`` checks
(:meth:`~bo_ncgp.models.hipgp.whitening.FFTWhitener.start_errors`).

Second table (``--train``): minibatch training of :class:`~bo_ncgp.models.hipgp.HIPGP`
with each training solve -- the library default ``"auto"`` (a row's start is kept where
its estimated error is within :func:`~bo_ncgp.models.hipgp.model.minibatch_start_tol`,
3 PCG iterations otherwise), 3 PCG iterations for every row, no solve (``k_n = R^T W_n``)
and converged solves (``pcg_tol``) -- on ``N`` noisy observations (sd 0.1) of a smooth
function, batches of 500 (``N = 2000``), natural-gradient steps ``1 / (t + 5)`` (floor
0.05; from 0.2, where the CG of the mean step converges: at step 1 under noise 0.01 it
stops at its iteration cap, and two variants with the same rows end about 1 % apart), the
variants' epochs interleaved. Reported: test RMSE against the noise-free
function, the relative distance of the predictive mean from the converged variant's,
the share of rows whose start was kept, and seconds per epoch (median; ratio to the
3-iteration variant). Results: ``benchmarks/results/hipgp_training_cap.json`` and markdown
tables on stdout.

Usage::

    python -m benchmarks.hipgp_training_cap            # G = 32, 60 points
    python -m benchmarks.hipgp_training_cap --train    # and the training table
    python -m benchmarks.hipgp_training_cap --quick    # G = 12, 10 points
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import gpytorch
import torch

from benchmarks.hipgp_time_to_rmse import truth
from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models.hipgp import HIPGP, Grid
from bo_ncgp.models.hipgp.interdomain import cross_covariance
from bo_ncgp.models.hipgp.whitening import FFTWhitener, interpolation_guess
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results" / "hipgp_training_cap.json"
ITERS = (0, 1, 2, 3, 5, 10, 20)
#: (name, Matern nu or None for RBF, lengthscale in grid spacings)
KERNELS = (("Matern-5/2", 2.5, 6.0), ("Matern-5/2", 2.5, 3.0), ("Matern-5/2", 2.5, 1.5),
           ("Matern-3/2", 1.5, 3.0), ("RBF", None, 2.0))  # fmt: skip
#: kernels of the training table: good, middling and poor interpolation starts
TRAIN_KERNELS = (("Matern-5/2", 2.5, 6.0), ("Matern-5/2", 2.5, 3.0), ("Matern-5/2", 2.5, 1.0))
#: training solves: name -> ``pcg_train_max_iters``
VARIANTS = {"auto": "auto", "cap 3": 3, "no solve": 0, "converged": None}
TRAIN = {"num_train": 2000, "num_test": 500, "batch": 500, "epochs": 3}
TRAIN_QUICK = {"num_train": 200, "num_test": 50, "batch": 50, "epochs": 1}


def _kernel(nu: float | None, lengthscale: float) -> gpytorch.kernels.Kernel:
    base = gpytorch.kernels.RBFKernel() if nu is None else gpytorch.kernels.MaternKernel(nu=nu)
    k = gpytorch.kernels.ScaleKernel(base)
    k.base_kernel.lengthscale = lengthscale
    return k


@torch.no_grad()
def errors(side: int, n: int, nu: float | None, spacings: float, seed: int = 0) -> dict:
    """Median and max relative error of ``k_n`` after each count of :data:`ITERS`."""
    grid = Grid([-0.02, -0.02], [1.02, 1.02], (side, side))
    k = _kernel(nu, spacings * float(grid.spacing[0]))
    X = torch.rand(n, 2, generator=torch.Generator().manual_seed(seed))
    codes = torch.zeros(n, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long kernels clamp a little of the embedding
        w = FFTWhitener(k, grid, jitter=1e-6)
    emb = w.embedding
    k_un = cross_covariance(k, grid.points(), X, codes).mT
    ref = w.root_t_mv(emb.solve(k_un, tol=1e-10)[0])

    def rel(x: torch.Tensor) -> tuple[float, float]:
        e = (w.root_t_mv(x) - ref).norm(dim=-1) / ref.norm(dim=-1)
        return float(e.median()), float(e.max())

    W = interpolation_guess(X, grid, codes)
    KW = emb.kuu_mv(W)
    est = w.start_errors(W, k_un - KW, KW)
    out = {"estimate": (float(est.median()), float(est.max()))}
    for c in ITERS:
        x = W if c == 0 else emb.solve(k_un, tol=1e-12, max_iters=c, x0=W)[0]
        out[str(c)] = rel(x)
    out["zero 20"] = rel(emb.solve(k_un, tol=1e-12, max_iters=20)[0])
    return out


def train_rows(side: int, nu: float | None, spacings: float, cfg: dict, seed: int = 0) -> dict:
    """Test RMSE, distance from the converged variant and seconds per epoch of the
    training solves of :data:`VARIANTS` (epochs interleaved)."""
    grid = Grid([-0.02, -0.02], [1.02, 1.02], (side, side))
    k = _kernel(nu, spacings * float(grid.spacing[0]))
    k.requires_grad_(False)
    g = torch.Generator().manual_seed(seed)
    n, nt, bs = cfg["num_train"], cfg["num_test"], cfg["batch"]
    X, Xt = torch.rand(n, 2, generator=g), torch.rand(nt, 2, generator=g)
    y = truth(X) + 0.1 * torch.randn(n, generator=g)
    models, times, kept = {}, {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long kernels clamp a little of the embedding
        for name, cap in VARIANTS.items():
            m = HIPGP(k, grid, likelihood=Gaussian(noise=0.01), pcg_train_max_iters=cap,
                      pcg_initial_guess="interpolation")  # fmt: skip
            m.likelihood.requires_grad_(False)
            with torch.no_grad():
                m.whitener()
            models[name], times[name], kept[name] = m, [], [0, 0]
    orders = {name: torch.Generator().manual_seed(seed + 1) for name in VARIANTS}
    for epoch in range(cfg["epochs"]):
        for name, m in models.items():
            perm = torch.randperm(n, generator=orders[name])
            t0 = time.perf_counter()
            for t, s in enumerate(range(0, n, bs)):
                idx = perm[s : s + bs]
                lr = max(0.05, 1.0 / (epoch * -(-n // bs) + t + 5))
                m.natgrad_step(X[idx], y[idx], num_data=n, lr=lr)
                if m.last_kept_starts is not None:
                    kept[name][0] += m.last_kept_starts
                kept[name][1] += idx.numel()
            times[name].append(time.perf_counter() - t0)
    with torch.no_grad():
        means = {name: m.predict_f(Xt)[0] for name, m in models.items()}
    ref, f = means["converged"], truth(Xt)
    out = {}
    for name in VARIANTS:
        out[name] = {
            "rmse": float((means[name] - f).square().mean().sqrt()),
            "distance": float((means[name] - ref).norm() / ref.norm()),
            "kept": kept[name][0] / kept[name][1],
            "seconds_per_epoch": statistics.median(times[name]),
            "epoch_seconds": times[name],
        }
    return out


def train_table(res: dict) -> str:
    cells = []
    for r in res["training"]:
        base = r["variants"]["cap 3"]["seconds_per_epoch"]
        for name, v in r["variants"].items():
            cells.append([
                r["kernel"], f"{r['spacings']:g}", name, f"{v['rmse']:.4f}",
                f"{100 * v['distance']:.2g}", f"{100 * v['kept']:.0f}",
                f"{v['seconds_per_epoch']:.2f}", f"{v['seconds_per_epoch'] / base:.2f}",
            ])  # fmt: skip
    header = ["kernel", "lengthscale / spacing", "training solves", "test RMSE (noise-free)",
              "mean off converged (%)", "starts kept (%)", "s / epoch", "/ cap 3"]  # fmt: skip
    return markdown_table(header, cells)


def table(res: dict) -> str:
    cols = ["estimate", *(str(c) for c in ITERS), "zero 20"]
    cells = [
        [r["kernel"], f"{r['spacings']:g}", *(f"{100 * r['errors'][c][0]:.2g} / "
                                               f"{100 * r['errors'][c][1]:.2g}" for c in cols)]
        for r in res["rows"]
    ]  # fmt: skip
    header = ["kernel", "lengthscale / spacing", "estimate, c = 0 (%)",
              *(f"c = {c} (%)" for c in cols[1:])]  # fmt: skip
    return markdown_table(header, cells)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke test")
    p.add_argument("--side", type=int, default=None, help="grid side G")
    p.add_argument("--points", type=int, default=None, help="number of points")
    p.add_argument("--train", action="store_true", help="also the training table")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    side = args.side or (12 if args.quick else 32)
    n = args.points or (10 if args.quick else 60)
    rows = [
        {"kernel": name, "spacings": s, "errors": errors(side, n, nu, s)} for name, nu, s in KERNELS
    ]
    res = {"side": side, "M": side * side, "points": n, "rows": rows}
    if args.train or args.quick:
        cfg = TRAIN_QUICK if args.quick else TRAIN
        kernels = TRAIN_KERNELS[::2] if args.quick else TRAIN_KERNELS
        res["train_config"] = cfg
        res["training"] = [
            {"kernel": name, "spacings": s, "variants": train_rows(side, nu, s, cfg)}
            for name, nu, s in kernels
        ]
    write_json(args.out, res)
    print(table(res))
    if "training" in res:
        print()
        print(train_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
