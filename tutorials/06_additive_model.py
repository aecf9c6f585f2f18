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
# # Tutorial 6 — a sparse variational additive model and its components
#
# `SparseGAM` (Adam, Durrande & John, "Scalable GAM using sparse variational Gaussian
# processes") models the predictor as a sum of a-priori independent GPs, one per input group,
#
# $$\rho(x) = \sum_c f_c(x_{[c]}),$$
#
# each with its own inducing points. Its `"coupled_precision"` posterior keeps the posterior
# correlations *between* the components that a mean-field posterior throws away, at a cost
# linear in the number of components. Because the model is additive, each component can be
# plotted on its own, with its own uncertainty — an interpretable model.
#
# We fit it to a 4-D function that is a sum of three 1-D effects (the fourth input is
# irrelevant), plot the components, and plug the model into BoTorch with `SparseGAMModel`.
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
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.optim import optimize_acqf
from gpytorch.kernels import RBFKernel, ScaleKernel

from bo_ncgp.bo import SparseGAMModel
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models import SparseGAM

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
QUICK = os.environ.get("BO_NCGP_TUTORIAL_QUICK") == "1"
N, STEPS = (200, 150) if QUICK else (600, 400)
D, M = 4, 12  # inputs, inducing points per component
# figures go to output/ next to this file (the working folder when run as a notebook)
OUT = (Path(__file__).parent if "__file__" in globals() else Path.cwd()) / "output"
OUT.mkdir(exist_ok=True)

EFFECTS = [
    lambda x: torch.sin(2 * math.pi * x),
    lambda x: 4 * (x - 0.5) ** 2 - 1 / 3,
    lambda x: 0.8 * x - 0.4,
    lambda x: torch.zeros_like(x),  # irrelevant input
]


def f(X):
    return sum(g(X[..., c]) for c, g in enumerate(EFFECTS))


torch.manual_seed(0)
X = torch.rand(N, D)
y = f(X) + 0.1 * torch.randn(N)

# %% [markdown]
# ## The model
# One component per input: a GPyTorch kernel, the input it acts on (`active_dims`) and its
# inducing inputs. `fit` initialises `q(U)` by natural-gradient steps from the prior and then
# runs Adam on the ELBO (Eq. 5) and the hyperparameters.

# %%
Z = torch.linspace(0, 1, M)
components = [(ScaleKernel(RBFKernel()), [c], Z.clone()) for c in range(D)]
gam = SparseGAM(components, Gaussian(0.05), posterior="coupled_precision")
trace = gam.fit(X, y, num_steps=STEPS, lr=0.05, refresh_every=50).history
print(
    f"ELBO per data point: {trace[0]:.3f} after the first step, {trace[-1]:.3f} at the end; "
    f"noise sd {gam.likelihood.noise.sqrt().item():.3f} (true 0.1)"
)

Xtest = torch.rand(1000, D)
with torch.no_grad():
    mean, var = gam.predict_f(Xtest)
rmse = float((mean - f(Xtest)).square().mean().sqrt())
print(f"test RMSE of the predictor: {rmse:.4f}")

# %% [markdown]
# ## The components
# `predict_components(X)` returns the posterior mean and variance of every `f_c` at `X`
# (`joint=True`: the covariances between the components at each point). An additive
# decomposition is identifiable only up to constants: a constant can move from one component
# to another without changing the sum. The marginal variance of a component therefore
# includes a large uncertainty about its *level*, while the sum is known precisely -- the
# coupled posterior knows that the levels are anti-correlated:

# %%
with torch.no_grad():
    _, joint = gam.predict_components(Xtest[:200], joint=True)  # (200, D, D)
    _, var_sum = gam.predict_f(Xtest[:200])
sum_of_vars = joint.diagonal(dim1=-2, dim2=-1).sum(-1)
print(
    f"mean over test points: variance of the sum {var_sum.mean():.4f}, "
    f"sum of the component variances {sum_of_vars.mean():.4f}"
)

# %% [markdown]
# So we plot each component *centred* on the plotted interval, with the uncertainty of its
# shape: `predict_f(X, full_cov=True, components=[c])` gives the joint posterior of `f_c` over
# the points, and centring is a linear map `H = I - 11^T / n` of it.

# %%
t = torch.linspace(0, 1, 101)
T = t.unsqueeze(-1).expand(-1, D).clone()  # column c varies input c (the others are ignored)
H = torch.eye(101) - 1 / 101
fig, axes = plt.subplots(1, D, figsize=(14, 3.2), sharey=True)
errors, amplitudes, level_sd = [], [], []
for c, ax in enumerate(axes):
    with torch.no_grad():
        mean_c, cov_c = gam.predict_f(T, full_cov=True, components=[c])
    m = H @ mean_c
    sd = (H @ cov_c @ H).diagonal().clamp_min(0).sqrt()
    true = EFFECTS[c](t) - EFFECTS[c](t).mean()
    errors.append(float((m - true).square().mean().sqrt()))
    amplitudes.append(float(m.abs().max()))
    level_sd.append(float(cov_c.diagonal().mean().sqrt()))
    ax.fill_between(t.numpy(), (m - 2 * sd).numpy(), (m + 2 * sd).numpy(), alpha=0.25)
    ax.plot(t.numpy(), m.numpy(), label="posterior mean ± 2 sd (centred)")
    ax.plot(t.numpy(), true.numpy(), "k--", lw=1, label="true effect (centred)")
    ax.set_title(f"f_{c + 1}(x_{c + 1})  (RMSE {errors[-1]:.3f})")
    ax.set_xlabel(f"x_{c + 1}")
axes[0].legend(fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "06_gam_components.png", dpi=100)
for c in range(D):
    print(
        f"component {c + 1}: RMSE against the true effect {errors[c]:.4f}, largest |centred "
        f"mean| {amplitudes[c]:.4f}, marginal sd {level_sd[c]:.3f}"
    )

# %% [markdown]
# ## In BoTorch
# `SparseGAMModel` is a BoTorch `Model`: any analytic or MC acquisition function works with
# it. Here `optimize_acqf` maximises an upper confidence bound of the fitted predictor; the
# true maximiser is `x_1 = 0.25`, `x_2` at 0 or 1, `x_3 = 1` (any `x_4`).
# `SparseGAMModel.from_model(gam, components=[c])` would expose a single component instead.

# %%
model = SparseGAMModel.from_model(gam)
acq = UpperConfidenceBound(model, beta=0.1)
bounds = torch.stack([torch.zeros(D), torch.ones(D)])
x_best, _ = optimize_acqf(acq, bounds, q=1, num_restarts=4, raw_samples=256)
x_best = x_best[0].detach()
print(
    f"UCB maximiser: {[round(v, 3) for v in x_best.tolist()]}, f there {f(x_best):.3f} "
    f"(maximum {f(torch.tensor([0.25, 0.0, 1.0, 0.5])):.3f})"
)
