"""Does dual conditioning condition? Variance removed at new points, and qNIPV's ranking.

Chang et al. (2023), Sec. 3.3: a DualSVGP conditioned on a fantasy at ``x`` should lose the
variance at ``x`` that an exact Gaussian update of its posterior loses. 2-D data (60 points of
``sin(6 x1) + cos(4 x2)``), RBF kernel (lengthscale 0.25, outputscale 1), noise 0.01, a
DualSVGP with ``m = 20`` fixed inducing points; 10 new points, each conditioned on its
posterior mean. Reported: the mean fraction of the variance at the new point removed by

* ``DualSVGP.condition`` (the library's dual conditioning);
* the exact Gaussian update of the same posterior, ``v / (v + noise)``;
* ``DualSVGP.update`` with ``Z`` fixed, and with pivoted-Cholesky ``Z`` allowed to grow by one
  point (``max_inducing = m + 1``);
* an exact GP on all the data with the same hyperparameters (another prior-posterior, for
  reference).

qNIPV rows: ``qNegIntegratedPosteriorVariance`` over 30 candidates (128 MC points) on a
DualSVGPModel and on a SingleTaskGP with the same hyperparameters (30 points, lengthscale
0.15, ``m`` = 30 or 24): the spread ``(max - min) / mean |value|`` and the Spearman rank
correlation of the two.

    python benchmarks/conditioning_check.py   # seconds (``--quick`` is the same run)

Writes ``benchmarks/results/conditioning_check.json`` (``--out``) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import gpytorch
import torch
from botorch.acquisition.active_learning import qNegIntegratedPosteriorVariance
from botorch.models import SingleTaskGP

from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models import DualSVGP

DT = torch.float64
OUT = Path(__file__).resolve().parent / "results" / "conditioning_check.json"


def _rbf(lengthscale: float) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).to(DT)
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = 1.0
    return k


def _dual(k, noise, Z, X, y, **kw) -> DualSVGP:
    cfg = dict(memory_size=None, num_hyper_steps=0, inducing_update="fixed")
    cfg.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DualSVGP(k, Gaussian(noise), Z, **cfg).update(X, y)


def variance_rows() -> list[tuple[str, float]]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(60, 2, generator=g, dtype=DT)
    y = torch.sin(6 * X[:, 0]) + torch.cos(4 * X[:, 1])
    noise, k = 0.01, _rbf(0.25)
    model = _dual(k, noise, X[:20], X, y)
    grow = _dual(k, noise, X[:20], X, y, inducing_update="pivoted_cholesky", max_inducing=21)
    new = torch.rand(10, 2, generator=g, dtype=DT)
    out = {"condition": [], "exact update of q": [], "update, Z fixed": [],
           "update, Z grows": [], "exact GP": []}  # fmt: skip
    K = k(X).to_dense() + noise * torch.eye(60, dtype=DT)
    with torch.no_grad():
        for x in new.split(1):
            mu, v = model.predict_f(x)
            out["condition"].append(1 - model.condition(x, mu).predict_f(x)[1] / v)
            out["exact update of q"].append(v / (v + noise))
            for name, base in (("update, Z fixed", model), ("update, Z grows", grow)):
                m0, v0 = base.predict_f(x)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    v1 = base.copy().update(x, m0).predict_f(x)[1]
                out[name].append(1 - v1 / v0)
            ks = k(x, X).to_dense()
            ve = k(x).to_dense() - ks @ torch.linalg.solve(K, ks.T)
            out["exact GP"].append(ve[0] / (ve[0] + noise))
    return [(name, float(torch.cat([t.reshape(-1) for t in v]).mean())) for name, v in out.items()]


def qnipv_rows() -> list[tuple[int, float, float, float]]:
    rows = []
    for m in (30, 24):
        g = torch.Generator().manual_seed(0)
        X = torch.rand(30, 2, generator=g, dtype=DT)
        y = torch.sin(6 * X[:, 0]) + torch.cos(4 * X[:, 1])
        noise, k = 1e-2, _rbf(0.15)
        dual = _dual(k, noise, X[:m], X, y)
        gp = SingleTaskGP(X, y[:, None], covar_module=k, outcome_transform=None)
        gp.likelihood.noise = noise
        gp.mean_module.constant.data.fill_(0.0)
        gp.eval()
        mc = torch.rand(128, 2, generator=g, dtype=DT)
        cand = torch.rand(30, 1, 2, generator=g, dtype=DT)
        with torch.no_grad():
            a = qNegIntegratedPosteriorVariance(DualSVGPModel.from_model(dual), mc_points=mc)(cand)
            b = qNegIntegratedPosteriorVariance(gp, mc_points=mc)(cand)
        ra, rb = (v.argsort().argsort().to(DT) for v in (a, b))
        rho = float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])
        spread = [float((v.max() - v.min()) / v.abs().mean()) for v in (a, b)]
        rows.append((m, spread[0], spread[1], rho))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the same run (it takes seconds)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    variance, qnipv = variance_rows(), qnipv_rows()
    write_json(args.out, {
        "benchmark": "conditioning_check",
        "variance_removed": dict(variance),
        "qnipv": [dict(zip(("m", "spread_dual", "spread_single_task_gp", "spearman"), r,
                           strict=True)) for r in qnipv],
    })  # fmt: skip
    print("| variance at a new point removed by | mean fraction (10 points) |\n|---|---|")
    for name, val in variance:
        print(f"| {name} | {100 * val:.1f} % |")
    print(
        "\n| qNIPV, m | spread DualSVGPModel | spread SingleTaskGP | Spearman |\n|---|---|---|---|"
    )
    for m, s0, s1, rho in qnipv:
        print(f"| {m} of 30 | {100 * s0:.1f} % | {100 * s1:.1f} % | {rho:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
