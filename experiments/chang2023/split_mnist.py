"""Split MNIST continual learning (Chang et al. 2023, Sec. 4.3, Tables 2-3, Figs. 2 and 6).

Tasks (0, 1), (2, 3), (4, 5), (6, 7), (8, 9) arrive in order; each task's training images
are streamed in minibatches and a model sees only the current minibatch (plus its memory).
Predictions are 10-way (Softmax(10)); after every minibatch we record the test accuracy on all
classes seen so far (Fig. 6), after every task the accuracy on each seen task (Table 2), and at
the end accuracy and NLPD on the whole test set (Table 3).

Methods (``--methods``):

* ``ours``            -- :class:`~bo_ncgp.models.DualSVGP`, Matern-5/2, inducing points moved
  by pivoted Cholesky, ``memory_frac`` of each minibatch kept in memory by BLS sampling,
  ``inner_steps`` damped steps with ``rho``, ``hyper_steps`` Adam steps at ``lr``;
* ``ours_random``     -- the same with uniformly sampled memory;
* ``ours_no_memory``  -- memory size 0 (the VCL-style recursion: old posterior as new prior);
* ``bui``             -- Bui et al. (2017), Eq. 5, Adam on q(u) and hyperparameters, the same
  kernel, inducing-point rule and number;
* ``offline``         -- an SVGP (GPyTorch) trained on all training data of all tasks.

Studies (``--study``): ``main`` (the table above), ``memory-sweep`` (Fig. 2c: final accuracy
of ``ours`` against the memory fraction) and ``move-to-test`` (Fig. 2a: move the training
points with the highest BLS -- scored by the final model of a reference run -- or random
points to the test set, retrain, test on the enlarged test set).

Data (``--dataset``): ``mnist`` -- the 10,000 MNIST images available offline (shared data),
split 80/20 per task with the seed; ``fashion`` -- full Fashion-MNIST (60k/10k) from
``apt-get install dataset-fashion-mnist`` (skipped with a message when absent).

Every (study, method, seed) unit is written to its own JSON under
``experiments/chang2023/results/split_mnist/<dataset>/`` when it finishes, so an interrupted
run resumes; the summary ``results.json`` and the plots are rebuilt from those files.

Usage::

    bo-ncgp split-mnist                      # reduced setting (see DEFAULT)
    bo-ncgp split-mnist --paper              # the paper's setting (slow)
    bo-ncgp split-mnist --study memory-sweep --seeds 1
    bo-ncgp split-mnist --dataset fashion --seeds 1 --batch-size 2000
    bo-ncgp split-mnist --quick              # tiny configuration for CI
    python -m experiments.chang2023.split_mnist --quick
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from gpytorch.priors import GammaPrior
from torch import Tensor
from tqdm import tqdm

from bo_ncgp.data.mnist import load_mnist, split_tasks, to_features
from bo_ncgp.likelihoods import Softmax
from experiments import harness
from experiments.chang2023.continual import (
    fit_offline,
    kernel_hypers,
    make_bui,
    make_dual,
    matern,
    metrics,
    pointwise,
    timed_update,
)

OUT = harness.results_dir(__file__, "split_mnist")
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))
METHODS = ("ours", "ours_random", "ours_no_memory", "bui", "offline")
PAPER_TABLE3 = {
    "offline": (0.962, 0.155),
    "bui": (0.200, 2.150),
    "ours_no_memory": (0.208, 68.038),
    "ours": (0.909, 0.316),
}

DEFAULT = {
    "dataset": "mnist",
    "train_frac": 0.8,  # per-task train/test split of the 10k MNIST images
    "max_train_per_task": None,
    "max_test_per_task": None,
    "m": 100,
    "batch_size": 500,
    "memory_frac": 0.10,
    "rho": 0.1,
    "inner_steps": 10,
    "hyper_steps": 10,
    "lr": 0.01,
    "num_samples": 128,  # Monte-Carlo samples of the softmax expectations in training
    "eval_samples": 1000,  # ... and in the test NLPD / class probabilities
    "init_lengthscale": 8.0,
    "init_outputscale": 5.0,
    "bui_steps": 50,
    "bui_lr": 0.01,
    "offline_steps": 1000,
    "offline_lr": 0.01,
    "offline_batch": 500,
    "seeds": 3,
    "memory_fracs": [0.0, 0.02, 0.05, 0.1, 0.2, 0.3],
    "move_fracs": [0.05, 0.10, 0.15],
}
PAPER = dict(DEFAULT, m=300, hyper_steps=50, seeds=5)
QUICK = dict(
    DEFAULT, max_train_per_task=40, max_test_per_task=20, m=12, batch_size=20, inner_steps=2,
    hyper_steps=2, num_samples=16, eval_samples=32, bui_steps=3, offline_steps=5,
    offline_batch=50, seeds=1, memory_fracs=[0.0, 0.1], move_fracs=[0.1],
)  # fmt: skip


# --------------------------------------------------------------------------- data
def load_tasks(cfg: dict, seed: int, root=None, verify: bool = True):
    """``(train_tasks, test_tasks)``: lists of ``(X (n, 784) in [0, 1], y (n,) in 0..9)``."""
    g = torch.Generator().manual_seed(1000 + seed)
    if cfg["dataset"] == "mnist":
        d = load_mnist(root=root, split="test", verify=verify)
        X, y = to_features(d.images), d.labels.to(torch.get_default_dtype())
        train, test = [], []
        for Xt, yt in split_tasks(X, y, PAIRS, relabel=False):
            perm = torch.randperm(Xt.shape[0], generator=g)
            k = round(cfg["train_frac"] * Xt.shape[0])
            train.append((Xt[perm[:k]], yt[perm[:k]]))
            test.append((Xt[perm[k:]], yt[perm[k:]]))
    elif cfg["dataset"] == "fashion":
        d = load_mnist(root=cfg.get("fashion_dir", str(FASHION_DIR)), subdir="", split="auto")
        if "train" not in d:
            raise FileNotFoundError(f"Fashion-MNIST training files missing in {FASHION_DIR}")
        sets = []
        for split in ("train", "test"):
            X = to_features(d[split].images)
            y = d[split].labels.to(torch.get_default_dtype())
            tasks = split_tasks(X, y, PAIRS, relabel=False)
            sets.append([(Xt[p], yt[p]) for Xt, yt in tasks
                         for p in [torch.randperm(Xt.shape[0], generator=g)]])  # fmt: skip
        train, test = sets
    else:
        raise ValueError(f"unknown dataset {cfg['dataset']!r}")
    cap = lambda tasks, k: tasks if k is None else [(X[:k], y[:k]) for X, y in tasks]  # noqa: E731
    return cap(train, cfg["max_train_per_task"]), cap(test, cfg["max_test_per_task"])


def fashion_available(cfg: dict) -> bool:
    folder = Path(cfg.get("fashion_dir", str(FASHION_DIR)))
    names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")  # fmt: skip
    return all((folder / n).is_file() or (folder / f"{n}.gz").is_file() for n in names)


# ------------------------------------------------------------------------- models
def kernel(cfg: dict):
    """Matern-5/2 at the initial values; with ``cfg["kernel_prior_cv"] = v`` Gamma priors on the
    lengthscale and outputscale with the initial values as means and coefficient of variation
    ``v`` (the hyperparameter steps then maximise the posterior, not the evidence, which keeps
    rising with the outputscale while the labels are separable)."""
    k = matern(2.5, cfg["init_lengthscale"], cfg["init_outputscale"])
    cv = cfg.get("kernel_prior_cv")
    if cv:
        a = 1.0 / cv**2
        k.base_kernel.register_prior(
            "lengthscale_prior", GammaPrior(a, a / cfg["init_lengthscale"]),
            lambda m: m.lengthscale, lambda m, v: m._set_lengthscale(v),
        )  # fmt: skip
        k.register_prior(
            "outputscale_prior", GammaPrior(a, a / cfg["init_outputscale"]),
            lambda m: m.outputscale, lambda m, v: m._set_outputscale(v),
        )  # fmt: skip
    return k


def make_model(method: str, cfg: dict, Z0: torch.Tensor, seed: int, memory_frac=None):
    lik = Softmax(10, num_samples=cfg["num_samples"])
    frac = cfg["memory_frac"] if memory_frac is None else memory_frac
    msize = round(frac * cfg["batch_size"])
    if method == "ours":
        return make_dual(kernel(cfg), lik, Z0, cfg, msize, "bls", seed, cfg["m"])
    if method == "ours_random":
        return make_dual(kernel(cfg), lik, Z0, cfg, msize, "random", seed, cfg["m"])
    if method == "ours_no_memory":
        return make_dual(kernel(cfg), lik, Z0, cfg, 0, "bls", seed, cfg["m"])
    if method == "bui":
        return make_bui(kernel(cfg), lik, Z0, cfg, cfg["m"])
    raise ValueError(f"unknown streaming method {method!r}")


def minibatches(tasks, cfg: dict, seed: int):
    """``[(task, X, y), ...]`` in stream order (each task shuffled, then cut)."""
    g = torch.Generator().manual_seed(2000 + seed)
    out = []
    for t, (X, y) in enumerate(tasks):
        perm = torch.randperm(X.shape[0], generator=g)
        nb = max(1, math.ceil(X.shape[0] / cfg["batch_size"]))
        for idx in perm.tensor_split(nb):
            out.append((t, X[idx], y[idx]))
    return out


def run_stream(method: str, train, test, cfg: dict, seed: int, memory_frac=None,
               progress: bool = True, keep_model: bool = False) -> dict:  # fmt: skip
    """Stream all tasks through one model; metrics after every minibatch and task."""
    torch.manual_seed(seed)
    stream = minibatches(train, cfg, seed)
    Z0 = stream[0][1][: cfg["m"]]
    model = make_model(method, cfg, Z0, seed, memory_frac)
    eval_lik = Softmax(10, num_samples=cfg["eval_samples"])
    test_X = [X for X, _ in test]
    test_y = [y for _, y in test]
    curve, per_task, seconds = [], [], 0.0
    bar = tqdm(stream, desc=f"{method} seed {seed}", disable=not progress, leave=False)
    for i, (t, X, y) in enumerate(bar):
        seconds += timed_update(model, X, y)
        last_of_task = i + 1 == len(stream) or stream[i + 1][0] != t
        hit, logp = pointwise(model, torch.cat(test_X[: t + 1]), torch.cat(test_y[: t + 1]),
                              eval_lik)  # fmt: skip
        curve.append({"task": t, "accuracy_seen": float(hit.mean()), **kernel_hypers(model)})
        if last_of_task:
            sizes = [x.shape[0] for x in test_X[: t + 1]]
            accs = [float(h.mean()) for h in hit.split(sizes)]
            per_task.append({"after_task": t + 1, "task_accuracy": accs,
                             **metrics(hit, logp)})  # fmt: skip
    hit, logp = pointwise(model, torch.cat(test_X), torch.cat(test_y), eval_lik)
    out = {
        "method": method,
        "seed": seed,
        "final": metrics(hit, logp),
        "per_task": per_task,
        "curve": curve,
        "seconds": seconds,
        "num_updates": len(stream),
        "memory_size": len(model.memory) if hasattr(model, "memory") else 0,
    }
    if out["memory_size"]:  # class make-up of the memory at the end of the stream
        labels = model.memory_targets.reshape(-1).long()
        out["memory_classes"] = torch.bincount(labels, minlength=10).tolist()
    if keep_model:
        out["model"] = model
    return out


def run_offline(train, test, cfg: dict, seed: int, progress: bool = True) -> dict:
    X = torch.cat([x for x, _ in train])
    y = torch.cat([t for _, t in train])
    lik = Softmax(10, num_samples=cfg["num_samples"])
    bar = tqdm(total=cfg["offline_steps"], desc=f"offline seed {seed}", disable=not progress,
               leave=False)  # fmt: skip
    t0 = time.perf_counter()
    model = fit_offline(kernel(cfg), lik, X, y, cfg, seed, lambda step: bar.update())
    seconds = time.perf_counter() - t0
    bar.close()
    eval_lik = Softmax(10, num_samples=cfg["eval_samples"])
    hit, logp = pointwise(model, torch.cat([x for x, _ in test]),
                          torch.cat([t for _, t in test]), eval_lik)  # fmt: skip
    sizes = [x.shape[0] for x, _ in test]
    accs = [float(h.mean()) for h in hit.split(sizes)]
    final = metrics(hit, logp)
    return {"method": "offline", "seed": seed, "final": final, "seconds": seconds,
            "per_task": [{"after_task": len(train), "task_accuracy": accs, **final}],
            "loss_first_last": [model.losses[0], model.losses[-1]]}  # fmt: skip


# ------------------------------------------------------------------------ studies
def _cfg_key(cfg: dict, drop=("seeds", "memory_fracs", "move_fracs")) -> dict:
    return {k: v for k, v in cfg.items() if k not in drop}


def _lazy_tasks(cfg: dict, seed: int, root, verify: bool = True) -> Callable[[], tuple]:
    """:func:`load_tasks` of ``seed``, loaded at the first call only (summaries of stored units
    need no data)."""
    return functools.cache(lambda: load_tasks(cfg, seed, root, verify))


def study_main(
    cfg, store: harness.Store, methods, root, progress, force, compute=True, verify=True
) -> dict:
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for seed in range(cfg["seeds"]):
        data = _lazy_tasks(cfg, seed, root, verify)
        for method in methods:

            def make(method=method, seed=seed, data=data) -> dict:
                harness.log(f"split-mnist [{cfg['dataset']}] {method} seed {seed}")
                if method == "offline":
                    res = run_offline(*data(), cfg, seed, progress)
                else:
                    res = run_stream(method, *data(), cfg, seed, progress=progress)
                harness.log(f"  final {res['final']}  ({res['seconds']:.0f} s)")
                return res

            res = store.unit(f"main_{method}_seed{seed}", _cfg_key(cfg), make, force=force,
                             compute=compute)  # fmt: skip
            if res is not None:  # None: summary only, unit not stored
                runs[method].append(res)
    return runs


def study_memory_sweep(
    cfg, store: harness.Store, root, progress, force, compute=True, verify=True
) -> dict:
    out: dict[str, list[dict]] = {}
    for seed in range(cfg["seeds"]):
        data = _lazy_tasks(cfg, seed, root, verify)
        for frac in cfg["memory_fracs"]:
            key, ckey = f"sweep_mem{frac:g}_seed{seed}", _cfg_key(cfg)
            res = None if force else store.get(key, ckey)
            if res is None and not force and frac == cfg["memory_frac"]:
                res = store.get(f"main_ours_seed{seed}", ckey)  # the same run
                if res is not None:
                    res = dict(res, memory_frac=frac)
            if res is None and not compute:
                continue
            if res is None:
                harness.log(f"split-mnist memory sweep: fraction {frac:g}, seed {seed}")
                res = run_stream("ours", *data(), cfg, seed, memory_frac=frac, progress=progress)
                res["memory_frac"] = frac
                store.put(key, res, ckey)
            out.setdefault(f"{frac:g}", []).append(res)
    return out


def _move(train, test, scores, frac: float, how: str, seed: int):
    """Move ``frac`` of all training points (highest score, or random) to the test set."""
    sizes = [x.shape[0] for x, _ in train]
    N = sum(sizes)
    k = round(frac * N)
    if how == "bls":
        chosen = torch.as_tensor(scores).argsort(descending=True)[:k]
    else:
        chosen = torch.randperm(N, generator=torch.Generator().manual_seed(3000 + seed))[:k]
    moved = torch.zeros(N, dtype=torch.bool)
    moved[chosen] = True
    new_train, new_test = [], []
    for (Xtr, ytr), (Xte, yte), mv in zip(train, test, moved.split(sizes), strict=True):
        new_train.append((Xtr[~mv], ytr[~mv]))
        new_test.append((torch.cat([Xte, Xtr[mv]]), torch.cat([yte, ytr[mv]])))
    return new_train, new_test


def study_move_to_test(
    cfg, store: harness.Store, root, progress, force, compute=True, verify=True
) -> dict:
    out: dict[str, list[dict]] = {}
    for seed in range(cfg["seeds"]):
        key, ckey = f"move_ref_seed{seed}", _cfg_key(cfg)
        ref = None if force else store.get(key, ckey)
        if ref is None and not compute:
            continue
        data = _lazy_tasks(cfg, seed, root, verify)  # loaded only when something is computed
        if ref is None:
            harness.log(f"split-mnist move-to-test: reference run, seed {seed}")
            ref = run_stream("ours", *data(), cfg, seed, progress=progress, keep_model=True)
            model = ref.pop("model")
            X = torch.cat([x for x, _ in data()[0]])
            y = torch.cat([t for _, t in data()[0]])
            with torch.no_grad():
                ref["bls"] = model.bls(X, y).sum(-1).tolist()  # summed over the 10 latents
            store.put(key, ref, ckey)
        out.setdefault("0", []).append({"how": "both", "final": ref["final"]})
        for frac in cfg["move_fracs"]:
            for how in ("bls", "random"):

                def make(frac=frac, how=how, seed=seed, data=data, ref=ref) -> dict:
                    harness.log(f"split-mnist move-to-test: {how} {frac:g}, seed {seed}")
                    tr, te = _move(*data(), ref["bls"], frac, how, seed)
                    res = run_stream("ours", tr, te, cfg, seed, progress=progress)
                    return dict(res, how=how, frac=frac)

                res = store.unit(f"move_{how}{frac:g}_seed{seed}", ckey, make, force=force,
                                 compute=compute)  # fmt: skip
                if res is not None:
                    out.setdefault(f"{frac:g}", []).append(res)
    return out


# ------------------------------------------------------------------------ summary
def _per_task_table(rs: list[dict]) -> list[list[dict]]:
    """Table 2 rows: after task ``t``, mean (std) accuracy on each task seen so far."""
    return [
        [harness.summary([r["per_task"][t]["task_accuracy"][j] for r in rs]) for j in range(t + 1)]
        for t in range(len(rs[0]["per_task"]))
    ]


def summarise_main(runs: dict) -> dict:
    table3 = {}
    for method, rs in runs.items():
        if not rs:
            continue
        table3[method] = {key: harness.summary([r["final"][key] for r in rs])
                          for key in ("accuracy", "nlpd")}  # fmt: skip
        table3[method]["seconds"] = harness.summary([r["seconds"] for r in rs])
        table3[method]["seeds"] = sorted(r["seed"] for r in rs)
    per_task = {m: _per_task_table(rs) for m, rs in runs.items() if rs and m != "offline"}
    return {"table3": table3, "table2": per_task.get("ours"), "table2_all": per_task}


def table3_md(s: dict) -> str:
    """Markdown Table 3: final accuracy / NLPD per method beside the paper's."""
    rows = []
    for method, row in s["table3"].items():
        pa, pn = PAPER_TABLE3.get(method, (None, None))
        rows.append([method, harness.fmt(row["accuracy"]), harness.fmt(row["nlpd"]),
                     "--" if pa is None else f"{pa:.3f}", "--" if pn is None else f"{pn:.3f}",
                     row["accuracy"]["n"], f"{row['seconds']['mean']:.0f}"])  # fmt: skip
    header = ["method", "accuracy (ours)", "NLPD (ours)", "paper accuracy", "paper NLPD", "seeds",
              "seconds"]  # fmt: skip
    return harness.markdown_table(header, rows)


def table2_md(s: dict, method: str = "ours") -> str:
    rows = (s.get("table2_all") or {}).get(method)
    if rows is None and method == "ours":
        rows = s.get("table2")
    if not rows:
        return ""
    cells = [[f"#{t + 1}"] + [harness.fmt(c, 2) for c in row] + [""] * (5 - len(row))
             for t, row in enumerate(rows)]  # fmt: skip
    return harness.markdown_table(["after task"] + [f"{a}, {b}" for a, b in PAIRS], cells)


def plot_main(runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    for method, style in (("ours", "o-"), ("ours_random", "s--"), ("ours_no_memory", "^:"),
                          ("bui", "x-")):  # fmt: skip
        rs = runs.get(method)
        if not rs:
            continue
        acc = torch.tensor([[c["accuracy_seen"] for c in r["curve"]] for r in rs])
        mean = acc.mean(0)
        std = acc.std(0) if acc.shape[0] > 1 else torch.zeros_like(mean)
        x = torch.arange(1, mean.numel() + 1)
        ax.plot(x, mean, style, ms=3, label=method)
        ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        tasks = [c["task"] for c in rs[0]["curve"]]
    for i in range(1, len(tasks)):
        if tasks[i] != tasks[i - 1]:
            ax.axvline(i + 0.5, color="grey", lw=0.5)
    if runs.get("offline"):
        offline = harness.summary([r["final"]["accuracy"] for r in runs["offline"]])
        ax.axhline(offline["mean"], color="k", lw=1, label="offline (all tasks)")
    ax.set_xlabel("minibatch (vertical lines: new task)")
    ax.set_ylabel("test accuracy, classes seen so far")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bls_extremes(
    cfg: dict, store: harness.Store, root, k: int = 8, seed: int = 0, verify: bool = True
) -> Tensor | None:
    """Fig. 2b: the ``k`` training images of lowest and highest Bayesian leverage score (Eq. 31)
    in the move-to-test reference run of ``seed``, as a ``(2, k, 28, 28)`` tensor, or ``None``
    when that run is not stored or the images are not available."""
    ref = store.get(f"move_ref_seed{seed}", _cfg_key(cfg))
    if ref is None or "bls" not in ref:
        return None
    try:
        X = torch.cat([x for x, _ in load_tasks(cfg, seed, root, verify)[0]])
    except FileNotFoundError:
        return None
    order = torch.as_tensor(ref["bls"]).argsort()
    return torch.stack([X[order[:k]], X[order[-k:].flip(0)]]).reshape(2, k, 28, 28)


def plot_studies(
    sweep: dict | None, move: dict | None, path: Path, digits: Tensor | None = None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
    if move:
        fracs = sorted(float(f) for f in move)
        for how, style in (("bls", "o-"), ("random", "s--")):
            ys = []
            for f in fracs:
                rs = [r for r in move[f"{f:g}"] if r.get("how") in (how, "both")]
                ys.append(harness.summary([r["final"]["accuracy"] for r in rs])["mean"])
            axes[0].plot([100 * f for f in fracs], ys, style, label=how.upper())
        axes[0].set_xlabel("training data moved to the test set (%)")
        axes[0].set_ylabel("test accuracy")
        axes[0].legend()
        axes[0].set_title("Fig. 2a: BLS vs random")
    else:
        axes[0].axis("off")  # study not run
    if sweep:
        fracs = sorted(float(f) for f in sweep)
        ys = [harness.summary([r["final"]["accuracy"] for r in sweep[f"{f:g}"]]) for f in fracs]
        axes[1].errorbar([100 * f for f in fracs], [s["mean"] for s in ys],
                         yerr=[s["std"] for s in ys], fmt="o-")  # fmt: skip
        axes[1].set_xlabel("memory size (% of each minibatch)")
        axes[1].set_ylabel("final test accuracy")
        axes[1].set_title("Fig. 2c: memory size")
    else:
        axes[1].axis("off")  # study not run
    axes[2].axis("off")
    if digits is not None:
        rows = [torch.cat(list(digits[i]), dim=1) for i in range(2)]  # (28, 28 k) each
        axes[2].imshow(torch.cat(rows, dim=0).numpy(), cmap="gray_r")
        axes[2].set_title("Fig. 2b: lowest (top) / highest (bottom) BLS", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: dict, studies=("main",), methods=METHODS, root=None, out: Path = OUT,
        progress: bool = True, force: bool = False, compute: bool = True,
        verify: bool = True) -> dict:  # fmt: skip
    """Run (or, with ``compute=False``, only summarise the stored units of) the studies;
    writes ``results*.json`` and the plots under ``out/<dataset>/``."""
    folder = out / cfg["dataset"]
    store = harness.Store(folder / "runs")
    results = {"experiment": "split_mnist", "paper": "Chang et al. 2023, Sec. 4.3",
               "config": cfg, "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    if "main" in studies:
        runs = study_main(cfg, store, methods, root, progress, force, compute, verify)
        results["main"] = summarise_main(runs)
        results["main"]["runs"] = {m: [{k: r[k] for k in ("seed", "final", "seconds")}
                                       for r in rs] for m, rs in runs.items()}  # fmt: skip
        plot_main(runs, folder / "split_mnist.png")
    sweep = move = None
    if "memory-sweep" in studies:
        sweep = study_memory_sweep(cfg, store, root, progress, force, compute, verify)
        results["memory_sweep"] = {f: harness.summary([r["final"]["accuracy"] for r in rs])
                                   for f, rs in sweep.items()}  # fmt: skip
    if "move-to-test" in studies:
        move = study_move_to_test(cfg, store, root, progress, force, compute, verify)
        results["move_to_test"] = {
            f: {how: harness.summary([r["final"]["accuracy"] for r in rs
                                      if r.get("how") in (how, "both")])
                for how in ("bls", "random")} for f, rs in move.items()
        }  # fmt: skip
    if sweep or move:  # the plot shows every stored study, not only the ones run now
        if sweep is None:
            sweep = study_memory_sweep(cfg, store, root, progress, False, False, verify)
        if move is None:
            move = study_move_to_test(cfg, store, root, progress, False, False, verify)
        digits = bls_extremes(cfg, store, root, verify=verify)
        plot_studies(sweep, move, folder / "split_mnist_studies.png", digits)
    name = "results.json" if set(studies) == {"main"} else f"results_{'_'.join(studies)}.json"
    harness.write_json(folder / name, results)
    return results


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, seeds=True, root=True, resume="results.json and plots")
    p.add_argument("--paper", action="store_true", help="the paper's setting (300 inducing "
                   "points, 50 Adam steps per minibatch, 5 seeds; slow)")  # fmt: skip
    p.add_argument(
        "--dataset",
        choices=("mnist", "fashion"),
        default=None,
        help="data set: MNIST or Fashion-MNIST (default: the preset's)",
    )
    p.add_argument("--study", nargs="+", default=["main"],
                   choices=("main", "memory-sweep", "move-to-test"),
                   help="main: the table; memory-sweep: accuracy against the memory "
                   "fraction (Fig. 2c); move-to-test: move training points to the test set "
                   "(Fig. 2a)")  # fmt: skip
    p.add_argument(
        "--methods", nargs="+", default=list(METHODS), choices=METHODS, help="methods to run"
    )
    for name, typ, help_ in (
        ("m", int, "inducing points"),
        ("batch-size", int, "minibatch size of the stream"),
        ("hyper-steps", int, "Adam steps per minibatch"),
        ("inner-steps", int, "damped site steps per minibatch"),
        ("bui-steps", int, "optimiser steps per task of Bui et al.'s streaming SVGP"),
        ("offline-steps", int, "optimiser steps of the offline SVGP"),
        ("memory-frac", float, "fraction of each minibatch kept in memory"),
        ("lr", float, "Adam learning rate of the hyperparameters"),
        ("max-train-per-task", int, "cap on the training images per task"),
        ("max-test-per-task", int, "cap on the test images per task"),
    ):
        key = name.replace("-", "_")
        p.add_argument(
            f"--{name}",
            type=typ,
            default=None,
            help=f"{help_} (default: {DEFAULT[key]}; --quick: {QUICK[key]})",
        )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(PAPER if args.paper else DEFAULT, QUICK, args, dataset=args.dataset)
    overrides = (
        "m",
        "batch_size",
        "hyper_steps",
        "inner_steps",
        "bui_steps",
        "offline_steps",
        "memory_frac",
        "lr",
        "max_train_per_task",
        "max_test_per_task",
    )
    for key in overrides:
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if cfg["dataset"] == "fashion" and not fashion_available(cfg):
        print(f"Fashion-MNIST not found in {FASHION_DIR}: install it with "
              "`apt-get install dataset-fashion-mnist`; skipping.", file=sys.stderr)  # fmt: skip
        return 0
    res = run(cfg, tuple(args.study), tuple(args.methods), args.root, args.out, force=args.force,
              compute=not args.summary_only, verify=args.verify)  # fmt: skip
    if "main" in res:
        print(table3_md(res["main"]))
        for method in res["main"].get("table2_all", {}):
            print(f"\nTable 2, {method}:")
            print(table2_md(res["main"], method))
    for key in ("memory_sweep", "move_to_test"):
        if key in res:
            print(key, res[key])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
