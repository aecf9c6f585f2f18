"""GP multi-class classification on MNIST (Tatzel et al., Sec. 5.2 "Extension to MNIST", Fig. 7,
App. C.4).

Data: the 10,000 real MNIST images available offline (``mnist/t10k-*.gz`` of the shared data;
the paper uses 20,000 training and 10,000 test images of the 70,000), split at random into
8,000 training and 2,000 test images; pixels scaled to [0, 1] and flattened (d = 784). Model:
softmax likelihood, C = 10 independent zero-mean GPs sharing a Matern-3/2 kernel with the
paper's SVGP-fitted hyperparameters (lengthscale 1.550934, outputscale 0.451591), fixed. As in
the paper (KeOps scales poorly with d = 784) products with K use GPyTorch's dense kernel
matrix (8,000^2 entries).

Methods: IterNCGP-CG with recycling, no compression, at most 1 or 5 solver iterations per
Newton step; GPyTorch SVGP (grid over the learning rate and inducing points per class, 200 s
per run in the paper); subset of data (extra, not in the paper's figure). Metrics as in the
GMM experiment (probit-approximated probabilities; accuracy, NLL, ECE on test and a training
subset), wall-clock per method capped by ``--budget``, peak resident memory per method.

Usage::

    bo-ncgp iterncgp-mnist           # 8,000 / 2,000
    bo-ncgp iterncgp-mnist --quick   # tiny configuration (CI)

Results: ``experiments/tatzel/results/mnist[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import gpytorch
import torch

from bo_ncgp.cli.common import DATA_ROOT_HELP, add_verify_argument
from experiments import harness
from experiments.tatzel import baselines

OUT = harness.results_dir(__file__)
C = 10
LENGTHSCALE, OUTPUTSCALE = 1.550934, 0.451591  # App. C.4 (fitted by SVGP in the paper)


def make_kernel(batch: int | None = None) -> gpytorch.kernels.Kernel:
    """The model's kernel: Matern-3/2 with the paper's hyperparameters (fixed)."""
    return baselines.matern32(LENGTHSCALE, OUTPUTSCALE, batch)


def data(cfg: dict) -> dict:
    from bo_ncgp.data import load_mnist
    from bo_ncgp.data.mnist import to_features

    split = load_mnist(root=cfg["root"], split="test", verify=cfg["verify"])
    X, y = to_features(split.images, torch.float64), split.labels
    g = torch.Generator().manual_seed(cfg["seed"])
    perm = torch.randperm(X.shape[0], generator=g)
    tr, te = perm[: cfg["n_train"]], perm[cfg["n_train"] : cfg["n_train"] + cfg["n_test"]]
    sub = tr[: cfg["n_eval_train"]]
    return {"X": X[tr], "y": y[tr], "evals": {"test": (X[te], y[te]), "train": (X[sub], y[sub])}}


def main(argv: list[str] | None = None) -> int:
    p = baselines.classification_parser(
        __doc__, n_train=8000, svgp_budget=200.0, sod=[1000, 2000],
        budget_help="seconds per IterNCGP run",
    )  # fmt: skip
    p.add_argument("--root", default=None, help=DATA_ROOT_HELP)
    add_verify_argument(p)
    p.add_argument(
        "--iters",
        type=int,
        nargs="+",
        default=[1, 5],
        help="solver iterations per Newton step to run",
    )
    p.add_argument("--tag", default=None, help="output file name (default mnist[_quick])")
    args = p.parse_args(argv)
    if args.quick:
        args.n_train, args.n_test, args.budget, args.svgp_budget = 200, 100, 30.0, 1.0
        args.svgp_inducing, args.svgp_lr, args.sod, args.iters = [10], [0.05], [50], [5]
        args.newton_steps = 2
    tag = args.tag or ("mnist_quick" if args.quick else "mnist")
    base = baselines.base_config(
        "experiments.tatzel.mnist", args, root=args.root, verify=args.verify
    )
    jobs = []
    if "iterncgp" in args.methods:
        for j in args.iters:
            cfg = dict(base, rank=None, iters_per_step=j, budget=args.budget, backend="dense")
            jobs.append((f"IterNCGP-CG j<={j}", baselines.run_iterncgp, cfg))
    jobs += baselines.baseline_jobs(base, args)
    baselines.run_methods(
        jobs, args, (args.out or OUT) / tag, f"MNIST {args.n_train}/{args.n_test}, C=10"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
