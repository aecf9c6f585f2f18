"""Poisson regression: Newton steps against solver iterations (Tatzel et al., Sec. 5.1, Fig. 5;
App. C.2 / workshop App. D.2).

Data: N = 100 inputs linearly spaced on [0, 1]; the log rate f is one draw of a zero-mean GP
with an RBF kernel (lengthscale 0.1, outputscale 5), fixed for all runs; counts are re-drawn
from Poisson(exp f) for each of the 10 runs (training and test counts). The model uses the
same kernel (no mismatch). The paper does not describe its test set; we use 1,000 uniform test
inputs on [0, 1] whose log rates come from the same GP draw.

IterNCGP-CG with recycling and no compression spends a budget of 100 solver iterations as
1, 5, 10 or 20 iterations per Newton step (100, 20, 10, 5 steps), outer tolerance 0.001 (as
the paper), twice: with the paper's full Newton steps and with our line search (the full step
from f = 0 overshoots to f ~ max(y) for these counts; see bo_ncgp/models/iterncgp/linesearch.py).
Reported: the test NLL ``-log int Poisson(y | e^f) N(f | m, v) df`` (80-point
Gauss-Hermite; the paper uses 10^5 Monte-Carlo samples) after every solver iteration, median
and range over the runs (the JSON keeps these curves and a summary per run, not the
per-iteration records), and the exact Laplace approximation's test NLL as a reference.

Usage::

    bo-ncgp iterncgp-poisson           # 10 runs
    bo-ncgp iterncgp-poisson --quick   # CI

Results: ``experiments/tatzel/results/poisson[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.cli.common import HelpFormatter
from experiments import harness

OUT = harness.results_dir(__file__)
SCHEDULES = (1, 5, 10, 20)


def make_kernel() -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    k.base_kernel.lengthscale = 0.1
    k.outputscale = 5.0
    return k.double()


def make_data(n_train: int, n_test: int, run: int) -> dict:
    """Fixed latent draw (seed 0), counts re-drawn per run."""
    g = torch.Generator().manual_seed(0)
    X = torch.linspace(0, 1, n_train, dtype=torch.float64).unsqueeze(-1)
    Xt = torch.rand(n_test, 1, generator=g, dtype=torch.float64)
    Xall = torch.cat([X, Xt])
    with torch.no_grad():
        K = make_kernel()(Xall).to_dense() + 1e-8 * torch.eye(len(Xall), dtype=torch.float64)
    f = torch.linalg.cholesky(K) @ torch.randn(len(Xall), generator=g, dtype=torch.float64)
    gr = torch.Generator().manual_seed(100 + run)
    counts = torch.poisson(torch.exp(f), generator=gr)
    return {
        "X": X,
        "y": counts[:n_train],
        "Xt": Xt,
        "yt": counts[n_train:],
        "f": f[:n_train],
        "ft": f[n_train:],
    }


def nll(model, X, y) -> float:
    with torch.no_grad():
        mean, var = model.predict_f(X)
        return float(-model.likelihood.predictive_log_prob(y, mean, var).mean())


def run_schedule(d: dict, per_step: int, budget: int, tol: float, line_search: bool) -> dict:
    from bo_ncgp.likelihoods import Poisson
    from bo_ncgp.models import IterNCGP

    records = []

    def callback(i, j, t, model):
        if j == 0 and i > 0:
            return False  # the recycled start of a step repeats the previous record's data
        records.append(
            {
                "total_iters": model.num_solver_iters,
                "newton_step": i,
                "time": t,
                "test_nll": nll(model, d["Xt"], d["yt"]),
                "train_nll": nll(model, d["X"], d["y"]),
            }
        )
        return model.num_solver_iters >= budget

    model = IterNCGP(
        make_kernel(),
        Poisson(),
        policy="cg",
        max_solver_iters_per_step=per_step,
        max_newton_steps=max(1, budget // per_step),
        recycle=True,
        compression_rank=None,
        tol=tol,
        backend="dense",
        line_search=line_search,
    )
    model.fit(
        d["X"],
        d["y"],
        callback=lambda s: callback(
            s.info["newton_step"], s.info["solver_iter"], s.seconds, s.model
        ),
    )
    return {
        "records": records,
        "newton_steps": len(model.history),
        "solver_iters": model.num_solver_iters,
        "converged": model._state.converged,
        "fit_seconds": model.fit_seconds,
    }


def exact_laplace_nll(d: dict) -> float:
    """Unit-vector actions to N iterations per step: the exact Laplace approximation."""
    from bo_ncgp.likelihoods import Poisson
    from bo_ncgp.models import IterNCGP

    n = d["X"].shape[0]
    model = IterNCGP.exact_laplace(make_kernel(), Poisson(), n, max_newton_steps=50, tol=1e-10).fit(
        d["X"], d["y"]
    )
    return nll(model, d["Xt"], d["yt"])


def run_summary(run: dict) -> dict:
    """A run without its per-iteration records (those are summarised by the curves)."""
    out = {k: v for k, v in run.items() if k != "records"}
    out["final_test_nll"] = run["records"][-1]["test_nll"]
    out["final_train_nll"] = run["records"][-1]["train_nll"]
    return out


def curve_at(records: list[dict], budget: int, key: str = "test_nll") -> list[float]:
    """Value after k = 0..budget total iterations (last record with total_iters <= k)."""
    out, idx = [], 0
    for k in range(budget + 1):
        while idx + 1 < len(records) and records[idx + 1]["total_iters"] <= k:
            idx += 1
        out.append(records[idx][key])
    return out


def plot(result: dict, path: Path, example: dict | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = result["variants"]
    ncols = len(variants) + (1 if example else 0)
    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 4.2), squeeze=False)
    budget = result["setting"]["budget"]
    for ax, (v, res) in zip(axes[0], variants.items(), strict=False):
        for j in SCHEDULES:
            s = res["schedules"][str(j)]
            k = list(range(budget + 1))
            ax.plot(k, s["median"], label=f"j <= {j} ({budget // j} steps)")
            ax.fill_between(k, s["min"], s["max"], alpha=0.15)
        ax.axhline(result["exact_laplace_test_nll_median"], color="k", ls=":", label="exact")
        ax.set_xlabel("total solver iterations (products with K)")
        ax.set_ylabel("test NLL")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.set_title(f"{v}: median, min-max of {result['setting']['runs']} runs", fontsize=9)
    if example:
        ax = axes[0, -1]
        X, Xs = example["X"], example["Xs"]
        ax.plot(Xs, example["rate_true"], "k--", lw=1, label="true rate")
        ax.scatter(X, example["y"], s=6, c="k", alpha=0.5, label="counts")
        for i, (label, r) in enumerate(example["rates"].items()):
            c = f"C{i}"
            ax.plot(Xs, r["median"], color=c, label=label)
            ax.fill_between(Xs, r["lower"], r["upper"], color=c, alpha=0.15)
        ax.set_yscale("symlog")
        ax.set_xlabel("x")
        ax.set_ylabel("rate (MC median, 95% band)")
        ax.legend(fontsize=7)
        ax.set_title("IterNCGP-CG, 1 iteration per step (line search)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rate_example(d: dict, checkpoints: tuple[int, ...]) -> dict:
    """Rate bands of one j <= 1 run at a few total iteration counts (Fig. 5, right)."""
    from bo_ncgp.likelihoods import Poisson
    from bo_ncgp.models import IterNCGP

    Xs = torch.linspace(0, 1, 200, dtype=torch.float64).unsqueeze(-1)
    rates = {}
    g = torch.Generator().manual_seed(0)

    def record(model, label):
        r = model.predict_rate(Xs, num_samples=4000, generator=g)
        rates[label] = {k: v.tolist() for k, v in r._asdict().items()}

    def callback(i, j, t, model):
        if j > 0 and model.num_solver_iters in checkpoints[:-1]:
            record(model, f"{model.num_solver_iters} iterations")
        return model.num_solver_iters >= checkpoints[-1]

    model = IterNCGP(
        make_kernel(),
        Poisson(),
        max_solver_iters_per_step=1,
        max_newton_steps=checkpoints[-1],
        tol=0.0,
        backend="dense",
        line_search=True,
    ).fit(
        d["X"],
        d["y"],
        callback=lambda s: callback(
            s.info["newton_step"], s.info["solver_iter"], s.seconds, s.model
        ),
    )
    record(model, f"{model.num_solver_iters} iterations")
    with torch.no_grad():
        K = make_kernel()
        Kxx = K(d["X"]).to_dense() + 1e-8 * torch.eye(len(d["X"]), dtype=torch.float64)
        f_s = K(Xs, d["X"]).to_dense() @ torch.linalg.solve(Kxx, d["f"])
    return {
        "X": d["X"][:, 0].tolist(),
        "y": d["y"].tolist(),
        "Xs": Xs[:, 0].tolist(),
        "rate_true": torch.exp(f_s).tolist(),
        "rates": rates,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny configuration (CI)")
    p.add_argument("--runs", type=int, default=10, help="runs (fresh counts each)")
    p.add_argument("--budget", type=int, default=100, help="solver iterations per run")
    p.add_argument("--n-test", type=int, default=1000, help="test inputs")
    p.add_argument("--tol", type=float, default=1e-3, help="outer (Newton) tolerance")
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default: experiments/tatzel/results)"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.budget, args.n_test = 1, 10, 50
    torch.set_num_threads(1)
    from tqdm import tqdm

    t0 = time.perf_counter()
    variants = {"paper (full Newton steps)": False, "with line search": True}
    per_run = {v: {str(j): [] for j in SCHEDULES} for v in variants}
    exact = []
    for run in tqdm(range(args.runs), desc="runs"):
        d = make_data(100, args.n_test, run)
        exact.append(exact_laplace_nll(d))
        for v, ls in variants.items():
            for j in SCHEDULES:
                per_run[v][str(j)].append(run_schedule(d, j, args.budget, args.tol, ls))
    checkpoints = [k for k in (5, 10, 20, 50, 100) if k <= args.budget]
    results = {}
    for v in variants:
        schedules = {}
        for j in SCHEDULES:
            runs_j = per_run[v][str(j)]
            curves = torch.tensor([curve_at(r["records"], args.budget) for r in runs_j])
            schedules[str(j)] = {
                "median": curves.median(0).values.tolist(),
                "min": curves.min(0).values.tolist(),
                "max": curves.max(0).values.tolist(),
                "newton_steps": [r["newton_steps"] for r in runs_j],
                "solver_iters": [r["solver_iters"] for r in runs_j],
                "converged": [r["converged"] for r in runs_j],
            }
        table = {
            str(k): {str(j): schedules[str(j)]["median"][k] for j in SCHEDULES} for k in checkpoints
        }
        results[v] = {
            "schedules": schedules,
            "median_test_nll_at": table,
            "best_schedule_at": {k: min(t, key=t.get) for k, t in table.items()},
            "runs": {j: [run_summary(r) for r in rs] for j, rs in per_run[v].items()},
        }
    checkpoints_ex = tuple(sorted({2, min(10, args.budget), args.budget}))
    example = rate_example(make_data(100, args.n_test, 0), checkpoints_ex)
    result = {
        "setting": {
            "runs": args.runs,
            "budget": args.budget,
            "n_train": 100,
            "n_test": args.n_test,
            "tol": args.tol,
            "kernel": "RBF lengthscale 0.1 outputscale 5",
        },
        "date": time.strftime("%Y-%m-%d"),
        "seconds": time.perf_counter() - t0,
        "exact_laplace_test_nll": exact,
        "exact_laplace_test_nll_median": float(torch.tensor(exact).median()),
        "variants": results,
        "example": example,
    }
    out = args.out or OUT
    tag = "poisson_quick" if args.quick else "poisson"
    harness.write_json(out / f"{tag}.json", result)
    plot(result, out / f"{tag}.png", example)
    for v, r in results.items():
        print(v, "median test NLL after k iterations:", r["median_test_nll_at"])
        print(v, "best schedule:", r["best_schedule_at"])
    print("exact Laplace test NLL (median):", result["exact_laplace_test_nll_median"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
