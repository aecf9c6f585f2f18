"""Do fantasy batches spread? Smallest pairwise distance and repeated points in batches of 4.

Chang et al. (2023), Alg. 2 builds a batch by fantasising the observation at each chosen point
and conditioning on it. On BoTorch test functions (maximising the negated function; inputs
scaled to the unit cube, outputs standardised), per seed: ``4 d`` Sobol points, a
``SingleTaskGP`` fitted with ``fit_gpytorch_mll``, a :class:`~bo_ncgp.models.DualSVGP` with
its hyperparameters (its kernel, constant mean as ``mean_constant``, the same noise;
``m = n / 2`` inducing points, the first half of the design, so that the batch's points lie
off ``Z``), then one batch of ``q = 4`` by LogEI for

* ``dual mean``: :func:`~bo_ncgp.bo.build_fantasy_batch` on ``DualSVGPModel``, posterior-mean
  fantasies, the incumbent raised by the fantasies inside the batch;
* ``dual sample``: the same with sampled fantasies (``fantasy="sample"``, seeded);
* ``dual mean, fixed incumbent``: posterior-mean fantasies, ``best_f`` kept at the observed best;
* ``SingleTaskGP KB``: :func:`~bo_ncgp.bo.kriging_believer_batch` on the exact GP (incumbent
  raised).

Reported per problem and strategy (mean over seeds): the smallest pairwise distance of the
batch (unit cube) and the number of batches holding a near-duplicate (a pair closer than
``0.01``). ``--before`` runs what the library offered before the incumbent could be raised
(every strategy with a fixed incumbent) for a comparison with other code.

    python benchmarks/batch_diversity.py            # 10 seeds, about 2 min
    python benchmarks/batch_diversity.py --quick    # 1 seed, Branin only

Writes ``benchmarks/results/batch_diversity.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import time
import warnings
from pathlib import Path

import torch
from botorch.acquisition import LogExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.test_functions import Branin, Hartmann, Levy
from botorch.utils.sampling import draw_sobol_samples
from gpytorch.mlls import ExactMarginalLogLikelihood

from bo_ncgp.bo import DualSVGPModel, build_fantasy_batch, kriging_believer_batch
from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models import DualSVGP

OUT = Path(__file__).resolve().parent / "results" / "batch_diversity.json"
PROBLEMS = {
    "Branin": lambda: Branin(negate=True),
    "Hartmann3": lambda: Hartmann(dim=3, negate=True),
    "Levy2": lambda: Levy(dim=2, negate=True),
}
DUPLICATE = 0.01
Q = 4


def _fit(X: torch.Tensor, y: torch.Tensor):
    gp = SingleTaskGP(X, y[:, None], outcome_transform=None)  # y is standardised here
    fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
    gp.eval()
    return gp


def _dual(gp: SingleTaskGP, X: torch.Tensor, y: torch.Tensor) -> DualSVGP:
    k = copy.deepcopy(gp.covar_module)  # BoTorch's default kernel and its fitted values
    noise = float(gp.likelihood.noise.detach())
    c = float(gp.mean_module.constant.detach())
    dual = DualSVGP(
        k, Gaussian(noise), X[: X.shape[0] // 2], memory_size=None, num_hyper_steps=0,
        inducing_update="fixed", mean_constant=c,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dual.update(X, y)


def _has_best_f() -> bool:
    return "best_f" in inspect.signature(build_fantasy_batch).parameters


def _batch(kind: str, gp, dual, y, bounds, seed: int, before: bool) -> torch.Tensor:
    kw = dict(q=Q, bounds=bounds, num_restarts=4, raw_samples=128)
    best = y.max()
    raise_incumbent = not before and kind != "dual mean, fixed incumbent"
    if raise_incumbent:
        kw["best_f"] = best

        def factory(ms, b):
            return LogExpectedImprovement(ms[0], best_f=b)

    else:

        def factory(ms):
            return LogExpectedImprovement(ms[0], best_f=best)

    torch.manual_seed(seed)
    if kind == "SingleTaskGP KB":
        return kriging_believer_batch(gp, factory, **kw).X
    fantasy = "sample" if kind == "dual sample" else "mean"
    gen = torch.Generator().manual_seed(seed)
    model = DualSVGPModel.from_model(dual)
    return build_fantasy_batch(model, factory, fantasy=fantasy, generator=gen, **kw).X


def run(problems: list[str], seeds: int, before: bool) -> dict:
    kinds = ["dual mean", "dual sample", "dual mean, fixed incumbent", "SingleTaskGP KB"]
    if before:
        kinds = ["dual mean", "dual sample", "SingleTaskGP KB"]
    rows = []
    for name in problems:
        f = PROBLEMS[name]()
        d = f.dim
        unit = torch.stack([torch.zeros(d), torch.ones(d)]).to(torch.float64)
        lo, hi = f.bounds.to(torch.float64)
        res = {k: [] for k in kinds}
        for seed in range(seeds):
            X = draw_sobol_samples(unit, n=4 * d, q=1, seed=seed)[:, 0]
            raw = f(lo + (hi - lo) * X)
            y = (raw - raw.mean()) / raw.std()
            gp = _fit(X, y)
            dual = _dual(gp, X, y)
            for k in kinds:
                B = _batch(k, gp, dual, y, unit, seed, before)
                dist = torch.pdist(B).min().item()
                res[k].append(dist)
        for k, dists in res.items():
            rows.append({
                "problem": name, "strategy": k, "seeds": seeds,
                "min_pairwise_distance_mean": sum(dists) / len(dists),
                "min_pairwise_distance_min": min(dists),
                "batches_with_duplicate": sum(x < DUPLICATE for x in dists),
            })  # fmt: skip
    return {"experiment": "batch_diversity", "q": Q, "duplicate_below": DUPLICATE,
            "before": before, "rows": rows}  # fmt: skip


def table(out: dict) -> str:
    lines = [
        "| problem | strategy | mean smallest distance | smallest | batches with a repeat |",
        "|---|---|---|---|---|",
    ]
    for r in out["rows"]:
        lines.append(
            f"| {r['problem']} | {r['strategy']} | {r['min_pairwise_distance_mean']:.3f} | "
            f"{r['min_pairwise_distance_min']:.2g} | {r['batches_with_duplicate']} / {r['seeds']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 seed, Branin only")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--before", action="store_true", help="every strategy with a fixed incumbent")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    before = args.before or not _has_best_f()
    problems = ["Branin"] if args.quick else list(PROBLEMS)
    t0 = time.perf_counter()
    out = run(problems, 1 if args.quick else args.seeds, before)
    out["seconds"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, out)
    print(table(out))
    print(f"\n({out['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
