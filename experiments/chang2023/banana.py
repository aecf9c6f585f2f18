"""Streaming banana with the memory-based dual SVGP (Chang et al. 2023, Sec. 4.2, Fig. 1).

The 400 banana training points are sorted by their first input and streamed in 4 batches of
100 to :class:`bo_ncgp.models.DualSVGP` with a Bernoulli likelihood, 25 inducing points moved
by pivoted Cholesky and 5 memory points per batch chosen by the Bayesian leverage score
(Eq. 31). After each batch the test accuracy and NLPD on the 4,900 test points are recorded
for

* ``memory_bls``    -- the method (5 BLS-sampled memory points per batch);
* ``memory_random`` -- the ablation with uniformly sampled memory points;
* ``no_memory``     -- ``memory_size = 0`` (the old data only enter through the dual pair);
* ``offline``       -- the same model fitted once on all 400 points (the gold standard).

Each streaming variant is run for several seeds (the seed only changes the memory sampling);
the offline fit and the no-memory variant are deterministic. Results:
``experiments/chang2023/results/banana/results.json`` plus ``banana.png``.

Usage::

    bo-ncgp banana            # full run (about a minute per seed)
    bo-ncgp banana --quick    # tiny configuration for CI
    python -m experiments.chang2023.banana --quick
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import gpytorch
import torch
from tqdm import tqdm

from bo_ncgp.data import load_banana
from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.models import DualSVGP
from experiments import harness
from experiments.chang2023.continual import make_dual

OUT = harness.results_dir(__file__, "banana")


def make_kernel(cfg: dict) -> gpytorch.kernels.Kernel:
    """``ScaleKernel(RBF-ARD)`` at the initial hyperparameters of ``cfg``."""
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=2))
    kernel.base_kernel.lengthscale = cfg["init_lengthscale"]
    kernel.outputscale = cfg["init_outputscale"]
    return kernel


def load_data(cfg: dict, root=None, verify: bool = True):
    """The banana set; a random subsample when ``cfg`` asks for fewer points (quick runs)."""
    data = load_banana(root=root, verify=verify)
    if cfg["num_train"] < data.X_train.shape[0]:
        g = torch.Generator().manual_seed(0)
        tr = torch.randperm(data.X_train.shape[0], generator=g)[: cfg["num_train"]]
        te = torch.randperm(data.X_test.shape[0], generator=g)[: cfg["num_test"]]
        data = type(data)(data.X_train[tr], data.y_train[tr], data.X_test[te], data.y_test[te])
    return data


def make_model(Z0: torch.Tensor, memory_size: int, cfg: dict, selection: str, seed: int):
    """Ours: :class:`DualSVGP` with the banana settings of ``cfg``."""
    return make_dual(make_kernel(cfg), Bernoulli(), Z0, cfg, memory_size, selection, seed)


@torch.no_grad()
def evaluate(model: DualSVGP, X: torch.Tensor, y: torch.Tensor) -> dict:
    mean, var = model.predict_f(X)
    p = model.likelihood.predictive_mean(mean, var)
    nlpd = -model.likelihood.predictive_log_prob(y, mean, var).mean()
    return {"accuracy": float(((p > 0.5).to(y.dtype) == y).double().mean()), "nlpd": float(nlpd)}


def stream(data, cfg: dict, memory_size: int, selection: str, seed: int) -> dict:
    order = torch.argsort(data.X_train[:, 0])
    X, y = data.X_train[order], data.y_train[order]
    batches = torch.arange(X.shape[0]).tensor_split(cfg["num_batches"])
    model = make_model(X[batches[0][: cfg["m"]]], memory_size, cfg, selection, seed)
    rows = []
    for b, idx in enumerate(batches):
        t0 = time.perf_counter()
        model.update(X[idx], y[idx])
        dt = time.perf_counter() - t0
        rows.append({"batch": b + 1, "seconds": dt, **evaluate(model, data.X_test, data.y_test)})
    state = {
        "Z": model.Z.tolist(),
        "memory": model.memory_inputs.tolist(),
        "lengthscale": model.kernel.base_kernel.lengthscale.detach().reshape(-1).tolist(),
        "outputscale": float(model.kernel.outputscale.detach()),
    }
    return {"per_batch": rows, "final_state": state, "model": model}


def offline(data, cfg: dict) -> dict:
    X, y = data.X_train, data.y_train
    off_cfg = dict(cfg, rounds=cfg["offline_rounds"])
    model = make_model(X[torch.argsort(X[:, 0])][: cfg["m"]], 0, off_cfg, "bls", 0)
    t0 = time.perf_counter()
    model.update(X, y)
    dt = time.perf_counter() - t0
    return {"seconds": dt, **evaluate(model, data.X_test, data.y_test), "model": model}


def per_batch_summary(runs: list[dict], key: str) -> list[dict]:
    """:func:`~experiments.harness.summary` over ``runs`` of ``key`` after every batch."""
    per_batch = [[r["per_batch"][b][key] for r in runs] for b in range(len(runs[0]["per_batch"]))]
    return [harness.summary(values) for values in per_batch]


def plot(results: dict, models: dict, data, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    batches = list(range(1, results["config"]["num_batches"] + 1))
    for name, style in (("memory_bls", "o-"), ("memory_random", "s--"), ("no_memory", "^:")):
        for ax, key in zip(axes[:2], ("accuracy", "nlpd"), strict=True):
            s = results["summary"][name][key]
            ax.errorbar(
                batches, [r["mean"] for r in s], yerr=[r["std"] for r in s], fmt=style, label=name
            )
    for ax, key in zip(axes[:2], ("accuracy", "nlpd"), strict=True):
        ax.axhline(results["offline"][key], color="k", lw=1, label="offline (400 points)")
        ax.set_xlabel("batch")
        ax.set_ylabel(f"test {key}")
        ax.set_xticks(batches)
    axes[0].legend(fontsize=8)
    model = models["memory_bls"]
    g = torch.linspace(-2.6, 2.6, 120, dtype=data.X_test.dtype)
    G = torch.stack(torch.meshgrid(g, g, indexing="xy"), -1).reshape(-1, 2)
    with torch.no_grad():
        p = model.predict_y(G).reshape(120, 120)
    ax = axes[2]
    ax.contourf(g, g, p, levels=20, cmap="RdBu_r", alpha=0.7)
    ax.contour(g, g, p, levels=[0.5], colors="k")
    Xt, yt = data.X_train, data.y_train
    ax.scatter(Xt[:, 0], Xt[:, 1], c=yt, cmap="bwr", s=6, alpha=0.5)
    ax.scatter(model.Z[:, 0], model.Z[:, 1], marker="+", c="k", s=60, label="Z")
    mem = model.memory_inputs
    ax.scatter(mem[:, 0], mem[:, 1], marker="o", facecolors="none", edgecolors="g", s=60,
               label="memory")  # fmt: skip
    ax.set_title("after the last batch (BLS memory, seed 0)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: dict, root=None, out: Path = OUT, progress: bool = True, verify: bool = True) -> dict:
    data = load_data(cfg, root, verify)
    variants = [("memory_bls", cfg["memory_size"], "bls"), ("memory_random", cfg["memory_size"],
                "random"), ("no_memory", 0, "bls")]  # fmt: skip
    jobs = [(v, s) for v in variants for s in (range(cfg["seeds"]) if v[1] > 0 else [0])]
    runs: dict[str, list[dict]] = {v[0]: [] for v in variants}
    models = {}
    bar = tqdm(total=len(jobs) + 1, desc="banana", disable=not progress)
    for (name, msize, sel), seed in jobs:
        torch.manual_seed(seed)
        res = stream(data, cfg, msize, sel, seed)
        models.setdefault(name, res.pop("model"))
        runs[name].append({"seed": seed, **res})
        bar.update()
    off = offline(data, cfg)
    models["offline"] = off.pop("model")
    bar.update()
    bar.close()
    results = {
        "experiment": "dual_svgp_banana",
        "paper": "Chang et al. 2023, Sec. 4.2 (banana, Fig. 1)",
        "config": cfg,
        "offline": off,
        "runs": runs,
        "summary": {
            name: {key: per_batch_summary(r, key) for key in ("accuracy", "nlpd", "seconds")}
            for name, r in runs.items()
        },
    }
    harness.write_json(out / "results.json", results)
    plot(results, models, data, out / "banana.png")
    return results


def table(results: dict) -> str:
    """Markdown table of the per-batch accuracy / NLPD (mean ± std over seeds)."""
    nb = results["config"]["num_batches"]
    rows = [
        [name] + [f"{a['mean']:.3f}±{a['std']:.3f} / {n['mean']:.3f}±{n['std']:.3f}"
                  for a, n in zip(s["accuracy"], s["nlpd"], strict=True)]
        for name, s in results["summary"].items()
    ]  # fmt: skip
    o = results["offline"]
    rows.append([f"offline (all {results['config']['num_train']})"] + [""] * (nb - 1)
                + [f"{o['accuracy']:.3f} / {o['nlpd']:.3f}"])  # fmt: skip
    return harness.markdown_table(["variant"] + [f"batch {b}" for b in range(1, nb + 1)], rows)


DEFAULT = {
    "num_train": 400,
    "num_test": 4900,
    "num_batches": 4,
    "m": 25,
    "memory_size": 5,
    "rho": 0.8,
    "inner_steps": 20,
    "hyper_steps": 50,
    "rounds": 2,
    "offline_rounds": 8,
    "lr": 0.05,
    "init_lengthscale": 1.0,
    "init_outputscale": 1.0,
    "seeds": 5,
}
QUICK = dict(
    DEFAULT, num_train=60, num_test=200, m=8, memory_size=3, inner_steps=3, hyper_steps=3,
    rounds=1, offline_rounds=1, seeds=1,
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, OUT, seeds=True, root=True).parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(DEFAULT, QUICK, args)
    results = run(cfg, root=args.root, out=args.out, verify=args.verify)
    print(table(results))
    print(f"results written to {args.out}", file=sys.stderr)
    nlpd = [r["mean"] for s in results["summary"].values() for r in s["nlpd"]]
    return harness.exit_code([*nlpd, results["offline"]["nlpd"]])


if __name__ == "__main__":
    raise SystemExit(main())
