"""PCG with the circulant preconditioner against plain CG (Wu et al. 2022, Sec. 5.1, Fig. 1).

Solve ``K_uu x = b`` for 25 random standard-normal right-hand sides on 2-D grids of
25 x 25, 50 x 50 and 100 x 100 points on [0, 1]^2 (Matern-5/2 kernel, outputscale 1) to a
relative residual of 1e-10 (CG capped at 4,000 iterations: where it stops there the
fractions below are upper bounds), with CG and with PCG preconditioned by the top-left block of
``C^{-1}`` (Eqs. 21-22). Reported: the fraction of CG's iterations that PCG needs (mean and
max over right-hand sides), for lengthscale 0.05 (``--lengthscales`` for others). The
paper's lengthscale is not stated.
Results: ``experiments/wu2022/results/pcg.json`` and ``pcg.png`` (relative residual against
the fraction of CG iterations).

Usage::

    bo-ncgp hipgp-pcg            # full run
    bo-ncgp hipgp-pcg --quick    # tiny configuration for CI
"""

from __future__ import annotations

from pathlib import Path

import gpytorch
import torch
from tqdm import tqdm

from bo_ncgp.linalg.toeplitz import CirculantEmbedding, Grid, circulant_first_row
from experiments import harness

OUT = harness.results_dir(__file__)


@torch.no_grad()
def run_one(side: int, lengthscale: float, num_rhs: int, tol: float, cap: int) -> dict:
    k = gpytorch.kernels.MaternKernel(nu=2.5)
    k.lengthscale = lengthscale
    grid = Grid([0.0, 0.0], [1.0, 1.0], (side, side))
    emb = CirculantEmbedding(circulant_first_row(k, grid), warn=False)
    B = torch.randn(num_rhs, grid.num_points)
    out = {"M": grid.num_points, "lengthscale": lengthscale, "clamped": emb.clamped_fraction}
    for name, pre in (("cg", False), ("pcg", True)):
        _, res = emb.solve(B, precondition=pre, tol=tol, max_iters=cap, record_history=True)
        hist = torch.stack(res.history).squeeze(-1)  # (iters+1, rhs)
        out[name] = {
            "iterations": res.iterations,
            "column_iterations": res.column_iterations.squeeze(-1).tolist(),
            "converged": bool(res.converged.all()),
            "median_history": hist.median(-1).values.tolist(),
        }
    ci = torch.tensor(out["cg"]["column_iterations"], dtype=torch.float64)
    pi = torch.tensor(out["pcg"]["column_iterations"], dtype=torch.float64)
    frac = pi / ci
    out["fraction_mean"] = float(frac.mean())
    out["fraction_max"] = float(frac.max())
    # if CG hit the iteration cap, the true fractions are smaller (upper bounds here)
    out["cg_capped"] = not out["cg"]["converged"]
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ls = sorted({r["lengthscale"] for r in rows})
    fig, axes = plt.subplots(1, len(ls), figsize=(5 * len(ls), 3.6), squeeze=False)
    for ax, l in zip(axes[0], ls, strict=True):
        for r in (r for r in rows if r["lengthscale"] == l):
            n_cg = max(1, r["cg"]["iterations"])
            for name, style in (("cg", "--"), ("pcg", "-")):
                h = r[name]["median_history"]
                x = [i / n_cg for i in range(len(h))]
                ax.semilogy(x, h, style, label=f"{name.upper()} M={r['M']}")
        ax.set_xlabel("fraction of CG iterations")
        ax.set_ylabel("median relative residual")
        ax.set_title(f"Matern-5/2, lengthscale {l}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: dict, out: Path) -> dict:
    torch.manual_seed(0)
    rows = []
    for l in cfg["lengthscales"]:
        for side in tqdm(cfg["sides"], desc=f"lengthscale {l}"):
            rows.append(run_one(side, l, cfg["num_rhs"], cfg["tol"], cfg["cg_cap"]))
            harness.write_json(out / cfg["file"], {"config": cfg, "rows": rows})
    res = {"config": cfg, "rows": rows, "paper": {"625": "< 18%", "10000": "< 4.5%"}}
    harness.write_json(out / cfg["file"], res)
    plot(rows, out / cfg["file"].replace(".json", ".png"))
    return res


DEFAULT = {
    "sides": [25, 50, 100],
    "lengthscales": [0.05],
    "num_rhs": 25,
    "tol": 1e-10,
    "cg_cap": 4000,
    "file": "pcg.json",
}
QUICK = dict(DEFAULT, sides=[8, 12], lengthscales=[0.2], num_rhs=3, file="pcg_quick.json")


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT)
    p.add_argument(
        "--lengthscales",
        type=float,
        nargs="+",
        default=None,
        help="kernel lengthscales to run (default: the preset's)",
    )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(DEFAULT, QUICK, args, lengthscales=args.lengthscales or None)
    res = run(cfg, args.out)
    for r in res["rows"]:
        print(
            f"M={r['M']:>6d} l={r['lengthscale']}: CG {r['cg']['iterations']} it, PCG "
            f"{r['pcg']['iterations']} it, fraction mean {r['fraction_mean']:.3f} "
            f"max {r['fraction_max']:.3f}{' (CG capped)' if r['cg_capped'] else ''}"
        )
    return harness.exit_code(r["fraction_mean"] for r in res["rows"])


if __name__ == "__main__":
    raise SystemExit(main())
