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
# # Tutorial 2 — batch BO with a classifier constraint and fantasy batches
#
# We tune constants of gymnasium's hand-written lunar-lander controller
# (`bo_ncgp.problems.lunar_lander`, the benchmark of Chang et al. 2023, Sec. 4.1, which tunes
# all 12). Every
# evaluation flies a few episodes and returns the mean reward *and* a success label (did the
# lander come to rest in every episode?). We want a high reward **and** a landing, so the
# acquisition multiplies the expected improvement of a reward model by the probability of
# success of a classifier:
#
# $$\log a(x) = \log \mathrm{EI}(x) + \log P(\text{success}\mid x)$$
#
# (`ConstrainedLogExpectedImprovement`). Both models are streaming `DualSVGP`s — a Gaussian
# regression model of the reward and a Bernoulli classifier of success. Batches of `q` points
# are built by *fantasising* (`build_fantasy_batch`, Algorithm 2 of Chang et al.): after each
# point is chosen, both models are conditioned on a fantasy observation there (the reward
# model on its posterior mean, the classifier on its predictive probability as a soft label)
# by cheap dual conditioning, and the next point is chosen from the conditioned models.
#
# This is a *small* run (4 of the 12 constants, a few episodes per evaluation, a few
# batches), far smaller than the experiment of `experiments/chang2023/RESULTS.md`; it shows
# the moving parts. Runs in about a minute;
# set `BO_NCGP_TUTORIAL_QUICK=1` for an even smaller budget.

# %%
import os
import sys
import time

import matplotlib

if "ipykernel" not in sys.modules:  # scripts and CI: no display; notebooks: inline
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
from gpytorch.kernels import ScaleKernel
from gpytorch.priors import LogNormalPrior

from bo_ncgp.bo import DualSVGPModel, build_fantasy_batch
from bo_ncgp.bo.acquisition import ConstrainedLogExpectedImprovement, ProbabilityOfSuccess
from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models import DualSVGP
from bo_ncgp.problems.lunar_lander import DEFAULT_WEIGHTS, LunarLander

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
QUICK = os.environ.get("BO_NCGP_TUTORIAL_QUICK") == "1"
N_INIT, Q, N_BATCHES = (6, 3, 2) if QUICK else (8, 4, 5)
EPISODES = [0, 1] if QUICK else [0, 1, 2]
NUM_RESTARTS, RAW_SAMPLES = (2, 64) if QUICK else (4, 256)
NUM_INDUCING = 24 if QUICK else 32

problem = LunarLander(episode_seeds=EPISODES)
# tune 4 of the 12 constants -- the gains of the angle and hover controllers, w[4:8] -- over
# the problem's range [0, 1.2]; the other 8 keep their hand-tuned values
TUNED = [4, 5, 6, 7]
DIM = len(TUNED)
lo, hi = float(problem.bounds[0][0]), float(problem.bounds[1][0])
unit = torch.stack([torch.zeros(DIM), torch.ones(DIM)])  # the models work on the unit cube


def controller(u):
    w = DEFAULT_WEIGHTS.copy()
    w[TUNED] = lo + u.numpy() * (hi - lo)
    return w


def evaluate(U):
    """Fly the controllers U (n x DIM, unit cube): rewards (n,) and success labels (n,)."""
    evs = [problem.evaluate(controller(u)) for u in U]
    return (torch.tensor([e.value for e in evs]), torch.tensor([float(e.success) for e in evs]))


reference = problem.evaluate(DEFAULT_WEIGHTS)
crash = problem.evaluate(np.zeros(12))  # never fires an engine
print(
    f"gymnasium's hand-tuned controller: reward {reference.value:.1f}, landed {reference.success}"
)
print(f"engines off: reward {crash.value:.1f}, landed {crash.success}")

rng = np.random.default_rng(0)
torch.manual_seed(0)  # optimize_acqf draws its raw samples from torch
U0 = torch.as_tensor(rng.random((N_INIT, DIM)))
Y0, S0 = evaluate(U0)
print(f"initial design: best reward {Y0.max():.1f}, {int(S0.sum())} of {N_INIT} landed")

# %% [markdown]
# ## Two streaming models
# A DualSVGP is built from a GPyTorch kernel, one of our likelihoods and initial inducing
# points; `update(X, y)` folds a batch of observations in (Algorithm 1 of Chang et al.: site
# updates, a few hyperparameter steps, inducing points re-chosen by pivoted Cholesky).
# Rewards are standardised with the initial design's statistics, fixed afterwards.

# %%
mu, sd = Y0.mean(), Y0.std()


def make_dual(likelihood, Z):
    kernel = ScaleKernel(get_covar_module_with_dim_scaled_prior(DIM))
    return DualSVGP(
        kernel,
        likelihood,
        Z,
        memory_size=None,
        num_hyper_steps=30,
        lr=0.05,
        rho=0.7,
        num_inner_steps=10,
    )


# m inducing points: the initial design plus random fillers. m stays fixed; every update
# re-chooses the m points by pivoted Cholesky from the old ones and the new data, so the
# fillers give way to observed points as the campaign goes on. (Starting from the initial
# design alone would cap m at N_INIT: the model could then learn nothing far from it.)
Z = torch.cat([U0, torch.as_tensor(rng.random((NUM_INDUCING - N_INIT, DIM)))])
reward = make_dual(Gaussian(noise=np.exp(-4.0), noise_prior=LogNormalPrior(-4.0, 1.0)), Z)
success = make_dual(Bernoulli(), Z)
reward.update(U0, (Y0 - mu) / sd)
success.update(U0, S0)

# %% [markdown]
# ## The batch loop
# `build_fantasy_batch` takes the BoTorch models and a factory that builds the acquisition
# from (conditioned) models; it returns the batch, the acquisition value of each point when
# it was chosen and the timings. The incumbent for EI is the best *successful* reward so far
# (the best reward if nothing has landed yet).

# %%
U, Y, S = U0.clone(), Y0.clone(), S0.clone()
t_acq, t_cond = 0.0, 0.0
t_start = time.perf_counter()
for b in range(N_BATCHES):
    incumbent = Y[S == 1].max() if (S == 1).any() else Y.max()
    best_f = float((incumbent - mu) / sd)
    batch = build_fantasy_batch(
        [DualSVGPModel.from_model(reward), DualSVGPModel.from_model(success)],
        lambda ms, best_f=best_f: ConstrainedLogExpectedImprovement(ms[0], ms[1], best_f=best_f),
        q=Q,
        bounds=unit,
        fantasy="mean",
        num_restarts=NUM_RESTARTS,
        raw_samples=RAW_SAMPLES,
    )
    t_acq += sum(batch.optimize_seconds)
    t_cond += sum(batch.condition_seconds)
    with torch.no_grad():
        p_succ = ProbabilityOfSuccess(DualSVGPModel.from_model(success))(batch.X.unsqueeze(-2))
    y, s = evaluate(batch.X)
    reward.update(batch.X, (y - mu) / sd)  # the real observations, one streaming update each
    success.update(batch.X, s)
    U, Y, S = torch.cat([U, batch.X]), torch.cat([Y, y]), torch.cat([S, s])
    print(
        f"batch {b + 1}: rewards {np.round(y.numpy(), 1).tolist()}, landed {s.int().tolist()}, "
        f"predicted P(success) {np.round(p_succ.numpy(), 2).tolist()}"
    )
t_bo = time.perf_counter() - t_start
print(
    f"batch BO: {t_bo:.1f} s in total ({t_acq:.1f} s optimising the acquisition, "
    f"{t_cond:.2f} s fantasising + conditioning)"
)

# %% [markdown]
# ## Random search with the same budget, for comparison

# %%
U_rand = torch.cat([U0, torch.as_tensor(rng.random((Q * N_BATCHES, DIM)))])
y, s = evaluate(U_rand[N_INIT:])
Y_rand, S_rand = torch.cat([Y0, y]), torch.cat([S0, s])


def best_so_far(y, landed=None):
    """Best reward after each evaluation (only landed controllers if ``landed`` is given)."""
    if landed is not None:
        y = torch.where(landed == 1, y, torch.tensor(-torch.inf))
    best = torch.cummax(y, 0).values.numpy()
    return np.where(np.isfinite(best), best, np.nan)


best_bo, best_rand = float(Y.max()), float(Y_rand.max())
land_bo, land_rand = best_so_far(Y, S)[-1], best_so_far(Y_rand, S_rand)[-1]
print(
    f"best reward: batch BO {best_bo:.1f}, random search {best_rand:.1f} "
    f"(engines off {crash.value:.1f}, hand-tuned {reference.value:.1f})"
)
print(
    f"best reward of a controller that landed: batch BO {land_bo:.1f}, "
    f"random search {land_rand:.1f}; landed: BO {int(S.sum())}, random {int(S_rand.sum())}"
)
print(f"RESULT best_bo={best_bo:.6f}")
print(f"RESULT best_random={best_rand:.6f}")
print(f"RESULT best_landed_bo={land_bo:.6f}")
print(f"RESULT best_landed_random={land_rand:.6f}")
print(f"RESULT best_initial={float(Y0.max()):.6f}")
print(f"RESULT crash_value={crash.value:.6f}")
print(f"RESULT reference_value={reference.value:.6f}")
print(f"RESULT num_evaluations={U.shape[0]}")
print(f"RESULT num_distinct={torch.unique(U.round(decimals=8), dim=0).shape[0]}")
print(f"RESULT in_bounds={int(bool(((U >= 0) & (U <= 1)).all()))}")
print(f"RESULT p_success_in_unit={int(bool(((p_succ >= 0) & (p_succ <= 1)).all()))}")
print(f"RESULT num_landed_bo={int(S.sum())}")
print(f"RESULT num_landed_random={int(S_rand.sum())}")
print(f"RESULT seconds_bo={t_bo:.3f}")

# %% [markdown]
# ## Best reward so far against the number of evaluations
# Left, solid: the best reward of a controller that *landed* (the constrained objective);
# dashed: the best reward regardless of landing. Dots are the individual evaluations of batch
# BO (filled: landed); the dotted vertical lines separate the initial design and the batches.
# Right: how many of the evaluated controllers landed.
#
# What to expect from such a small run: the success classifier steers batch BO to
# controllers that land -- after the first batch nearly all of its evaluations land, far more
# than random search's -- and the reward climbs batch by batch. With some 20 evaluations a
# lucky random draw can still beat it on the best reward; comparisons need several seeds and
# larger budgets (see the lunar-lander section of `experiments/chang2023/RESULTS.md`).

# %%
n = np.arange(1, U.shape[0] + 1)
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
ax = axes[0]
ax.plot(n, best_so_far(Y, S), color="C0", label="batch BO, landed")
ax.plot(n, best_so_far(Y), color="C0", ls="--", lw=1, label="batch BO, any")
ax.plot(n, best_so_far(Y_rand, S_rand), color="C1", label="random search, landed")
ax.plot(n, best_so_far(Y_rand), color="C1", ls="--", lw=1, label="random search, any")
ok = S.numpy() == 1
ax.scatter(n[~ok], Y.numpy()[~ok], s=12, facecolors="none", edgecolors="C0", alpha=0.6)
ax.scatter(n[ok], Y.numpy()[ok], s=14, color="C0")
ax.axhline(reference.value, color="k", ls="-.", lw=1, label="hand-tuned controller")
ax.set_ylabel("mean episode reward")
ax.legend(loc="lower right", fontsize=8)
ax = axes[1]
ax.plot(n, np.cumsum(S.numpy()), color="C0", label="batch BO")
ax.plot(n, np.cumsum(S_rand.numpy()), color="C1", label="random search")
ax.set_ylabel("controllers that landed")
ax.legend(loc="upper left", fontsize=8)
for ax in axes:
    for k in range(N_BATCHES + 1):
        ax.axvline(N_INIT + k * Q + 0.5, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("evaluations")
fig.tight_layout()
os.makedirs("tutorials/output", exist_ok=True)
fig.savefig("tutorials/output/02_lunar_best_so_far.png", dpi=100)
