"""How noisy is the acquisition of the script behind Chang et al.'s Fig. 4?

Maddox et al.'s hotspot script, which Chang et al. ran for Fig. 4, scores a candidate village
by Monte Carlo: for each block of ``--batch-limit`` candidates it draws fresh scrambled-Sobol
normal samples, estimates every pool village's spiked entropy ``E[h(sigmoid f) 1(f > logit
t)]`` before (``--samples`` samples) and after each fantasy (another ``--samples`` samples,
shared by the block's candidates and fantasies), clamps each village's decrease at zero and
sums. Two independent estimates of the same entropy differ, and the clamp turns that noise into
a positive offset summed over ~1,300 villages, the same for every candidate of a block but new
for each block. This script measures how much that noise changes the choice.

For each seed it refits the svgp-entropy model (Maddox et al.'s SVGP, early-stopped, from
scratch) on the first ``--step`` villages an existing ``svgp-entropy`` campaign surveyed, scores
every remaining village (a) exactly (their acquisition, ``maddox_acquisition``: the same
fantasies, no sampling noise) and (b) ``--reps`` times with the Monte
Carlo estimator above (our predictive-quantile fantasies; the per-village samples are
independent, where the script samples the pool jointly), and reports the rank correlation, how
often the noisy argmax is the exact one, and where the noisy choice ranks under the exact
scores.

    python -m experiments.chang2023.hotspots_acq_noise --seeds 3 --threads 1
    python -m experiments.chang2023.hotspots_acq_noise --quick     # smoke test (synthetic pool)

Writes ``experiments/chang2023/results/hotspots/acq_noise.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import Tensor

from bo_ncgp.cli.common import HelpFormatter
from experiments import harness
from experiments.chang2023.hotspots import RESULTS
from experiments.chang2023.maddox_acquisition import (
    bernoulli_entropy_of_logit,
    maddox_acquisition,
)


def spiked_mc(mean: Tensor, var: Tensor, eps: Tensor, level: float) -> Tensor:
    """Monte Carlo ``E[h(sigmoid f) 1(f > level)]``, ``f = mean + sd eps_s``, averaged over
    the leading dimension ``S`` of ``eps (S, P)``; ``mean, var (..., P)`` -> ``(..., P)``."""
    f = mean.unsqueeze(-2) + var.clamp_min(0).sqrt().unsqueeze(-2) * eps  # (..., S, P)
    h = torch.where(f > level, bernoulli_entropy_of_logit(f), torch.zeros_like(f))
    return h.mean(-2)


def sobol_normal(n: int, dim: int, generator: torch.Generator, like: Tensor) -> Tensor:
    """``(n, dim)`` scrambled-Sobol normal samples (as BoTorch's ``SobolQMCNormalSampler``)."""
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    u = torch.quasirandom.SobolEngine(dim, scramble=True, seed=seed).draw(n, dtype=like.dtype)
    return torch.special.ndtri(u.clamp(1e-10, 1 - 1e-10))


def mc_scores(acq, num_fantasies: int, samples: int, block: int, generator) -> Tensor:
    """Maddox et al.'s estimator of the clamped spiked entropy reduction (module docstring)
    for every pool member of ``acq``, with our fantasies and dual conditioning."""
    from bo_ncgp.bo.acquisition import predictive_quantile_fantasies

    st, level = acq.fantasies, acq.level
    Y = predictive_quantile_fantasies(acq.latent.likelihood, st.mean, st.var, num_fantasies)
    out, P = [], st.mean.shape[0]
    with torch.no_grad():
        for start in range(0, P, block):
            sl = slice(start, start + block)
            m, v = st.conditioned(torch.arange(start, min(start + block, P)), Y[sl])
            h_now = spiked_mc(st.mean, st.var, sobol_normal(samples, P, generator, m), level)
            h_after = spiked_mc(m, v, sobol_normal(samples, P, generator, m), level)  # (b, J, P)
            out.append((h_now - h_after).clamp_min(0).sum(-1).mean(-1))
    return torch.cat(out)


def _fitted_strategy(pool, surveyed: np.ndarray, counts: np.ndarray, num_initial: int, steps):
    from bo_ncgp.campaigns.strategies.registry import build_strategy

    strat = build_strategy(
        "hotspots", "svgp-entropy", num_steps=steps, criterion="spiked", gain="clamped"
    )
    strat.setup(pool, pool.seed)
    strat.scale_pool(pool.features[surveyed[:num_initial]])
    strat.fit(surveyed, torch.as_tensor(counts, dtype=torch.float64))
    return strat


def analyse(strat, rest: np.ndarray, args, generator) -> dict:
    acq = maddox_acquisition(
        strat.model, strat.U[torch.as_tensor(rest)], strat.threshold, num_fantasies=args.fantasies
    )
    exact = acq.score_pool()
    best = int(exact.argmax())
    order = torch.argsort(torch.argsort(exact, descending=True))  # 0 = best
    reps = []
    for _ in range(args.reps):
        noisy = mc_scores(acq, args.fantasies, args.samples, args.batch_limit, generator)
        pick = int(noisy.argmax())
        reps.append(
            {
                "spearman": float(spearmanr(exact.numpy(), noisy.numpy())[0]),
                "argmax_equal": pick == best,
                "exact_rank_of_choice": int(order[pick]),
                "exact_score_of_choice": float(exact[pick]),
            }
        )
    return {
        "num_candidates": len(rest),
        "exact_best": float(exact[best]),
        "exact_median": float(exact.median()),
        "reps": reps,
        "mean_spearman": float(np.mean([r["spearman"] for r in reps])),
        "argmax_equal_fraction": float(np.mean([r["argmax_equal"] for r in reps])),
        "median_exact_rank_of_choice": float(np.median([r["exact_rank_of_choice"] for r in reps])),
    }


def run(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, analyse the seeds and return ``{"settings", "results"}``."""
    p = argparse.ArgumentParser(
        prog="bo-ncgp hotspots-acq-noise",
        description=__doc__.split("\n")[0],
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--campaign",
        default=str(RESULTS / "svgp_entropy"),
        help="folder of an svgp-entropy campaign (its svgp-entropy/seed_<k> states give the "
        "surveyed villages)",
    )
    p.add_argument("--seeds", type=int, default=3, help="number of seeds from --first-seed on")
    p.add_argument("--first-seed", type=int, default=0, help="the first seed")
    p.add_argument("--step", type=int, default=150, help="surveyed villages of the fit")
    p.add_argument("--reps", type=int, default=20, help="Monte Carlo repetitions")
    p.add_argument("--samples", type=int, default=16, help="inner = outer samples (script: 16)")
    p.add_argument("--fantasies", type=int, default=16, help="fantasies per candidate")
    p.add_argument("--batch-limit", type=int, default=8, help="candidates per block (Chang: 8)")
    p.add_argument("--svgp-steps", type=int, default=1000, help="Adam steps of each SVGP refit")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", default=str(RESULTS / "acq_noise.json"), help="output JSON file")
    p.add_argument("--quick", action="store_true", help="synthetic 60-village pool, 2 reps")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from bo_ncgp.problems.hotspots import HotspotPool

    generator = torch.Generator().manual_seed(0)
    results = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t0 = time.perf_counter()
        if args.quick:
            rng = np.random.default_rng(seed)
            X = rng.random((60, 3))
            pool = HotspotPool(X, 1 / (1 + np.exp(-(3 * X[:, 0] - 2.5))), 0.1, seed=seed)
            surveyed, num_initial = pool.permutation[:20], 15
            counts = np.array([pool.observe(int(i)) for i in surveyed])
            args.reps, args.svgp_steps = 2, 30
        else:
            pool = HotspotPool.from_country("civ", seed=seed)
            path = Path(args.campaign) / "svgp-entropy" / f"seed_{seed}" / "state.json"
            evals = harness.read_json(path)["evaluations"][: args.step]
            if len(evals) < args.step:
                raise ValueError(f"{path}: only {len(evals)} surveys, --step is {args.step}")
            surveyed = np.array([int(e["point"]) for e in evals])
            counts = np.array([e["value"] for e in evals])
            num_initial = 100
        strat = _fitted_strategy(pool, surveyed, counts, num_initial, args.svgp_steps)
        res = analyse(strat, pool.remaining(surveyed), args, generator)
        res["seconds"] = time.perf_counter() - t0
        results[str(seed)] = res
        if not args.quick:  # after every seed: an interrupted run keeps the finished seeds
            _write(args, results)
        print(
            f"seed {seed}: spearman {res['mean_spearman']:.3f}, noisy argmax = exact "
            f"{res['argmax_equal_fraction']:.2f}, median exact rank of the noisy choice "
            f"{res['median_exact_rank_of_choice']:.0f} of {res['num_candidates']} "
            f"({res['seconds']:.0f} s)",
            flush=True,
        )
    return {"settings": dict(vars(args)), "results": results}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    run(argv)
    return 0


def _write(args, results: dict) -> None:
    harness.write_json(Path(args.out), {"settings": dict(vars(args)), "results": results})


if __name__ == "__main__":
    raise SystemExit(main())
