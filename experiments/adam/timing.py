"""Cost of one ELBO evaluation vs the number of components C (Table 1 of Adam et al.).

Table 1 of *Scalable GAM using sparse variational Gaussian processes* gives, for C components
of M inducing points and N data,

    family                      storage     KL          E_q log p(Y | rho)
    mean field                  O(C M^2)    O(C M^3)    O(C M^3 + N C M^2)
    full covariance (Adam 2017) O(C^2 M^2)  O(C^3 M^3)  O(C^3 M^3 + N C^2 M^2)
    coupled precision (Eq. 7)   O(C M^2)    O(C M^3)    O(C M^3 + N C^2 M^2)

This script times, for C = 2, 4, 8, 16 one-dimensional RBF components (N, M fixed):

* ``kl``    -- ``prepare`` + ``KL[q(U) || p(U)]``, forward and backward, from precomputed
  (detached) ``K_UU`` and Cholesky factors: the KL column;
* ``expect``-- ``prepare`` + projection + marginals of the sum + Gaussian expected
  log-likelihood, forward and backward, from precomputed ``K_UX``: the expectation column;
* ``elbo``  -- the model's full ``elbo(X, y)`` forward and backward (kernel evaluations
  included): what one training step costs;

and counts the variational parameters (storage column). Each timing is the minimum CPU time
(``time.process_time``, one thread) over ``--repeats`` runs, families interleaved so that
machine load affects them alike (the machine is shared); the log-log
slope of time against C over C = 4..16 estimates the exponent of C, reported beside Table 1's.
Speed is also given as a ratio to the mean-field family at the same C (same process).

Usage:
    bo-ncgp gam-timing            # N = 2000, M = 32
    bo-ncgp gam-timing --quick    # tiny smoke configuration
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from tqdm.auto import tqdm

from bo_ncgp.cli.common import HelpFormatter
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.models.gam import SparseGAM
from experiments import harness

OUT = harness.results_dir(__file__)

#: (label, posterior, whiten)
VARIANTS = [
    ("mean_field", "mean_field", True),
    ("coupled_precision", "coupled_precision", True),
    ("full", "full", True),
    ("coupled_precision (paper param.)", "coupled_precision", False),
    ("full (unwhitened)", "full", False),
]
#: Table 1 exponents of C at fixed N, M (dominant term; KL, expectation)
TABLE1 = {
    "mean_field": (1, 1),
    "coupled_precision": (1, 2),
    "full": (3, 2),
}


def build(C: int, M: int, posterior: str, whiten: bool) -> SparseGAM:
    comps = []
    for c in range(C):
        k = ScaleKernel(RBFKernel())
        k.base_kernel.lengthscale = 0.3
        comps.append((k, [c], torch.linspace(0, 1, M)))
    model = SparseGAM(comps, Gaussian(0.1), posterior, whiten=whiten)
    g = torch.Generator().manual_seed(C)
    with torch.no_grad():  # a posterior away from the prior
        for p in model.variational.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _timed(fn) -> float:
    """CPU time of our process (less sensitive than wall time to other users' load)."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def make_workloads(model: SparseGAM, X: torch.Tensor, y: torch.Tensor) -> dict:
    with torch.no_grad():
        Kuu = [K.detach() for K in model._kuu()]
        chol = [stable_cholesky(K) for K in Kuu] if model.variational.needs_cholesky else None
        Kux = [c.kux(X).detach() for c in model.components]
        kxx = [c.kxx(X).detach() for c in model.components]
    q, lik = model.variational, model.likelihood

    def kl():
        q.kl(q.prepare(Kuu, chol)).backward()

    def expect():
        proj = q.project(q.prepare(Kuu, chol), Kux)
        var = proj.sum_variance(kxx).clamp_min(1e-12)
        lik.expected(y, proj.sum_mean(), var)[0].sum().backward()

    def elbo():
        model.elbo(X, y).backward()

    return {"kl": kl, "expect": expect, "elbo": elbo}


def slope(cs: list[int], ts: list[float]) -> float:
    return float(np.polyfit(np.log(cs), np.log(ts), 1)[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny configuration (CI smoke test)")
    p.add_argument("--num-data", type=int, default=2000, help="training points")
    p.add_argument("--num-inducing", type=int, default=32, help="inducing points per component")
    p.add_argument(
        "--components",
        type=int,
        nargs="+",
        default=[2, 4, 8, 16],
        help="numbers of additive components to time",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=7,
        help="timed repetitions per configuration (the median is reported)",
    )
    p.add_argument("--tag", default="", help="suffix of the output file names")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, default=OUT, help="output folder")
    args = p.parse_args(argv)
    if args.quick:
        args.num_data, args.num_inducing, args.components, args.repeats = 100, 4, [2, 4], 2
    harness.setup(args.threads)
    torch.manual_seed(0)
    N, M = args.num_data, args.num_inducing

    timings = {label: {w: [] for w in ("kl", "expect", "elbo")} for label, _, _ in VARIANTS}
    storage = {label: [] for label, _, _ in VARIANTS}
    for C in tqdm(args.components, desc="C", disable=args.quick):
        X = torch.rand(N, C)
        y = torch.sin(6 * X).sum(-1) + 0.3 * torch.randn(N)
        work = {}
        for label, posterior, whiten in VARIANTS:
            model = build(C, M, posterior, whiten)
            storage[label].append(sum(p.numel() for p in model.variational.parameters()))
            work[label] = make_workloads(model, X, y)
            for fn in work[label].values():  # warm-up
                fn()
        samples = {label: {w: [] for w in ("kl", "expect", "elbo")} for label in work}
        for _ in range(args.repeats):
            for label, fns in work.items():
                for w, fn in fns.items():
                    samples[label][w].append(_timed(fn))
        for label in work:
            for w in samples[label]:
                timings[label][w].append(min(samples[label][w]))

    cs = args.components
    fit = [i for i, c in enumerate(cs) if c >= 4]
    if len(fit) < 2:
        fit = list(range(len(cs)))
    summary = {}
    for label, posterior, _ in VARIANTS:
        summary[label] = {
            "slope_kl": slope([cs[i] for i in fit], [timings[label]["kl"][i] for i in fit]),
            "slope_expect": slope([cs[i] for i in fit], [timings[label]["expect"][i] for i in fit]),
            "slope_elbo": slope([cs[i] for i in fit], [timings[label]["elbo"][i] for i in fit]),
            "slope_storage": slope(cs, storage[label]),
            "table1_exponents_kl_expect": TABLE1[posterior],
            "ratio_elbo_vs_mean_field": [
                t / b
                for t, b in zip(timings[label]["elbo"], timings["mean_field"]["elbo"], strict=True)
            ],
        }
    results = {
        "config": {
            "N": N,
            "M": M,
            "components": cs,
            "repeats": args.repeats,
            "threads": args.threads,
            "quick": args.quick,
        },
        "date": time.strftime("%Y-%m-%d"),
        "timings_seconds": timings,
        "num_variational_parameters": storage,
        "summary": summary,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    tag = ("timing_quick" if args.quick else "timing") + args.tag
    harness.write_json(args.out / f"{tag}.json", results)
    for label in timings:
        s = summary[label]
        print(
            f"{label:34s} elbo ms {[round(1e3 * t, 1) for t in timings[label]['elbo']]}  "
            f"slopes kl {s['slope_kl']:.2f} expect {s['slope_expect']:.2f} "
            f"elbo {s['slope_elbo']:.2f} storage {s['slope_storage']:.2f}"
        )
    if not args.quick:
        _plot(results, args.out / f"{tag}.png")
    return 0


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = results["config"]["components"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, w in zip(axes, ("kl", "expect", "elbo"), strict=True):
        for label, t in results["timings_seconds"].items():
            ax.loglog(cs, [1e3 * v for v in t[w]], "o-", label=label)
        ax.set_xlabel("number of components C")
        ax.set_ylabel("ms (forward + backward)")
        ax.set_title(w)
        ax.set_xticks(cs, [str(c) for c in cs])
    axes[0].legend(fontsize=7)
    fig.suptitle(f"SparseGAM cost vs C (N={results['config']['N']}, M={results['config']['M']})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
