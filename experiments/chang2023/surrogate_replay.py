"""Replay a finished campaign's evaluations into a streaming surrogate and BoTorch's refitted
``SingleTaskGP``, to tell a difference of method from a difference of trajectory.

The batches of a campaign folder (``state.json`` of ``bo-ncgp bench``) are fed in their
order to the objective surrogate of a box-bounded strategy whose model is SingleTaskGP's
(``dual-matched`` and ``dual-matched-fantasy``: learned constant mean, outputscale and noise
prior from the values' sample variance). After the initial design and every ``--every``
evaluations from there (and at the end) a ``SingleTaskGP`` is
fitted by ``fit_gpytorch_mll`` on the same unit-cube points and standardised values, and both
fits are reported in SingleTaskGP's units: lengthscales, noise, constant mean and the exact
log marginal likelihood of each set of hyperparameters. At the end, with the surrogate's
hyperparameters copied into the ``SingleTaskGP``: the largest difference of the two BoTorch
models' joint posteriors over the data and a batch, and ``qLogNoisyExpectedImprovement``
(the bench's acquisition for ``q > 1``, same ``SobolQMCNormalSampler`` seed) of both over
``--batches`` random batches of the campaign's batch size, for each ``--samples`` count: the
rank correlation and the largest difference among the 8 best batches.

Usage::

    bo-ncgp surrogate-replay experiments/chang2023/results/bench_q4/levy4/botorch/seed_0
    python -m experiments.chang2023.surrogate_replay RUN --strategy dual-matched --every 8 \\
        --samples 512 8192 --out replay.json

Writes ``--out`` (default ``surrogate_replay.json`` in the run's folder) and prints a table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bo_ncgp.cli.common import HelpFormatter
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.base import Evaluation
from experiments import harness


def _stgp(U: torch.Tensor, Y: torch.Tensor, fit: bool = True):
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    gp = SingleTaskGP(U, Y.unsqueeze(-1))
    if fit:
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp))
    return gp


def _mll(gp) -> float:
    """The exact log marginal likelihood (summed over points, priors included as
    ``ExactMarginalLogLikelihood`` adds them) of ``gp``'s standardised targets."""
    from gpytorch.mlls import ExactMarginalLogLikelihood

    gp.train()
    with torch.no_grad():
        mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
        value = mll(gp(*gp.train_inputs), gp.train_targets) * gp.train_targets.numel()
    gp.eval()
    return float(value)


def _as_stgp(model, U: torch.Tensor, Y: torch.Tensor):
    """A ``SingleTaskGP`` on ``(U, Y)`` with the DualSVGP ``model``'s hyperparameters in
    SingleTaskGP's standardised units (the model's outputscale is the values' variance)."""
    gp = _stgp(U, Y, fit=False)
    mu, var = float(Y.mean()), float(Y.var())
    with torch.no_grad():
        gp.covar_module.lengthscale = model.kernel.base_kernel.lengthscale.detach()
        gp.likelihood.noise = float(model.likelihood.noise.detach()) / var
        gp.mean_module.constant.fill_((float(model.mean_constant) - mu) / var**0.5)
    gp.eval()
    return gp


def _hypers(gp) -> dict[str, Any]:
    return {
        "lengthscale": gp.covar_module.lengthscale.detach().reshape(-1).tolist(),
        "noise": float(gp.likelihood.noise.detach()),
        "constant": float(gp.mean_module.constant.detach()),
        "log_marginal": _mll(gp),
    }


def _acquisitions(gp, ours, U: torch.Tensor, q: int, batches: int, samples: list[int]) -> dict:
    from botorch.acquisition import qLogNoisyExpectedImprovement
    from botorch.sampling import SobolQMCNormalSampler

    g = torch.Generator().manual_seed(0)
    Xq = torch.rand(batches, q, U.shape[-1], generator=g, dtype=U.dtype)
    with torch.no_grad():
        Z = torch.cat([U, Xq[0]])
        pa, pb = gp.posterior(Z), ours.posterior(Z)
        out: dict[str, Any] = {
            "posterior_mean_diff": float((pa.mean - pb.mean).abs().max()),
            "posterior_cov_diff": float((pa.covariance_matrix - pb.covariance_matrix).abs().max()),
            "posterior_var_max": float(pa.covariance_matrix.diagonal().max()),
            "by_samples": [],
        }
    for n in samples:
        vals = []
        for model in (gp, ours):
            torch.manual_seed(0)  # prune_baseline draws its samples from the global generator
            sampler = SobolQMCNormalSampler(torch.Size([n]), seed=1)
            acq = qLogNoisyExpectedImprovement(
                model, X_baseline=U, sampler=sampler, prune_baseline=True
            )
            with torch.no_grad():
                vals.append(acq(Xq))
        ranks = torch.stack([v.argsort().argsort().to(U.dtype) for v in vals])
        top = vals[0].argsort(descending=True)[:8]
        out["by_samples"].append(
            {
                "samples": n,
                "rank_correlation": float(torch.corrcoef(ranks)[0, 1]),
                "top8_max_diff": float((vals[0][top] - vals[1][top]).abs().max()),
            }
        )
    return out


def replay(
    run: Path,
    strategy: str,
    every: int,
    batches: int,
    samples: list[int],
    problem: str | None = None,
) -> dict:
    """Replay the campaign in ``run`` (module docstring); the result as a dict. ``problem``:
    its registered name (default: the folder two levels up, as ``bo-ncgp bench`` lays out
    ``OUT/<problem>/<strategy>/seed_<k>``)."""
    from bo_ncgp.campaigns.strategies.blackbox import MatchedObjectiveConfig
    from bo_ncgp.campaigns.strategies.registry import get_strategy_spec
    from bo_ncgp.problems.registry import make_problem

    state = harness.read_json(run / "state.json")
    prob = make_problem(problem or run.resolve().parent.parent.name, state["seed"])
    s = get_strategy_spec("continuous", strategy).make()
    if not isinstance(getattr(s, "model_config", None), MatchedObjectiveConfig):
        raise InputDataError(
            f"surrogate-replay: strategy {strategy!r} does not use SingleTaskGP's model "
            "(MatchedObjectiveConfig), so its hyperparameters have no SingleTaskGP "
            "counterpart; use dual-matched or dual-matched-fantasy"
        )
    s.setup(prob, state["seed"])
    evs = state["evaluations"]
    rows, n = [], 0
    first = len(state["batches"][0])  # the initial design: compared from there on
    for batch in state["batches"]:
        X = np.array([evs[i]["point"] for i in batch], dtype=float)
        s.observe(X, [Evaluation(evs[i]["value"], evs[i]["success"]) for i in batch], None)
        n += len(batch)
        if (n - first) % every and n != len(evs):
            continue
        gp = _stgp(s.U, s.Y)
        mapped = _as_stgp(s.surrogate.model, s.U, s.Y)
        rows.append({"n": n, "singletaskgp": _hypers(gp), "ours": _hypers(mapped)})
        harness.log(
            f"n={n}: log marginal SingleTaskGP {rows[-1]['singletaskgp']['log_marginal']:.3f}, "
            f"ours {rows[-1]['ours']['log_marginal']:.3f}"
        )
    q = state["batch_size"]
    end = _acquisitions(mapped, s.surrogate.botorch_model(), s.U, q, batches, samples)
    return {
        "run": str(run),
        "problem": prob.config(),
        "strategy": strategy,
        "rows": rows,
        "same_hyperparameters": end,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bo-ncgp surrogate-replay",
        description=__doc__.strip().splitlines()[0],
        formatter_class=HelpFormatter,
    )
    p.add_argument("run", type=Path, help="a campaign folder (with state.json)")
    p.add_argument("--strategy", default="dual-matched", help="the surrogate's strategy")
    p.add_argument("--problem", default=None,
                   help="registered problem name (default: the folder two levels up)")  # fmt: skip
    p.add_argument("--every", type=int, default=8, help="compare every N evaluations")
    p.add_argument("--batches", type=int, default=64, help="random batches for the acquisition")
    p.add_argument("--samples", type=int, nargs="+", default=[512, 8192],
                   help="QMC sample counts of qLogNEI")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="result file (JSON)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    if not (args.run / "state.json").is_file():
        p.error(f"{args.run} holds no state.json (a campaign folder of bo-ncgp bench)")
    for name in ("every", "batches"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if min(args.samples) < 1:
        p.error(f"--samples must be >= 1, got {args.samples}")
    harness.setup(args.threads)
    res = replay(args.run, args.strategy, args.every, args.batches, args.samples, args.problem)
    out = args.out or args.run / "surrogate_replay.json"
    harness.write_json(out, res)
    cells = [
        [
            r["n"],
            f"{r['singletaskgp']['log_marginal']:.3f}",
            f"{r['ours']['log_marginal']:.3f}",
            " / ".join(f"{v:.3f}" for v in r["singletaskgp"]["lengthscale"]),
            " / ".join(f"{v:.3f}" for v in r["ours"]["lengthscale"]),
        ]
        for r in res["rows"]
    ]
    head = ["n", "log marginal SingleTaskGP", "ours", "lengthscales SingleTaskGP", "ours"]
    print(harness.markdown_table(head, cells))
    end = res["same_hyperparameters"]
    print(
        f"same hyperparameters: posterior mean / covariance differ by at most "
        f"{end['posterior_mean_diff']:.2e} / {end['posterior_cov_diff']:.2e}"
    )
    for b in end["by_samples"]:
        print(
            f"qLogNEI, {b['samples']} samples: rank correlation {b['rank_correlation']:.3f}, "
            f"8 best batches within {b['top8_max_diff']:.3f}"
        )
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
