# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tutorial 5 — HIP-GP with derivative and line-integral observations
#
# `HIPGP` (Wu et al. 2022) is a sparse variational GP whose inducing points sit on a regular
# grid, which makes the whitening of the inducing values an FFT and lets it scale to very
# many inducing points. Its observations need not be values of the latent function `rho`:
# each observation carries a *linear operator* (`bo_ncgp.models.hipgp.interdomain`):
#
# * `"value"` (code 0): `rho(x)`;
# * `("derivative", d)` (code `d + 1`): `d rho / d x_d (x)`;
# * `"integral"` (code -1): the line integral from the origin to `x`,
#   `int_0^1 rho(t x) |x| dt` — e.g. the dust extinction of a star at `x` seen from the origin.
#
# Part 1 (1-D) adds derivative observations where there are no function values; part 2 (2-D)
# recovers a density map from line integrals only. Kernel hyperparameters are fixed here
# (`HIPGP.fit(..., learn_hyperparameters=True)` learns them by Adam on the ELBO).
# Runs in well under a minute; set `BO_NCGP_TUTORIAL_QUICK=1` for an even smaller budget.

# %%
import math
import os
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # scripts: no display; notebooks: inline figures
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models import HIPGP
from bo_ncgp.models.hipgp import Grid
from bo_ncgp.models.hipgp.interdomain import INTEGRAL, VALUE, derivative

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
QUICK = os.environ.get("BO_NCGP_TUTORIAL_QUICK") == "1"
GRID_1D = 64
GRID_2D, N_STARS, MAX_STEPS = (16, 150, 50) if QUICK else (20, 300, 100)
torch.manual_seed(0)
# figures go to output/ next to this file (the working folder when run as a notebook)
OUT = (Path(__file__).parent if "__file__" in globals() else Path.cwd()) / "output"
OUT.mkdir(exist_ok=True)


def se_kernel(dim, outputscale, lengthscale):
    k = ScaleKernel(RBFKernel())
    k.outputscale, k.base_kernel.lengthscale = outputscale, lengthscale
    for p in k.parameters():
        p.requires_grad_(False)
    return k


# %% [markdown]
# ## Part 1 — function values plus derivatives (1-D)
# The function is observed (noise sd 0.05) only on the left half of [0, 1]; its derivative
# (noise sd 0.2) on the whole interval. Observations of different kinds go into one `fit` with
# a tensor of operator codes, and per-observation noise variances via `obs_noise`.


# %%
def f(x):
    return torch.sin(6 * x) + 0.5 * torch.cos(14 * x)


def df(x):
    return 6 * torch.cos(6 * x) - 7 * torch.sin(14 * x)


Xf = torch.rand(15, 1) * 0.5
Xd = torch.rand(20, 1)
yf = f(Xf[:, 0]) + 0.05 * torch.randn(15)
yd = df(Xd[:, 0]) + 0.2 * torch.randn(20)
Xs = torch.linspace(0, 1, 200).unsqueeze(-1)


def fit_1d(X, y, codes, noise):
    # "full" variational family (fine for 64 grid points); with a Gaussian likelihood one
    # full-batch natural-gradient step of size 1 is the optimum
    model = HIPGP(
        se_kernel(1, 0.8, 0.12),
        Grid([-0.25], [1.25], (GRID_1D,)),
        variational="full",
        pcg_tol=1e-10,
    )
    model.fit(X, y, op=codes, obs_noise=noise, num_epochs=1, natgrad_lr=1.0)
    return model


values_only = fit_1d(Xf, yf, VALUE, torch.full((15,), 0.05**2))
codes = torch.tensor([VALUE] * 15 + [derivative(0)] * 20)
noise = torch.cat([torch.full((15,), 0.05**2), torch.full((20,), 0.2**2)])
with_derivs = fit_1d(torch.cat([Xf, Xd]), torch.cat([yf, yd]), codes, noise)

with torch.no_grad():
    curves = {
        name: m.predict_f(Xs)
        for name, m in [("values only", values_only), ("values + derivatives", with_derivs)]
    }
    d_mean, d_var = with_derivs.predict_f(Xs, op=("derivative", 0))
truth = f(Xs[:, 0])
rmse = {name: float((mu - truth).square().mean().sqrt()) for name, (mu, _) in curves.items()}
for name, (_, var) in curves.items():
    print(
        f"{name:22s}: RMSE of the latent mean {rmse[name]:.4f}, mean sd "
        f"{var.clamp_min(0).sqrt().mean():.4f}"
    )
d_rmse = float((d_mean - df(Xs[:, 0])).square().mean().sqrt())
print(f"posterior of the derivative: RMSE {d_rmse:.4f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
xs = Xs[:, 0].numpy()
for ax, (name, (mu, var)) in zip(axes, curves.items(), strict=True):
    sd = var.clamp_min(0).sqrt().numpy()
    ax.fill_between(xs, mu.numpy() - 2 * sd, mu.numpy() + 2 * sd, alpha=0.25)
    ax.plot(xs, mu.numpy(), label="posterior mean ± 2 sd")
    ax.plot(xs, truth.numpy(), "k--", lw=1, label="truth")
    ax.plot(Xf[:, 0].numpy(), yf.numpy(), "ko", ms=4, label="function values")
    ax.set_title(f"{name} (RMSE {rmse[name]:.3f})")
    ax.set_xlabel("x")
    ax.set_ylim(-3, 3)
axes[1].plot(
    Xd[:, 0].numpy(), np.full(20, -2.8), "|", color="C3", ms=12, label="derivative observed"
)
axes[0].legend(loc="upper right", fontsize=8)
axes[1].legend(loc="upper right", fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "05_hipgp_derivatives.png", dpi=100)

# %% [markdown]
# ## Part 2 — a density from line integrals (2-D)
# A "dust density" `rho` on the plane (a few Gaussian blobs); an observer at the origin sees
# `N_STARS` stars and measures, for each, the extinction `e(x) = int_0^1 rho(t x) |x| dt`
# (noise sd 0.02). We never observe `rho` itself. HIP-GP's grid of inducing points covers
# `[-1.2, 1.2]^2`; the RBF kernel has closed-form line-integral covariances (error
# functions). The block variational family (2 x 2 blocks of the whitened grid) is fitted by
# natural-gradient steps (a block-Jacobi iteration; `MAX_STEPS` of them at most, or until its
# mean stops changing).

# %%
centres = torch.tensor([[0.5, 0.4], [-0.4, 0.6], [-0.3, -0.5], [0.6, -0.5]])
heights = torch.tensor([1.0, 0.7, 1.2, 0.5])


def rho(x):
    d2 = (x.unsqueeze(-2) - centres).square().sum(-1)
    return (heights * torch.exp(-d2 / (2 * 0.2**2))).sum(-1)


def line_integral(x, nodes=200):
    t, w = np.polynomial.legendre.leggauss(nodes)
    t, w = torch.as_tensor((t + 1) / 2), torch.as_tensor(w / 2)  # Gauss-Legendre on [0, 1]
    return (rho(t[:, None, None] * x) * w[:, None]).sum(0) * x.norm(dim=-1)


radius = torch.rand(N_STARS).sqrt()  # stars uniform in the unit disc
angle = 2 * math.pi * torch.rand(N_STARS)
stars = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], -1)
ext = line_integral(stars) + 0.02 * torch.randn(N_STARS)
n_train = int(0.8 * N_STARS)
Xtr, ytr, Xte, yte = stars[:n_train], ext[:n_train], stars[n_train:], ext[n_train:]

hip = HIPGP(
    se_kernel(2, 0.5, 0.25),
    Grid([-1.2, -1.2], [1.2, 1.2], (GRID_2D, GRID_2D)),
    likelihood=Gaussian(noise=0.02**2),
    variational="block",
    pcg_tol=1e-8,
)
codes = torch.full((n_train,), INTEGRAL)
with torch.no_grad():
    K = hip.whitened_cross_covariance(Xtr, codes)  # computed once, reused by every step
    step = 0
    while step < MAX_STEPS:
        before = hip.q.mean.clone()
        hip.natgrad_step(Xtr, ytr, codes, K=K, lr=1.0)
        step += 1
        if (hip.q.mean - before).norm() < 1e-4 * hip.q.mean.norm():
            break
    elbo = float(hip.elbo(Xtr, ytr, op="integral"))
    pred, pred_var = hip.predict_f(Xte, op="integral")
    density = hip.latent_grid_mean()  # E[rho] on the inducing grid
grid_pts = hip.inducing_points()
true_density = rho(grid_pts).reshape(GRID_2D, GRID_2D)
inside = grid_pts.norm(dim=-1).reshape(GRID_2D, GRID_2D) <= 1.0  # where stars are
rmse_int = float((pred - yte).square().mean().sqrt())
corr = float(torch.corrcoef(torch.stack([density[inside], true_density[inside]]))[0, 1])
print(
    f"{step} natural-gradient steps, ELBO {elbo:.1f}; held-out extinctions: RMSE {rmse_int:.4f} "
    f"(sd of the targets {yte.std():.4f}); correlation of the recovered density with "
    f"the truth inside the unit disc {corr:.3f}"
)

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
extent = [-1.2, 1.2, -1.2, 1.2]
vmax = float(true_density.max())
for ax, (title, img) in zip(
    axes[:2],
    [("true density", true_density), ("HIP-GP posterior mean density", density)],
    strict=True,
):
    im = ax.imshow(img.T.numpy(), origin="lower", extent=extent, cmap="viridis", vmin=0, vmax=vmax)
    ax.scatter(Xtr[:, 0], Xtr[:, 1], s=3, c="w", alpha=0.6)
    ax.plot([0], [0], "r*", ms=10)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, shrink=0.8)
ax = axes[2]
ax.errorbar(
    yte.numpy(),
    pred.numpy(),
    yerr=2 * pred_var.clamp_min(0).sqrt().numpy(),
    fmt="o",
    ms=3,
    alpha=0.7,
)
lim = [0, float(torch.cat([yte, pred]).max()) * 1.05]
ax.plot(lim, lim, "k--", lw=1)
ax.set_xlabel("observed extinction (held-out stars)")
ax.set_ylabel("predicted ± 2 sd")
ax.set_title(f"held-out line integrals (RMSE {rmse_int:.3f})")
fig.tight_layout()
fig.savefig(OUT / "05_hipgp_line_integrals.png", dpi=100)
