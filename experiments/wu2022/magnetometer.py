"""Spatial regression with a growing inducing grid (like Wu et al. 2022, Sec. 5.4, Fig. 3c).

The magnetic-field norm measured along the 9 robot paths of the indoor magnetometer data
(``bo_ncgp.data.load_magnetometer``) as a function of the 2-D position: a random 90/10
split of all readings, of which ``num_train`` training and ``num_test`` test readings are
used (time budget). Matern-5/2 kernel; hyperparameters (lengthscale, outputscale, noise)
are learned once on a coarse grid (Adam on the minibatch ELBO of the Cholesky-whitened
model, cheap there) and then fixed for every model, so the
comparison isolates the inducing grid. For each grid ``G x G`` over the room:

* HIP-GP (FFT whitening; the library's training solves, ``pcg_train_max_iters="auto"``:
  starts kept within the minibatch noise, 3 PCG iterations for the others, or PCG capped
  at ``--pcg-train N``; in evaluation capped at 50
  iterations, ``--pcg-eval``; the paper: 20 / 50);
* SVGP: the same inter-domain SVGP with Cholesky whitening (while ``M`` fits the budget);

both with the block-independent family (2 x 2 blocks of whitened variables; the paper uses
10 x 10; ``--svgp-variational full``: the SVGP with a full covariance, whose full-batch step
forms the ``M x M`` precision and reaches the optimum in one CG iteration), trained by
minibatch natural-gradient steps with step ``1 / (t + 1)`` (floor 0.05), or with
``--full-batch`` by one full-batch step per epoch whose mean solve reaches the optimum of
``q`` given the rows (HIP-GP's rows are then never held at once). The two
models of a grid train in one process with their epochs interleaved (HIP-GP, SVGP, HIP-GP,
...), so that the load of a shared machine hits both alike.
Reported: test RMSE, wall-clock seconds per epoch (whitening + natural-gradient steps) and
per fit (set-up + epochs, against ``--fit-budget``), and every HIP-GP row against every SVGP
row paired over the test readings (``paired``: mean difference of the squared and absolute
errors with its standard error). Results: ``experiments/wu2022/results/magnetometer.json``
and ``magnetometer.png``.

Usage::

    bo-ncgp hipgp-magnetometer [--quick]
    python -m experiments.wu2022.magnetometer --sides 50 100 --epochs 4
"""

from __future__ import annotations

import time
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.data import load_magnetometer
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models.hipgp import HIPGP, Grid
from experiments import harness
from experiments.wu2022.dust import paired_errors, predict

OUT = harness.results_dir(__file__)


def split(cfg: dict, root=None, verify: bool = True):
    d = load_magnetometer(root=root, verify=verify)
    X, y = d["X"], d["y"]
    perm = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))
    ntest_all = X.shape[0] // 10
    te, tr = perm[:ntest_all][: cfg["num_test"]], perm[ntest_all:][: cfg["num_train"]]
    # a count of None takes every reading of its part
    ymean = float(y[tr].mean())
    lo = (X.min(0).values - 0.1).tolist()
    hi = (X.max(0).values + 0.1).tolist()
    return X[tr], y[tr] - ymean, X[te], y[te] - ymean, lo, hi


def train(m: HIPGP, X, y, cfg, epochs: int) -> list[float]:
    """``epochs`` epochs of minibatch natural-gradient steps; seconds per epoch."""
    trainer = epoch_trainer(m, X, y, cfg)
    return [trainer() for _ in range(epochs)]


def epoch_trainer(m: HIPGP, X, y, cfg):
    """A function that runs the next epoch of minibatch natural-gradient steps of ``m`` and
    returns its seconds (the minibatch order and step sizes of :func:`train`); with
    ``cfg["full_batch"]`` an epoch is one step on all data with step size 1, whose mean
    solve (CG to ``natgrad_tol``) jumps to the optimum of ``q`` given the rows."""
    n, bs = X.shape[0], cfg["batch"]
    g = torch.Generator().manual_seed(1)
    t = 0

    def epoch() -> float:
        nonlocal t
        t0 = time.perf_counter()
        if cfg.get("full_batch"):
            m.natgrad_step(X, y, tol=cfg["natgrad_tol"], max_iters=cfg["natgrad_max_iters"])
            return time.perf_counter() - t0
        perm = torch.randperm(n, generator=g)
        for s in range(0, n, bs):
            idx = perm[s : s + bs]
            lr = max(cfg["lr_floor"], 1.0 / (t + 1))
            m.natgrad_step(X[idx], y[idx], num_data=n, lr=lr)
            t += 1
        return time.perf_counter() - t0

    return epoch


def run(cfg: dict, out: Path, root=None, verify: bool = True) -> dict:
    torch.manual_seed(0)
    Xtr, ytr, Xte, yte, lo, hi = split(cfg, root, verify)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    kernel.base_kernel.lengthscale = 0.3
    kernel.outputscale = float(ytr.var())
    lik = Gaussian(noise=0.1 * float(ytr.var()))
    hyper = HIPGP(
        kernel,
        Grid(lo, hi, (cfg["hyper_side"],) * 2),
        likelihood=lik,
        whitening="cholesky",
        jitter=1e-6,
    )
    harness.log("learning hyperparameters")
    t0 = time.perf_counter()
    hyper.fit(
        Xtr,
        ytr,
        num_epochs=cfg["hyper_epochs"],
        batch_size=cfg["batch"],
        natgrad_lr=0.5,
        learn_hyperparameters=True,
        hyper_lr=0.05,
        progress=True,
    )
    hyp = {
        "lengthscale": float(kernel.base_kernel.lengthscale.detach()),
        "outputscale": float(kernel.outputscale.detach()),
        "noise": float(lik.noise.detach()),
        "seconds": time.perf_counter() - t0,
    }
    harness.log(f"hyperparameters {hyp}")
    for p in [*kernel.parameters(), *lik.parameters()]:
        p.requires_grad_(False)
    rows = []
    skip = set()
    for side in cfg["sides"]:
        names = [
            (name, whitening)
            for name, whitening in (("hipgp", "fft"), ("svgp", "cholesky"))
            if name not in skip and not (name == "svgp" and side > cfg["svgp_max_side"])
        ]
        runs = {}
        for name, whitening in names:
            m = HIPGP(
                kernel,
                Grid(lo, hi, (side, side)),
                likelihood=lik,
                variational=cfg["svgp_variational"] if name == "svgp" else "block",
                block_shape=None
                if name == "svgp" and cfg["svgp_variational"] == "full"
                else (2, 2),
                whitening=whitening,
                pcg_max_iters=cfg["pcg_eval"],
                pcg_train_max_iters=cfg["pcg_train"],
                jitter=1e-6,
            )
            t0 = time.perf_counter()
            with torch.no_grad():
                m.whitener()  # K_uu set-up (Cholesky: O(M^3)); not part of an epoch
            runs[name] = (m, time.perf_counter() - t0, epoch_trainer(m, Xtr, ytr, cfg), [], [])
        for _ in range(cfg["epochs"]):  # interleaved: HIP-GP, SVGP, HIP-GP, ...
            for m, _, epoch, times, cgs in runs.values():
                times.append(epoch())
                cgs.append(m.q.last_cg)  # the last mean step's CG (the epoch's one, full batch)
        for name, (m, setup, _, times, cgs) in runs.items():
            t0 = time.perf_counter()
            with torch.no_grad():
                mean = predict(m, Xte, cfg["batch"])[0]
            # stored to 1e-5 (the field is in µT; errors are ~1): the paired differences
            # below are taken from the stored predictions
            mean = torch.round(mean, decimals=5)
            row = {
                "model": name,
                "side": side,
                "M": side * side,
                "rmse": float(((mean - yte) ** 2).mean().sqrt()),
                "seconds_per_epoch": sum(times) / len(times),
                "seconds_setup": setup,
                "epoch_seconds": times,
                "variational": m.variational,
                "last_cg_per_epoch": cgs,  # [iterations, converged] of its last mean step
                "seconds_fit": setup + sum(times),
                "within_fit_budget": setup + sum(times) <= cfg["fit_budget"],
                "seconds_predict": time.perf_counter() - t0,
            }
            harness.log(str(row))
            row["test_prediction"] = mean.tolist()
            rows.append(row)
            res = {
                "config": cfg,
                "hyperparameters": hyp,
                "rows": rows,
                "paired": paired_errors(rows, yte),
            }
            harness.write_json(out / cfg["file"], res)
            if row["seconds_per_epoch"] + setup > cfg["epoch_budget"]:
                skip.add(name)
    res = {"config": cfg, "hyperparameters": hyp, "rows": rows, "paired": paired_errors(rows, yte)}
    harness.write_json(out / cfg["file"], res)
    plot(rows, out / cfg["file"].replace(".json", ".png"))
    return res


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for name in ("hipgp", "svgp"):
        r = [x for x in rows if x["model"] == name]
        if not r:
            continue
        axes[0].plot([x["M"] for x in r], [x["rmse"] for x in r], "o-", label=name)
        axes[1].plot([x["M"] for x in r], [x["seconds_per_epoch"] for x in r], "o-", label=name)
    axes[0].set_ylabel("test RMSE")
    axes[1].set_ylabel("seconds per epoch")
    for a in axes:
        a.set_xscale("log")
        a.set_xlabel("M (inducing points)")
        a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


DEFAULT = {
    "num_train": 2000,
    "num_test": 1000,
    "batch": 500,
    "epochs": 2,
    "lr_floor": 0.05,
    "hyper_side": 20,
    "hyper_epochs": 5,
    "sides": [30, 50, 76, 100],
    "svgp_max_side": 100,
    "svgp_variational": "block",
    "pcg_train": "auto",
    "pcg_eval": 50,
    "epoch_budget": 300.0,
    # seconds of set-up + epochs within which a fit counts as fitting the budget
    "fit_budget": 600.0,
    # --full-batch: epochs of one full-batch step each, mean solve to this CG tolerance
    "full_batch": False,
    "natgrad_tol": 1e-8,
    "natgrad_max_iters": 5000,
    "file": "magnetometer.json",
}
QUICK = dict(
    DEFAULT,
    num_train=300,
    num_test=100,
    batch=100,
    epochs=1,
    hyper_side=8,
    hyper_epochs=1,
    sides=[8, 12],
    svgp_max_side=12,
    file="magnetometer_quick.json",
)


def _cap(value: int | str | None) -> int | str | None:
    """A PCG cap of the configuration: ``"auto"``, ``"none"`` (no cap), a count."""
    if value is None or value == "auto" or isinstance(value, int):
        return value
    return None if value == "none" else int(value)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, root=True)
    p.add_argument("--sides", type=int, nargs="+", default=None, help="grid sides G (M = G^2)")
    p.add_argument("--epochs", type=int, default=None, help="natural-gradient epochs")
    p.add_argument("--pcg-train", default=None,
                   help="training PCG cap: 'auto' (the library's), 'none' or N")  # fmt: skip
    p.add_argument("--pcg-eval", default=None, help="PCG cap of the test solves: 'none' or N")
    p.add_argument("--file", default=None, help="result file name in --out")
    p.add_argument("--num-train", type=int, default=None,
                   help="training readings (default 2000; 0: all 68,425)")  # fmt: skip
    p.add_argument("--num-test", type=int, default=None,
                   help="test readings (default 1000; 0: all 7,602)")  # fmt: skip
    p.add_argument("--fit-budget", type=float, default=None,
                   help="seconds of set-up + epochs within which a fit counts as fitting the "
                   "budget (reported per row; default 600)")  # fmt: skip
    p.add_argument("--svgp-max-side", type=int, default=None,
                   help="largest grid side of the SVGP (default 100)")  # fmt: skip
    p.add_argument("--hyper-side", type=int, default=None,
                   help="grid side of the hyperparameter fit (default 20)")  # fmt: skip
    p.add_argument("--hyper-epochs", type=int, default=None,
                   help="epochs of the hyperparameter fit (default 5)")  # fmt: skip
    p.add_argument("--epoch-budget", type=float, default=None,
                   help="seconds of set-up + epoch above which a model skips the larger grids "
                   "(default 300)")  # fmt: skip
    p.add_argument("--svgp-variational", choices=("block", "full"), default=None,
                   help="the SVGP's variational family: 2x2 blocks as HIP-GP's (default) or a "
                   "full covariance")  # fmt: skip
    p.add_argument("--natgrad-tol", type=float, default=None,
                   help="relative residual of the full-batch mean CG (default 1e-8)")  # fmt: skip
    p.add_argument("--natgrad-max-iters", type=int, default=None,
                   help="most iterations of the full-batch mean CG (default 5000)")  # fmt: skip
    p.add_argument("--full-batch", action="store_true",
                   help="epochs of one full-batch natural-gradient step each (to the optimum of "
                   "q given the rows) instead of minibatch steps")  # fmt: skip
    args = p.parse_args(argv)
    harness.setup(args.threads)
    overrides = {
        k: v
        for k, v in (("sides", args.sides), ("epochs", args.epochs), ("pcg_train", args.pcg_train),
                     ("pcg_eval", args.pcg_eval), ("file", args.file),
                     ("num_train", args.num_train), ("svgp_max_side", args.svgp_max_side),
                     ("hyper_side", args.hyper_side), ("hyper_epochs", args.hyper_epochs),
                     ("num_test", args.num_test), ("fit_budget", args.fit_budget),
                     ("svgp_variational", args.svgp_variational),
                     ("natgrad_tol", args.natgrad_tol),
                     ("natgrad_max_iters", args.natgrad_max_iters),
                     ("full_batch", args.full_batch or None),
                     ("epoch_budget", args.epoch_budget))
        if v is not None
    }  # fmt: skip
    cfg = harness.preset(DEFAULT, QUICK, args, **overrides)
    cfg["pcg_train"], cfg["pcg_eval"] = _cap(cfg["pcg_train"]), _cap(cfg["pcg_eval"])
    for key in ("num_train", "num_test"):
        if cfg[key] is not None and cfg[key] < 0:
            p.error(f"--{key.replace('_', '-')} must be >= 0 (0: all readings), got {cfg[key]}")
        cfg[key] = cfg[key] or None
    rows = run(cfg, args.out, root=args.root, verify=args.verify)["rows"]
    cells = [
        [r["model"], r["M"], f"{r['rmse']:.3f}", f"{r['seconds_per_epoch']:.1f}"] for r in rows
    ]
    print(harness.markdown_table(["model", "M", "RMSE", "s/epoch"], cells))
    return harness.exit_code(r["rmse"] for r in rows)


if __name__ == "__main__":
    raise SystemExit(main())
