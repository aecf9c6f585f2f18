"""Cost of the BoTorch adapter over the bare model, and of qKnowledgeGradient against m.

6-D Hartmann (BoTorch), 500 noisy observations, a :class:`~bo_ncgp.models.DualSVGP`
regression model (Matern-5/2 ARD kernel at fixed hyperparameters, all points in memory)
with m = 100 inducing points, wrapped in :class:`~bo_ncgp.bo.DualSVGPModel`. One process,
``torch.set_num_threads(1)``, float64, one warm-up call per variant, then the variants
interleaved (A, B, C, A, B, C, ...) so that load on the shared machine hits all of them.

Posterior rows: one posterior call at the input shapes that ``optimize_acqf`` evaluates,

* ``bare``     -- ``predict_f(X, full_cov=True)`` of the DualSVGP inside
  :func:`~bo_ncgp.models.dual.fixed_hyperparameters` (what the adapter wraps);
* ``bare + factor + samples`` (rows with ``q > 1``, where the acquisition samples) -- the
  least any sampler of the joint posterior computes: the same ``predict_f``, one Cholesky
  factor of its covariance and ``mean + L eps`` for the same base samples. This is the
  honest reference of the sampled rows: ``bare`` computes neither the factor nor the samples;
* ``adapter``  -- ``DualSVGPModel.posterior(X)`` with its mean and variance read, and for
  ``q > 1`` one reparameterised sample batch from fixed base samples (what the MC
  acquisitions draw);
* ``SingleTaskGP`` -- BoTorch's exact GP on the same 500 points (same kernel family, same
  reads), the peer.

One sampled row repeats q = 4 with BoTorch's ``Standardize`` outcome transform (the default
of an adapter built from data): the posterior goes through ``untransform_posterior``.

``--clock cpu`` times with the process's CPU time (``time.process_time``; one thread, so it
is the compute time of the call) instead of wall-clock time: on a shared, loaded machine it
leaves out the time the process waits for a core.

Shapes: LogEI (q = 1) on ``raw_samples = 512`` candidates without gradient and on 8 restarts
with a backward pass; q = 4 on 8 restarts; qLogNEI on 8 restarts of ``X_baseline`` + q = 4
points, with the baseline BoTorch keeps after pruning and with all n points
(``prune_baseline=False``: one joint (n + 4) x (n + 4) covariance per restart); and a fantasy
model (qKG's inner problem): ``condition`` on 64 fantasies x 2 candidates, then the posterior at
each fantasy model's candidate; and ``condition_on_observations`` alone against
``DualSVGP.condition`` (1 x 1 and fantasies x candidates, without transforms and with
``Normalize`` + ``Standardize``), the peer's column there one exact fantasy update.

qKG rows: BoTorch's ``qKnowledgeGradient`` (``num_fantasies = 64``, 2 candidates of q = 1:
64 x 2 = 128 fantasy models) on the adapter, at m = 100 and m = 500, forward and forward +
backward; the ratio of m = 500 to m = 100 is reported.

``--before PATH`` adds the columns of a run of this script on other code (e.g. the project's
main branch in a temporary worktree) from its JSON result; such columns are measured in a
separate process and are marked as such.

Usage::

    python benchmarks/adapter_overhead.py            # full
    python benchmarks/adapter_overhead.py --quick    # n = 120, m = 20 / 40, smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import gpytorch
import torch
from botorch.acquisition import qKnowledgeGradient
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.models import SingleTaskGP
from botorch.test_functions import Hartmann

from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.dual import fixed_hyperparameters
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results" / "adapter_overhead.json"

DEFAULT = {"n": 500, "m": 100, "m_large": 500, "raw_samples": 512, "restarts": 8,
           "num_fantasies": 64, "candidates": 2, "reps": 41, "kg_reps": 11}  # fmt: skip
QUICK = dict(DEFAULT, n=120, m=20, m_large=40, raw_samples=64, num_fantasies=8, reps=3,
             kg_reps=2)  # fmt: skip


def make_problem(n: int, m: int, seed: int = 0):
    """Hartmann-6 data and a DualSVGP with ``m`` inducing points (the first ``m`` inputs)."""
    g = torch.Generator().manual_seed(seed)
    f = Hartmann(dim=6, negate=True)
    X = torch.rand(n, 6, generator=g, dtype=torch.float64)
    y = f(X) + 0.01 * torch.randn(n, generator=g, dtype=torch.float64)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=6))
    kernel = kernel.to(torch.float64)
    kernel.base_kernel.lengthscale = 0.6
    kernel.outputscale = 0.3
    dual = DualSVGP(kernel, Gaussian(0.01), X[:m], memory_size=None, num_hyper_steps=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # jitter on a dense K_zz at m = n
        dual.update(X, y)
    return X, y, dual


#: the clock of :func:`_interleaved` (``--clock``): wall-clock or the process's CPU time
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = CLOCKS["wall"]


def _interleaved(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, list[float]]:
    """Seconds per call of each variant: one warm-up each, then ``reps`` interleaved rounds."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = _clock()
            fn()
            times[k].append(_clock() - t0)
    return times


def _reads(post, base: torch.Tensor | None, grad_of: torch.Tensor | None) -> None:
    """What an acquisition reads from a posterior (mean, variance, samples), then a backward
    pass if the inputs require grad."""
    total = post.mean.sum() + post.variance.sum()
    if base is not None:
        total = total + post.rsample_from_base_samples(base.shape[:1], base).sum()
    if grad_of is not None:
        torch.autograd.grad(total, grad_of)


def _bare_reads(mean, var, grad_of: torch.Tensor | None) -> None:
    if grad_of is not None:
        torch.autograd.grad(mean.sum() + var.sum(), grad_of)


def _ratio_stats(num: list[float], den: list[float]) -> dict[str, float]:
    """Per-round ratios (median, min, max; rounds are interleaved) and the ratio of the
    minima (the least disturbed by load on a shared machine)."""
    r = sorted(a / b for a, b in zip(num, den, strict=True))
    return {"median": statistics.median(r), "min": r[0], "max": r[-1],
            "of_minima": min(num) / min(den)}  # fmt: skip


def posterior_rows(cfg: dict, X, y, dual) -> list[dict]:
    """Adapter vs bare vs SingleTaskGP at the shapes of optimize_acqf."""
    model = DualSVGPModel.from_model(dual)
    peer = SingleTaskGP(X, y.unsqueeze(-1))
    peer.eval()
    torch.manual_seed(0)  # prune_baseline samples
    nei = qLogNoisyExpectedImprovement(model, X_baseline=X, prune_baseline=True)
    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)

    r, q4 = cfg["restarts"], 4
    cases = [
        ("LogEI raw samples, q=1", rand(cfg["raw_samples"], 1, 6), False),
        ("LogEI restarts + backward, q=1", rand(r, 1, 6), True),
        ("q=4 restarts + backward", rand(r, q4, 6), True),
        ("qLogNEI restarts + backward, pruned baseline + q=4", nei.X_baseline, True),
        ("qLogNEI restarts + backward, all n baseline + q=4", X, True),
    ]
    rows = []
    for name, Xq, grad in cases:
        if Xq.dim() == 2:  # a baseline: X_full = [X_baseline, X] as qLogNEI evaluates it
            Xq = torch.cat([Xq.expand(r, *Xq.shape), rand(r, q4, 6)], -2)
        q = Xq.shape[-2]
        base = torch.randn(32, *Xq.shape[:-1], generator=g, dtype=torch.float64)
        base = base if q > 1 else None
        rows.append(_posterior_case(name, Xq, grad, base, model, dual, peer, cfg["reps"]))
    rows.append(_standardized_case(cfg, X, y, dual, rand, g))
    rows.append(_fantasy_case(cfg, model, dual, peer, rand))
    rows += _condition_cases(cfg, dual, peer, rand)
    return rows


def _standardized_case(cfg, X, y, dual, rand, g) -> dict:
    """q = 4 with ``Standardize``: the adapter and ``SingleTaskGP`` both untransform their
    posteriors (the bare columns are the untransformed model's)."""
    from botorch.models.transforms import Standardize

    def standardize():
        tf = Standardize(m=1).to(torch.float64)
        tf(y.unsqueeze(-1))
        return tf.eval()

    model = DualSVGPModel.from_model(dual, outcome_transform=standardize())
    peer = SingleTaskGP(X, y.unsqueeze(-1), outcome_transform=standardize())
    peer.eval()
    Xq = rand(cfg["restarts"], 4, 6)
    base = torch.randn(32, *Xq.shape[:-1], generator=g, dtype=torch.float64)
    name = "q=4 restarts + backward, Standardize"
    return _posterior_case(name, Xq, True, base, model, dual, peer, cfg["reps"], scaled=True)


def _posterior_case(name, Xq, grad, base, model, dual, peer, reps, scaled=False) -> dict:
    Xg = Xq.clone().requires_grad_(grad)

    def bare():
        with fixed_hyperparameters(), torch.set_grad_enabled(grad):
            _bare_reads(*dual.predict_f(Xg, full_cov=True), Xg if grad else None)

    def adapter():
        with torch.set_grad_enabled(grad):
            _reads(model.posterior(Xg), base, Xg if grad else None)

    def bare_factor():  # the least a sampler needs: the moments, one Cholesky, the samples
        with fixed_hyperparameters(), torch.set_grad_enabled(grad):
            mean, cov = dual.predict_f(Xg, full_cov=True)
            L = torch.linalg.cholesky(cov)
            total = mean.sum() + cov.diagonal(dim1=-2, dim2=-1).sum()
            total = total + (mean.unsqueeze(-1) + L @ base.movedim(0, -1)).sum()
            if grad:
                torch.autograd.grad(total, Xg)

    def single_task():
        with torch.set_grad_enabled(grad):
            _reads(peer.posterior(Xg), base, Xg if grad else None)

    fns = {"bare": bare, "adapter": adapter, "SingleTaskGP": single_task}
    if base is not None:
        fns["bare + factor + samples"] = bare_factor
    t = _interleaved(fns, reps)
    with torch.no_grad(), fixed_hyperparameters():
        mean, cov = dual.predict_f(Xq, full_cov=True)
        post = model.posterior(Xq)
        if scaled:  # back to the model's scale
            tf = model.outcome_transform
            post_mean = (post.mean[..., 0] - tf.means[..., 0]) / tf.stdvs[..., 0]
            post_cov = post.distribution.covariance_matrix / tf.stdvs[..., 0] ** 2
        else:
            post_mean, post_cov = post.mean[..., 0], post.distribution.covariance_matrix
        diff = max(float((post_mean - mean).abs().max()), float((post_cov - cov).abs().max()))
    return _row(name, tuple(Xq.shape), t, diff)


def _fantasy_case(cfg, model, dual, peer, rand) -> dict:
    """qKG's inner problem: condition on fantasies x candidates, then one posterior each."""
    nf, nc = cfg["num_fantasies"], cfg["candidates"]
    Xc = rand(nc, 1, 6)
    Yf = torch.randn(nf, nc, 1, 1, dtype=torch.float64)
    Xq = rand(nf, nc, 1, 6)

    def bare():
        with fixed_hyperparameters():
            dual.condition(Xc, Yf[..., 0]).predict_f(Xq, full_cov=True)

    def adapter():
        post = model.condition_on_observations(Xc, Yf).posterior(Xq)
        post.mean, post.variance  # noqa: B018  (read as an acquisition does)

    def single_task():
        post = peer.condition_on_observations(Xc.expand(nf, nc, 1, 6), Yf).posterior(Xq)
        post.mean, post.variance  # noqa: B018

    t = _interleaved({"bare": bare, "adapter": adapter}, cfg["reps"])
    # the peer's batched fantasy update costs seconds: one warm-up and one timed call
    t["SingleTaskGP"] = _interleaved({"SingleTaskGP": single_task}, 1)["SingleTaskGP"] * len(
        t["bare"]
    )
    with torch.no_grad(), fixed_hyperparameters():
        mean, cov = dual.condition(Xc, Yf[..., 0]).predict_f(Xq, full_cov=True)
        post = model.condition_on_observations(Xc, Yf).posterior(Xq)
        diff = max(
            float((post.mean[..., 0] - mean).abs().max()),
            float((post.distribution.covariance_matrix - cov).abs().max()),
        )
    name = f"fantasy model: condition {nf} x {nc} + posterior, q=1"
    return _row(name, tuple(Xq.shape), t, diff)


def _condition_cases(cfg, dual, peer, rand) -> list[dict]:
    """``condition_on_observations`` alone against ``DualSVGP.condition`` (the adapter's
    share of a fantasy model), without transforms and with ``Normalize`` + ``Standardize``."""
    from botorch.models.transforms import Normalize, Standardize

    nf, nc = cfg["num_fantasies"], cfg["candidates"]
    g = torch.Generator().manual_seed(3)
    standardize = Standardize(m=1)
    standardize(torch.randn(20, 1, generator=g, dtype=torch.float64))
    bounds = torch.stack([torch.zeros(6), torch.ones(6)]).to(torch.float64)
    transformed = DualSVGPModel.from_model(
        dual, input_transform=Normalize(d=6, bounds=bounds), outcome_transform=standardize.eval()
    )
    transformed.eval()
    rows = []
    for F, C, model, label in [
        (1, 1, DualSVGPModel.from_model(dual), ""),
        (nf, nc, DualSVGPModel.from_model(dual), ""),
        (nf, nc, transformed, ", Normalize + Standardize"),
    ]:
        Xc = rand(C, 1, 6)
        Yf = torch.randn(F, C, 1, 1, generator=g, dtype=torch.float64)
        Yt = transformed.outcome_transform(Yf)[0] if label else Yf

        def bare(Xc=Xc, Yt=Yt):
            with fixed_hyperparameters():
                return dual.condition(Xc, Yt[..., 0])

        def adapter(model=model, Xc=Xc, Yf=Yf):
            return model.condition_on_observations(Xc, Yf)

        def single_task(Xc=Xc, Yf=Yf, F=F, C=C):
            return peer.condition_on_observations(Xc.expand(F, C, 1, 6), Yf)

        t = _interleaved({"bare": bare, "adapter": adapter}, cfg["reps"])
        t["SingleTaskGP"] = _interleaved({"SingleTaskGP": single_task}, 1)["SingleTaskGP"] * len(
            t["bare"]
        )
        Xq = rand(F, C, 3, 6)
        with torch.no_grad(), fixed_hyperparameters():
            mean, cov = bare().predict_f(Xq, full_cov=True)
            post = model.eval().condition_on_observations(Xc, Yf)._latent_mean_cov(Xq)
            diff = max(
                float((post[0][..., 0] - mean).abs().max()), float((post[1] - cov).abs().max())
            )
        name = f"condition_on_observations only, {F} x {C} fantasies x candidates{label}"
        rows.append(_row(name, tuple(Xc.shape), t, diff))
    return rows


def _row(name: str, shape: tuple, t: dict[str, list[float]], diff: float) -> dict:
    med = {k: statistics.median(v) for k, v in t.items()}
    return {
        "case": name,
        "shape": list(shape),
        "seconds_median": med,
        "seconds_min": {k: min(v) for k, v in t.items()},
        "adapter_over_bare": _ratio_stats(t["adapter"], t["bare"]),
        "adapter_over_single_task_gp": _ratio_stats(t["adapter"], t["SingleTaskGP"]),
        "adapter_over_bare_factor": (
            _ratio_stats(t["adapter"], t["bare + factor + samples"])
            if "bare + factor + samples" in t
            else None
        ),
        "max_abs_diff_adapter_vs_bare": diff,
    }


def kg_rows(cfg: dict) -> list[dict]:
    """qKnowledgeGradient on the DualSVGP adapter at m and m_large, forward and backward."""
    nf, nc = cfg["num_fantasies"], cfg["candidates"]
    out = []
    for m in (cfg["m"], cfg["m_large"]):
        _, _, dual = make_problem(cfg["n"], m)
        kg = qKnowledgeGradient(DualSVGPModel.from_model(dual), num_fantasies=nf)
        Xkg = torch.rand(nc, 1 + nf, 6, generator=torch.Generator().manual_seed(2))
        Xkg = Xkg.to(torch.float64)
        Xg = Xkg.clone().requires_grad_(True)

        def forward(kg=kg, Xkg=Xkg):
            with torch.no_grad():
                kg(Xkg)

        def backward(kg=kg, Xg=Xg):
            torch.autograd.grad(kg(Xg).sum(), Xg)

        t = _interleaved({"forward": forward, "forward + backward": backward}, cfg["kg_reps"])
        with torch.no_grad():
            value = kg(Xkg)
        out.append(
            {
                "m": m,
                "seconds_median": {k: statistics.median(v) for k, v in t.items()},
                "seconds_min": {k: min(v) for k, v in t.items()},
                "seconds_max": {k: max(v) for k, v in t.items()},
                "value": value.tolist(),
                "finite": bool(torch.isfinite(value).all()),
            }
        )
    return out


def run(cfg: dict) -> dict:
    X, y, dual = make_problem(cfg["n"], cfg["m"])
    rows = posterior_rows(cfg, X, y, dual)
    kg = kg_rows(cfg)
    small, large = kg
    ratio = {
        k: large["seconds_median"][k] / small["seconds_median"][k] for k in small["seconds_median"]
    }
    return {
        "benchmark": "adapter_overhead",
        "config": cfg,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "posterior": rows,
        "qkg": kg,
        "qkg_large_over_small": ratio,
    }


def _ms(s: float) -> str:
    return f"{1e3 * s:.3g}"


def table(out: dict, before: dict | None = None) -> str:
    """Markdown tables: posterior rows and qKG rows (``before``: a run on other code)."""
    old = {r["case"]: r for r in before["posterior"]} if before else {}
    header = ["case", "X shape", "bare ms", "adapter ms",
              "adapter / bare: median (min-max); of minima",
              "adapter / (bare + factor + samples): median; of minima", "SingleTaskGP ms",
              "adapter / SingleTaskGP"]  # fmt: skip
    if before:
        header += ["before: adapter / bare: median; of minima", "before: adapter ms"]
    lines = []
    for r in out["posterior"]:
        s, a, p = r["seconds_median"], r["adapter_over_bare"], r["adapter_over_single_task_gp"]
        f = r.get("adapter_over_bare_factor")
        row = [r["case"], "x".join(map(str, r["shape"])), _ms(s["bare"]), _ms(s["adapter"]),
               f"{a['median']:.2f} ({a['min']:.2f}-{a['max']:.2f}); {a['of_minima']:.2f}",
               f"{f['median']:.2f}; {f['of_minima']:.2f}" if f else "",
               _ms(s["SingleTaskGP"]), f"{p['median']:.2f}"]  # fmt: skip
        if before:
            o = old.get(r["case"])
            b = o["adapter_over_bare"] if o else None
            row += (
                [f"{b['median']:.2f}; {b['of_minima']:.2f}", _ms(o["seconds_median"]["adapter"])]
                if o
                else ["", ""]
            )
        lines.append(row)
    text = markdown_table(header, lines)
    kg_header = ["qKG", "forward ms (min-max)", "forward + backward ms (min-max)"]
    if before:
        kg_header += ["before: forward ms", "before: forward + backward ms"]
    old_kg = {r["m"]: r for r in before["qkg"]} if before else {}
    kg_lines = []
    for r in out["qkg"]:
        s, lo, hi = r["seconds_median"], r["seconds_min"], r["seconds_max"]
        row = [f"m = {r['m']}"] + [
            f"{_ms(s[k])} ({_ms(lo[k])}-{_ms(hi[k])})" for k in ("forward", "forward + backward")
        ]
        if before:
            o = old_kg.get(r["m"])
            row += [_ms(o["seconds_median"][k]) if o else "" for k in s]
        kg_lines.append(row)
    ratio = out["qkg_large_over_small"]
    row = [f"m = {out['qkg'][1]['m']} / m = {out['qkg'][0]['m']}"]
    row += [f"{ratio[k]:.2f}x" for k in ("forward", "forward + backward")]
    if before:
        row += [f"{before['qkg_large_over_small'][k]:.2f}x" for k in ratio]
    kg_lines.append(row)
    return text + "\n\n" + markdown_table(kg_header, kg_lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall-clock or CPU time")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--before", type=Path, default=None, help="JSON result of a run on other code")
    p.add_argument(
        "--before-label", default=None, help="what --before measured (e.g. a branch and commit)"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    global _clock
    _clock = CLOCKS[args.clock]
    out = run(QUICK if args.quick else DEFAULT)
    out["clock"] = args.clock
    before = json.loads(args.before.read_text()) if args.before else None
    if before is not None:
        label = args.before_label or str(args.before)
        out["before"] = {"source": label, "result": before}
    write_json(args.out, out)
    if before is not None:
        print(f"before: {out['before']['source']} (a separate process)\n")
    print(table(out, before))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
