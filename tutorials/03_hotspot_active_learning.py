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
# # Tutorial 3 — active learning of disease hotspots
#
# Schistosomiasis surveys in Côte d'Ivoire (Andrade-Pacheco et al. 2020): every village is a
# candidate survey site; surveying village *i* tests 100 people and returns the number of
# positives, `y_i ~ Binomial(100, theta_i)`. A village is a *hotspot* when its prevalence
# `theta_i` exceeds 10 %. Which villages should we survey to map the hotspots with as few
# surveys as possible? (Chang et al. 2023, Sec. 4.1 / Fig. 4, after Maddox et al. 2021.)
#
# * `bo_ncgp.problems.hotspots.HotspotPool` — the villages as a pool problem; surveys are
#   simulated from the true prevalences, deterministically per (seed, village);
# * the `entropy` strategy of `bo_ncgp.campaigns.strategies.registry` — a streaming `DualSVGP`
#   with the `Binomial(100)` likelihood; the next village maximises the expected reduction of
#   the summed entropy of the exceedance probabilities `P(theta(x) > 0.1)` over the remaining
#   villages (`bo_ncgp.bo.acquisition.ThresholdEntropyReduction`, fantasies by dual
#   conditioning);
# * the `random` strategy — the same model, villages drawn at random;
# * `bo_ncgp.campaigns.Campaign` — the ask/tell loop (with checkpoints, as the experiments use).
#
# To keep this tutorial to a couple of minutes we use a random subset of the 1,500 villages as
# the pool. The data are read from `$BO_NCGP_DATA` or `<repo>/../shared/data`; without them the
# tutorial says so and stops. Set `BO_NCGP_TUTORIAL_QUICK=1` for an even smaller budget.

# %%
import os
import shutil
import sys

import matplotlib

if "ipykernel" not in sys.modules:  # scripts and CI: no display; notebooks: inline
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from bo_ncgp.bo.acquisition import exceedance_probability
from bo_ncgp.campaigns import Campaign
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.data.hotspots import load_hotspots
from bo_ncgp.problems.hotspots import HotspotPool

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
QUICK = os.environ.get("BO_NCGP_TUTORIAL_QUICK") == "1"
POOL, N_INIT, N_STEPS = (300, 25, 6) if QUICK else (600, 40, 25)

try:
    data = load_hotspots("civ")
except FileNotFoundError as err:
    print(
        f"The hotspot data are not available, so this tutorial cannot run:\n  {err}\n"
        "Point BO_NCGP_DATA at the shared data folder (see ../shared/data/README.md)."
    )
    print("RESULT skipped=1")
    sys.exit(0)
print(f"{data.X.shape[0]} villages from {data.path}; hotspot threshold {data.threshold}")

# %% [markdown]
# ## The pool
# Eight features per village (longitude, latitude, four bioclimatic variables, distance to
# water, elevation); the strategies min-max scale them with the initial villages' statistics.

# %%
rng = np.random.default_rng(0)
subset = np.sort(rng.choice(data.X.shape[0], size=POOL, replace=False))
features = data.X.numpy()[subset]
theta = data.theta.numpy()[subset]
problem = HotspotPool(features, theta, data.threshold, seed=0, country="civ-subset")
print(
    f"pool of {POOL} villages, {int((theta > data.threshold).sum())} hotspots; "
    f"{N_INIT} initial surveys, then {N_STEPS} chosen one at a time"
)

# %% [markdown]
# ## Two campaigns: entropy reduction and random surveys
# The campaign writes `state.json` / `evaluations.csv` to its folder after every survey (a
# killed run can be resumed with `Campaign.resume`). Both strategies start from the same
# initial villages (the first `N_INIT` of the seed's permutation of the pool).

# %%
dual_settings = dict(num_inner_steps=10, init_rounds=2, init_hyper_steps=20)
strategies = {
    "entropy": build_strategy("hotspots", "entropy", num_fantasies=8, **dual_settings),
    "random": build_strategy("hotspots", "random", **dual_settings),
}
states = {}
for name, strategy in strategies.items():
    out = f"tutorials/output/03_campaigns/{name}"
    shutil.rmtree(out, ignore_errors=True)  # a fresh run every time
    campaign = Campaign(
        problem,
        strategy,
        budget=N_INIT + N_STEPS,
        batch_size=1,
        num_initial=N_INIT,
        seed=0,
        out_dir=out,
    )
    states[name] = campaign.run(progress=False)
    last = states[name]["iterations"][-1]["metrics"]
    secs = np.mean([it["metrics"]["step_seconds"] for it in states[name]["iterations"][1:]])
    print(
        f"{name:8s}: hotspot accuracy {last['accuracy']:.3f}, prevalence MSE "
        f"{last['mse']:.5f} on the villages not surveyed; {secs:.2f} s per survey step"
    )


def curve(state, metric):
    its = state["iterations"]
    return (
        np.array([it["num_evaluations"] for it in its]),
        np.array([it["metrics"][metric] for it in its]),
    )


for name, st in states.items():
    acc = curve(st, "accuracy")[1]
    chosen = [int(e["point"]) for e in st["evaluations"]]
    print(f"RESULT {name}_accuracy_initial={acc[0]:.6f}")
    print(f"RESULT {name}_accuracy_final={acc[-1]:.6f}")
    print(f"RESULT {name}_mse_final={curve(st, 'mse')[1][-1]:.8f}")
    print(f"RESULT {name}_num_surveys={len(chosen)}")
    print(f"RESULT {name}_num_distinct={len(set(chosen))}")

# %% [markdown]
# ## Maps
# The entropy campaign's final model: predicted prevalence `sigmoid(E f)`, the probability that
# a village is a hotspot, `P(theta > 0.1) = Phi((E f - logit 0.1) / sd f)`, and the true
# prevalence. Crosses: initial surveys; numbered circles: the villages the strategy chose, in
# order.

# %%
strategy = strategies["entropy"]
with torch.no_grad():
    mean, var = strategy.model.predict_f(strategy.U)
prevalence = torch.sigmoid(mean).numpy()
level = float(np.log(data.threshold / (1 - data.threshold)))
p_hot = exceedance_probability(mean, var, level).numpy()
print(f"RESULT prevalence_min={prevalence.min():.6f}")
print(f"RESULT prevalence_max={prevalence.max():.6f}")
print(f"RESULT exceedance_min={p_hot.min():.6f}")
print(f"RESULT exceedance_max={p_hot.max():.6f}")

chosen = np.array([int(e["point"]) for e in states["entropy"]["evaluations"]])
lng, lat = features[:, 0], features[:, 1]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharex=True, sharey=True)
panels = [
    ("predicted prevalence", prevalence, "magma_r", (0, max(0.3, float(theta.max())))),
    ("P(hotspot)", p_hot, "coolwarm", (0, 1)),
    ("true prevalence", theta, "magma_r", (0, max(0.3, float(theta.max())))),
]
for ax, (title, values, cmap, (vmin, vmax)) in zip(axes, panels, strict=True):
    sc = ax.scatter(lng, lat, c=values, cmap=cmap, vmin=vmin, vmax=vmax, s=14)
    fig.colorbar(sc, ax=ax, shrink=0.85)
    ax.scatter(
        lng[chosen[:N_INIT]], lat[chosen[:N_INIT]], marker="x", c="k", s=18, label="initial surveys"
    )
    ax.set_title(title)
    ax.set_xlabel("longitude")
ax = axes[1]
new = chosen[N_INIT:]
ax.scatter(
    lng[new],
    lat[new],
    facecolors="none",
    edgecolors="lime",
    s=70,
    linewidths=1.5,
    label="chosen by entropy reduction",
)
for i, v in enumerate(new):
    ax.annotate(str(i + 1), (lng[v], lat[v]), fontsize=7, xytext=(3, 3), textcoords="offset points")
axes[0].set_ylabel("latitude")
ax.legend(loc="lower left", fontsize=8)
fig.tight_layout()
os.makedirs("tutorials/output", exist_ok=True)
fig.savefig("tutorials/output/03_hotspot_maps.png", dpi=100)

# %% [markdown]
# ## Hotspot accuracy on the villages not yet surveyed

# %%
fig, ax = plt.subplots(figsize=(6, 4))
for name, st in states.items():
    ax.plot(*curve(st, "accuracy"), "o-", ms=3, label=name)
ax.set_xlabel("surveys")
ax.set_ylabel("hotspot accuracy (unsurveyed villages)")
ax.legend()
fig.tight_layout()
fig.savefig("tutorials/output/03_hotspot_accuracy.png", dpi=100)
