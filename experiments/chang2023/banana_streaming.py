"""Streaming banana, ours vs Bui et al. (2017): posterior after each batch (Chang et al. 2023,
Fig. 1 top, Sec. 4.2).

The 400 banana training points are sorted by their first input and streamed in 4 batches of
100. After every batch we plot the predictive class probability of

* ``ours``   -- :class:`~bo_ncgp.models.DualSVGP` in the setting of
  ``experiments/chang2023/banana.py`` (imported from there: Bernoulli likelihood, RBF-ARD, 25
  inducing points moved by pivoted Cholesky, 5 BLS memory points per batch);
* ``bui``    -- :class:`~bo_ncgp.models.baselines.BuiStreamingSVGP` with the same kernel
  initialisation and number of inducing points, Adam on Eq. 5 over q(u), the hyperparameters
  and the inducing inputs (initialised by the same pivoted-Cholesky rule);

and record test accuracy / NLPD on the 4,900 test points; ``offline`` is a GPyTorch SVGP with
25 inducing points trained on all 400 points. ``ours`` is run for several seeds (memory
sampling); Bui et al. is deterministic. Outputs under
``experiments/chang2023/results/banana_streaming/``: ``results.json`` (metrics per batch and
run, no grids) and ``banana_streaming.png`` (2 rows x 4 batches, Fig. 1 top; first seed).

Usage::

    bo-ncgp banana-streaming [--seeds 5] [--quick]
    python -m experiments.chang2023.banana_streaming --quick
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.models.baselines import BuiStreamingSVGP, OfflineSVGP
from experiments import harness
from experiments.chang2023 import banana
from experiments.chang2023.continual import evaluate

OUT = harness.results_dir(__file__, "banana_streaming")
GRID = 80

DEFAULT = dict(
    banana.DEFAULT, seeds=5, bui_steps=500, bui_lr=0.05, offline_steps=2000, offline_lr=0.05
)
QUICK = dict(banana.QUICK, seeds=1, bui_steps=5, bui_lr=0.05, offline_steps=5, offline_lr=0.05)


def _grid(dtype) -> torch.Tensor:
    g = torch.linspace(-2.8, 2.8, GRID, dtype=dtype)
    return torch.stack(torch.meshgrid(g, g, indexing="xy"), -1).reshape(-1, 2)


def stream(method: str, data, cfg: dict, seed: int) -> dict:
    """Stream the sorted training set; metrics, grid probabilities and state per batch."""
    torch.manual_seed(seed)
    order = torch.argsort(data.X_train[:, 0])
    X, y = data.X_train[order], data.y_train[order]
    batches = torch.arange(X.shape[0]).tensor_split(cfg["num_batches"])
    Z0 = X[batches[0][: cfg["m"]]]
    if method == "ours":
        model = banana.make_model(Z0, cfg["memory_size"], cfg, "bls", seed)
    else:
        model = BuiStreamingSVGP(banana.make_kernel(cfg), Bernoulli(), Z0,
                                 num_steps=cfg["bui_steps"], lr=cfg["bui_lr"],
                                 learn_inducing=True)  # fmt: skip
    G = _grid(X.dtype)
    rows = []
    for b, idx in enumerate(batches):
        t0 = time.perf_counter()
        model.update(X[idx], y[idx])
        secs = time.perf_counter() - t0
        with torch.no_grad():
            p = model.predict_y(G)
        mem = model.memory_inputs.tolist() if method == "ours" else []
        rows.append({"batch": b + 1, "seconds": secs, **evaluate(model, data.X_test, data.y_test),
                     "grid_prob": p.tolist(), "Z": model.Z.tolist(), "memory": mem,
                     "seen": int(idx[-1]) + 1})  # fmt: skip
    return {"method": method, "seed": seed, "per_batch": rows}


def plot(results: dict, data, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {"ours": results["runs"]["ours"][0], "bui": results["runs"]["bui"][0]}
    nb = len(runs["ours"]["per_batch"])
    fig, axes = plt.subplots(2, nb, figsize=(3.2 * nb, 6.4), squeeze=False)
    g = torch.linspace(-2.8, 2.8, GRID)
    order = torch.argsort(data.X_train[:, 0])
    X, y = data.X_train[order], data.y_train[order]
    for r, (name, run) in enumerate(runs.items()):
        for b, row in enumerate(run["per_batch"]):
            ax = axes[r, b]
            P = torch.tensor(row["grid_prob"]).reshape(GRID, GRID)
            ax.contourf(g, g, P, levels=20, cmap="RdBu_r", alpha=0.7, vmin=0, vmax=1)
            ax.contour(g, g, P, levels=[0.5], colors="k", linewidths=1)
            seen = row["seen"]
            ax.scatter(X[:seen, 0], X[:seen, 1], c=y[:seen], cmap="bwr", s=4, alpha=0.35)
            Z = torch.tensor(row["Z"])
            ax.scatter(Z[:, 0], Z[:, 1], marker="+", c="k", s=40)
            if row["memory"]:
                M = torch.tensor(row["memory"])
                ax.scatter(M[:, 0], M[:, 1], facecolors="none", edgecolors="g", s=40)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{name}, batch {b + 1}: acc {row['accuracy']:.2f}, NLPD "
                         f"{row['nlpd']:.2f}", fontsize=8)  # fmt: skip
    fig.tight_layout()
    harness.save_png(fig, path, dpi=100)
    plt.close(fig)


def run(cfg: dict, root=None, out: Path = OUT, progress: bool = True, verify: bool = True) -> dict:
    data = banana.load_data(cfg, root, verify)
    jobs = [("ours", s) for s in range(cfg["seeds"])] + [("bui", 0)]
    runs: dict[str, list] = {"ours": [], "bui": []}
    for method, seed in tqdm(jobs, desc="banana streaming", disable=not progress):
        runs[method].append(stream(method, data, cfg, seed))
    t0 = time.perf_counter()
    off = OfflineSVGP(banana.make_kernel(cfg), Bernoulli(), data.X_train[: cfg["m"]])
    off.fit(data.X_train, data.y_train, num_steps=cfg["offline_steps"], lr=cfg["offline_lr"])
    offline = {"seconds": time.perf_counter() - t0, **evaluate(off, data.X_test, data.y_test)}
    summ = {
        m: [{k: harness.summary([r["per_batch"][b][k] for r in rs]) for k in ("accuracy", "nlpd")}
            for b in range(cfg["num_batches"])] for m, rs in runs.items()
    }  # fmt: skip
    results = {"experiment": "banana_streaming", "paper": "Chang et al. 2023, Fig. 1 top",
               "config": cfg, "date": time.strftime("%Y-%m-%d"), "offline": offline,
               "summary": summ, "runs": runs}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    plot(results, data, out / "banana_streaming.png")
    harness.write_json(out / "results.json", compact(results))
    return results


_BULKY = ("grid_prob", "Z", "memory")


def compact(results: dict) -> dict:
    """``results`` without the per-batch grids, inducing inputs and memory (kept in memory for
    the plot only), so that ``results.json`` stays a few kB."""
    runs = {m: [dict(r, per_batch=[{k: v for k, v in row.items() if k not in _BULKY}
                                   for row in r["per_batch"]]) for r in rs]
            for m, rs in results["runs"].items()}  # fmt: skip
    return dict(results, runs=runs)


def table(results: dict) -> str:
    """Markdown table of the per-batch accuracy / NLPD, mean (std) over seeds."""
    nb = results["config"]["num_batches"]
    rows = [[m] + [f"{harness.fmt(r['accuracy'])} / {harness.fmt(r['nlpd'])}" for r in per_batch]
            for m, per_batch in results["summary"].items()]  # fmt: skip
    o = results["offline"]
    rows.append(["offline SVGP (all points)"] + [""] * (nb - 1)
                + [f"{o['accuracy']:.3f} / {o['nlpd']:.3f}"])  # fmt: skip
    return harness.markdown_table(["method"] + [f"batch {b + 1}" for b in range(nb)], rows)


def main(argv: list[str] | None = None) -> int:
    args = harness.parser(__doc__, OUT, seeds=True, root=True).parse_args(argv)
    harness.setup(args.threads)
    res = run(harness.preset(DEFAULT, QUICK, args), args.root, args.out, verify=args.verify)
    print(table(res))
    print(f"results written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
