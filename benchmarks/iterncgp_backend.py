"""IterNCGP's kernel backends at N = 10,000, and its time to the exact-Laplace NLL.

Setting: the 10-class Gaussian mixture of ``experiments/tatzel/gmm.py`` (``make_gmm``) in 3-D;
softmax (C = 10) with that experiment's kernel (Matern-3/2, lengthscale 0.05, outputscale
0.05, fixed), and binary classification (label = mixture component mod 2, Bernoulli) with the
smoother Matern-3/2 of ``experiments/tatzel/condition.py`` (lengthscale 0.2, outputscale 2,
fixed); 2,000 held-out test points of the same mixture. One process, one thread
(``--threads``). (With outputscale 2 the undamped multi-class Newton iteration of the exact
reference diverges, so the softmax model keeps the experiment's kernel.)

1. **Backends**: ``IterNCGP`` (CG policy, recycling, 5 solver iterations per Newton step, at
   most 3 Newton steps) fitted with ``backend="auto"`` (the memory rule of
   :func:`bo_ncgp.linalg.backend.choose_backend`), ``"dense"``, ``"chunked"`` and ``"keops"``,
   timed interleaved (auto, dense, chunked, keops, auto, ...) as medians over repetitions
   after one warm-up fit per backend on 300 points (imports, KeOps compilation). Every
   backend's test predictions are compared with the dense fit's.
2. **Time to target**: exact Laplace (Newton + Cholesky: Rasmussen & Williams, Algorithms
   3.1/3.2 for the binary model, 3.3/3.4 via ``SoDLaplace`` of ``experiments/tatzel/baselines.py``
   for softmax) on the first ``n_target`` training points gives the test NLL target
   ``NLL_exact + 0.002`` (probit-approximated predictive probabilities for every method). On
   the same points, the wall-clock time (metric evaluations excluded) until the test NLL
   reaches the target, of

   * IterNCGP, ``backend="auto"``, ``race_policy`` (``--race-policy``; default
     ``cov-100``: the library defaults, ``policy="pcg"`` with 10 solver iterations per
     Newton step, and a covariance step with 100 targets, ``covariance_targets=100``, whose
     block action removes the computational uncertainty that keeps the variances too
     large), NLL checked after every solver iteration;
   * the same with ``race_before_policy`` (the "before" row; default ``pcg``: the
     Jacobi-preconditioned CG policy with ``race_iters`` solver iterations per Newton step
     and the solver tolerances off, ``cg``: the same with plain CG);
   * a GPyTorch SVGP (:class:`bo_ncgp.models.svgp.SVGP`: whitened Cholesky ``q(u)``,
     ``svgp_inducing`` inducing points per latent function at a random subset of the data,
     fixed kernel), Adam (learning rate ``svgp_lr``) on minibatches of 1,024, NLL checked
     every ``svgp_eval_every`` steps; the binary ELBO uses bo_ncgp's Bernoulli (logistic)
     likelihood, the softmax one GPyTorch's ``SoftmaxLikelihood``.

   Exact Laplace at N = 10,000 costs one (binary) or ten (softmax) 10,000 x 10,000 Cholesky
   factorisations per Newton step on one thread, too slow for the shared machine: the target
   runs use ``n_target`` = 4,000 (binary) and 2,000 (softmax) points.

Results: ``benchmarks/results/iterncgp_backend.json`` and a markdown table on stdout.

Usage::

    python benchmarks/iterncgp_backend.py            # N = 10,000
    python benchmarks/iterncgp_backend.py --quick    # smoke test (small N, one repetition)
    python benchmarks/iterncgp_backend.py --backends none \
        --out /tmp/iterncgp_race.json                               # the races only
    python benchmarks/iterncgp_backend.py --no-race --backends auto --reps 7 \
        --out benchmarks/results/iterncgp_backend_auto_dense.json   # auto against dense only
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.exceptions import NumericalWarning
from bo_ncgp.likelihoods import Bernoulli, Softmax
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.linalg.backend import available_memory_bytes
from bo_ncgp.models import IterNCGP
from bo_ncgp.models.svgp import SVGP
from experiments.harness import markdown_table
from experiments.tatzel.baselines import SoDLaplace, matern32, probit_softmax
from experiments.tatzel.gmm import make_gmm

OUT = Path(__file__).resolve().parent / "results"
BACKENDS = ("auto", "dense", "chunked", "keops")
C = 10


# ---------------------------------------------------------------------- problem
def kernel(task: str, batch: int | None = None) -> gpytorch.kernels.Kernel:
    """Matern-3/2 (fixed, float64): lengthscale 0.2, outputscale 2 (binary) or the mixture
    experiment's lengthscale 0.05, outputscale 0.05 (softmax)."""
    return matern32(0.2, 2.0, batch) if task == "binary" else matern32(0.05, 0.05, batch)


def problem(task: str, n: int, n_test: int, seed: int = 0) -> dict:
    """Training and test data of ``task`` (``"binary"`` or ``"softmax"``)."""
    X, y = make_gmm(math.ceil(n / C), seed)
    Xt, yt = make_gmm(math.ceil(n_test / C), seed + 500)
    X, y, Xt, yt = X[:n], y[:n], Xt[:n_test], yt[:n_test]
    if task == "binary":
        return {"X": X, "y": (y % 2).double(), "Xt": Xt, "yt": (yt % 2).double(),
                "likelihood": Bernoulli(), "C": 1, "task": task}  # fmt: skip
    return {"X": X, "y": y, "Xt": Xt, "yt": yt, "likelihood": Softmax(C), "C": C, "task": task}


def nll(probs: torch.Tensor, y: torch.Tensor) -> float:
    """Mean test NLL of class-1 probabilities ``(m,)`` or class probabilities ``(m, C)``."""
    probs = probs.detach().double()
    if probs.dim() == 1:
        p = torch.where(y > 0.5, probs, 1 - probs)
    else:
        p = probs.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    return float(-torch.log(p.clamp_min(1e-300)).mean())


def probit_probs(mean: torch.Tensor, var: torch.Tensor, binary: bool) -> torch.Tensor:
    """``sigmoid`` / ``softmax`` of ``m / sqrt(1 + pi v / 8)`` (IterNCGP's ``"probit"``)."""
    if binary:
        return torch.sigmoid(mean / torch.sqrt(1 + math.pi / 8 * var))
    return probit_softmax(mean, var)


# ------------------------------------------------------------------- backends
def iterncgp(d: dict, backend: str, cfg: dict, **kw) -> IterNCGP:
    opts = dict(policy="cg", max_solver_iters_per_step=cfg["iters"],
                max_newton_steps=cfg["newton_steps"], tol=1e-2, backend=backend)  # fmt: skip
    return IterNCGP(kernel(d["task"]), d["likelihood"], **{**opts, **kw})


def time_backends(task: str, cfg: dict) -> dict:
    d = problem(task, cfg["n"], cfg["n_test"])
    warm = problem(task, 300, 50)
    backends = cfg["backends"]
    for b in backends:  # imports, KeOps compilation
        with torch.no_grad():
            iterncgp(warm, b, cfg).fit(warm["X"], warm["y"]).predict_f(warm["Xt"])
    times: dict[str, list[float]] = {b: [] for b in backends}
    resolved, preds, iters = {}, {}, {}
    for _ in range(cfg["reps"]):
        for b in backends:
            model = iterncgp(d, b, cfg)
            t0 = time.perf_counter()
            model.fit(d["X"], d["y"])
            times[b].append(time.perf_counter() - t0)
            resolved[b] = model._K.op.backend
            iters[b] = model.num_solver_iters
            with torch.no_grad():
                preds[b] = model.predict_f(d["Xt"][:200])
            del model
    fastest = min(statistics.median(t) for t in times.values())
    rows = []
    for b in backends:
        med = statistics.median(times[b])
        diff = max(float((preds[b][i] - preds["dense"][i]).abs().max()) for i in (0, 1))
        rows.append({"task": task, "backend": b, "resolved": resolved[b],
                     "median_s": med, "min_s": min(times[b]), "max_s": max(times[b]),
                     "ratio_to_fastest": med / fastest, "solver_iters": iters[b],
                     "max_pred_diff_vs_dense": diff})  # fmt: skip
    return {"task": task, "n": cfg["n"], "rows": rows}


# --------------------------------------------------------------- exact Laplace
def exact_binary_laplace(X, y, Xt, max_steps: int = 50, tol: float = 1e-8):
    """Logistic Laplace by Newton + Cholesky (R&W Alg. 3.1); predictive mean and variance at
    ``Xt`` (Alg. 3.2). Returns ``(mean, var, newton_steps)``."""
    k = kernel("binary")
    with torch.no_grad():
        K = k(X).to_dense()
        f = torch.zeros_like(y)
        steps = 0
        while steps < max_steps:
            steps += 1
            pi = torch.sigmoid(f)
            sw = (pi * (1 - pi)).sqrt()
            L = stable_cholesky(torch.eye(len(y), dtype=K.dtype) + sw[:, None] * K * sw[None, :])
            b = sw.square() * f + y - pi
            c = torch.cholesky_solve((sw * (K @ b)).unsqueeze(-1), L).squeeze(-1)
            f_new = K @ (b - sw * c)
            change = float((f_new - f).norm() / f_new.norm().clamp_min(1e-300))
            f = f_new
            if change <= tol:
                break
        pi = torch.sigmoid(f)
        sw = (pi * (1 - pi)).sqrt()
        L = stable_cholesky(torch.eye(len(y), dtype=K.dtype) + sw[:, None] * K * sw[None, :])
        Ks = k(X, Xt).to_dense()
        mean = Ks.T @ (y - pi)
        v = torch.linalg.solve_triangular(L, sw[:, None] * Ks, upper=False)
        var = (k(Xt, diag=True) - v.square().sum(0)).clamp_min(0)
    return mean, var, steps


def exact_nll(task: str, d: dict) -> tuple[float, int, float]:
    """``(test NLL, Newton steps, seconds)`` of the exact Laplace approximation."""
    t0 = time.perf_counter()
    if task == "binary":
        mean, var, steps = exact_binary_laplace(d["X"], d["y"], d["Xt"])
        probs = probit_probs(mean, var, True)
    else:
        lap = SoDLaplace(kernel(task), C, d["X"], d["y"]).fit(max_newton_steps=30, tol=1e-6)
        mean, var = lap.predict(d["Xt"])
        probs, steps = probit_softmax(mean, var), lap.newton_steps
    return nll(probs, d["yt"]), steps, time.perf_counter() - t0


# ------------------------------------------------------------------- the race
def race_settings(policy: str, cfg: dict) -> dict:
    """IterNCGP's settings in a race: ``"cg"`` / ``"pcg"``: ``race_iters`` solver iterations
    per Newton step, solver tolerances off, outer tolerance 1e-4; ``"cov-<t>"``: the library
    defaults (``policy="pcg"``, 10 iterations per step, outer tolerance 1e-2) and a
    covariance step with ``t`` targets (``covariance_targets``)."""
    kind, _, targets = policy.partition("-")
    if kind == "cov" and targets.isdigit():
        return {"policy": "pcg", "covariance_targets": int(targets),
                "max_newton_steps": cfg["race_newton_steps"]}  # fmt: skip
    if policy in ("cg", "pcg"):
        return {"policy": policy, "max_solver_iters_per_step": cfg["race_iters"],
                "max_newton_steps": cfg["race_newton_steps"], "tol": 1e-4,
                "solver_rtol": 0.0, "solver_atol": 0.0}  # fmt: skip
    raise ValueError(f"unknown race policy {policy!r}; use 'cg', 'pcg' or 'cov-<targets>'")


def race_iterncgp(d: dict, target: float, cfg: dict, policy: str) -> dict:
    """IterNCGP (auto backend, ``policy``) until the test NLL reaches ``target``."""
    best = [math.inf]
    hit: list[float] = []

    def callback(step) -> bool:
        with torch.no_grad():
            value = nll(step.model.predict_proba(d["Xt"]), d["yt"])
        best[0] = min(best[0], value)
        if value <= target and not hit:
            hit.append(step.seconds)
        return bool(hit) or step.seconds > cfg["budget"]

    model = IterNCGP(kernel(d["task"]), d["likelihood"], **race_settings(policy, cfg))
    with warnings.catch_warnings(record=True) as caught:  # clamped round-off variances
        warnings.simplefilter("always", NumericalWarning)
        model.fit(d["X"], d["y"], callback=callback)
        with torch.no_grad():
            final = nll(model.predict_proba(d["Xt"]), d["yt"])
    return {"seconds_to_target": hit[0] if hit else None, "best_nll": min(best[0], final),
            "fit_seconds": model.fit_seconds, "solver_iters": model.num_solver_iters,
            "newton_steps": len(model.history), "backend": model._K.op.backend,
            "numerical_warnings": len(caught)}  # fmt: skip


def race_svgp(d: dict, target: float, cfg: dict, seed: int = 0) -> dict:
    """GPyTorch SVGP with Adam on minibatches until the test NLL reaches ``target``."""
    g = torch.Generator().manual_seed(seed)
    X, y, n, Cd = d["X"], d["y"], d["X"].shape[0], d["C"]
    M = min(cfg["svgp_inducing"], n)
    binary = Cd == 1
    if binary:
        Z = X[torch.randperm(n, generator=g)[:M]]
        k = kernel("binary")
    else:
        Z = torch.stack([X[torch.randperm(n, generator=g)[:M]] for _ in range(Cd)])
        k = kernel("softmax", Cd)
    for p in k.parameters():
        p.requires_grad_(False)
    model = SVGP(k, Z, num_latents=None if binary else Cd)
    if binary:
        lik = Bernoulli()

        def loss(xb, yb):
            q = model(xb)
            elp = lik.expected_log_prob(yb, q.mean, q.variance).sum()
            return -(elp * n / len(yb) - model.kl_divergence()) / n
    else:
        glik = gpytorch.likelihoods.SoftmaxLikelihood(num_classes=Cd, mixing_weights=False)
        mll = gpytorch.mlls.VariationalELBO(glik, model, num_data=n)

        def loss(xb, yb):
            return -mll(model(xb), yb)

    opt = torch.optim.Adam(model.parameters(), lr=cfg["svgp_lr"])
    train_time, steps, best, hit = 0.0, 0, math.inf, None

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            q = model(d["Xt"])
            value = nll(probit_probs(q.mean, q.variance, binary), d["yt"])
        model.train()
        return value

    while hit is None and train_time < cfg["budget"]:
        perm = torch.randperm(n, generator=g)
        for s in range(0, n, 1024):
            t0 = time.perf_counter()
            idx = perm[s : s + 1024]
            opt.zero_grad()
            loss(X[idx], y[idx]).backward()
            opt.step()
            train_time += time.perf_counter() - t0
            steps += 1
            if steps % cfg["svgp_eval_every"] == 0:
                value = evaluate()
                best = min(best, value)
                if value <= target:
                    hit = train_time
                    break
            if train_time >= cfg["budget"]:
                break
    best = min(best, evaluate())
    return {"seconds_to_target": hit, "best_nll": best, "train_seconds": train_time,
            "steps": steps, "inducing_per_latent": M}  # fmt: skip


def _summary(runs: list[dict]) -> dict:
    """Median / min / max time to the target over the repetitions (``None``: some run did not
    reach it), the best NLL of all runs, and the runs."""
    hits = [r["seconds_to_target"] for r in runs]
    reached = [h for h in hits if h is not None]
    return {"seconds_to_target": statistics.median(hits) if len(reached) == len(hits) else None,
            "min_s": min(reached, default=None), "max_s": max(reached, default=None),
            "reached": f"{len(reached)}/{len(hits)}",
            "best_nll": min(r["best_nll"] for r in runs), "runs": runs}  # fmt: skip


def time_to_target(task: str, cfg: dict) -> dict:
    """Exact-Laplace target, then ``race_reps`` interleaved races (IterNCGP with
    ``race_policy``, IterNCGP with ``race_before_policy``, SVGP, IterNCGP, ...; the SVGP's
    inducing points and minibatches are re-drawn with the repetition's seed)."""
    d = problem(task, cfg["n_target"][task], cfg["n_test"])
    exact, steps, secs = exact_nll(task, d)
    target = exact + 0.002
    before = cfg.get("race_before_policy")
    runs: dict[str, list[dict]] = {"iterncgp": [], "svgp": []}
    if before:
        runs["iterncgp_before"] = []
    for rep in range(cfg["race_reps"]):
        runs["iterncgp"].append(race_iterncgp(d, target, cfg, cfg["race_policy"]))
        if before:
            runs["iterncgp_before"].append(race_iterncgp(d, target, cfg, before))
        runs["svgp"].append(race_svgp(d, target, cfg, seed=rep))
    return {"task": task, "n": cfg["n_target"][task], "exact_nll": exact,
            "exact_newton_steps": steps, "exact_seconds": secs, "target_nll": target,
            **{k: _summary(v) for k, v in runs.items()}}  # fmt: skip


# ---------------------------------------------------------------------- output
def run(cfg: dict) -> dict:
    return {
        "benchmark": "iterncgp_backend",
        "config": cfg,
        "threads": torch.get_num_threads(),
        "available_memory_bytes": available_memory_bytes("cpu"),
        "backends": [time_backends(t, cfg) for t in cfg["tasks"]] if cfg["backends"] else [],
        "time_to_target": [time_to_target(t, cfg) for t in cfg["tasks"]] if cfg["race"] else [],
    }


def _fmt(r: dict) -> str:
    if r["seconds_to_target"] is None:
        return f"not reached ({r['reached']}; best NLL {r['best_nll']:.4f})"
    spread = f"{r['min_s']:.3g}-{r['max_s']:.3g}"
    return f"{r['seconds_to_target']:.3g} [{spread}] (best NLL {r['best_nll']:.4f})"


def table(out: dict) -> str:
    """Markdown tables: backend fit times, then the time to the exact-Laplace NLL target."""
    header = ["task", "N", "backend", "resolved", "median s", "min-max s", "/ fastest",
              "solver iters", "max |pred - dense|"]  # fmt: skip
    rows = [
        [r["task"], str(b["n"]), r["backend"], r["resolved"], f"{r['median_s']:.3g}",
         f"{r['min_s']:.3g}-{r['max_s']:.3g}", f"{r['ratio_to_fastest']:.2f}",
         str(r["solver_iters"]), f"{r['max_pred_diff_vs_dense']:.1e}"]
        for b in out["backends"] for r in b["rows"]
    ]  # fmt: skip
    text = markdown_table(header, rows) if rows else ""
    if out["time_to_target"]:
        cfg = out["config"]
        before = cfg.get("race_before_policy")
        header = ["task", "N", "exact NLL (s)", "target",
                  f"IterNCGP ({cfg['race_policy']}) s to target",
                  *([f"IterNCGP ({before}) s to target"] if before else []),
                  "SVGP s to target", "IterNCGP / SVGP",
                  *([f"{cfg['race_policy']} / {before}"] if before else [])]  # fmt: skip
        rows = []

        def ratio(a: dict, b: dict) -> str:
            if a["seconds_to_target"] and b["seconds_to_target"]:
                return f"{a['seconds_to_target'] / b['seconds_to_target']:.2f}"
            return "-"

        for t in out["time_to_target"]:
            a, s = t["iterncgp"], t["svgp"]
            b = t.get("iterncgp_before")
            rows.append([t["task"], str(t["n"]), f"{t['exact_nll']:.4f} ({t['exact_seconds']:.3g})",
                         f"{t['target_nll']:.4f}", _fmt(a), *([_fmt(b)] if b else []),
                         _fmt(s), ratio(a, s), *([ratio(a, b)] if b else [])])  # fmt: skip
        text += ("\n\n" if text else "") + markdown_table(header, rows)
    return text


DEFAULT = {"tasks": ["binary", "softmax"], "backends": list(BACKENDS), "n": 10_000,
           "n_test": 2_000, "reps": 3,
           "iters": 5, "newton_steps": 3, "race": True,
           "n_target": {"binary": 4_000, "softmax": 2_000}, "race_iters": 100,
           "race_policy": "cov-100", "race_before_policy": "pcg",
           "race_newton_steps": 30, "race_reps": 3, "budget": 120.0, "svgp_inducing": 256,
           "svgp_lr": 0.05, "svgp_eval_every": 4}  # fmt: skip
QUICK = dict(DEFAULT, n=300, n_test=100, reps=1, n_target={"binary": 150, "softmax": 150},
             race_reps=1, race_policy="cov-40",
             budget=3.0, svgp_inducing=32, newton_steps=2)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tasks", nargs="+", choices=["binary", "softmax"], default=None)
    p.add_argument("--no-race", action="store_true", help="backend timings only")
    p.add_argument(
        "--backends",
        nargs="+",
        choices=[*BACKENDS, "none"],
        default=None,
        help="the backends to time (dense is always included: the reference); none: the "
        "time-to-target races only",
    )
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per backend")
    p.add_argument("--race-policy", default=None, help="'cg', 'pcg' or 'cov-<targets>'")
    p.add_argument("--race-before", default=None, help="the race's before row (same forms)")
    p.add_argument("--race-reps", type=int, default=None, help="interleaved race repetitions")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT / "iterncgp_backend.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    cfg = dict(QUICK if args.quick else DEFAULT)
    if args.tasks:
        cfg["tasks"] = args.tasks
    if args.no_race:
        cfg["race"] = False
    if args.backends == ["none"]:
        cfg["backends"] = []
    elif args.backends:
        cfg["backends"] = [b for b in BACKENDS if b in args.backends or b == "dense"]
    if args.reps:
        cfg["reps"] = args.reps
    for key, value in (("race_policy", args.race_policy), ("race_before_policy", args.race_before),
                       ("race_reps", args.race_reps)):  # fmt: skip
        if value is not None:
            if key != "race_reps":
                race_settings(value, cfg)
            cfg[key] = value
    out = run(cfg)
    write_json(args.out, out)
    print(table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
