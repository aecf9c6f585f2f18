"""Streaming UCI classification (Chang et al. 2023, Sec. 4.2, Table 1): bank, mammographic.

10-fold cross-validation. In each fold the training inputs are sorted by their first input
dimension and cut into 50 streaming sets; a streaming model sees one set at a time. Test NLPD
(and accuracy) after the last set, mean (std) over folds, for

* ``offline``      -- SVGP (GPyTorch) with the same kernel and number of inducing points,
  trained on the whole training fold (minibatch Adam, 1000 steps of 500 points);
* ``ours``         -- :class:`~bo_ncgp.models.DualSVGP`, Bernoulli likelihood, Matern-5/2 ARD,
  100 inducing points moved by pivoted Cholesky, 10 memory points per set chosen by the
  Bayesian leverage score, hyperparameters learned by Eq. 26 with BoTorch's
  dimension-scaled log-normal prior on the lengthscales (``lengthscale_prior``; without it
  the first sets, some 17 points each, run the lengthscales of the categorical inputs to
  zero on some memory draws);
* ``ours_random``  -- the same with 10 uniformly sampled memory points per set;
* ``ours_balanced`` -- the same with 10 label-balanced BLS memory points per set (an equal
  share per label, BLS within each label);
* ``ours_stratified`` -- the same with shares in proportion to the labels seen so far;
* ``ours_random_stratified`` -- those shares drawn uniformly within each label;
* ``bui``          -- Bui et al. (2017): Adam on Eq. 5 over q(u), the hyperparameters and the
  inducing inputs (initialised by the same pivoted-Cholesky rule), 100 inducing points.

Every (data set, fold, method) unit is stored as JSON under
``experiments/chang2023/results/uci/runs/`` as soon as it finishes (resume after an
interruption; ``--force`` recomputes). ``results.json`` holds the table.

Usage::

    python experiments/chang2023/uci.py [--datasets bank mammographic] [--folds 10] [--quick]
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from tqdm import tqdm

from bo_ncgp.data import load_uci
from bo_ncgp.likelihoods import Bernoulli
from experiments import harness
from experiments.chang2023.continual import (
    evaluate,
    fit_offline,
    make_bui,
    make_dual,
    matern,
    timed_update,
)

OUT = harness.results_dir(__file__, "uci")
METHODS = (
    "offline",
    "ours",
    "ours_random",
    "ours_balanced",
    "ours_stratified",
    "ours_random_stratified",
    "bui",
)
SELECTION = {
    "ours": "bls",
    "ours_random": "random",
    "ours_balanced": "bls_balanced",
    "ours_stratified": "bls_stratified",
    "ours_random_stratified": "random_stratified",
}
PAPER_TABLE1 = {  # NLPD mean (std): offline, ours, Bui et al.
    "bank": ((0.25, 0.03), (0.26, 0.03), (0.28, 0.04)),
    "mammographic": ((0.40, 0.04), (0.41, 0.05), (0.42, 0.05)),
}

DEFAULT = {
    "datasets": ["bank", "mammographic"],
    "folds": 10,
    "num_sets": 50,
    "m": 100,
    "memory_size": 10,
    "rho": 0.8,
    "inner_steps": 10,
    "hyper_steps": 20,
    "lr": 0.05,
    "init_lengthscale": 2.0,
    "init_outputscale": 1.0,
    "bui_steps": 100,
    "bui_lr": 0.05,
    "bui_learn_inducing": True,
    "offline_steps": 1000,
    "offline_lr": 0.05,
    "offline_batch": 500,
    "max_rows": None,
    "lengthscale_prior": True,
    "memory_seed": 0,
}
QUICK = dict(
    DEFAULT, datasets=["mammographic"], folds=2, num_sets=4, m=10, memory_size=3,
    inner_steps=2, hyper_steps=2, bui_steps=3, offline_steps=5, max_rows=120,
)  # fmt: skip


def folds(n: int, k: int, seed: int = 0) -> list[torch.Tensor]:
    """``k`` disjoint test-index sets covering ``range(n)`` (a seeded permutation)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return list(perm.tensor_split(k))


def kernel(cfg: dict, d: int, prior: bool = False):
    """Matern-5/2 ARD at the initial hyperparameters; with ``prior`` the lengthscales get
    BoTorch's dimension-scaled prior (that of ``get_covar_module_with_dim_scaled_prior``,
    ``LogNormal(sqrt(2) + log(d) / 2, sqrt(3))``)."""
    ls_prior = None
    if prior:
        from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior

        ls_prior = get_covar_module_with_dim_scaled_prior(ard_num_dims=d).lengthscale_prior
    return matern(2.5, cfg["init_lengthscale"], cfg["init_outputscale"], ard_num_dims=d,
                  lengthscale_prior=ls_prior)  # fmt: skip


def run_unit(method: str, X, y, test_idx, cfg: dict, fold: int) -> dict:
    """One method on one fold: test NLPD / accuracy and wall-clock seconds."""
    torch.manual_seed(fold)
    train = torch.ones(X.shape[0], dtype=torch.bool)
    train[test_idx] = False
    Xtr, ytr, Xte, yte = X[train], y[train], X[test_idx], y[test_idx]
    d = X.shape[1]
    if method == "offline":
        t0 = time.perf_counter()
        model = fit_offline(kernel(cfg, d), Bernoulli(), Xtr, ytr, cfg, seed=fold)
        return {"seconds": time.perf_counter() - t0, **evaluate(model, Xte, yte)}
    order = torch.argsort(Xtr[:, 0], stable=True)
    sets = order.tensor_split(cfg["num_sets"])
    Z0 = Xtr[sets[0][: cfg["m"]]]
    if method == "bui":
        model = make_bui(kernel(cfg, d), Bernoulli(), Z0, cfg, cfg["m"])
    else:
        seed = fold + cfg["memory_seed"]  # the memory's draws
        model = make_dual(kernel(cfg, d, cfg["lengthscale_prior"]), Bernoulli(), Z0, cfg,
                          cfg["memory_size"], SELECTION[method], seed, cfg["m"])  # fmt: skip
    seconds = sum(timed_update(model, Xtr[idx], ytr[idx]) for idx in sets if len(idx))
    return {"seconds": seconds, **evaluate(model, Xte, yte)}


_COMMON = ("num_sets", "m", "init_lengthscale", "init_outputscale", "max_rows")
_OURS = ("memory_size", "rho", "inner_steps", "hyper_steps", "lr", "lengthscale_prior",
         "memory_seed")  # fmt: skip
_KEYS = {
    "offline": ("offline_steps", "offline_lr", "offline_batch"),
    **{method: _OURS for method in SELECTION},  # the DualSVGP methods differ in memory only
    "bui": ("bui_steps", "bui_lr", "bui_learn_inducing"),
}


def method_config(cfg: dict, method: str) -> dict:
    """The settings a method's result depends on (its stored units are reused as long as
    these are unchanged)."""
    return {k: cfg.get(k) for k in _COMMON + _KEYS[method]}


def run(cfg: dict, methods=METHODS, root=None, out: Path = OUT, progress: bool = True,
        force: bool = False, compute: bool = True, verify: bool = True) -> dict:  # fmt: skip
    """Run the missing (data set, fold, method) units (``compute=False``: none, summarise the
    stored ones), then write ``results.json`` and ``streaming_uci.png`` under ``out``."""
    store = harness.Store(out / "runs")
    table: dict = {}
    raw: dict = {}
    for name in cfg["datasets"]:
        X, y = load_uci(name, root=root, verify=verify)
        if cfg["max_rows"]:
            keep = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))
            X, y = X[keep[: cfg["max_rows"]]], y[keep[: cfg["max_rows"]]]
        tests = folds(X.shape[0], cfg["folds"])
        res: dict[str, list[dict]] = {m: [] for m in methods}
        nrun = min(cfg.get("run_folds") or cfg["folds"], cfg["folds"])
        jobs = [(f, m) for f in range(nrun) for m in methods]
        for f, method in tqdm(jobs, desc=name, disable=not progress):

            def make(name=name, X=X, y=y, test=tests[f], f=f, method=method) -> dict:
                r = run_unit(method, X, y, test, cfg, f)
                harness.log(f"{name} fold {f} {method}: NLPD {r['nlpd']:.3f}, "
                            f"acc {r['accuracy']:.3f} ({r['seconds']:.1f} s)")  # fmt: skip
                return r

            r = store.unit(f"{name}_fold{f}_{method}", method_config(cfg, method), make,
                           force=force, compute=compute)  # fmt: skip
            if r is not None:  # None: summary only, unit not stored
                res[method].append(dict(r, fold=f))
        raw[name] = res
        table[name] = {m: {k: harness.summary([r[k] for r in rs])
                           for k in ("nlpd", "accuracy", "seconds")}
                       for m, rs in res.items() if rs}  # fmt: skip
    results = {"experiment": "streaming_uci", "paper": "Chang et al. 2023, Sec. 4.2, Table 1",
               "config": cfg, "date": time.strftime("%Y-%m-%d"), "table": table,
               "runs": raw}  # fmt: skip
    harness.write_json(out / "results.json", results)
    plot(results, out / "streaming_uci.png")
    return results


def plot(results: dict, path: Path) -> None:
    """Test NLPD per fold and method (dots), mean (bar) and the paper's mean (black tick)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in results["table"] if results["table"][n]]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(4.2 * max(1, len(names)), 3.4),
                             squeeze=False)  # fmt: skip
    paper_idx = {"offline": 0, "ours": 1, "bui": 2}
    for ax, name in zip(axes[0], names, strict=False):
        rows = results["table"][name]
        for i, m in enumerate(rows):
            vals = [r["nlpd"] for r in results["runs"][name][m]]
            ax.bar(i, rows[m]["nlpd"]["mean"], color="C0", alpha=0.35)
            ax.plot([i] * len(vals), vals, "o", color="C0", ms=3)
            if name in PAPER_TABLE1 and m in paper_idx:
                ax.plot(i, PAPER_TABLE1[name][paper_idx[m]][0], "_", color="k", ms=18, mew=2)
        ax.set_xticks(range(len(rows)), list(rows), fontsize=8)
        n = max(r["nlpd"]["n"] for r in rows.values())
        ax.set_title(f"{name}: test NLPD ({n} folds; black: paper)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table_md(results: dict) -> str:
    """Markdown Table 1: test NLPD per data set and method beside the paper's."""
    cells = []
    paper_idx = {"offline": 0, "ours": 1, "bui": 2}
    for name, rows in results["table"].items():
        for m, row in rows.items():
            paper = PAPER_TABLE1.get(name)
            pv = "--"
            if paper and m in paper_idx:
                mean, std = paper[paper_idx[m]]
                pv = f"{mean:.2f} ({std:.2f})"
            cells.append([name, m, harness.fmt(row["nlpd"]), pv, harness.fmt(row["accuracy"]),
                          row["nlpd"]["n"], f"{row['seconds']['mean']:.1f}"])  # fmt: skip
    header = ["data set", "method", "NLPD (ours)", "paper NLPD", "accuracy", "folds",
              "seconds/fold"]  # fmt: skip
    return harness.markdown_table(header, cells)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, root=True, resume="results.json and the plot")
    p.add_argument(
        "--datasets",
        nargs="+",
        default=None,
        choices=("bank", "mammographic"),
        help="data sets to run (default: both)",
    )
    p.add_argument(
        "--methods", nargs="+", default=list(METHODS), choices=METHODS, help="methods to run"
    )
    p.add_argument("--folds", type=int, default=None, help="number of CV folds (default 10)")
    p.add_argument(
        "--run-folds",
        type=int,
        default=None,
        help="run only the first k of the folds (time budget)",
    )
    p.add_argument(
        "--memory-seed",
        type=int,
        default=0,
        help="added to the fold's seed of the DualSVGP memory draws (another draw of the "
        "same runs)",
    )
    p.add_argument(
        "--no-lengthscale-prior",
        action="store_true",
        help="the DualSVGP methods without a prior on the lengthscales (the runs before "
        "2026-12-02)",
    )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(DEFAULT, QUICK, args, datasets=args.datasets or None,
                         folds=args.folds or None, run_folds=args.run_folds or None)  # fmt: skip
    cfg["memory_seed"] = args.memory_seed
    cfg["lengthscale_prior"] = not args.no_lengthscale_prior
    res = run(cfg, tuple(args.methods), args.root, args.out, force=args.force,
              compute=not args.summary_only, verify=args.verify)  # fmt: skip
    print(table_md(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
