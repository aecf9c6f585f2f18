"""Time to a test RMSE: HIP-GP with and without PCG warm starts against a GPyTorch SVGP.

Setting: ``N`` noisy observations (noise standard deviation 0.1) of a smooth function on
``[0, 1]^2``, 500 test points, a Matern-5/2 kernel with fixed hyperparameters, inducing
points on a ``G x G`` grid (``M = G^2``), minibatches of 1,000 and natural-gradient steps
for every model:

* ``hipgp``: :class:`bo_ncgp.models.HIPGP` (FFT whitening, 2 x 2 blocks, ``pcg_tol =
  1e-6``) with the library's training solves (``pcg_train_max_iters="auto"``: in minibatch
  steps a row's start is kept where its estimated error is within the minibatch noise, 3
  PCG iterations otherwise; ``--pcg-cap N`` caps them at ``N`` instead, the paper
  trains with 20; 0: no solves) and PCG warm starts (each observation's solve starts from
  its solution of the previous epoch, the first one from the cubic interpolation weights of
  its point);
* ``hipgp zero``: the same with ``pcg_initial_guess="zero"`` (a solve without a warm start
  begins at zero instead of at the cubic interpolation weights of its point);
* ``hipgp cold``: ``pcg_warm_start=False`` (every solve begins at the interpolation
  weights);
* ``svgp``: GPyTorch's ``VariationalStrategy`` with a ``NaturalVariationalDistribution`` on
  the same grid (fixed inducing points), ``NGD`` steps (step size 0.1: at 1 the minibatch
  noise keeps its RMSE above the target) on the same minibatches.

HIP-GP's natural-gradient steps have the SVGP's step size, 0.1 (``--hipgp-lr``).
Test predictions of HIP-GP use converged PCG solves (``pcg_tol``), not the training cap.
On a library without ``pcg_train_max_iters`` (``--pcg-cap`` then sets ``pcg_max_iters`` during
training) the default ``hipgp`` row is that library's default, uncapped solves.

The test RMSE (against noisy test targets) is evaluated every ``eval_every`` steps; the clock
stops for evaluations. Reported: the training time until the RMSE first falls to ``target``,
medians over repetitions (variants interleaved, one warm-up run), the time per step, and the
ratio to the SVGP. Results: ``benchmarks/results/hipgp_time_to_rmse.json`` and a markdown
table on stdout.

Usage::

    python benchmarks/hipgp_time_to_rmse.py            # N = 10,000, M = 1,024 and 4,096
    python benchmarks/hipgp_time_to_rmse.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import inspect
import math
import statistics
import time
from pathlib import Path

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models.hipgp import HIPGP, Grid
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results" / "hipgp_time_to_rmse.json"
HYPERS = {"lengthscale": 0.2, "outputscale": 1.0, "noise": 0.01}
DEFAULT = {"num_train": 10_000, "num_test": 500, "sides": [32, 64], "batch": 1_000,
           "eval_every": 2, "max_epochs": 4, "reps": 3, "target": 0.1035,
           "svgp_lr": 0.1, "hipgp_lr": 0.1, "pcg_cap": None}  # fmt: skip
QUICK = {"num_train": 1_000, "num_test": 300, "sides": [12], "batch": 250,
         "eval_every": 2, "max_epochs": 3, "reps": 1, "target": 0.5, "svgp_lr": 0.1,
         "hipgp_lr": 0.1, "pcg_cap": None}  # fmt: skip


def truth(X: Tensor) -> Tensor:
    return torch.sin(6 * X[:, 0]) * torch.cos(4 * X[:, 1]) + 0.5 * torch.sin(
        3 * (X[:, 0] + X[:, 1])
    )


def data(n: int, m: int, seed: int = 0) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    X, Xt = torch.rand(n, 2, generator=g), torch.rand(m, 2, generator=g)
    y = truth(X) + 0.1 * torch.randn(n, generator=g)
    yt = truth(Xt) + 0.1 * torch.randn(m, generator=g)
    return X, y, Xt, yt


def _kernel():
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    k.base_kernel.lengthscale = HYPERS["lengthscale"]
    k.outputscale = HYPERS["outputscale"]
    for p in k.parameters():
        p.requires_grad_(False)
    return k


def _grid(side: int) -> Grid:
    return Grid([-0.02, -0.02], [1.02, 1.02], (side, side))


def _warm_kwarg(warm: bool) -> dict:
    # a library without warm starts (``--variants 'hipgp cold'`` on an older checkout)
    # runs the cold variant with its own defaults
    if "pcg_warm_start" in inspect.signature(HIPGP).parameters:
        return {"pcg_warm_start": warm}
    if warm:
        raise SystemExit("this library has no PCG warm starts; run --variants 'hipgp cold'")
    return {}


def _has_train_cap() -> bool:
    return "pcg_train_max_iters" in inspect.signature(HIPGP).parameters


def _options(name: str, cap: int | None) -> dict:
    opts = _warm_kwarg(name != "hipgp cold")
    if name == "hipgp zero":
        opts["pcg_initial_guess"] = "zero"
    if cap is not None:  # None: the library's default
        opts["pcg_train_max_iters" if _has_train_cap() else "pcg_max_iters"] = cap
    return opts


def run_hipgp(side: int, name: str, X, y, Xt, yt, cfg) -> dict:
    """Train until the test RMSE reaches the target; returns the training time and trace."""
    cap = cfg["pcg_cap"]
    m = HIPGP(_kernel(), _grid(side), likelihood=Gaussian(noise=HYPERS["noise"]),
              block_shape=(2, 2), pcg_tol=1e-6, jitter=1e-6, **_options(name, cap))  # fmt: skip
    train_cap = m.pcg_max_iters  # a cap on every solve: lifted for the test predictions
    m.likelihood.requires_grad_(False)
    t0 = time.perf_counter()
    with torch.no_grad():
        m.whitener()  # the circulant set-up counts as training time
    setup = time.perf_counter() - t0
    trace: list[tuple[float, float]] = []
    iters: list[int] = []

    def cb(s) -> bool:
        iters.append(int(m.last_pcg_iterations or 0))
        if (s.step + 1) % cfg["eval_every"]:
            return False
        m.pcg_max_iters = None  # test predictions from converged solves (pcg_tol)
        with torch.no_grad():
            rmse = float((m.predict_f(Xt)[0] - yt).square().mean().sqrt())
        m.pcg_max_iters = train_cap
        trace.append((setup + s.seconds, rmse))
        return rmse <= cfg["target"]

    m.fit(X, y, batch_size=cfg["batch"], num_epochs=cfg["max_epochs"], natgrad_lr=cfg["hipgp_lr"],
          callback=cb, generator=torch.Generator().manual_seed(1))  # fmt: skip
    return _summary(trace, cfg, len(iters), iters)


def run_svgp(side: int, X, y, Xt, yt, cfg) -> dict:
    Z = _grid(side).points()

    class Model(gpytorch.models.ApproximateGP):
        def __init__(self):
            q = gpytorch.variational.NaturalVariationalDistribution(Z.shape[0])
            s = gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=False)
            super().__init__(s)
            self.mean_module, self.covar_module = gpytorch.means.ZeroMean(), _kernel()

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    model = Model()
    lik = gpytorch.likelihoods.GaussianLikelihood()
    lik.noise = HYPERS["noise"]
    lik.requires_grad_(False)
    n = X.shape[0]
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=n)
    opt = gpytorch.optim.NGD(model.variational_parameters(), num_data=n, lr=cfg["svgp_lr"])
    gen = torch.Generator().manual_seed(1)
    trace, step, clock = [], 0, 0.0
    for _ in range(cfg["max_epochs"]):
        perm = torch.randperm(n, generator=gen)
        for s in range(0, n, cfg["batch"]):
            idx = perm[s : s + cfg["batch"]]
            t0 = time.perf_counter()
            opt.zero_grad()
            (-mll(model(X[idx]), y[idx])).backward()
            opt.step()
            clock += time.perf_counter() - t0
            step += 1
            if step % cfg["eval_every"]:
                continue
            model.eval()
            with torch.no_grad():
                rmse = float((model(Xt).mean - yt).square().mean().sqrt())
            model.train()
            trace.append((clock, rmse))
            if rmse <= cfg["target"]:
                return _summary(trace, cfg, step, [])
    return _summary(trace, cfg, step, [])


def _summary(trace, cfg, steps: int, iters: list[int]) -> dict:
    hit = next((t for t, r in trace if r <= cfg["target"]), None)
    return {
        "seconds_to_target": hit,
        "reached": hit is not None,
        "final_rmse": trace[-1][1] if trace else math.nan,
        "steps": steps,
        "seconds_per_step": trace[-1][0] / steps if trace and steps else math.nan,
        "pcg_iterations": iters,
        "trace": trace,
    }


VARIANTS = ("hipgp", "hipgp zero", "hipgp cold", "svgp")
#: run by default (``hipgp zero`` needs epochs of warm starts to repair its rows: opt in)
DEFAULT_VARIANTS = ("hipgp", "hipgp cold", "svgp")


def bench(side: int, cfg: dict, X, y, Xt, yt, variants=VARIANTS) -> dict:
    def once(name: str) -> dict:
        if name == "svgp":
            return run_svgp(side, X, y, Xt, yt, cfg)
        return run_hipgp(side, name, X, y, Xt, yt, cfg)

    for name in variants:  # warm-up: FFT plans, lazy imports
        once(name) if cfg["reps"] > 1 else None
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(cfg["reps"]):
        for name in variants:  # interleaved so that load hits every variant alike
            runs[name].append(once(name))
    row: dict = {"side": side, "M": side * side}
    for name, rs in runs.items():
        times = [r["seconds_to_target"] for r in rs if r["reached"]]
        row[name] = {
            "seconds_to_target": statistics.median(times) if len(times) == len(rs) else None,
            "seconds_to_target_all": [r["seconds_to_target"] for r in rs],
            "seconds_per_step": statistics.median(r["seconds_per_step"] for r in rs),
            "steps": [r["steps"] for r in rs],
            "final_rmse": [r["final_rmse"] for r in rs],
            "pcg_iterations": rs[-1]["pcg_iterations"],
            "trace": rs[-1]["trace"],
        }
    svgp = row["svgp"]["seconds_to_target"] if "svgp" in row else None
    for name in (v for v in variants if v != "svgp"):
        t = row[name]["seconds_to_target"]
        row[name]["over_svgp"] = t / svgp if t is not None and svgp else None
    return row


def table(res: dict) -> str:
    def fmt(x, spec=".2f"):
        return "miss" if x is None else format(x, spec)

    cells = []
    for r in res["rows"]:
        for name in (v for v in VARIANTS if v in r):
            v = r[name]
            spread = ", ".join(fmt(t) for t in v["seconds_to_target_all"])
            cells.append([f"{r['M']}", f"{name}{res['label']}", fmt(v["seconds_to_target"]), spread,
                          f"{1e3 * v['seconds_per_step']:.0f}", str(v["steps"][-1]),
                          fmt(v.get("over_svgp"), ".2f") if name != "svgp" else "1"])  # fmt: skip
    header = ["M", "model", "time to RMSE (s, median)", "runs (s)", "ms / step", "steps",
              "time / SVGP"]  # fmt: skip
    return markdown_table(header, cells)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke test")
    p.add_argument("--sides", type=int, nargs="+", default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(DEFAULT_VARIANTS))
    p.add_argument("--max-epochs", type=int, default=None)
    p.add_argument("--pcg-cap", type=int, default=None,
                   help="HIP-GP's PCG cap in training (default: the library's)")  # fmt: skip
    p.add_argument("--hipgp-lr", type=float, default=None, help="HIP-GP's natural-gradient step")
    p.add_argument("--label", default="", help="appended to the model names in the table")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    cfg = dict(QUICK if args.quick else DEFAULT)
    if args.sides:
        cfg["sides"] = args.sides
    if args.reps:
        cfg["reps"] = args.reps
    if args.max_epochs:
        cfg["max_epochs"] = args.max_epochs
    if args.pcg_cap is not None:
        cfg["pcg_cap"] = args.pcg_cap
    if args.hipgp_lr:
        cfg["hipgp_lr"] = args.hipgp_lr
    X, y, Xt, yt = data(cfg["num_train"], cfg["num_test"])
    rows = [bench(s, cfg, X, y, Xt, yt, tuple(args.variants)) for s in cfg["sides"]]
    res = {"config": cfg, "threads": args.threads, "hypers": HYPERS, "rows": rows,
           "label": args.label}  # fmt: skip
    write_json(args.out, res)
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
