"""NLPD against wall-clock time, ours vs Bui et al. (Chang et al. 2023, Sec. 4.4, Fig. 7).

A streaming classification set (``bank``; the paper's ``adult`` is not available offline)
is streamed as in ``experiments/chang2023/uci.py`` (fold 0 of the 10-fold split, training
inputs sorted by the first dimension, 50 sets). Hyperparameters are *fixed* (taken from an
offline SVGP fitted to the training fold, then frozen) and the inducing inputs follow the same
pivoted-Cholesky rule in both methods, so only the variational parameters are optimised:

* ``ours`` -- :class:`~bo_ncgp.models.DualSVGP` with ``inner_steps`` natural-gradient (dual)
  steps per set, ``rho = 1``, 10 BLS memory points per set;
* ``bui``  -- :class:`~bo_ncgp.models.baselines.BuiStreamingSVGP` with ``steps`` Adam steps
  per set on Eq. 5.

For each budget we record the total inference wall-clock over the stream and the final test
NLPD (one run per budget; wall-clock on a shared machine is noisy). Outputs under
``experiments/chang2023/results/streaming_timing/``: ``results.json``, ``fig7.png``.

Usage::

    bo-ncgp streaming-timing [--dataset bank] [--quick]
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import torch
from tqdm import tqdm

from bo_ncgp.data import load_uci
from bo_ncgp.likelihoods import Bernoulli
from experiments import harness
from experiments.chang2023.continual import evaluate, fit_offline, make_bui, make_dual, timed_update
from experiments.chang2023.uci import DEFAULT as UCI_DEFAULT
from experiments.chang2023.uci import folds, kernel

OUT = harness.results_dir(__file__, "streaming_timing")

DEFAULT = dict(
    UCI_DEFAULT,
    dataset="bank",
    ours_inner_steps=[1, 2, 5, 10, 20],
    bui_step_counts=[1, 3, 10, 30, 100],
    rho=1.0,
    bui_lr=0.05,
    offline_steps=500,
)
QUICK = dict(
    DEFAULT, dataset="mammographic", num_sets=4, m=10, memory_size=3, ours_inner_steps=[1, 2],
    bui_step_counts=[1, 3], offline_steps=5, max_rows=120,
)  # fmt: skip


def data(cfg: dict, root=None, verify: bool = True):
    X, y = load_uci(cfg["dataset"], root=root, verify=verify)
    if cfg["max_rows"]:
        keep = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))
        X, y = X[keep[: cfg["max_rows"]]], y[keep[: cfg["max_rows"]]]
    test = folds(X.shape[0], UCI_DEFAULT["folds"])[0]
    train = torch.ones(X.shape[0], dtype=torch.bool)
    train[test] = False
    return X[train], y[train], X[test], y[test]


def stream(method: str, budget: int, k_fixed, Xtr, ytr, Xte, yte, cfg: dict) -> dict:
    torch.manual_seed(0)
    order = torch.argsort(Xtr[:, 0], stable=True)
    sets = [s for s in order.tensor_split(cfg["num_sets"]) if len(s)]
    Z0 = Xtr[sets[0][: cfg["m"]]]
    kern = copy.deepcopy(k_fixed)
    if method == "ours":
        c = dict(cfg, inner_steps=budget, hyper_steps=0)
        model = make_dual(kern, Bernoulli(), Z0, c, cfg["memory_size"], "bls", 0, cfg["m"])
    else:
        c = dict(cfg, bui_steps=budget, bui_learn_hypers=False, bui_learn_inducing=False)
        model = make_bui(kern, Bernoulli(), Z0, c, cfg["m"])
    seconds, curve = 0.0, []
    for idx in sets:
        seconds += timed_update(model, Xtr[idx], ytr[idx])
        curve.append(seconds)
    return {"method": method, "budget": budget, "seconds": seconds, "cumulative": curve,
            **evaluate(model, Xte, yte)}  # fmt: skip


def run(cfg: dict, root=None, out: Path = OUT, progress: bool = True, verify: bool = True) -> dict:
    Xtr, ytr, Xte, yte = data(cfg, root, verify)
    harness.log(f"streaming timing on {cfg['dataset']}: {Xtr.shape[0]} training points, "
                "fixed hyperparameters from an offline SVGP fit")  # fmt: skip
    off = fit_offline(kernel(cfg, Xtr.shape[1]), Bernoulli(), Xtr, ytr, cfg, seed=0)
    k_fixed = copy.deepcopy(off.kernel)
    for p in k_fixed.parameters():
        p.requires_grad_(False)
    offline = evaluate(off, Xte, yte)
    jobs = [("ours", b) for b in cfg["ours_inner_steps"]]
    jobs += [("bui", b) for b in cfg["bui_step_counts"]]
    rows = []
    for method, budget in tqdm(jobs, desc="timing", disable=not progress):
        r = stream(method, budget, k_fixed, Xtr, ytr, Xte, yte, cfg)
        harness.log(f"{method} budget {budget}: {r['seconds']:.2f} s, NLPD {r['nlpd']:.4f}")
        rows.append(r)
    results = {"experiment": "streaming_timing", "paper": "Chang et al. 2023, Sec. 4.4, Fig. 7",
               "config": cfg, "date": time.strftime("%Y-%m-%d"), "offline": offline,
               "runs": rows}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    harness.write_json(out / "results.json", results)
    plot(results, out / "fig7.png")
    return results


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for method, style, label in (("ours", "o-", "ours (dual steps)"),
                                 ("bui", "x--", "Bui et al. (Adam steps)")):  # fmt: skip
        rs = [r for r in results["runs"] if r["method"] == method]
        ax.plot([r["seconds"] for r in rs], [r["nlpd"] for r in rs], style, label=label)
        for r in rs:
            ax.annotate(str(r["budget"]), (r["seconds"], r["nlpd"]), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))  # fmt: skip
    ax.axhline(results["offline"]["nlpd"], color="k", lw=0.8, label="offline SVGP")
    values = [r["nlpd"] for r in results["runs"]] + [results["offline"]["nlpd"]]
    span = max(values) - min(values)
    ax.set_ylim(min(values) - 0.05 * span - 1e-3, max(values) + 0.05 * span + 1e-3)
    ax.set_xscale("log")
    ax.set_xlabel("inference wall-clock over the stream (s), log scale")
    ax.set_ylabel("test NLPD")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(results: dict) -> str:
    """Markdown table of the total update time and final NLPD per method and budget."""
    rows = [[r["method"], r["budget"], f"{r['seconds']:.2f}", f"{r['nlpd']:.4f}"]
            for r in results["runs"]]  # fmt: skip
    rows.append(["offline SVGP", "", "", f"{results['offline']['nlpd']:.4f}"])
    return harness.markdown_table(["method", "steps per set", "total seconds", "test NLPD"], rows)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, root=True)
    p.add_argument(
        "--dataset",
        choices=("bank", "mammographic"),
        default=None,
        help="data set (default: the preset's)",
    )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(DEFAULT, QUICK, args, dataset=args.dataset)
    print(table(run(cfg, args.root, args.out, verify=args.verify)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
