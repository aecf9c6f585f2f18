"""Interstellar dust from line-integral observations (Wu et al. 2022, Sec. 5.5, Fig. 5).

Data: the 5,000-star subsample (``bo_ncgp.data.load_dust``), 80/20 random split (seed 0).
Each extinction ``e`` is modelled as the line integral of the dust density ``rho`` from the
observer (the origin) to the star, ``e = int_0^1 rho(t x) |x| dt + noise`` with a chosen
noise sd (``--noise-sd``, default 1e-3, about 7% of the mean extinction; the file's
``e_err`` is ~1e-8). ``rho = rho0 + GP`` with the constant ``rho0`` fitted by least squares
(``e ~ rho0 |x|``) and a zero-mean GP with an ARD Matern-3/2 kernel, as in the paper; the
line integrals use 16-point Gauss-Legendre quadrature (the paper: Monte Carlo). Kernel
hyperparameters are learned once (``--learn-hyper``; the defaults hold the values learned
by the run of 2026-11-22) on a coarse grid (Adam on the minibatch ELBO of the
Cholesky-whitened model, which is cheap there) and then fixed for every model, so that the
comparison isolates the inducing grid.

Models (block-independent variational family with 2x2x2 blocks, natural-gradient steps
on the full training set until the ELBO stalls):

* HIP-GP (FFT whitening, PCG capped at 100 iterations in training and 200 in evaluation;
  the paper: 200 / 500) on the largest grid that runs in the time budget here;
* SVGP, the same inter-domain SVGP with Cholesky whitening, on grids up to the largest
  that fits the time budget.

Reported on the 1,000 held-out stars: MAE, MSE and mean log-likelihood of the extinctions,
and the RMSE of the latent density at the stars against the file's ``density`` column after
a least-squares scale (the file's density and extinction units differ by a constant).
Results: ``experiments/wu2022/results/dust.json``, maps ``dust_maps.png``.

Usage::

    bo-ncgp hipgp-dust [--quick]
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.data import load_dust
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models.hipgp import HIPGP, Grid
from experiments import harness

OUT = harness.results_dir(__file__)
PAPER = {
    "hipgp": {"M": 62500, "mae": 0.0101, "mse": 0.0012, "loglike": 2.3517},
    "svgp": {"M": 16384, "mae": 0.0153, "mse": 0.0020, "loglike": 2.0690},
}
LO = [-0.26, -0.26, -0.052]
HI = [0.26, 0.26, 0.052]


def make_kernel() -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5, ard_num_dims=3))
    k.base_kernel.lengthscale = torch.tensor([[0.05, 0.05, 0.02]])
    k.outputscale = 0.01
    return k


def whiten_all(m: HIPGP, X: torch.Tensor, codes: torch.Tensor, bs: int) -> torch.Tensor:
    rows = []
    for s in range(0, X.shape[0], bs):
        with torch.no_grad():
            rows.append(m.whitened_cross_covariance(X[s : s + bs], codes[s : s + bs]))
    return torch.cat(rows)


@torch.no_grad()
def fit_and_eval(name, kernel, shape, whitening, data, cfg) -> dict:
    Xtr, ytr, Xte, yte, dte, rho0 = data
    lik = Gaussian(noise=cfg["noise_sd"] ** 2)
    m = HIPGP(
        kernel,
        Grid(LO, HI, shape),
        likelihood=lik,
        variational="block",
        block_shape=(2, 2, 2),
        whitening=whitening,
        pcg_max_iters=cfg["pcg_train"],
        pcg_tol=1e-6,
        jitter=1e-6,
        num_quad=cfg["num_quad"],
        embedding_factor=cfg["embedding_factor"],
    )
    ints = torch.full((Xtr.shape[0],), -1, dtype=torch.long)
    t0 = time.perf_counter()
    K = whiten_all(m, Xtr, ints, cfg["batch"])
    t_whiten = time.perf_counter() - t0
    elbos = []
    for _ in range(cfg["natgrad_iters"]):
        m.natgrad_step(Xtr, ytr, ints, K=K, lr=1.0)
        elbos.append(float(m._elbo_from(K, Xtr, ytr, ints, Xtr.shape[0], None)))
        if len(elbos) > 2 and abs(elbos[-1] - elbos[-2]) < 1e-4 * abs(elbos[-1]):
            break
    t_fit = time.perf_counter() - t0
    del K
    m.pcg_max_iters = cfg["pcg_eval"]
    mean, var = [], []
    for s in range(0, Xte.shape[0], cfg["batch"]):
        mu, v = m.predict_f(Xte[s : s + cfg["batch"]], op="integral")
        mean.append(mu)
        var.append(v)
    mean, var = torch.cat(mean), torch.cat(var)
    lat = torch.cat(
        [m.predict_f(Xte[s : s + cfg["batch"]])[0] for s in range(0, Xte.shape[0], cfg["batch"])]
    )
    lat = lat + rho0
    resid = yte - (mean + rho0 * Xte.norm(dim=-1))
    pv = var + lik.noise
    loglike = (-0.5 * (math.log(2 * math.pi) + pv.log() + resid**2 / pv)).mean()
    scale = float((lat * dte).sum() / (lat * lat).sum())
    out = {
        "model": name,
        "shape": list(shape),
        "M": math.prod(shape),
        "whitening": whitening,
        "mae": float(resid.abs().mean()),
        "mse": float((resid**2).mean()),
        "loglike": float(loglike),
        "density_rmse_scaled": float(((scale * lat - dte) ** 2).mean().sqrt()),
        "density_corr": float(torch.corrcoef(torch.stack([lat, dte]))[0, 1]),
        "density_scale": scale,
        "natgrad_iters": len(elbos),
        "elbo": elbos[-1],
        "seconds_whiten_train": t_whiten,
        "seconds_fit": t_fit,
        "pcg_iterations_last": m.last_pcg_iterations,
    }
    harness.log(f"{name} {shape}: {out}")
    return out, m


def run(cfg: dict, out: Path, root=None, verify: bool = True) -> dict:
    torch.manual_seed(0)
    d = load_dust(root=root, verify=verify)
    X, e, dens = d["X"], d["e"], d["density"]
    n = X.shape[0] if cfg["num_stars"] is None else cfg["num_stars"]
    perm = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))[:n]
    ntr = int(0.8 * n)
    tr, te = perm[:ntr], perm[ntr:]
    r = X[tr].norm(dim=-1)
    rho0 = float((e[tr] * r).sum() / (r * r).sum())  # e ~ rho0 |x|
    ytr = e[tr] - rho0 * r
    data = (X[tr], ytr, X[te], e[te], dens[te], rho0)
    # hyperparameters: Cholesky-whitened model on a coarse grid, Adam on the minibatch ELBO
    kernel = make_kernel()
    hyper = HIPGP(
        kernel,
        Grid(LO, HI, cfg["hyper_shape"]),
        likelihood=Gaussian(noise=cfg["noise_sd"] ** 2),
        variational="block",
        block_shape=(2, 2, 2),
        whitening="cholesky",
        jitter=1e-6,
        num_quad=cfg["num_quad"],
    )
    hyper.likelihood.raw_noise.requires_grad_(False)
    t0 = time.perf_counter()
    if cfg.get("fixed_hyper"):
        harness.log("using the hyperparameters learned by an earlier run of this script")
        kernel.base_kernel.lengthscale = torch.tensor([cfg["fixed_hyper"]["lengthscale"]])
        kernel.outputscale = cfg["fixed_hyper"]["outputscale"]
    else:
        harness.log("learning hyperparameters")
        hyper.fit(
            X[tr],
            ytr,
            op="integral",
            num_epochs=cfg["hyper_epochs"],
            batch_size=cfg["batch"],
            learn_hyperparameters=True,
            hyper_lr=0.05,
            progress=True,
        )
    hyp = {
        "lengthscale": kernel.base_kernel.lengthscale.detach().reshape(-1).tolist(),
        "outputscale": float(kernel.outputscale.detach()),
        "seconds": time.perf_counter() - t0,
        "rho0": rho0,
        "noise_sd": cfg["noise_sd"],
    }
    harness.log(f"hyperparameters {hyp}")
    for p in kernel.parameters():
        p.requires_grad_(False)
    rows, models = [], {}
    res = {"config": cfg, "hyperparameters": hyp, "rows": rows, "paper": PAPER}
    out.mkdir(parents=True, exist_ok=True)
    for shape in cfg["svgp_shapes"]:
        row, _ = fit_and_eval("svgp", kernel, shape, "cholesky", data, cfg)
        rows.append(row)
        harness.write_json(out / cfg["file"], res)
    for shape in cfg["hipgp_shapes"]:
        row, m = fit_and_eval("hipgp", kernel, shape, "fft", data, cfg)
        row["clamped_fraction"] = m.whitener().embedding.clamped_fraction
        rows.append(row)
        models["hipgp"] = m
        harness.write_json(out / cfg["file"], res)
    if "hipgp" in models:
        plot(models["hipgp"], data, cfg, out / cfg["file"].replace(".json", "_maps.png"))
    return res


@torch.no_grad()
def plot(m: HIPGP, data, cfg, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, _, Xte, yte, _, rho0 = data
    s = cfg["map_side"]
    ax_ = torch.linspace(-0.25, 0.25, s)
    gx, gy = torch.meshgrid(ax_, ax_, indexing="ij")
    P = torch.stack([gx.reshape(-1), gy.reshape(-1), torch.zeros(s * s)], -1)
    lat = torch.cat([m.predict_f(P[i : i + 500])[0] for i in range(0, len(P), 500)]) + rho0
    ext = torch.cat([m.predict_f(P[i : i + 500], op="integral")[0] for i in range(0, len(P), 500)])
    ext = ext + rho0 * P.norm(dim=-1)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    ext_ext = [-0.25, 0.25, -0.25, 0.25]
    im = axes[0].imshow(ext.reshape(s, s).T.numpy(), origin="lower", extent=ext_ext, cmap="magma")
    axes[0].set_title("posterior mean extinction, plane z = 0")
    fig.colorbar(im, ax=axes[0])
    im = axes[1].imshow(lat.reshape(s, s).T.numpy(), origin="lower", extent=ext_ext, cmap="viridis")
    axes[1].set_title("posterior mean dust density (e units / kpc), z = 0")
    fig.colorbar(im, ax=axes[1])
    sel = Xte[:, 2].abs() < 0.01
    sc = axes[2].scatter(
        Xte[sel, 0].numpy(), Xte[sel, 1].numpy(), c=yte[sel].numpy(), s=8, cmap="magma"
    )
    axes[2].set_title("held-out extinctions, |z| < 0.01 kpc")
    fig.colorbar(sc, ax=axes[2])
    for a in axes:
        a.set_xlabel("x (kpc)")
        a.set_ylabel("y (kpc)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


DEFAULT = {
    "num_stars": None,
    "noise_sd": 1e-3,
    "hyper_shape": (12, 12, 4),
    "hyper_epochs": 10,
    "hipgp_shapes": [(12, 12, 4)],
    "svgp_shapes": [(12, 12, 4), (24, 24, 6), (32, 32, 8)],
    "batch": 500,
    "pcg_train": 100,
    "pcg_eval": 200,
    "num_quad": 16,
    # the learned Matern-3/2 lengthscales are long against the thin z-extent: a deeper
    # embedding along z keeps the clamped spectral mass small (reported in the results)
    "embedding_factor": (2, 2, 4),
    # learned by this script's hyperparameter step (10 epochs, Cholesky-whitened 12x12x4
    # grid, 817 s) in the run of 2026-11-22; reused to fit the time budget. Pass
    # --learn-hyper to learn them again.
    "fixed_hyper": {"lengthscale": [0.1330, 0.1151, 0.0789], "outputscale": 0.002628},
    "natgrad_iters": 30,
    "map_side": 20,
    "file": "dust.json",
}
QUICK = dict(
    DEFAULT,
    num_stars=200,
    hyper_shape=(6, 6, 2),
    hyper_epochs=1,
    fixed_hyper=None,
    hipgp_shapes=[(6, 6, 2)],
    embedding_factor=2,
    svgp_shapes=[(6, 6, 2)],
    natgrad_iters=3,
    batch=100,
    map_side=6,
    file="dust_quick.json",
)


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, root=True)
    p.add_argument(
        "--noise-sd",
        type=float,
        default=None,
        help="observation noise standard deviation (default: the preset's)",
    )
    p.add_argument("--learn-hyper", action="store_true", help="learn the hyperparameters again")
    p.add_argument("--only", choices=["hipgp", "svgp"], default=None, help="run one model family")
    p.add_argument("--file", default=None, help="results file name (default dust.json)")
    args = p.parse_args(argv)
    harness.setup(args.threads)
    cfg = harness.preset(DEFAULT, QUICK, args, noise_sd=args.noise_sd, file=args.file)
    if args.learn_hyper:
        cfg["fixed_hyper"] = None
    if args.only == "hipgp":
        cfg["svgp_shapes"] = []
    elif args.only == "svgp":
        cfg["hipgp_shapes"] = []
    rows = run(cfg, args.out, root=args.root, verify=args.verify)["rows"]
    cells = [[r["model"], r["M"], f"{r['mae']:.4f}", f"{r['mse']:.2e}", f"{r['loglike']:.3f}",
              f"{r['density_rmse_scaled']:.4f}"] for r in rows]  # fmt: skip
    print(
        harness.markdown_table(["model", "M", "MAE", "MSE", "test log-lik", "density RMSE"], cells)
    )
    return harness.exit_code(r["mse"] for r in rows)


if __name__ == "__main__":
    raise SystemExit(main())
