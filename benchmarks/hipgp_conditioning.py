"""Time of HIPGP.condition against refitting, in the setting of ``bo-ncgp survey``.

Setting: the magnetometer survey (:class:`~bo_ncgp.problems.survey.MagnetometerSurvey`, a
pool of 800 candidate locations and 400 test readings); hyperparameters learned on 20
initial surveys (:func:`~bo_ncgp.campaigns.strategies.survey.learn_hyperparameters`), a HIP-GP
on a 32 x 32 grid (FFT whitening, 2 x 2 blocks, 10 natural-gradient epochs) fitted on them;
then ``q`` = 1, 10, 80 further surveys. Each variant ends with the posterior on the pool (what
an acquisition needs) and is timed as the median over repetitions after one warm-up, the
variants interleaved (A, B, C, A, B, C, ...):

* ``condition (rows cached)``: ``condition(X_q, y_q)`` + ``predict_f(pool)`` with the pool's
  whitened rows remembered (:meth:`~bo_ncgp.models.HIPGP.remember_rows`, as the campaign);
* ``condition``: the same with the rows recomputed (PCG solves for the pool);
* ``HIP-GP refit``: 10 natural-gradient epochs on all ``20 + q`` surveys from a reset ``q``,
  then ``predict_f(pool)`` (rows cached);
* ``SVGP refit``: the Cholesky-whitened, full-rank SVGP on the same grid, its exact ``q`` on
  all surveys (one natural-gradient step), then ``predict_f(pool)`` (rows cached).

The test RMSE of each posterior mean is reported beside its time. Results:
``benchmarks/results/hipgp_conditioning.json`` and a markdown table on stdout.

Usage::

    python benchmarks/hipgp_conditioning.py            # full
    python benchmarks/hipgp_conditioning.py --quick    # smoke test (smaller, one repetition)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.campaigns.strategies.survey import (
    DTYPE,
    FieldModelConfig,
    HIPGPField,
    SVGPField,
    learn_hyperparameters,
)
from bo_ncgp.models.hipgp import Grid
from bo_ncgp.problems.survey import MagnetometerSurvey
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results"
FULL = {"pool": 800, "test": 400, "grid": 32, "initial": 20, "qs": (1, 10, 80), "reps": 3}
QUICK = {"pool": 120, "test": 60, "grid": 10, "initial": 10, "qs": (1, 5), "reps": 1}


def run(cfg: dict, root: str | None = None) -> dict:
    """Times (s) and test RMSEs of every variant for every ``q``."""
    torch.set_num_threads(1)
    survey = MagnetometerSurvey.from_data(cfg["pool"], cfg["test"], root=root)
    pool = torch.as_tensor(survey.pool_X, dtype=DTYPE)
    test = torch.as_tensor(survey.test_X, dtype=DTYPE)
    y_pool = torch.as_tensor(survey.pool_y, dtype=DTYPE)
    order = torch.as_tensor(survey.initial_design(cfg["pool"], None))
    n0 = cfg["initial"]
    shift, scale = float(y_pool[order[:n0]].mean()), float(y_pool[order[:n0]].std())
    ys = (y_pool - shift) / scale
    X0, y0 = pool[order[:n0]], ys[order[:n0]]
    kernel, noise = learn_hyperparameters(X0, y0)
    both = torch.cat([pool, test])
    lo, hi = both.min(0).values - 0.5, both.max(0).values + 0.5
    grid = Grid(lo, hi, (cfg["grid"],) * 2, dtype=DTYPE)
    config = FieldModelConfig(grid_size=cfg["grid"])
    hip, svgp = HIPGPField(config), SVGPField(config)
    hip.start(X0, y0, kernel, noise, grid, both)
    svgp.start(X0, y0, kernel, noise, grid, both)
    uncached = copy.deepcopy(hip.base)
    uncached._row_cache = None

    def rmse(model) -> float:
        with torch.no_grad():
            mean = model.predict_f(test)[0]
        return float(((mean * scale + shift - torch.as_tensor(survey.test_y)) ** 2).mean().sqrt())

    out: dict = {"config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}}
    out["hyperparameters"] = {
        "lengthscale": float(kernel.base_kernel.lengthscale),
        "outputscale": float(kernel.outputscale),
        "noise": noise,
    }
    out["rows"] = []
    for q in cfg["qs"]:
        Xq, yq = pool[order[n0 : n0 + q]], ys[order[n0 : n0 + q]]
        Xa, ya = pool[order[: n0 + q]], ys[order[: n0 + q]]
        variants = _variants(hip.base, uncached, svgp.base, Xq, yq, Xa, ya, pool, config)
        times: dict[str, list[float]] = {name: [] for name in variants}
        models = {name: fn() for name, fn in variants.items()}  # warm-up
        for _ in range(cfg["reps"]):
            for name, fn in variants.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        for name in variants:
            out["rows"].append(
                {
                    "q": q,
                    "variant": name,
                    "median_s": statistics.median(times[name]),
                    "min_s": min(times[name]),
                    "max_s": max(times[name]),
                    "test_rmse": rmse(models[name]),
                }
            )
    return out


def _variants(base, uncached, svgp, Xq, yq, Xa, ya, pool, config) -> dict:
    """The timed variants: ``name -> fn()`` returning the model whose test RMSE is reported."""
    refit = copy.deepcopy(base)
    refit._row_cache = base._row_cache

    def cond_cached():
        with torch.no_grad():
            m = base.condition(Xq, yq)
            m.predict_f(pool)
        return m

    def cond_uncached():
        with torch.no_grad():
            m = uncached.condition(Xq, yq)
            m.predict_f(pool)
        return m

    def hip_refit():
        with torch.no_grad():
            refit.q.reset()
            refit.fit(Xa, ya, num_epochs=int(config.natgrad_epochs))
            refit.predict_f(pool)
        return refit

    def svgp_refit():
        with torch.no_grad():
            svgp.q.reset()
            svgp.natgrad_step(Xa, ya)
            svgp.predict_f(pool)
        return svgp

    return {
        "condition (rows cached)": cond_cached,
        "condition": cond_uncached,
        "HIP-GP refit": hip_refit,
        "SVGP refit": svgp_refit,
    }


def table(out: dict) -> str:
    """The markdown table of a result."""
    header = ["q", "variant", "median s", "min-max s", "test RMSE"]
    rows = [
        [
            r["q"],
            r["variant"],
            f"{r['median_s']:.3f}",
            f"{r['min_s']:.3f}-{r['max_s']:.3f}",
            f"{r['test_rmse']:.3f}",
        ]
        for r in out["rows"]
    ]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke test (smaller, one repetition)")
    p.add_argument("--root", default=None, help="data root (default $BO_NCGP_DATA)")
    p.add_argument("--out", type=Path, default=None, help="JSON result file")
    args = p.parse_args(argv)
    name = "hipgp_conditioning_quick.json" if args.quick else "hipgp_conditioning.json"
    out = run(QUICK if args.quick else FULL, args.root)
    write_json(args.out or OUT / name, out)
    print(table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
