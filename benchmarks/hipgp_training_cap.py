"""How accurate HIP-GP's whitened rows ``k_n`` are after a few PCG iterations from the
interpolation start: the evidence behind the training cap of minibatch steps
(:data:`bo_ncgp.models.hipgp.model.MINIBATCH_PCG_MAX_ITERS`).

For ``n`` random points in ``[0, 1]^2`` and a ``G x G`` grid on ``[-0.02, 1.02]^2`` (M = G^2,
FFT whitening with the default embedding), the relative error ``|k_n - k_n*| / |k_n*|`` of
the rows after ``c`` PCG iterations started at the cubic interpolation weights
(:func:`~bo_ncgp.models.hipgp.whitening.interpolation_guess`), against a solve to ``1e-10``;
"zero 20": 20 iterations from zero. Kernels: Matern-5/2 at 6, 3 and 1.5 grid spacings,
Matern-3/2 at 3 and RBF at 2. Medians and maxima over the points; no timings. Results:
``benchmarks/results/hipgp_training_cap.json`` and a markdown table on stdout.

Usage::

    python -m benchmarks.hipgp_training_cap            # G = 32, 60 points
    python -m benchmarks.hipgp_training_cap --quick    # G = 12, 10 points
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.models.hipgp import Grid
from bo_ncgp.models.hipgp.interdomain import cross_covariance
from bo_ncgp.models.hipgp.whitening import FFTWhitener, interpolation_guess
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results" / "hipgp_training_cap.json"
ITERS = (0, 1, 2, 3, 5, 10, 20)
#: (name, Matern nu or None for RBF, lengthscale in grid spacings)
KERNELS = (("Matern-5/2", 2.5, 6.0), ("Matern-5/2", 2.5, 3.0), ("Matern-5/2", 2.5, 1.5),
           ("Matern-3/2", 1.5, 3.0), ("RBF", None, 2.0))  # fmt: skip


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
    out = {}
    for c in ITERS:
        x = W if c == 0 else emb.solve(k_un, tol=1e-12, max_iters=c, x0=W)[0]
        out[str(c)] = rel(x)
    out["zero 20"] = rel(emb.solve(k_un, tol=1e-12, max_iters=20)[0])
    return out


def table(res: dict) -> str:
    cols = [*(str(c) for c in ITERS), "zero 20"]
    cells = [
        [r["kernel"], f"{r['spacings']:g}", *(f"{100 * r['errors'][c][0]:.2g} / "
                                               f"{100 * r['errors'][c][1]:.2g}" for c in cols)]
        for r in res["rows"]
    ]  # fmt: skip
    header = ["kernel", "lengthscale / spacing", *(f"c = {c} (%)" for c in cols)]
    return markdown_table(header, cells)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke test")
    p.add_argument("--side", type=int, default=None, help="grid side G")
    p.add_argument("--points", type=int, default=None, help="number of points")
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
    write_json(args.out, res)
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
