"""Large-scale GP multi-class classification on a Gaussian mixture (Tatzel et al., Sec. 5.2,
Fig. 6; App. C.3 / workshop App. D.3).

Data: C = 10 Gaussians in 3-D (means uniform in [-1, 1]^3; covariances U diag(lambda) U^T with
U the eigenvectors of A A^T, A uniform in [0, 1]^{3x3}, lambda uniform in [0.001, 0.1]); the
mixture is fixed (seed 0), the samples are re-drawn per run seed. Model: softmax likelihood,
C independent zero-mean GPs sharing a Matern-3/2 kernel, lengthscale 0.05, outputscale 0.05
(fixed). Methods (wall-clock per method capped by ``--budget``):

* IterNCGP-CG, recycling, at most 5 solver iterations per Newton step, R in {inf, 10};
* subset of data (SoD): exact Laplace on a random subset with Newton + Cholesky;
* GPyTorch SVGP (grid over the learning rate and the number of inducing points per class).

Metrics (accuracy, NLL, ECE of probit-approximated probabilities, App. C.3) on the test set
and a training subset, against wall-clock time (metric evaluation excluded), and the peak
resident memory of each method (fresh process per method).

A shared 2-core CPU runs N = 10,000 by default; ``--large`` is the paper's
N = 100,000 / 10,000 test setting for a machine with a GPU (``--device cuda``).

Usage::

    bo-ncgp iterncgp-gmm                 # N = 10,000 (default budgets)
    bo-ncgp iterncgp-gmm --large --device cuda --budget 10000
    bo-ncgp iterncgp-gmm --quick         # tiny configuration (CI)

Results: ``experiments/tatzel/results/gmm[_quick|_large].json`` and ``.png``.
"""

from __future__ import annotations

import gpytorch
import torch

from experiments import harness
from experiments.tatzel import baselines

OUT = harness.results_dir(__file__)
C = 10


# --------------------------------------------------------------------------- data
def make_gmm(n_per_class: int, seed: int, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples of the fixed 10-class mixture in 3-D (App. C.3)."""
    g = torch.Generator().manual_seed(0)  # the mixture itself
    means = 2 * torch.rand(C, 3, generator=g, dtype=torch.float64) - 1
    covs = []
    for _ in range(C):
        A = torch.rand(3, 3, generator=g, dtype=torch.float64)
        _, U = torch.linalg.eigh(A @ A.T)
        lam = 0.001 + (0.1 - 0.001) * torch.rand(3, generator=g, dtype=torch.float64)
        covs.append(U @ torch.diag(lam) @ U.T)
    gs = torch.Generator().manual_seed(1000 + seed)  # the samples
    X, y = [], []
    for c in range(C):
        L = torch.linalg.cholesky(covs[c])
        X.append(means[c] + torch.randn(n_per_class, 3, generator=gs, dtype=torch.float64) @ L.T)
        y.append(torch.full((n_per_class,), c))
    X, y = torch.cat(X), torch.cat(y)
    perm = torch.randperm(len(y), generator=gs)
    return X[perm].to(dtype), y[perm]


def make_kernel(batch: int | None = None) -> gpytorch.kernels.Kernel:
    """The model's kernel: Matern-3/2, lengthscale 0.05, outputscale 0.05 (fixed)."""
    return baselines.matern32(0.05, 0.05, batch)


def data(cfg: dict) -> dict:
    X, y = make_gmm(cfg["n_train"] // C, cfg["seed"])
    Xt, yt = make_gmm(cfg["n_test"] // C, cfg["seed"] + 500)
    g = torch.Generator().manual_seed(cfg["seed"])
    sub = torch.randperm(len(y), generator=g)[: cfg["n_eval_train"]]
    dev = torch.device(cfg["device"])
    return {
        "X": X.to(dev),
        "y": y.to(dev),
        "evals": {"test": (Xt.to(dev), yt.to(dev)), "train": (X[sub].to(dev), y[sub].to(dev))},
    }


# -------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = baselines.classification_parser(
        __doc__, n_train=10_000, svgp_budget=300.0, sod=[250, 500, 1000, 2000],
        budget_help="seconds per method",
    )  # fmt: skip
    p.add_argument("--large", action="store_true", help="paper setting N = 100,000 (GPU)")
    p.add_argument(
        "--ranks",
        type=str,
        nargs="+",
        default=["inf", "10"],
        help="IterNCGP action ranks per Newton step ('inf': unlimited)",
    )
    p.add_argument("--device", default="cpu", help="torch device of the models (cpu or cuda)")
    p.add_argument("--tag", default=None, help="output file name (default gmm[_quick|_large])")
    args = p.parse_args(argv)
    if args.quick:
        args.n_train, args.n_test, args.budget, args.svgp_budget = 200, 100, 30.0, 1.0
        args.svgp_inducing, args.svgp_lr, args.sod = [10], [0.05], [50]
        args.newton_steps = 3
    if args.large:
        args.n_train, args.n_test = 100_000, 10_000
        args.svgp_inducing = [1000, 2500, 5000, 10000]
        args.svgp_lr = [0.001, 0.01, 0.05]
    tag = args.tag or ("gmm_quick" if args.quick else ("gmm_large" if args.large else "gmm"))
    out_dir = args.out or OUT
    base = baselines.base_config("experiments.tatzel.gmm", args, device=args.device)
    jobs = []
    if "iterncgp" in args.methods:
        for r in args.ranks:
            rank = None if r == "inf" else int(r)
            cfg = dict(base, rank=rank, iters_per_step=5, budget=args.budget, backend="auto")
            jobs.append((f"IterNCGP-CG R={r}", baselines.run_iterncgp, cfg))
    jobs += baselines.baseline_jobs(base, args)
    title = f"GMM, N={args.n_train}, C=10 (solid: test, dashed: train)"
    baselines.run_methods(jobs, args, out_dir / tag, title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
