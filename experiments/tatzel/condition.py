"""Cost and accuracy of ``IterNCGP.condition`` against a full refit (for the BoTorch layer).

A model is fitted (IterNCGP-CG, recycling, at most 10 solver iterations per Newton step,
outer tolerance 1e-3) on N points of a data set; then ``n_new`` held-out points are added with
``condition(X_new, y_new, num_iters, max_newton_steps=2)`` (warm start from the current mode
and the recycled buffers). The reference is a fit on all N + n_new points run to a tight
tolerance (CG from scratch in every Newton step, at most 250 iterations, to a relative residual
of 1e-8; outer tolerance 1e-6).
Reported per setting: seconds and products with K of ``condition`` and of a default refit
(same settings as the base model), the largest absolute deviation of the predictive mean on
500 test points from the reference, and the average predictive variance (which includes the
computational uncertainty: fewer solver directions leave a larger variance). Fantasies:
``condition`` on a batch of 16 label vectors against 16 separate calls.

Data sets: the 10-class Gaussian mixture of ``experiments/tatzel/gmm.py`` (3-D, Matern-3/2) with
N = 1,000, and the banana set (binary, 400 training points, RBF kernel).

Usage::

    bo-ncgp iterncgp-condition
    bo-ncgp iterncgp-condition --quick

Results: ``experiments/tatzel/results/condition[_quick].json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.cli.common import DATA_ROOT_HELP, HelpFormatter, add_verify_argument
from experiments import harness
from experiments.tatzel.gmm import make_gmm, make_kernel

OUT = harness.results_dir(__file__)


def gmm_problem(n: int, n_pool: int, n_test: int):
    from bo_ncgp.likelihoods import Softmax

    X, y = make_gmm((n + n_pool + n_test) // 10 + 1, seed=7)
    k = make_kernel()
    k.base_kernel.lengthscale = 0.2  # a smoother model than the large-scale benchmark
    k.outputscale = 2.0
    return X, y, k, Softmax(10), n, n_pool


def banana_problem(root, verify: bool = True):
    from bo_ncgp.data import load_banana
    from bo_ncgp.likelihoods import Bernoulli

    d = load_banana(root=root, dtype=torch.float64, verify=verify)
    X = torch.cat([d.X_train, d.X_test[:520]])
    y = torch.cat([d.y_train, d.y_test[:520]])
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
    k.base_kernel.lengthscale = 0.5
    k.outputscale = 3.0
    return X, y, k, Bernoulli(), 400, 20


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def run(problem, n_new_list, iters_list, quick) -> dict:
    from bo_ncgp.models import IterNCGP

    X, y, k, lik, n, n_pool = problem
    Xb, yb = X[:n], y[:n]
    pool_X, pool_y = X[n : n + n_pool], y[n : n + n_pool]
    Xs = X[n + n_pool : n + n_pool + 500]
    opts = dict(policy="cg", max_solver_iters_per_step=10, max_newton_steps=30, tol=1e-3)
    with torch.no_grad():
        base, t_base = timed(lambda: IterNCGP(k, lik, **opts).fit(Xb, yb))
        rows = []
        for n_new in n_new_list:
            Xn, yn = pool_X[:n_new], pool_y[:n_new]
            Xa, ya = torch.cat([Xb, Xn]), torch.cat([yb, yn])
            ref = IterNCGP(  # CG from scratch in every Newton step (small buffers)
                k,
                lik,
                policy="cg",
                max_solver_iters_per_step=250,
                max_newton_steps=30,
                recycle=False,
                tol=1e-6,
                solver_rtol=1e-8,
                solver_atol=0.0,
            ).fit(Xa, ya)
            m_ref, v_ref = ref.predict_f(Xs)
            refit, t_refit = timed(lambda Xa=Xa, ya=ya: IterNCGP(k, lik, **opts).fit(Xa, ya))

            def dev(model, m_ref=m_ref):
                m, v = model.predict_f(Xs)
                return float((m - m_ref).abs().max()), float(v.mean())

            row = {
                "n_new": n_new,
                "reference": {"k_products": ref.num_solver_iters, "avg_var": float(v_ref.mean())},
                "refit": {"seconds": t_refit, "k_products": refit.num_solver_iters},
                "condition": [],
            }
            row["refit"]["mean_dev"], row["refit"]["avg_var"] = dev(refit)
            for iters in iters_list:
                cond, t_cond = timed(
                    lambda Xn=Xn, yn=yn, iters=iters: base.condition(
                        Xn, yn, num_iters=iters, max_newton_steps=2
                    )
                )
                md, vd = dev(cond)
                row["condition"].append(
                    {
                        "num_iters": iters,
                        "seconds": t_cond,
                        "k_products": cond.num_solver_iters,
                        "mean_dev": md,
                        "avg_var": vd,
                    }
                )
            rows.append(row)
        # fantasies: one batched call against separate calls
        nf = 4 if quick else 16
        Xn = pool_X[:2]
        labels = int(getattr(lik, "num_latents", 1))
        if labels > 1:
            yf = torch.randint(0, labels, (nf, 2), generator=torch.Generator().manual_seed(0))
        else:
            yf = torch.randint(0, 2, (nf, 2), generator=torch.Generator().manual_seed(0)).double()
        fant, t_batch = timed(lambda: base.condition(Xn, yf, num_iters=3))
        singles, t_loop = timed(lambda: [base.condition(Xn, yf[b], num_iters=3) for b in range(nf)])
        m_b = fant.predict_f(Xs)[0]
        diff = max(float((m_b[b] - s.predict_f(Xs)[0]).abs().max()) for b, s in enumerate(singles))
    return {
        "n": n,
        "base_fit": {"seconds": t_base, "k_products": base.num_solver_iters},
        "rows": rows,
        "fantasies": {
            "num_fantasies": nf,
            "batched_seconds": t_batch,
            "loop_seconds": t_loop,
            "max_mean_difference": diff,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny configuration (CI)")
    p.add_argument("--root", default=None, help=DATA_ROOT_HELP)
    add_verify_argument(p)
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default: experiments/tatzel/results)"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n_new_list, iters_list = ([1, 5], [1, 3]) if args.quick else ([1, 5, 20], [1, 3, 10])
    problems = {"gmm": gmm_problem(200 if args.quick else 1000, 20, 500)}
    if not args.quick:
        problems["banana"] = banana_problem(args.root, args.verify)
    result = {"date": time.strftime("%Y-%m-%d"), "settings": {}}
    for name, prob in problems.items():
        result["settings"][name] = run(prob, n_new_list, iters_list, args.quick)
        print(name, result["settings"][name]["rows"])
    harness.write_json(
        (args.out or OUT) / ("condition_quick.json" if args.quick else "condition.json"), result
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
