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
# To keep this tutorial to a few minutes we use a random subset of the 1,500 villages as the
# pool, and repeat both campaigns over several seeds (each seed: its own initial villages and
# survey outcomes, the same for both strategies). The data are read from `$BO_NCGP_DATA`
# (in a checkout, `<repo>/../shared/data` by default); without them `load_hotspots` stops
# with an error that names the missing file. Set `BO_NCGP_TUTORIAL_QUICK=1` for a smaller
# budget (fewer seeds and surveys).

# %%
import os
import shutil
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # scripts: no display; notebooks: inline figures
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from bo_ncgp.bo.acquisition import exceedance_probability
from bo_ncgp.campaigns import Campaign
from bo_ncgp.campaigns.stats import mean_se, mean_se_curve
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.data.hotspots import load_hotspots
from bo_ncgp.problems.hotspots import HotspotPool

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
QUICK = os.environ.get("BO_NCGP_TUTORIAL_QUICK") == "1"
SEEDS = [0, 1] if QUICK else [0, 1, 2, 3, 4]
POOL, N_INIT, N_STEPS = (300, 25, 5) if QUICK else (600, 40, 25)
# figures and campaign folders go to output/ next to this file (the working folder when run
# as a notebook)
OUT = (Path(__file__).parent if "__file__" in globals() else Path.cwd()) / "output"
OUT.mkdir(exist_ok=True)

data = load_hotspots("civ")
print(f"{data.X.shape[0]} villages from {data.path.name}; hotspot threshold {data.threshold}")

# %% [markdown]
# ## The pool
# Eight features per village (longitude, latitude, four bioclimatic variables, distance to
# water, elevation); the strategies min-max scale them with the initial villages' statistics.

# %%
rng = np.random.default_rng(0)
subset = np.sort(rng.choice(data.X.shape[0], size=POOL, replace=False))
features = data.X.numpy()[subset]
theta = data.theta.numpy()[subset]
print(
    f"pool of {POOL} villages, {int((theta > data.threshold).sum())} hotspots; "
    f"{N_INIT} initial surveys, then {N_STEPS} chosen one at a time; {len(SEEDS)} seeds"
)

# %% [markdown]
# ## Two campaigns per seed: entropy reduction and random surveys
# A campaign writes `state.json` / `evaluations.csv` to its folder after every survey (a
# killed run can be resumed with `Campaign.resume`). For each seed, both strategies start from
# the same initial villages (the first `N_INIT` of the seed's permutation of the pool) and see
# the same simulated survey outcomes.

# %%
dual_settings = dict(num_inner_steps=10, init_rounds=2, init_hyper_steps=20)


def make_strategy(name):
    if name == "entropy":
        return build_strategy("hotspots", "entropy", num_fantasies=8, **dual_settings)
    return build_strategy("hotspots", "random", **dual_settings)


states, strategies = {"entropy": [], "random": []}, {}
for seed in SEEDS:
    problem = HotspotPool(features, theta, data.threshold, seed=seed, country="civ-subset")
    for name in states:
        strategy = make_strategy(name)
        out = OUT / "03_campaigns" / f"{name}_seed{seed}"
        shutil.rmtree(out, ignore_errors=True)  # a fresh run every time
        campaign = Campaign(
            problem,
            strategy,
            budget=N_INIT + N_STEPS,
            batch_size=1,
            num_initial=N_INIT,
            seed=seed,
            out_dir=out,
        )
        states[name].append(campaign.run(progress=False))
        strategies[name, seed] = strategy


def curve(state, metric):
    its = state["iterations"]
    return (
        np.array([it["num_evaluations"] for it in its]),
        np.array([it["metrics"][metric] for it in its]),
    )


# %% [markdown]
# ## What the numbers say
# Hotspot accuracy and prevalence MSE on the villages not surveyed, after the initial surveys
# and at the end, and the seconds per survey step, as mean ± standard error over the seeds,
# with the paired differences entropy − random (same seed). A difference within two standard
# errors of zero is not told apart from the seed-to-seed noise at this number of seeds.


# %%
def summary(values, fmt=".3f"):
    m, se, _ = mean_se(values)
    return f"{m:{fmt}} ± {se:{fmt}}"


final = {
    metric: {k: np.array([curve(st, metric)[1][-1] for st in v]) for k, v in states.items()}
    for metric in ("accuracy", "mse")
}
for name, v in states.items():
    initial = [curve(st, "accuracy")[1][0] for st in v]
    secs = [np.mean([it["metrics"]["step_seconds"] for it in st["iterations"][1:]]) for st in v]
    print(
        f"{name:8s}: hotspot accuracy {summary(initial)} after the initial surveys, "
        f"{summary(final['accuracy'][name])} at the end; prevalence MSE "
        f"{summary(final['mse'][name], '.5f')}; {summary(secs, '.2f')} s per survey step"
    )
for metric, fmt in [("accuracy", ".3f"), ("mse", ".5f")]:
    m, se, n = mean_se(final[metric]["entropy"] - final[metric]["random"])
    verdict = "within" if abs(m) <= 2 * se else "more than"
    print(
        f"final {metric}: paired difference entropy - random {m:+{fmt}} ± {se:{fmt}} over "
        f"{n} seeds, {verdict} two standard errors of zero"
    )

# %% [markdown]
# ## Maps (first seed)
# The entropy campaign's final model: predicted prevalence `sigmoid(E f)`, the probability that
# a village is a hotspot, `P(theta > 0.1) = Phi((E f - logit 0.1) / sd f)`, and the true
# prevalence. Crosses: initial surveys; numbered circles: the villages the strategy chose, in
# order.

# %%
strategy = strategies["entropy", SEEDS[0]]
with torch.no_grad():
    mean, var = strategy.model.predict_f(strategy.U)
prevalence = torch.sigmoid(mean).numpy()
level = float(np.log(data.threshold / (1 - data.threshold)))
p_hot = exceedance_probability(mean, var, level).numpy()

chosen = np.array([int(e["point"]) for e in states["entropy"][0]["evaluations"]])
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
fig.savefig(OUT / "03_hotspot_maps.png", dpi=100)

# %% [markdown]
# ## Hotspot accuracy on the villages not yet surveyed
# Mean ± one standard error over the seeds; the summary above says whether the final
# difference is larger than the noise between seeds.

# %%
fig, ax = plt.subplots(figsize=(6, 4))
for c, (name, v) in zip(["C0", "C1"], states.items(), strict=True):
    n_eval = curve(v[0], "accuracy")[0]
    m, se, _ = mean_se_curve([curve(st, "accuracy")[1] for st in v])
    ax.plot(n_eval, m, "o-", ms=3, color=c, label=name)
    ax.fill_between(n_eval, m - se, m + se, color=c, alpha=0.2)
ax.set_xlabel("surveys")
ax.set_ylabel("hotspot accuracy (unsurveyed villages)")
ax.legend()
fig.tight_layout()
fig.savefig(OUT / "03_hotspot_accuracy.png", dpi=100)
