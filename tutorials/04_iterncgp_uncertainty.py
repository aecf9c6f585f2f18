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
# # Tutorial 4 — computation-aware classification with IterNCGP
#
# `IterNCGP` (Tatzel et al., "Accelerating Non-Conjugate Gaussian Processes By Trading Off
# Computation For Uncertainty") computes the Laplace approximation of a GP classifier by
# Newton's method, and solves each Newton step's linear system only *approximately*, with a
# few iterations of IterGP. Its posterior knows that: the predictive variance is
#
# $$\text{combined} = \text{mathematical (the exact Laplace posterior)} +
#   \text{computational (from stopping the solver early)},$$
#
# so a model fitted with little computation is honestly *more* uncertain, and the extra
# uncertainty shrinks as the solver runs more iterations. Here we watch it shrink on a 1-D
# binary classification problem, against the exact Laplace approximation.
#
# Runs in well under a minute; set `BO_NCGP_TUTORIAL_QUICK=1` for an even smaller budget.

# %%
import os
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # scripts: no display; notebooks: inline figures
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from gpytorch.kernels import MaternKernel, ScaleKernel

from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.models import IterNCGP

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
QUICK = os.environ.get("BO_NCGP_TUTORIAL_QUICK") == "1"
N = 150 if QUICK else 300
BUDGETS = [1, 2, 4, 8, 16] if QUICK else [1, 2, 4, 8, 16, 32]  # solver iterations per Newton step
# figures go to output/ next to this file (the working folder when run as a notebook)
OUT = (Path(__file__).parent if "__file__" in globals() else Path.cwd()) / "output"
OUT.mkdir(exist_ok=True)

torch.manual_seed(0)
X = torch.cat([torch.rand(N // 2) * 0.45, 0.55 + torch.rand(N - N // 2) * 0.45]).unsqueeze(-1)
f_true = 3.0 * torch.sin(20 * X[:, 0]) + 1.0
y = torch.bernoulli(torch.sigmoid(f_true))  # labels in {0, 1}
Xs = torch.linspace(-0.1, 1.1, 200).unsqueeze(-1)  # note the gap in the data at 0.45 .. 0.55

kernel = ScaleKernel(MaternKernel(nu=1.5))
kernel.base_kernel.lengthscale = 0.05
kernel.outputscale = 4.0
for p in kernel.parameters():  # IterNCGP keeps the hyperparameters fixed during the fit
    p.requires_grad_(False)

# %% [markdown]
# ## The exact Laplace approximation (mathematical uncertainty only)
# With unit-vector actions (one data point per iteration) and `N` iterations per Newton step
# the solver is exact, so IterNCGP *is* the Laplace approximation (Theorem A.2 of the paper;
# tested in `tests/models/iterncgp/test_laplace_limit.py`).

# %%
exact = IterNCGP.exact_laplace(kernel, Bernoulli(), N, max_newton_steps=30, tol=1e-8).fit(X, y)
with torch.no_grad():
    mean_exact, var_exact = exact.predict_f(Xs)
print(
    f"exact Laplace: {exact.num_solver_iters} solver iterations, {len(exact.history)} Newton steps"
)

# %% [markdown]
# ## IterNCGP with a small budget of CG iterations per Newton step
# `policy="cg"` uses the residuals as actions (like conjugate gradients);
# `max_solver_iters_per_step` caps the iterations of each Newton step. Actions are recycled
# across Newton steps, so the total number of iterations keeps growing. With only one or two
# iterations per step a full Newton step can overshoot; `line_search=True` damps such steps
# (an extension of the paper's Algorithm 1; steps near the mode are full steps).

# %%
fits = {}
for k in BUDGETS:
    model = IterNCGP(
        kernel,
        Bernoulli(),
        policy="cg",
        max_solver_iters_per_step=k,
        max_newton_steps=8,
        backend="dense",
        line_search=True,
    ).fit(X, y)
    with torch.no_grad():
        mean, var = model.predict_f(Xs)
    fits[k] = (model.num_solver_iters, mean, var)
    excess = (var - var_exact).mean()
    print(
        f"{k:3d} iterations per step ({model.num_solver_iters:4d} in total): mean latent "
        f"variance {var.mean():.4f}, of which computational ~{excess:.4f}"
    )

mean_var = [float(fits[k][2].mean()) for k in BUDGETS]

# %% [markdown]
# ## Inside one solver run
# The `callback` of `fit` sees the model after every solver iteration. Within one Newton step
# (fixed likelihood curvature) every iteration adds a search direction to the solver's
# belief, so the predictive variance can only go down, point by point.

# %%
trace = []


def record(step):
    if step.info["newton_step"] == 0:  # the first Newton step, from the prior
        with torch.no_grad():
            trace.append(step.model.predict_f(Xs)[1].clone())


IterNCGP(
    kernel,
    Bernoulli(),
    policy="cg",
    max_solver_iters_per_step=BUDGETS[-1],
    max_newton_steps=1,
    backend="dense",
).fit(X, y, callback=record)
trace = torch.stack(trace)  # (iterations + 1, test points)
increase = float((trace[1:] - trace[:-1]).max())
print(
    f"within the first Newton step: {trace.shape[0] - 1} iterations, mean variance "
    f"{trace[0].mean():.3f} -> {trace[-1].mean():.3f}; largest pointwise increase "
    f"{increase:.2e}"
)

# %% [markdown]
# ## Pictures
# Left: latent posterior mean ± 2 sd of IterNCGP for a few budgets (shaded) and of the exact
# Laplace approximation (black). Right: mean predictive variance on the test grid against the
# total number of solver iterations — it falls towards the exact Laplace value.

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
ax = axes[0]
xs = Xs[:, 0].numpy()
shown = [BUDGETS[0], BUDGETS[len(BUDGETS) // 2], BUDGETS[-1]]
for c, k in zip(["C3", "C1", "C2"], shown, strict=True):
    _, m, v = fits[k]
    sd = v.sqrt().numpy()
    ax.fill_between(xs, m.numpy() - 2 * sd, m.numpy() + 2 * sd, color=c, alpha=0.2)
    ax.plot(xs, m.numpy(), color=c, label=f"IterNCGP, {k} it./step")
sd = var_exact.sqrt().numpy()
ax.plot(xs, mean_exact.numpy(), "k", label="exact Laplace")
ax.plot(xs, mean_exact.numpy() - 2 * sd, "k--", lw=0.8)
ax.plot(xs, mean_exact.numpy() + 2 * sd, "k--", lw=0.8)
ax.plot(X[:, 0].numpy(), 6 * y.numpy() - 3, "|", color="grey", alpha=0.5)
ax.set_xlabel("x")
ax.set_ylabel("latent f (labels at ±3)")
ax.legend(fontsize=8)
ax = axes[1]
totals = [fits[k][0] for k in BUDGETS]
ax.plot(totals, mean_var, "o-", label="IterNCGP (combined)")
ax.axhline(float(var_exact.mean()), color="k", ls="--", label="exact Laplace (mathematical)")
ax.axhline(float(kernel.outputscale), color="grey", ls=":", label="prior")
ax.set_xscale("log")
ax.set_xlabel("total solver iterations")
ax.set_ylabel("mean predictive variance of f")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "04_iterncgp_uncertainty.png", dpi=100)
