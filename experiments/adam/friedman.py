"""Section 7 of Adam, Durrande & John: ANOVA decomposition of a Friedman-like function.

f(x) = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 on [0, 1]^6 (x6 inert), N = 5000
uniform inputs, unit Gaussian noise. Kernel (Eq. 8): sigma_0 + sum_{i=1}^6 s_i(x_i) +
s_7(x1) s_8(x2) with zero-mean ANOVA kernels s_i, i.e. C = 8 additive components: a constant,
six 1-D terms with 16 regularly spaced inducing points each, and the x1-x2 interaction with a
4 x 4 inducing grid. Variational parameters and hyperparameters (lengthscales, variances,
noise) are fitted by maximising the ELBO (Adam), for the three posterior families.

Measured: RMSE of every recovered component against its analytic ANOVA term, 95% coverage of
the component credible bands, test NLPD and latent RMSE, and Fig.-1-like plots.

Analytic ANOVA terms (uniform measure on [0, 1]^6), with h(t) = 10 (1 - cos(pi t)) / (pi t)
(the x2-average of 10 sin(pi t x2)) and c = 10 Cin(pi) / pi its mean:
    f_0 = c + 5/3 + 5 + 2.5,  f_1(t) = f_2(t) = h(t) - c,  f_3(t) = 20 (t - 1/2)^2 - 5/3,
    f_4(t) = 10 t - 5,  f_5(t) = 5 t - 2.5,  f_6 = 0,
    f_12(s, t) = 10 sin(pi s t) - h(s) - h(t) + c.

Usage:
    bo-ncgp gam-friedman            # the paper's setting (a few minutes)
    bo-ncgp gam-friedman --quick    # tiny smoke configuration
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
from gpytorch.kernels import ConstantKernel, RBFKernel, ScaleKernel
from scipy.special import sici

from bo_ncgp.cli.common import HelpFormatter
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models.gam import AdditiveComponent, SparseGAM
from bo_ncgp.models.gam.anova_kernel import ANOVAKernel
from experiments import harness

OUT = harness.results_dir(__file__)

FAMILIES = ("mean_field", "coupled_precision", "full")
NAMES = ["const", "x1", "x2", "x3", "x4", "x5", "x6", "x1:x2"]
EULER_GAMMA = 0.5772156649015329


# ----------------------------------------------------------------- test function
def friedman(X: torch.Tensor) -> torch.Tensor:
    x = X
    return (
        10 * torch.sin(math.pi * x[..., 0] * x[..., 1])
        + 20 * (x[..., 2] - 0.5) ** 2
        + 10 * x[..., 3]
        + 5 * x[..., 4]
    )


def _h(t: torch.Tensor) -> torch.Tensor:
    """``E_{x2}[10 sin(pi t x2)] = 10 (1 - cos(pi t)) / (pi t)`` (0 at t = 0)."""
    pt = math.pi * t
    safe = torch.where(pt.abs() < 1e-8, torch.ones_like(pt), pt)
    return torch.where(pt.abs() < 1e-8, 5 * pt, 10 * (1 - torch.cos(pt)) / safe)


def _c() -> float:
    """Mean of 10 sin(pi x1 x2) on [0,1]^2: 10 Cin(pi) / pi, Cin(z) = gamma + ln z - Ci(z)."""
    return 10.0 * (EULER_GAMMA + math.log(math.pi) - float(sici(math.pi)[1])) / math.pi


def analytic_components(X: torch.Tensor) -> torch.Tensor:
    """The ANOVA terms ``(f_0, f_1, ..., f_6, f_12)`` at ``X (n, 6)``, shape ``(n, 8)``."""
    c = _c()
    x1, x2, x3, x4, x5 = (X[..., i] for i in range(5))
    return torch.stack(
        [
            torch.full_like(x1, c + 5.0 / 3.0 + 5.0 + 2.5),
            _h(x1) - c,
            _h(x2) - c,
            20 * (x3 - 0.5) ** 2 - 5.0 / 3.0,
            10 * x4 - 5,
            5 * x5 - 2.5,
            torch.zeros_like(x1),
            10 * torch.sin(math.pi * x1 * x2) - _h(x1) - _h(x2) + c,
        ],
        dim=-1,
    )


# ------------------------------------------------------------------------ model
def build_model(
    posterior: str,
    y: torch.Tensor,
    m1d: int = 16,
    m2d: int = 4,
    rank: int | None = None,
    kernel: str = "anova",
) -> SparseGAM:
    """The section-7 model: constant + six 1-D ANOVA terms + the x1-x2 interaction.

    ``kernel="se"`` (ablation, not in the paper) uses plain SE kernels instead of the zero-mean
    ANOVA kernels: the components are then confounded with each other and the constant, so
    only the posterior of the sum is identifiable.
    """
    base = {"anova": ANOVAKernel, "se": RBFKernel}[kernel]
    z1 = torch.linspace(0, 1, m1d)
    const = ConstantKernel()
    const.constant = torch.tensor(float(y.mean()) ** 2)  # data-driven start for sigma_0
    comps = [AdditiveComponent(const, [0], torch.tensor([[0.5]]), name="const")]
    for i in range(6):
        k = ScaleKernel(base())
        k.base_kernel.lengthscale = 0.3
        k.outputscale = 1.0
        comps.append(AdditiveComponent(k, [i], z1, name=f"x{i + 1}"))
    k12 = ScaleKernel(base(active_dims=[0]) * base(active_dims=[1]))
    for k in k12.base_kernel.kernels:
        k.lengthscale = 0.3
    k12.outputscale = 1.0
    g = torch.linspace(0, 1, m2d)
    comps.append(AdditiveComponent(k12, [0, 1], torch.cartesian_prod(g, g), name="x1:x2"))
    kwargs = {"rank": rank} if rank is not None else {}
    return SparseGAM(comps, Gaussian(noise=0.5), posterior, **kwargs)


def component_grid(n1: int, n2: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Evaluation inputs: for each 1-D term a line in its coordinate, and a 2-D grid."""
    t = torch.linspace(0, 1, n1)
    lines = []
    for i in range(6):
        X = torch.full((n1, 6), 0.5)
        X[:, i] = t
        lines.append(X)
    g = torch.linspace(0, 1, n2)
    G = torch.cartesian_prod(g, g)
    X2 = torch.full((G.shape[0], 6), 0.5)
    X2[:, :2] = G
    return lines, X2


@torch.no_grad()
def evaluate(model: SparseGAM, X_test, y_test, f_test, n1: int, n2: int) -> dict:
    lines, X2 = component_grid(n1, n2)
    out = {"components": {}}
    cover_all, rmse_all = [], []
    evals = [(c + 1, lines[c]) for c in range(6)] + [(7, X2)]
    for c, X in evals:
        mean, var = model.predict_components(X)
        truth = analytic_components(X)[:, c]
        err = mean[:, c] - truth
        sd = var[:, c].sqrt()
        rmse = float(err.square().mean().sqrt())
        cover = float((err.abs() <= 1.959964 * sd).double().mean())
        out["components"][NAMES[c]] = {
            "rmse": rmse,
            "coverage95": cover,
            "mean_sd": float(sd.mean()),
        }
        cover_all.append(cover)
        rmse_all.append(rmse)
    m0, v0 = model.predict_components(X_test[:1])
    out["components"]["const"] = {
        "estimate": float(m0[0, 0]),
        "truth": float(analytic_components(X_test[:1])[0, 0]),
        "sd": float(v0[0, 0].sqrt()),
    }
    mean, var = model.predict_f(X_test)
    out["test_nlpd"] = float(-model.log_predictive(X_test, y_test).mean())
    out["test_rmse_latent"] = float((mean - f_test).square().mean().sqrt())
    out["test_coverage95_latent"] = float(
        ((mean - f_test).abs() <= 1.959964 * var.sqrt()).double().mean()
    )
    # posterior coupling of the components at the same input (zero for the mean field)
    _, cov = model.predict_components(X_test, joint=True)
    sd = cov.diagonal(dim1=-2, dim2=-1).sqrt()
    corr = (cov / (sd.unsqueeze(-1) * sd.unsqueeze(-2)))[:, 1:, 1:]  # drop the constant
    off = corr - torch.diag_embed(corr.diagonal(dim1=-2, dim2=-1))
    out["max_abs_component_correlation"] = float(off.abs().max())
    out["mean_component_rmse"] = float(np.mean(rmse_all))
    out["mean_component_coverage95"] = float(np.mean(cover_all))
    k = model.components
    out["hyperparameters"] = {
        "noise": float(model.likelihood.noise),
        "sigma0": float(k[0].kernel.constant),
        "lengthscales": [float(k[i].kernel.base_kernel.lengthscale) for i in range(1, 7)]
        + [float(kk.lengthscale) for kk in k[7].kernel.base_kernel.kernels],
        "outputscales": [float(k[i].kernel.outputscale) for i in range(1, 8)],
    }
    return out


# ------------------------------------------------------------------------ plots
@torch.no_grad()
def plot(model: SparseGAM, X, y, path: Path, title: str, n1: int = 101, n2: int = 41) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines, X2 = component_grid(n1, n2)
    t = lines[0][:, 0]
    idx = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))[:400]
    Xs, ys = X[idx], y[idx]
    cm_s, _ = model.predict_components(Xs)
    fig = plt.figure(figsize=(16, 7))
    for i in range(6):
        ax = fig.add_subplot(2, 5, [1, 2, 3, 6, 7, 8][i])
        mean, var = model.predict_components(lines[i])
        m, sd = mean[:, i + 1], var[:, i + 1].sqrt()
        truth = analytic_components(lines[i])[:, i + 1]
        partial = ys - (cm_s.sum(-1) - cm_s[:, i + 1])  # projected observations
        ax.plot(Xs[:, i], partial, ".", color="k", ms=2, alpha=0.4)
        ax.fill_between(t, m - 2 * sd, m + 2 * sd, color="tab:blue", alpha=0.3)
        ax.plot(t, m, color="tab:blue", label="estimated")
        ax.plot(t, truth, color="tab:red", ls="--", label="analytic")
        ax.set_title(f"f_{i + 1}(x{i + 1})")
        ax.set_ylim(-8, 8)
        if i == 0:
            ax.legend(fontsize=7)
    g = torch.linspace(0, 1, n2)
    mean, var = model.predict_components(X2)
    est = mean[:, 7].reshape(n2, n2)
    tru = analytic_components(X2)[:, 7].reshape(n2, n2)
    levels = np.linspace(float(tru.min()) - 0.5, float(tru.max()) + 0.5, 15)
    panels = [
        (4, est, "f_12(x1, x2) estimated", "RdBu_r", levels),
        (9, tru, "f_12(x1, x2) analytic", "RdBu_r", levels),
        (5, var[:, 7].sqrt().reshape(n2, n2), "f_12 posterior sd", "viridis", 12),
        (10, est - tru, "f_12 error (estimated - analytic)", "RdBu_r", 12),
    ]
    for pos, Z, name, cmap, lev in panels:
        ax = fig.add_subplot(2, 5, pos)
        cs = ax.contourf(g, g, Z.T, levels=lev, cmap=cmap)
        fig.colorbar(cs, ax=ax, shrink=0.85)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("x1", fontsize=8)
        ax.set_ylabel("x2", fontsize=8)
    # fixed margins: tight_layout measures every tick label and costs seconds per figure
    fig.subplots_adjust(left=0.04, right=0.97, bottom=0.07, top=0.9, wspace=0.35, hspace=0.35)
    fig.suptitle(title)
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny configuration (CI smoke test)")
    p.add_argument("--num-train", type=int, default=5000, help="training points")
    p.add_argument("--num-test", type=int, default=2000, help="test points")
    p.add_argument("--steps", type=int, default=3000, help="Adam steps of each model")
    p.add_argument("--lr", type=float, default=0.02, help="Adam learning rate")
    p.add_argument(
        "--refresh-every",
        type=int,
        default=None,
        help="natural-gradient refresh of q(U) every this many steps (SparseGAM.fit)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the models")
    p.add_argument(
        "--families",
        nargs="*",
        default=list(FAMILIES),
        choices=FAMILIES,
        help="posterior families to fit (may be empty when --extra-ranks is given)",
    )
    p.add_argument(
        "--extra-ranks",
        type=int,
        nargs="*",
        default=[],
        help="also fit coupled_precision with these ranks R of B (paper: R = M = 16)",
    )
    p.add_argument(
        "--kernel",
        choices=("anova", "se"),
        default="anova",
        help="anova: the paper's Eq. 8 kernels; se: plain SE kernels (ablation)",
    )
    p.add_argument("--tag", default="", help="suffix of the output file names")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, default=OUT, help="output folder")
    p.add_argument(
        "--no-plots", action="store_true", help="write the JSON results only, no figures"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.num_train, args.num_test, args.steps = 100, 50, 5
        args.extra_ranks = args.extra_ranks[:1]
    n1, n2 = (21, 9) if args.quick else (201, 41)

    harness.setup(args.threads)
    torch.manual_seed(args.seed)
    X = torch.rand(args.num_train, 6)
    y = friedman(X) + torch.randn(args.num_train)
    X_test = torch.rand(args.num_test, 6)
    f_test = friedman(X_test)
    y_test = f_test + torch.randn(args.num_test)

    args.out.mkdir(parents=True, exist_ok=True)
    if not args.families and not args.extra_ranks:
        p.error("nothing to fit: give --families and/or --extra-ranks")
    tag = ("friedman_quick" if args.quick else "friedman") + ("_se" if args.kernel == "se" else "")
    tag += args.tag
    results = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "date": time.strftime("%Y-%m-%d"),
        "families": {},
    }
    variants = [(fam, fam, None) for fam in args.families]
    variants += [(f"coupled_precision_R{r}", "coupled_precision", r) for r in args.extra_ranks]
    for fam, posterior, rank in variants:
        torch.manual_seed(args.seed + 1)
        model = build_model(posterior, y, rank=rank, kernel=args.kernel)
        t0 = time.perf_counter()
        hist = model.fit(
            X,
            y,
            num_steps=args.steps,
            lr=args.lr,
            progress=not args.quick,
            refresh_every=args.refresh_every,
        ).history
        fit_s = time.perf_counter() - t0
        with torch.no_grad():
            elbo = float(model.elbo(X, y)) / args.num_train
        res = evaluate(model, X_test, y_test, f_test, n1, n2)
        res.update(
            {
                "kernel": args.kernel,
                "components_identifiable": args.kernel == "anova",
                "posterior": posterior,
                "rank": getattr(model.variational, "rank", None),
                "num_variational_parameters": sum(
                    p.numel() for p in model.variational.parameters()
                ),
                "elbo_per_datum": elbo,
                "fit_seconds": fit_s,
                "elbo_trace": hist[::50],
            }
        )
        results["families"][fam] = res
        print(
            f"{fam:18s} elbo/N {elbo:.4f}  nlpd {res['test_nlpd']:.4f}  "
            f"rmse {res['test_rmse_latent']:.4f}  comp-rmse {res['mean_component_rmse']:.4f}  "
            f"coverage {res['mean_component_coverage95']:.3f}  ({fit_s:.0f} s)",
            flush=True,
        )
        # --quick draws one figure only: matplotlib layout costs more than the tiny fits
        if not args.no_plots and not (args.quick and fam != variants[0][0]):
            title = f"SparseGAM ({fam}), N={len(y)}"
            plot(model, X, y, args.out / f"{tag}_{fam}.png", title, n1=min(n1, 101), n2=n2)
    harness.write_json(args.out / f"{tag}.json", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
