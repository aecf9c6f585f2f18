"""Function plus derivative observations in 1-D (Wu et al. 2022, Sec. 5.3, Fig. 2).

A smooth function on [0, 1] is drawn from a random one-hidden-layer network with sine
activations (random Fourier features of the SE kernel below); its derivative comes from
autograd. Observations: 100 noisy function values (noise sd 0.05) and 20 noisy derivatives
(noise sd 0.2) at uniform random locations. Fixed SE kernel (variance 0.5, lengthscale
0.1), as in the paper. Compared on 100 uniform test points (RMSE of the latent mean against
the true function, mean predictive standard deviation):

* ``exact``  -- the dense inter-domain GP;
* ``hipgp``  -- HIP-GP, full-rank variational family, grid of 64 inducing points on
  [-0.25, 1.25], PCG capped at 20 iterations (the paper's setting);
* ``svgp``   -- the same inter-domain SVGP with Cholesky whitening (same inducing grid);

each with and without the derivative observations. Results:
``experiments/wu2022/results/derivative.json`` and ``derivative.png``.

Usage::

    bo-ncgp hipgp-derivative [--quick] [--seeds 5]
"""

from __future__ import annotations

import math
from pathlib import Path

import gpytorch
import torch

from bo_ncgp.models.hipgp import HIPGP, Grid
from bo_ncgp.models.hipgp.interdomain import transformed_covariance
from experiments import harness

OUT = harness.results_dir(__file__)
PAPER = {
    "rmse": {"hipgp": 0.0192, "svgp": 0.0192, "exact": 0.0192},
    "sd": {"hipgp": 0.0198, "svgp": 0.0206, "exact": 0.0198},
}


def make_function(seed: int, hidden: int = 200, var: float = 0.5, ls: float = 0.1):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(hidden, generator=g) / ls
    b = 2 * math.pi * torch.rand(hidden, generator=g)
    a = torch.randn(hidden, generator=g) * math.sqrt(2 * var / hidden)

    def f(x: torch.Tensor) -> torch.Tensor:
        return (a * torch.sin(x[..., :1] * w + b)).sum(-1)

    return f


def kernel(var: float, ls: float):
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    k.outputscale = var
    k.base_kernel.lengthscale = ls
    for p in k.parameters():
        p.requires_grad_(False)
    return k


def exact_posterior(k, X, codes, y, noise, Xs):
    Knn = transformed_covariance(k, X, codes) + torch.diag(noise)
    zeros = torch.zeros(Xs.shape[0], dtype=torch.long)
    Ksn = transformed_covariance(k, Xs, zeros, X, codes)
    L = torch.linalg.cholesky(Knn)
    mean = Ksn @ torch.cholesky_solve(y[:, None], L)[:, 0]
    var = k(Xs, diag=True) - (Ksn * torch.cholesky_solve(Ksn.T, L).T).sum(-1)
    return mean, var


@torch.no_grad()
def run_seed(seed: int, cfg: dict) -> dict:
    f = make_function(seed)
    g = torch.Generator().manual_seed(1000 + seed)
    nf, nd = cfg["num_f"], cfg["num_d"]
    Xf = torch.rand(nf, 1, generator=g)
    Xd = torch.rand(nd, 1, generator=g)
    Xs = torch.rand(cfg["num_test"], 1, generator=g)
    with torch.enable_grad():
        xd = Xd.clone().requires_grad_(True)
        df = torch.autograd.grad(f(xd).sum(), xd)[0][:, 0]
    yf = f(Xf) + cfg["noise_f"] * torch.randn(nf, generator=g)
    yd = df + cfg["noise_d"] * torch.randn(nd, generator=g)
    truth = f(Xs)
    k = kernel(0.5, 0.1)
    out = {}
    for with_d in (True, False):
        X = torch.cat([Xf, Xd]) if with_d else Xf
        y = torch.cat([yf, yd]) if with_d else yf
        codes = (
            torch.cat([torch.zeros(nf), torch.ones(nd)]).long()
            if with_d
            else torch.zeros(nf).long()
        )
        noise = torch.cat(
            [torch.full((nf,), cfg["noise_f"] ** 2), torch.full((nd,), cfg["noise_d"] ** 2)]
        )
        noise = noise[: X.shape[0]]
        res = {}
        mean, var = exact_posterior(k, X, codes, y, noise, Xs)
        res["exact"] = (mean, var)
        for name, whitening, iters in (
            ("hipgp", "fft", cfg["pcg_max_iters"]),
            ("hipgp_converged", "fft", None),
            ("svgp", "cholesky", None),
        ):
            m = HIPGP(
                k,
                Grid([-0.25], [1.25], (cfg["M"],)),
                variational="full",
                whitening=whitening,
                pcg_max_iters=iters,
                pcg_tol=1e-10,
                jitter=1e-6,
            )
            m.natgrad_step(X, y, codes, obs_noise=noise)  # full batch, lr 1: the optimum
            res[name] = m.predict_f(Xs)
        tag = "with_derivatives" if with_d else "function_only"
        out[tag] = {
            name: {
                "rmse": float(((mu - truth) ** 2).mean().sqrt()),
                "mean_sd": float(v.clamp_min(0).sqrt().mean()),
            }
            for name, (mu, v) in res.items()
        }
        if with_d and seed == 0:
            out["_curves"] = {n: (mu.tolist(), v.tolist()) for n, (mu, v) in res.items()}
            out["_data"] = {
                "Xs": Xs[:, 0].tolist(),
                "truth": truth.tolist(),
                "Xf": Xf[:, 0].tolist(),
                "yf": yf.tolist(),
                "Xd": Xd[:, 0].tolist(),
            }
    return out


def plot(seed0: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = seed0["_data"]
    order = sorted(range(len(d["Xs"])), key=lambda i: d["Xs"][i])
    xs = [d["Xs"][i] for i in order]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(xs, [d["truth"][i] for i in order], "k-", lw=1, label="true f")
    for name, c in (("hipgp", "C0"), ("exact", "C1")):
        mu, v = seed0["_curves"][name]
        m = [mu[i] for i in order]
        s = [math.sqrt(max(v[i], 0)) for i in order]
        ax.plot(xs, m, color=c, label=f"{name} mean")
        ax.fill_between(
            xs,
            [a - b for a, b in zip(m, s, strict=True)],
            [a + b for a, b in zip(m, s, strict=True)],
            color=c,
            alpha=0.2,
        )
    ax.plot(d["Xf"], d["yf"], "k.", ms=3, label="function obs")
    for x in d["Xd"]:
        ax.axvline(x, color="r", lw=0.5, alpha=0.5)
    ax.legend(fontsize=7)
    ax.set_title("HIP-GP with 100 function + 20 derivative observations (red lines)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: dict, out: Path) -> dict:
    per_seed = [run_seed(s, cfg) for s in range(cfg["seeds"])]
    summary: dict = {}
    for tag in ("with_derivatives", "function_only"):
        summary[tag] = {}
        for name in per_seed[0][tag]:
            for metric in ("rmse", "mean_sd"):
                vals = torch.tensor([p[tag][name][metric] for p in per_seed])
                summary[tag].setdefault(name, {})[metric] = {
                    "mean": float(vals.mean()),
                    "std": float(vals.std()) if len(vals) > 1 else 0.0,
                }
    res = {
        "config": cfg,
        "summary": summary,
        "paper": PAPER,
        "per_seed": [{k: v for k, v in p.items() if not k.startswith("_")} for p in per_seed],
    }
    harness.write_json(out / cfg["file"], res)
    plot(per_seed[0], out / cfg["file"].replace(".json", ".png"))
    return res


DEFAULT = {
    "num_f": 100,
    "num_d": 20,
    "num_test": 100,
    "noise_f": 0.05,
    "noise_d": 0.2,
    "M": 64,
    "pcg_max_iters": 20,
    "seeds": 5,
    "file": "derivative.json",
}
QUICK = dict(DEFAULT, num_f=20, num_d=5, num_test=10, M=24, seeds=1, file="derivative_quick.json")


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, seeds=True)
    args = p.parse_args(argv)
    harness.setup(args.threads)
    res = run(harness.preset(DEFAULT, QUICK, args), args.out)
    for tag, d in res["summary"].items():
        for name, r in d.items():
            print(
                f"{tag:17s} {name:16s} RMSE {r['rmse']['mean']:.4f} +- {r['rmse']['std']:.4f}"
                f"  sd {r['mean_sd']['mean']:.4f}"
            )
    return harness.exit_code(r["rmse"]["mean"] for d in res["summary"].values() for r in d.values())


if __name__ == "__main__":
    raise SystemExit(main())
