"""Sequential estimation of magnetic-field anomalies (Chang et al. 2023, Sec. 4.2, Fig. 5).

Indoor magnetometer data of Solin et al. (2018): a wheeled robot with a 3-axis magnetometer
in a 6 m x 6 m room; the target is the field norm (µT) as a function of the 2-D position.
Prior ``GP(0, sigma_0^2 + kappa_Matern-3/2(x, x'))`` with Gaussian noise; all of
``(sigma_0^2, sigma^2, lengthscale, sigma_n^2)`` are learned online. Targets are centred by the
mean of the first batch (the only data available at that time).

* Experiment #1 (Fig. 5a): paths 1-4 arrive one complete trajectory at a time (thinned by
  ``thin_a``); the model never sees an earlier path again. After each path: the posterior
  mean (opacity from the marginal variance), inducing inputs and memory, the learned
  hyperparameters, and RMSE / NLPD on held-out paths 5-9 (thinned by ``thin_test``).
* Experiment #2 (Fig. 5b): path ``explore_path`` arrives in ``num_steps`` consecutive chunks
  while the robot explores (an ever-expanding domain), a fixed number of inducing points;
  every ``holdout``-th reading is held out. After each step: RMSE on the held-out readings of
  the region explored so far, ours vs Bui et al. (2017).

``ours`` is :class:`~bo_ncgp.models.DualSVGP` (pivoted-Cholesky inducing points, BLS memory,
Eq. 26 hyperparameter steps); ``bui`` is :class:`~bo_ncgp.models.baselines.BuiStreamingSVGP`
(Adam on Eq. 5 over q(u), hyperparameters and inducing inputs). Outputs under
``experiments/chang2023/results/magnetometer/``: ``exp1.json``, ``exp2.json`` (metrics,
hyperparameters and times per path / step; no grids), ``fig5a.png``, ``fig5b.png``.

Usage::

    bo-ncgp magnetic-anomalies [--experiments 1 2] [--quick]
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from bo_ncgp.data import load_magnetometer
from bo_ncgp.likelihoods import Gaussian
from experiments import harness
from experiments.chang2023.continual import evaluate, make_bui, make_dual, matern, timed_update

OUT = harness.results_dir(__file__, "magnetometer")
PAPER_EXP2 = {5: (7.79, 8.31), 10: (7.75, 10.9), 15: (7.40, 9.90), 20: (7.38, 9.79)}
GRID = 60

DEFAULT = {
    "train_paths": [1, 2, 3, 4],
    "test_paths": [5, 6, 7, 8, 9],
    "thin_a": 10,
    "thin_test": 20,
    "m_a": 200,
    "memory_a": 50,
    "explore_path": 1,
    "thin_b": 5,
    "holdout": 10,
    "num_steps": 20,
    "m_b": 100,
    "memory_b": 20,
    "nu": 1.5,
    "init_lengthscale": 0.5,
    "init_outputscale": 100.0,
    "init_constant": 10.0,
    "init_noise": 4.0,
    "rho": 1.0,
    "inner_steps": 2,
    "hyper_steps": 50,
    "rounds": 3,
    "lr": 0.05,
    "bui_steps": 300,
    "bui_lr": 0.02,
    "bui_learn_inducing": True,
}
QUICK = dict(
    DEFAULT, train_paths=[1, 2], test_paths=[9], thin_a=200, thin_test=400, m_a=15, memory_a=5,
    thin_b=100, num_steps=4, m_b=10, memory_b=3, hyper_steps=3, rounds=1, bui_steps=5,
)  # fmt: skip


def kernel(cfg: dict):
    return matern(cfg["nu"], cfg["init_lengthscale"], cfg["init_outputscale"],
                  constant=cfg["init_constant"])  # fmt: skip


def hypers(model) -> dict:
    k = model.kernel.kernels[0]
    c = model.kernel.kernels[1]
    return {
        "lengthscale": float(k.base_kernel.lengthscale.detach()),
        "outputscale": float(k.outputscale.detach()),
        "constant": float(c.constant.detach()),
        "noise": float(model.likelihood.noise.detach()),
    }


def make(method: str, Z0, cfg: dict, m: int, memory: int, seed: int = 0):
    lik = Gaussian(cfg["init_noise"])
    if method == "ours":
        return make_dual(kernel(cfg), lik, Z0, cfg, memory, "bls", seed, m)
    return make_bui(kernel(cfg), lik, Z0, cfg, m)


def grid_prediction(model, lo, hi) -> dict:
    gx = torch.linspace(lo[0], hi[0], GRID)
    gy = torch.linspace(lo[1], hi[1], GRID)
    G = torch.stack(torch.meshgrid(gx, gy, indexing="xy"), -1).reshape(-1, 2)
    with torch.no_grad():
        mean, var = model.predict_f(G)
    return {"mean": mean.tolist(), "std": var.clamp_min(0).sqrt().tolist()}


def experiment1(cfg: dict, root=None, progress: bool = True, verify: bool = True) -> dict:
    train = [load_magnetometer([p], root=root, verify=verify) for p in cfg["train_paths"]]
    test = load_magnetometer(cfg["test_paths"], root=root, verify=verify)
    Xte, yte = test["X"][:: cfg["thin_test"]], test["y"][:: cfg["thin_test"]]
    offset = float(train[0]["y"][:: cfg["thin_a"]].mean())
    allX = torch.cat([d["X"] for d in train] + [test["X"]])
    lo, hi = (allX.min(0).values - 0.2).tolist(), (allX.max(0).values + 0.2).tolist()
    out = {"offset": offset, "extent": [lo, hi], "methods": {}}
    for method in ("ours", "bui"):
        torch.manual_seed(0)
        X0 = train[0]["X"][:: cfg["thin_a"]]
        model = make(method, X0[:: max(1, X0.shape[0] // cfg["m_a"])][: cfg["m_a"]], cfg,
                     cfg["m_a"], cfg["memory_a"])  # fmt: skip
        rows = []
        for p, d in zip(cfg["train_paths"], tqdm(train, desc=f"exp1 {method}",
                                                 disable=not progress), strict=True):  # fmt: skip
            X, y = d["X"][:: cfg["thin_a"]], d["y"][:: cfg["thin_a"]] - offset
            secs = timed_update(model, X, y)
            ev = evaluate(model, Xte, yte - offset)
            mem = model.memory_inputs.tolist() if method == "ours" else []
            rows.append({"path": p, "seconds": secs, **ev, "hypers": hypers(model),
                         "Z": model.Z.tolist(), "memory": mem,
                         "grid": grid_prediction(model, lo, hi)})  # fmt: skip
            harness.log(f"exp1 {method} after path {p}: RMSE {ev['rmse']:.2f}, "
                        f"NLPD {ev['nlpd']:.2f}, {hypers(model)}")  # fmt: skip
        out["methods"][method] = rows
    out["paths_xy"] = [d["X"][:: cfg["thin_a"]].tolist() for d in train]
    return out


def experiment2(cfg: dict, root=None, progress: bool = True, verify: bool = True) -> dict:
    d = load_magnetometer([cfg["explore_path"]], root=root, verify=verify)
    X, y = d["X"][:: cfg["thin_b"]], d["y"][:: cfg["thin_b"]]
    n = X.shape[0]
    is_test = torch.zeros(n, dtype=torch.bool)
    is_test[cfg["holdout"] - 1 :: cfg["holdout"]] = True
    chunks = torch.arange(n).tensor_split(cfg["num_steps"])
    offset = float(y[chunks[0]][~is_test[chunks[0]]].mean())
    lo, hi = (X.min(0).values - 0.2).tolist(), (X.max(0).values + 0.2).tolist()
    out = {"offset": offset, "extent": [lo, hi], "methods": {}, "path_xy": X.tolist(),
           "chunk_ends": [int(c[-1]) + 1 for c in chunks]}  # fmt: skip
    for method in ("ours", "bui"):
        torch.manual_seed(0)
        tr0 = chunks[0][~is_test[chunks[0]]]
        model = make(method, X[tr0][: cfg["m_b"]], cfg, cfg["m_b"], cfg["memory_b"])
        rows = []
        for k, idx in enumerate(tqdm(chunks, desc=f"exp2 {method}", disable=not progress)):
            tr, te = idx[~is_test[idx]], torch.arange(int(idx[-1]) + 1)
            te = te[is_test[te]]
            secs = timed_update(model, X[tr], y[tr] - offset)
            ev = evaluate(model, X[te], y[te] - offset)
            row = {"step": k + 1, "seconds": secs, **ev, "hypers": hypers(model),
                   "Z": model.Z.tolist()}  # fmt: skip
            if (k + 1) % 5 == 0 or k == 0:
                row["grid"] = grid_prediction(model, lo, hi)
            rows.append(row)
        out["methods"][method] = rows
        harness.log(f"exp2 {method}: RMSE per step " + ", ".join(f"{r['rmse']:.2f}" for r in rows))
    return out


def _field_image(ax, grid: dict, extent, vmin: float, vmax: float, std_ref: float) -> None:
    import matplotlib.pyplot as plt

    mean = torch.tensor(grid["mean"]).reshape(GRID, GRID)
    std = torch.tensor(grid["std"]).reshape(GRID, GRID)
    rgba = plt.get_cmap("viridis")(((mean - vmin) / (vmax - vmin)).clamp(0, 1).numpy())
    rgba[..., 3] = (1 - std / std_ref).clamp(0.05, 1).numpy()
    (x0, y0), (x1, y1) = extent
    ax.imshow(rgba, origin="lower", extent=(x0, x1, y0, y1), interpolation="bilinear")
    ax.set_xlim(x0, x1)  # fixed limits: learned inducing inputs may leave the room
    ax.set_ylim(y0, y1)
    ax.set_xticks([])
    ax.set_yticks([])


def plot1(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["methods"]
    npaths = len(rows["ours"])
    fig, axes = plt.subplots(2, npaths, figsize=(3.2 * npaths, 6.6), squeeze=False)
    lo, hi = res["extent"]
    for r, (name, runs) in enumerate(rows.items()):
        for c, row in enumerate(runs):
            ax = axes[r, c]
            std_ref = math.sqrt(row["hypers"]["outputscale"] + row["hypers"]["constant"])
            _field_image(ax, row["grid"], (lo, hi), -25, 35, std_ref)
            for pth in res["paths_xy"][: c + 1]:
                P = torch.tensor(pth)
                ax.plot(P[:, 0], P[:, 1], color="w", lw=0.3, alpha=0.5)
            Z = torch.tensor(row["Z"])
            ax.scatter(Z[:, 0], Z[:, 1], marker="+", c="r", s=12, lw=0.7)
            if row["memory"]:
                M = torch.tensor(row["memory"])
                ax.scatter(M[:, 0], M[:, 1], facecolors="none", edgecolors="k", s=12, lw=0.6)
            ax.set_title(f"{name}, after path {row['path']}: RMSE {row['rmse']:.2f}", fontsize=8)
    fig.tight_layout()
    harness.save_png(fig, path, dpi=100)
    plt.close(fig)


def plot2(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in res["methods"]["ours"] if "grid" in r]
    fig, axes = plt.subplots(2, len(steps) + 1, figsize=(3.0 * (len(steps) + 1), 6.2),
                             squeeze=False)  # fmt: skip
    lo, hi = res["extent"]
    P = torch.tensor(res["path_xy"])
    for r, (name, runs) in enumerate(res["methods"].items()):
        shown = [row for row in runs if "grid" in row]
        for c, row in enumerate(shown):
            ax = axes[r, c]
            std_ref = math.sqrt(row["hypers"]["outputscale"] + row["hypers"]["constant"])
            _field_image(ax, row["grid"], (lo, hi), -25, 35, std_ref)
            end = res["chunk_ends"][row["step"] - 1]
            ax.plot(P[:end, 0], P[:end, 1], color="w", lw=0.3, alpha=0.6)
            Z = torch.tensor(row["Z"])
            ax.scatter(Z[:, 0], Z[:, 1], marker="+", c="r", s=12, lw=0.7)
            ax.set_title(f"{name}, step {row['step']}: RMSE {row['rmse']:.2f}", fontsize=8)
        ax = axes[r, -1]
        ax.axis("off")
    ax = axes[0, -1]
    ax.axis("on")
    for name, style in (("ours", "o-"), ("bui", "x--")):
        runs = res["methods"][name]
        ax.plot([x["step"] for x in runs], [x["rmse"] for x in runs], style, ms=3, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("RMSE (µT), explored region")
    ax.legend(fontsize=8)
    fig.tight_layout()
    harness.save_png(fig, path, dpi=100)
    plt.close(fig)


def run(
    cfg: dict, experiments=(1, 2), root=None, out: Path = OUT, progress=True, verify=True
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    meta = {"config": cfg, "date": time.strftime("%Y-%m-%d"),
            "paper": "Chang et al. 2023, Sec. 4.2, Fig. 5"}  # fmt: skip
    if 1 in experiments:
        res = {**meta, **experiment1(cfg, root, progress, verify)}
        plot1(res, out / "fig5a.png")
        harness.write_json(out / "exp1.json", compact(res))
        results["exp1"] = res
    if 2 in experiments:
        res = {**meta, **experiment2(cfg, root, progress, verify)}
        plot2(res, out / "fig5b.png")
        harness.write_json(out / "exp2.json", compact(res))
        results["exp2"] = res
    return results


def compact(res: dict) -> dict:
    """An experiment's result without grids, paths and inducing inputs (kept in memory for the
    plots only), so that the JSON files stay a few kB."""
    bulky = ("grid", "Z", "memory")
    methods = {m: [{k: v for k, v in row.items() if k not in bulky} for row in rows]
               for m, rows in res["methods"].items()}  # fmt: skip
    out = {k: v for k, v in res.items() if k not in ("paths_xy", "path_xy")}
    out["methods"] = methods
    return out


def tables(results: dict) -> str:
    """Markdown tables of experiments #1 (per path) and #2 (per exploration step)."""
    out = []
    if "exp1" in results:
        rows = []
        for o, b in zip(results["exp1"]["methods"]["ours"], results["exp1"]["methods"]["bui"],
                        strict=True):  # fmt: skip
            h = o["hypers"]
            rows.append([o["path"], f"{o['rmse']:.2f} / {o['nlpd']:.2f}",
                         f"{b['rmse']:.2f} / {b['nlpd']:.2f}",
                         f"l={h['lengthscale']:.2f}, s2={h['outputscale']:.0f}, "
                         f"s0^2={h['constant']:.1f}, sn^2={h['noise']:.2f}"])  # fmt: skip
        header = ["after path", "ours RMSE / NLPD", "Bui et al. RMSE / NLPD", "ours hypers"]
        out.append(harness.markdown_table(header, rows) + "\n")
    if "exp2" in results:
        rows = []
        for o, b in zip(results["exp2"]["methods"]["ours"], results["exp2"]["methods"]["bui"],
                        strict=True):  # fmt: skip
            pv = PAPER_EXP2.get(o["step"])
            rows.append([o["step"], f"{o['rmse']:.2f}", f"{b['rmse']:.2f}",
                         f"{pv[0]} vs {pv[1]}" if pv else ""])  # fmt: skip
        header = ["step", "ours RMSE", "Bui et al. RMSE", "paper (ours vs Bui)"]
        out.append(harness.markdown_table(header, rows))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, root=True)
    p.add_argument(
        "--experiments",
        nargs="+",
        type=int,
        default=[1, 2],
        choices=(1, 2),
        help="experiments to run (1: whole trajectories, Fig. 5a; 2: one path in chunks, Fig. 5b)",
    )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(DEFAULT, QUICK, args)
    res = run(cfg, tuple(args.experiments), args.root, args.out, verify=args.verify)
    print(tables(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
