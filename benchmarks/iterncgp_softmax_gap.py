"""Where IterNCGP's softmax test NLL differs from the exact Laplace approximation's.

Setting: the 10-class Gaussian mixture of ``experiments/tatzel/gmm.py`` (``make_gmm``) in 3-D,
``n`` training and ``n_test`` held-out points, softmax (C = 10), the smoother Matern-3/2 of
``experiments/tatzel/condition.py`` (lengthscale 0.2, outputscale 2, fixed; with the large-scale
experiment's lengthscale 0.05 / outputscale 0.05 the posterior stays at the prior and every
method has the same NLL). One process, one thread (``--threads``), the same kernel and data for
every method; probit-approximated predictive probabilities ``softmax(m / sqrt(1 + pi v / 8))``
for every method.

* **Exact Laplace**: Newton + Cholesky (Rasmussen & Williams, Algorithms 3.3 / 3.4, via
  ``SoDLaplace`` of ``experiments/tatzel/baselines.py`` on all points) with a backtracking line
  search on ``Psi(f) = log p(y | f) - a^T K a / 2`` (the undamped iteration diverges on this
  kernel), to a relative change of ``exact_tol``.
* **IterNCGP** in the configurations of ``--configs`` (``default``: the library defaults, CG
  policy with 10 iterations per Newton step; ``cg-<k>`` / ``pcg-<k>``: the CG / Jacobi-
  preconditioned CG policy with ``k`` iterations per step, solver tolerances off, outer
  tolerance 1e-4).

Per IterNCGP run the gap to the exact test NLL is split into its parts: the NLL of IterNCGP's
predictive mean with the *exact* variances (the error of the mode / mean), and of the exact mean
with IterNCGP's variances (the computational uncertainty in the variance), beside the mean
predictive variances, the largest difference of the predictive means and the NLL of the mean
alone (variance zero).

Results: ``benchmarks/results/iterncgp_softmax_gap.json`` and a markdown table on stdout.

Usage::

    python -m benchmarks.iterncgp_softmax_gap            # N = 2,000 (exact Laplace: minutes)
    python -m benchmarks.iterncgp_softmax_gap --quick    # smoke test (N = 300)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Softmax
from bo_ncgp.models import IterNCGP
from experiments.harness import markdown_table
from experiments.tatzel.baselines import SoDLaplace, matern32, probit_softmax
from experiments.tatzel.gmm import make_gmm

OUT = Path(__file__).resolve().parent / "results"
C = 10


class DampedSoftmaxLaplace(SoDLaplace):
    """Exact multi-class Laplace (R&W Algorithms 3.3 / 3.4) whose Newton steps are halved
    until ``Psi(f) = log p(y | f) - a^T K a / 2`` does not decrease."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.a = torch.zeros_like(self.f)
        self.step_sizes: list[float] = []
        self._factor()

    def _psi(self, a: torch.Tensor) -> tuple[float, torch.Tensor]:
        f = (self.K @ a.unsqueeze(-1)).squeeze(-1)
        loglik = (self.Y * f).sum() - torch.logsumexp(f, 0).sum()
        return float(loglik - 0.5 * (a * f).sum()), f

    def step(self) -> float:
        """One damped Newton step; returns the relative change of ``f``."""
        with torch.no_grad():
            pi, f = self.pi, self.f
            b = pi * f - pi * (pi * f).sum(0, keepdim=True) + self.Y - pi
            c = (self.E @ (self.K @ b.unsqueeze(-1))).squeeze(-1)
            corr = torch.cholesky_solve(c.sum(0, keepdim=True).T, self.M).T
            a_full = b - c + (self.E @ corr.expand(self.C, -1).unsqueeze(-1)).squeeze(-1)
            psi0, _ = self._psi(self.a)
            t = 1.0
            while True:
                a = self.a + t * (a_full - self.a)
                psi, f_new = self._psi(a)
                # round-off of Psi near the mode is not a decrease
                if psi >= psi0 - 1e-12 * abs(psi0) or t < 1e-4:
                    break
                t *= 0.5
            change = float((f_new - f).norm() / f_new.norm().clamp_min(1e-300))
            self.f, self.a = f_new, a
            self.step_sizes.append(t)
            self.newton_steps += 1
            self._factor()
            return change


def nll(mean: torch.Tensor, var: torch.Tensor, y: torch.Tensor) -> float:
    """Mean test NLL of the probit-approximated class probabilities."""
    p = probit_softmax(mean, var).gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    return float(-torch.log(p.clamp_min(1e-300)).mean())


def problem(n: int, n_test: int, seed: int = 0) -> dict:
    X, y = make_gmm(math.ceil(n / C), seed)
    Xt, yt = make_gmm(math.ceil(n_test / C), seed + 500)
    return {"X": X[:n], "y": y[:n], "Xt": Xt[:n_test], "yt": yt[:n_test]}


def exact_laplace(d: dict, tol: float, max_steps: int = 40) -> dict:
    t0 = time.perf_counter()
    lap = DampedSoftmaxLaplace(matern32(0.2, 2.0), C, d["X"], d["y"])
    change = math.inf
    while lap.newton_steps < max_steps and change > tol:
        change = lap.step()
    seconds = time.perf_counter() - t0
    mean, var = lap.predict(d["Xt"])
    return {"seconds": seconds, "newton_steps": lap.newton_steps, "step_sizes": lap.step_sizes,
            "mean": mean, "var": var, "mode": lap.f.T}  # fmt: skip


def iterncgp_settings(name: str) -> dict:
    """Constructor arguments of a ``--configs`` entry."""
    if name == "default":
        return {}
    policy, _, iters = name.partition("-")
    if policy == "cov" and iters.isdigit():
        return {"policy": "pcg", "covariance_targets": int(iters)}
    if policy in ("cg", "pcg") and iters.isdigit():
        return {"policy": policy, "max_solver_iters_per_step": int(iters), "tol": 1e-4,
                "solver_rtol": 0.0, "solver_atol": 0.0}  # fmt: skip
    raise ValueError(
        f"unknown IterNCGP configuration {name!r}; use 'default', 'cg-<k>', 'pcg-<k>' or "
        "'cov-<targets>'"
    )


def run_iterncgp(d: dict, name: str, exact: dict) -> dict:
    model = IterNCGP(matern32(0.2, 2.0), Softmax(C), **iterncgp_settings(name))
    t0 = time.perf_counter()
    model.fit(d["X"], d["y"])
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        mean, var = model.predict_f(d["Xt"])
        mode_diff = float((model.mode - exact["mode"]).abs().max())
    yt = d["yt"]
    return {
        "config": name,
        "seconds": seconds,
        "time_over_exact": seconds / exact["seconds"],
        "newton_steps": len(model.history),
        "solver_iters": model.num_solver_iters,
        "converged": model._state.converged,
        "nll": nll(mean, var, yt),
        "nll_mean_with_exact_var": nll(mean, exact["var"], yt),
        "nll_exact_mean_with_own_var": nll(exact["mean"], var, yt),
        "nll_mean_only": nll(mean, torch.zeros_like(var), yt),
        "mean_var": float(var.mean()),
        "max_mean_diff": float((mean - exact["mean"]).abs().max()),
        "max_mode_diff": mode_diff,
        "acc": float((mean.argmax(-1) == yt).double().mean()),
    }


def run(cfg: dict) -> dict:
    """Exact Laplace, then every configuration, ``reps`` times interleaved (exact, configs,
    exact, configs, ...); times are medians over the repetitions (every run is
    deterministic: the other numbers are those of the first)."""
    d = problem(cfg["n"], cfg["n_test"])
    exacts, all_runs = [], []
    for _ in range(cfg.get("reps", 1)):
        exacts.append(exact_laplace(d, cfg["exact_tol"]))
        all_runs.append([run_iterncgp(d, name, exacts[0]) for name in cfg["configs"]])
    exact = exacts[0]
    exact_s = [e["seconds"] for e in exacts]
    exact["seconds"] = statistics.median(exact_s)
    runs = all_runs[0]
    for i, r in enumerate(runs):
        r["seconds_runs"] = [rep[i]["seconds"] for rep in all_runs]
        r["seconds"] = statistics.median(r["seconds_runs"])
        r["time_over_exact"] = r["seconds"] / exact["seconds"]
    yt = d["yt"]
    ref = {"seconds": exact["seconds"], "seconds_runs": exact_s,
           "newton_steps": exact["newton_steps"],
           "step_sizes": exact["step_sizes"], "nll": nll(exact["mean"], exact["var"], yt),
           "nll_mean_only": nll(exact["mean"], torch.zeros_like(exact["var"]), yt),
           "mean_var": float(exact["var"].mean()),
           "acc": float((exact["mean"].argmax(-1) == yt).double().mean())}  # fmt: skip
    return {"benchmark": "iterncgp_softmax_gap", "config": cfg,
            "threads": torch.get_num_threads(), "exact": ref, "iterncgp": runs}  # fmt: skip


def table(out: dict) -> str:
    e = out["exact"]
    header = ["method", "s", "/ exact time", "Newton steps (actions)", "test NLL", "gap",
              "NLL: own mean + exact var", "NLL: exact mean + own var", "NLL: mean only",
              "mean var", "max |mean - exact|"]  # fmt: skip

    def spread(r: dict) -> str:
        runs = r.get("seconds_runs", [r["seconds"]])
        if len(runs) == 1:
            return f"{r['seconds']:.3g}"
        return f"{r['seconds']:.3g} [{min(runs):.3g}-{max(runs):.3g}]"

    rows = [["exact Laplace", spread(e), "1", str(e["newton_steps"]),
             f"{e['nll']:.4f}", "0", "", "", f"{e['nll_mean_only']:.4f}",
             f"{e['mean_var']:.3f}", "0"]]  # fmt: skip
    for r in out["iterncgp"]:
        rows.append([f"IterNCGP {r['config']}", spread(r),
                     f"{r['time_over_exact']:.3f}",
                     f"{r['newton_steps']} ({r['solver_iters']})", f"{r['nll']:.4f}",
                     f"{r['nll'] - e['nll']:+.4f}", f"{r['nll_mean_with_exact_var']:.4f}",
                     f"{r['nll_exact_mean_with_own_var']:.4f}", f"{r['nll_mean_only']:.4f}",
                     f"{r['mean_var']:.3f}", f"{r['max_mean_diff']:.1e}"])  # fmt: skip
    return markdown_table(header, rows)


DEFAULT = {
    "n": 2_000,
    "n_test": 2_000,
    "exact_tol": 1e-8,
    "configs": ["default", "cg-30", "pcg-30", "cov-80", "cov-100"],
}
QUICK = dict(DEFAULT, n=200, n_test=200, configs=["default", "cg-30", "pcg-30", "cov-200"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--configs", nargs="+", default=None, help="'default', 'cg-<k>', 'pcg-<k>', 'cov-<t>'"
    )
    p.add_argument("--reps", type=int, default=1, help="interleaved repetitions (medians)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT / "iterncgp_softmax_gap.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    cfg = dict(QUICK if args.quick else DEFAULT, reps=args.reps)
    if args.configs:
        for name in args.configs:
            iterncgp_settings(name)
        cfg["configs"] = list(args.configs)
    out = run(cfg)
    write_json(args.out, out)
    print(table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
