"""Shared pieces of the IterNCGP experiments (Tatzel et al., Sec. 5.2 / App. C.3-C.4, D.3).

* :func:`classification_metrics` -- accuracy, NLL and expected calibration error (ECE, 15
  equal-width bins of the top-label confidence, as torchmetrics' ``MulticlassCalibrationError``
  with its defaults) of predictive class probabilities;
* :func:`probit_softmax` -- ``softmax(m / sqrt(1 + pi v / 8))`` (App. C.3), used for every method;
* :class:`SoDLaplace` -- the subset-of-data baseline: the exact multi-class Laplace
  approximation on a random subset, by Newton + Cholesky (Rasmussen & Williams 2006,
  Algorithms 3.3 and 3.4: C Cholesky factorisations of ``N_sub x N_sub`` per Newton step,
  cheaper than the paper's Cholesky of the full ``N_sub C x N_sub C`` matrix, same result);
* :func:`run_svgp` -- GPyTorch SVGP with C independent latent GPs, fixed kernel
  hyperparameters, Adam on minibatches of 1024 under a wall-clock budget;
* :func:`run_isolated` -- run a method in a fresh process and report its peak resident
  memory above the process's baseline (``ru_maxrss``), the CPU counterpart of the paper's
  GPU memory;
* :func:`classification_parser`, :func:`base_config`, :func:`baseline_jobs`,
  :func:`run_iterncgp`, :func:`run_sod`, :func:`run_svgp_baseline`, :func:`run_methods` -- the
  options, the method grid and the runs of a classification experiment (the problem is the
  module named by ``cfg["problem"]``: its ``data``, ``make_kernel`` and ``C``), collected
  into one result record;
* :func:`plot_curves` -- accuracy / NLL / ECE against wall-clock time.

Wall-clock times exclude the evaluation of the metrics (as in the paper).
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing as mp
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.cli.common import HelpFormatter
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.models.svgp import SVGP
from bo_ncgp.models.training import AdamStepper
from experiments import harness

__all__ = [
    "CrossCache",
    "SoDLaplace",
    "base_config",
    "baseline_jobs",
    "classification_metrics",
    "classification_parser",
    "ece",
    "fit_iterncgp_tracked",
    "fit_sod_tracked",
    "mark_baseline",
    "matern32",
    "plot_curves",
    "probit_softmax",
    "run_isolated",
    "run_iterncgp",
    "run_methods",
    "run_sod",
    "run_svgp",
    "run_svgp_baseline",
    "summarise",
]


# ----------------------------------------------------------------------- metrics
def probit_softmax(mean: Tensor, var: Tensor) -> Tensor:
    """``softmax(m / sqrt(1 + pi v / 8))`` per point (App. C.3; MacKay 1992)."""
    return torch.softmax(mean / torch.sqrt(1 + math.pi / 8 * var), dim=-1)


def ece(probs: Tensor, y: Tensor, n_bins: int = 15) -> float:
    """Top-label expected calibration error with ``n_bins`` equal-width confidence bins."""
    conf, pred = probs.max(-1)
    correct = (pred == y).to(probs.dtype)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=probs.dtype)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        mask = (conf > lo) & (conf <= hi)
        if bool(mask.any()):
            total += (
                float(mask.sum()) / len(y) * abs(float(correct[mask].mean() - conf[mask].mean()))
            )
    return total


def classification_metrics(probs: Tensor, y: Tensor) -> dict[str, float]:
    """Accuracy, mean NLL ``-log p(y)`` and ECE of class probabilities ``(n, C)``."""
    probs = probs.detach().double()
    p_true = probs.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    return {
        "acc": float((probs.argmax(-1) == y).double().mean()),
        "nll": float(-torch.log(p_true.clamp_min(1e-300)).mean()),
        "ece": ece(probs, y),
    }


# ------------------------------------------------------------------- SoD Laplace
class SoDLaplace:
    """Exact multi-class Laplace approximation on a data subset (R&W Algorithms 3.3, 3.4).

    Args:
        kernel: GPyTorch kernel shared by the C latent GPs (batch shape ``()``) or ``(C,)``.
        num_classes: C.
        X, y: the subset (``(n, d)`` inputs, ``(n,)`` labels).

    Newton steps: ``f <- K a`` with ``a = b - E K b + E R M^{-T} M^{-1} R^T E K b``,
    ``b = W f + y - pi``, ``E_c = D_c^{1/2} (I + D_c^{1/2} K_c D_c^{1/2})^{-1} D_c^{1/2}``,
    ``M M^T = sum_c E_c``. Predictions: ``mu_c = k_c(x)^T (y_c - pi_c)`` and
    ``var_c = k_c(x, x) - k_c^T E_c k_c + ||M^{-1} E_c k_c||^2``.
    """

    def __init__(self, kernel: gpytorch.kernels.Kernel, num_classes: int, X: Tensor, y: Tensor):
        self.kernel, self.C, self.X, self.y = kernel, int(num_classes), X, y.long()
        n = X.shape[0]
        with torch.no_grad():
            K = kernel(X).to_dense()
        self.K = K.expand(self.C, n, n)  # (C, n, n); a view when the kernel is shared
        self.Y = torch.nn.functional.one_hot(self.y, self.C).T.to(X.dtype)  # (C, n)
        self.f = torch.zeros(self.C, n, dtype=X.dtype)
        self.newton_steps = 0

    def _factor(self) -> None:
        pi = torch.softmax(self.f, dim=0)  # (C, n)
        sd = pi.sqrt()
        n = self.X.shape[0]
        eye = torch.eye(n, dtype=self.X.dtype)
        E = []
        for c in range(self.C):  # C Cholesky factorisations of n x n (Alg. 3.3, lines 5-8)
            B = eye + sd[c][:, None] * self.K[c] * sd[c][None, :]
            L = stable_cholesky(B, name="I + D^1/2 K D^1/2")
            E.append(sd[c][:, None] * torch.cholesky_inverse(L) * sd[c][None, :])
        self.E = torch.stack(E)  # (C, n, n)
        self.M = stable_cholesky(self.E.sum(0), name="sum_c E_c")
        self.pi = pi

    def step(self) -> float:
        """One Newton step; returns the relative change of ``f``."""
        with torch.no_grad():
            self._factor()
            pi, f = self.pi, self.f
            # b = (D - Pi Pi^T) f + y - pi  (Alg. 3.3, line 10)
            b = pi * f - pi * (pi * f).sum(0, keepdim=True) + self.Y - pi
            c = (self.E @ (self.K @ b.unsqueeze(-1))).squeeze(-1)  # E K b
            Rc = c.sum(0, keepdim=True).T  # R^T c
            corr = torch.cholesky_solve(Rc, self.M).T  # M^-T M^-1 R^T c, (1, n)
            a = b - c + (self.E @ corr.expand(self.C, -1).unsqueeze(-1)).squeeze(-1)
            f_new = (self.K @ a.unsqueeze(-1)).squeeze(-1)
            change = float((f_new - f).norm() / f_new.norm().clamp_min(1e-300))
            self.f = f_new
            self.newton_steps += 1
            self._factor()  # the predictive uses W at the new mode
            return change

    def fit(
        self,
        max_newton_steps: int = 20,
        tol: float = 1e-2,
        callback: Callable[[int, float, SoDLaplace], None] | None = None,
    ) -> SoDLaplace:
        clock, paused = time.perf_counter(), 0.0
        for i in range(max_newton_steps):
            change = self.step()
            if callback is not None:
                t = time.perf_counter()
                callback(i, t - clock - paused, self)
                paused += time.perf_counter() - t
            if change <= tol:
                break
        return self

    @torch.no_grad()
    def predict(self, Xs: Tensor, chunk: int = 500) -> tuple[Tensor, Tensor]:
        """Latent mean and per-class variance ``(m, C)`` (Alg. 3.4)."""
        means, variances = [], []
        for s in range(0, Xs.shape[0], chunk):
            x = Xs[s : s + chunk]
            Ks = self.kernel(self.X, x).to_dense().expand(self.C, self.X.shape[0], x.shape[0])
            mean = ((self.Y - self.pi).unsqueeze(-2) @ Ks).squeeze(-2)  # (C, m)
            B = self.E @ Ks  # E_c k_c
            MB = torch.linalg.solve_triangular(self.M, B, upper=False)
            prior = self.kernel(x, diag=True).expand(self.C, x.shape[0])
            var = prior - (Ks * B).sum(-2) + MB.square().sum(-2)
            means.append(mean.T)
            variances.append(var.clamp_min(0).T)
        return torch.cat(means), torch.cat(variances)


# -------------------------------------------------------------------------- SVGP
def run_svgp(
    make_kernel: Callable[[int], gpytorch.kernels.Kernel],
    X: Tensor,
    y: Tensor,
    evals: dict[str, tuple[Tensor, Tensor]],
    num_classes: int,
    num_inducing: int,
    lr: float,
    time_budget: float,
    eval_every: float,
    batch_size: int = 1024,
    seed: int = 0,
) -> dict:
    """Train a GPyTorch SVGP (``num_inducing`` inducing points per class, initialised at a
    random subset of the data; fixed kernel hyperparameters) with Adam for ``time_budget``
    seconds of training time and evaluate ``evals`` every ``eval_every`` seconds.

    Returns ``{"curve": [{"time", "epoch", "<split>_acc", ...}], "steps": ...}``.
    """
    g = torch.Generator().manual_seed(seed)
    C = num_classes
    Z = torch.stack([X[torch.randperm(X.shape[0], generator=g)[:num_inducing]] for _ in range(C)])
    kernel = make_kernel(C)
    for p in kernel.parameters():
        p.requires_grad_(False)
    model = SVGP(kernel, Z, num_latents=C)
    lik = gpytorch.likelihoods.SoftmaxLikelihood(num_classes=C, mixing_weights=False)
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=X.shape[0])
    stepper = AdamStepper(model.parameters(), lr, name="SVGP baseline")
    curve, steps, epoch, train_time = [], 0, 0, 0.0

    def evaluate() -> None:
        model.eval()
        rec = {"time": train_time, "epoch": epoch, "steps": steps}
        with torch.no_grad():
            for name, (Xe, ye) in evals.items():
                means, variances = [], []
                for s in range(0, Xe.shape[0], 2048):
                    out = model(Xe[s : s + 2048])
                    means.append(out.mean)
                    variances.append(out.variance)
                probs = probit_softmax(torch.cat(means), torch.cat(variances))
                for k, v in classification_metrics(probs, ye).items():
                    rec[f"{name}_{k}"] = v
        curve.append(rec)
        model.train()

    evaluate()
    next_eval = eval_every
    diverged = False
    while train_time < time_budget and not diverged:
        perm = torch.randperm(X.shape[0], generator=g)
        for s in range(0, X.shape[0], batch_size):
            t0 = time.perf_counter()
            idx = perm[s : s + batch_size]
            if not stepper.step(-mll(model(X[idx]), y[idx])):
                diverged = True
                break
            steps += 1
            train_time += time.perf_counter() - t0
            if train_time >= next_eval:
                evaluate()
                next_eval += eval_every
            if train_time >= time_budget:
                break
        epoch += 1
    evaluate()
    return {"curve": curve, "steps": steps, "epochs": epoch, "diverged": diverged}


# ----------------------------------------------------------------- isolation
def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


_BASELINE_MB: list[float | None] = [None]


def mark_baseline() -> None:
    """Called by a method after it has built its data and evaluation caches: memory measured
    by :func:`run_isolated` counts from here (``ru_maxrss`` minus the resident memory now)."""
    _BASELINE_MB[0] = _current_rss_mb()


def _isolated_target(queue, fn, kwargs, threads):  # runs in the child process
    torch.set_num_threads(threads)
    _BASELINE_MB[0] = _current_rss_mb()
    try:
        out = fn(**kwargs)
        queue.put({"ok": True, "result": out, "peak_mb": _max_rss_mb() - _BASELINE_MB[0]})
    except Exception as err:  # report instead of hanging the parent
        queue.put({"ok": False, "error": f"{type(err).__name__}: {err}"})


def run_isolated(
    fn: Callable[..., dict], kwargs: dict, threads: int = 1, inline: bool = False
) -> dict:
    """Run ``fn(**kwargs)`` in a fresh (spawned) process; adds ``peak_mb``: the peak resident
    memory above the resident memory at the last :func:`mark_baseline` call (or at the start
    of ``fn``). ``inline=True`` runs in this process without a memory figure (CI)."""
    if inline:
        out = fn(**kwargs)
        out["peak_mb"] = None
        return out
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_isolated_target, args=(queue, fn, kwargs, threads))
    proc.start()
    msg = queue.get()
    proc.join()
    if not msg["ok"]:
        raise RuntimeError(f"isolated run failed: {msg['error']}")
    out = msg["result"]
    out["peak_mb"] = msg["peak_mb"]
    return out


# ------------------------------------------------------------------------ output
# ------------------------------------------------------------- classification runs
def matern32(
    lengthscale: float, outputscale: float, batch: int | None = None
) -> gpytorch.kernels.Kernel:
    """``ScaleKernel(Matern-3/2)`` at fixed hyperparameters (float64), with ``batch`` kernels
    when given (the SVGP baseline's one kernel per class)."""
    bs = torch.Size([batch]) if batch else torch.Size()
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(nu=1.5, batch_shape=bs), batch_shape=bs
    )
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k.double()


def _problem(cfg: dict):
    """The experiment module named by ``cfg["problem"]``: its ``data(cfg)``,
    ``make_kernel(batch)`` and number of classes ``C``."""
    import importlib

    return importlib.import_module(cfg["problem"])


def run_iterncgp(cfg: dict) -> dict:
    """IterNCGP-CG on the problem of ``cfg`` (:func:`fit_iterncgp_tracked`)."""
    problem = _problem(cfg)
    torch.manual_seed(cfg["seed"])
    d = problem.data(cfg)
    return fit_iterncgp_tracked(d, problem.make_kernel().to(d["X"].device), problem.C, cfg)


def run_sod(cfg: dict) -> dict:
    """Subset-of-data Laplace on the problem of ``cfg`` (:func:`fit_sod_tracked`)."""
    problem = _problem(cfg)
    torch.manual_seed(cfg["seed"])
    d = problem.data(cfg)
    return fit_sod_tracked(d, problem.make_kernel().to(d["X"].device), problem.C, cfg)


def run_svgp_baseline(cfg: dict) -> dict:
    """The GPyTorch SVGP baseline on the problem of ``cfg`` (:func:`run_svgp`)."""
    problem = _problem(cfg)
    torch.manual_seed(cfg["seed"])
    d = problem.data(cfg)
    mark_baseline()
    return run_svgp(
        problem.make_kernel,
        d["X"],
        d["y"],
        d["evals"],
        problem.C,
        cfg["num_inducing"],
        cfg["lr"],
        time_budget=cfg["budget"],
        eval_every=cfg["eval_every"],
        seed=cfg["seed"],
    )


def classification_parser(
    doc: str, *, n_train: int, svgp_budget: float, sod: list[int], budget_help: str
) -> argparse.ArgumentParser:
    """The options shared by the classification experiments (sizes, budgets, method grids,
    threads, isolation, output)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=HelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny configuration for CI")
    p.add_argument("--n-train", type=int, default=n_train, help="training points")
    p.add_argument("--n-test", type=int, default=2_000, help="test points")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the methods")
    p.add_argument("--budget", type=float, default=900.0, help=budget_help)
    p.add_argument(
        "--svgp-budget", type=float, default=svgp_budget, help="seconds per SVGP configuration"
    )
    p.add_argument(
        "--svgp-inducing",
        type=int,
        nargs="+",
        default=[100, 250],
        help="SVGP inducing-point counts to run",
    )
    p.add_argument(
        "--svgp-lr", type=float, nargs="+", default=[0.01, 0.05], help="SVGP learning rates to run"
    )
    p.add_argument("--sod", type=int, nargs="+", default=sod, help="subset-of-data sizes to run")
    p.add_argument(
        "--newton-steps",
        type=int,
        default=30,
        help="Newton steps of IterNCGP and the exact Laplace",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        default=["iterncgp", "sod", "svgp"],
        help="methods to run (iterncgp, sod, svgp)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--inline", action="store_true", help="no subprocess / memory figure (CI)")
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default: experiments/tatzel/results)"
    )
    return p


def base_config(problem: str, args, **extra) -> dict:
    """The configuration every method of a classification run shares: the problem module,
    data sizes (metrics on at most 2,000 training points), seed, outer tolerance 0.01 and
    Newton-step cap, plus ``extra``."""
    return {
        "problem": problem,
        **extra,
        "n_train": args.n_train,
        "n_test": args.n_test,
        "n_eval_train": min(2000, args.n_train),
        "seed": args.seed,
        "tol": 1e-2,
        "newton_steps": args.newton_steps,
    }


def baseline_jobs(base: dict, args) -> list[tuple[str, Callable, dict]]:
    """``(name, fn, cfg)`` of the baselines ``args.methods`` asks for: SoD on every subset size
    of ``args.sod``; SVGP on every pair of ``args.svgp_inducing`` inducing points per class and
    ``args.svgp_lr`` learning rate, ``args.svgp_budget`` seconds, 15 evaluations."""
    jobs = []
    if "sod" in args.methods:
        for n_sub in args.sod:
            jobs.append((f"SoD N_sub={n_sub}", run_sod, dict(base, n_sub=n_sub)))
    if "svgp" in args.methods:
        for U in args.svgp_inducing:
            for lr in args.svgp_lr:
                cfg = dict(
                    base,
                    num_inducing=U,
                    lr=lr,
                    budget=args.svgp_budget,
                    eval_every=max(1.0, args.svgp_budget / 15),
                )
                jobs.append((f"SVGP U={U}/class lr={lr}", run_svgp_baseline, cfg))
    return jobs


def run_methods(jobs: list[tuple[str, Callable, dict]], args, stem: Path, title: str) -> dict:
    """Run every ``(name, fn, cfg)`` job through :func:`run_isolated` (``args.threads``,
    ``args.inline``); write the result record (setting, date, per-method summary and runs) to
    ``stem.json`` and the curves (:func:`plot_curves`, titled ``title``) to ``stem.png``."""
    from tqdm import tqdm

    runs: dict[str, dict] = {}
    for name, fn, cfg in tqdm(jobs, desc="methods"):
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        run = run_isolated(fn, {"cfg": cfg}, threads=args.threads, inline=args.inline)
        run.update(
            config=cfg, wall_seconds=time.perf_counter() - t0, load_avg=[load0, os.getloadavg()[0]]
        )
        runs[name] = run
        tqdm.write(f"{name}: {summarise(run)}")
    result = {
        "setting": vars(args) | {"out": str(args.out)},
        "date": time.strftime("%Y-%m-%d"),
        "torch_threads": args.threads,
        "summary": {name: summarise(run) for name, run in runs.items()},
        "runs": runs,
    }
    harness.write_json(stem.parent / f"{stem.name}.json", result)
    plot_curves(runs, stem.parent / f"{stem.name}.png", title)
    return result


def plot_curves(runs: dict[str, dict], path: Path, title: str) -> None:
    """Accuracy / NLL / ECE against training time (solid: test, dashed: train)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, run) in enumerate(runs.items()):
        curve = run["curve"]
        t = [max(r["time"], 1e-2) for r in curve]
        for ax, metric in zip(axes, ("acc", "nll", "ece"), strict=True):
            for split, style in (("test", "-"), ("train", "--")):
                key = f"{split}_{metric}"
                if key in curve[0]:
                    ax.plot(
                        t,
                        [r[key] for r in curve],
                        style,
                        color=colors[i % len(colors)],
                        label=name if split == "test" else None,
                        lw=1.3,
                        marker=".",
                        ms=4,
                    )
    for ax, label in zip(axes, ("accuracy", "NLL", "ECE"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("wall-clock time [s] (metrics excluded)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------- tracked runs (shared)
class CrossCache:
    """Cached ``K(X_eval, X_train)`` so that a metric evaluation of IterNCGP costs one matmul
    (the same numbers as ``IterNCGP.predict_f``; :func:`fit_iterncgp_tracked` checks it)."""

    def __init__(self, kernel, evals, X, max_bytes=600 * 2**20):
        self.evals = evals
        self.K = {}
        for name, (Xe, _) in evals.items():
            if Xe.shape[0] * X.shape[0] * Xe.element_size() <= max_bytes:
                with torch.no_grad():
                    self.K[name] = (kernel(Xe, X).to_dense(), kernel(Xe, diag=True))

    def predict(self, model, name, rows=slice(None)):
        Xe = self.evals[name][0][rows]
        if name not in self.K:
            return model.predict_f(Xe)
        Kx, prior = (t[rows] for t in self.K[name])
        b = model._belief
        V = torch.cat([model._mean_weights.expand_as(b.v), b.Q], -1)  # (C, n, 1 + B)
        KV = Kx @ V
        mean = KV[..., 0].T
        var = (prior - KV[..., 1:].square().sum(-1)).clamp_min(0).T
        return mean, var


def fit_iterncgp_tracked(d: dict, kernel, num_classes: int, cfg: dict) -> dict:
    """IterNCGP-CG on ``d["X"], d["y"]`` with metrics on ``d["evals"]`` after the initial
    belief and at the end of every Newton step; stops after ``cfg["budget"]`` seconds."""
    from bo_ncgp.likelihoods import Softmax
    from bo_ncgp.linalg import KernelOperator
    from bo_ncgp.models import IterNCGP

    with torch.no_grad():  # compile / load a KeOps formula before the clock starts
        KernelOperator(kernel, d["X"][:64], backend=cfg["backend"]) @ d["X"][:64, :1]
    cache = CrossCache(kernel, d["evals"], d["X"])
    model = IterNCGP(
        kernel,
        Softmax(num_classes),
        policy="cg",
        max_solver_iters_per_step=cfg["iters_per_step"],
        max_newton_steps=cfg["newton_steps"],
        recycle=True,
        compression_rank=cfg["rank"],
        tol=cfg["tol"],
        backend=cfg["backend"],
        # the paper's Algorithm 1 (full Newton steps) unless the config asks for damping
        line_search=cfg.get("line_search", False),
    )
    mark_baseline()
    curve = []
    J = cfg["iters_per_step"]

    def evaluate(i, j, t, m):
        rec = {"time": t, "newton_step": i, "solver_iter": j, "total_iters": m.num_solver_iters}
        with torch.no_grad():
            for name, (_, ye) in d["evals"].items():
                mean, var = cache.predict(m, name)
                probs = probit_softmax(mean, var)
                rec.update({f"{name}_{k}": v for k, v in classification_metrics(probs, ye).items()})
        curve.append(rec)

    def callback(i, j, t, m):
        if j in (0, J):  # the start of every Newton step (recycled belief) and full steps
            evaluate(i, j, t, m)
        return t > cfg["budget"]

    model.fit(
        d["X"],
        d["y"],
        callback=lambda s: callback(
            s.info["newton_step"], s.info["solver_iter"], s.seconds, s.model
        ),
    )
    if curve[-1]["total_iters"] != model.num_solver_iters:
        evaluate(len(model.history) - 1, -1, model.fit_seconds, model)
    rows = slice(0, 200)
    with torch.no_grad():
        m_ref, v_ref = model.predict_f(d["evals"]["test"][0][rows])
        m_c, v_c = cache.predict(model, "test", rows)
    return {
        "curve": curve,
        "fit_seconds": model.fit_seconds,
        "newton_steps": len(model.history),
        "solver_iters": model.num_solver_iters,
        "buffer_size": model.buffer_size,
        "state_mb": model.state_nbytes() / 2**20,
        "cache_vs_predict_f": float(
            torch.maximum((m_c - m_ref).abs().max(), (v_c - v_ref).abs().max())
        ),
        "history": [h.__dict__ for h in model.history],
    }


def fit_sod_tracked(d: dict, kernel, num_classes: int, cfg: dict) -> dict:
    """:class:`SoDLaplace` on a random subset of ``cfg["n_sub"]`` points, metrics after
    every Newton step (forming ``K`` is timed)."""
    g = torch.Generator().manual_seed(cfg["seed"])
    idx = torch.randperm(d["X"].shape[0], generator=g)[: cfg["n_sub"]].to(d["X"].device)
    mark_baseline()
    curve = []

    def evaluate(i, t, sod):
        rec = {"time": t, "newton_step": i}
        for name, (Xe, ye) in d["evals"].items():
            mean, var = sod.predict(Xe)
            probs = probit_softmax(mean, var)
            rec.update({f"{name}_{k}": v for k, v in classification_metrics(probs, ye).items()})
        curve.append(rec)

    t0 = time.perf_counter()
    sod = SoDLaplace(kernel, num_classes, d["X"][idx], d["y"][idx])
    setup = time.perf_counter() - t0
    sod.fit(
        max_newton_steps=cfg["newton_steps"],
        tol=cfg["tol"],
        callback=lambda i, t, s: evaluate(i, setup + t, s),
    )
    return {"curve": curve, "newton_steps": sod.newton_steps}


def summarise(run: dict) -> dict:
    """Final metrics, best test accuracy / NLL over the run, time and peak memory."""
    curve = run["curve"]
    last = curve[-1]
    out = {k: last[k] for k in last if k.startswith(("test_", "train_"))}
    out["time"] = last["time"]
    out["best_test_acc"] = max(r["test_acc"] for r in curve)
    out["best_test_nll"] = min(r["test_nll"] for r in curve)
    out["peak_mb"] = run.get("peak_mb")
    return out
