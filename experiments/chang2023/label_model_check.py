"""How well the constrained strategies' feasibility models predict success, fitted offline on
the first evaluations of finished campaigns.

For every campaign ``RUNS/<problem>/<strategy>/seed_<k>/state.json`` of a ``bo-ncgp bench
--suite constrained`` folder and every ``k`` in ``--at``, each label model is fitted on the
campaign's first ``k`` labelled evaluations and scored by the log loss (nats) of its
``P(feasible)``

* at ``--uniform`` uniform points of the unit cube, labelled by the problem's region, and
* at the campaign's next ``--next`` evaluations, the points its acquisition chose after
  seeing those ``k`` (where a feasibility model has to warn).

Label models: ``floor=<v>`` (and ``floor=none``) is ours, the streaming Gaussian DualSVGP of
the labels minus 1/2 of ``dual`` (:class:`~bo_ncgp.campaigns.strategies.blackbox.
StreamingDualObjective` with a learned constant mean) whose noise variance is bounded below
by ``v`` (``none``: the likelihood's ``1e-6``), ``P(feasible) = P(latent > 0)``;
``bernoulli`` is the ``botorch-bernoulli`` baseline's refitted variational probit GP
(:func:`~bo_ncgp.campaigns.strategies.bernoulli_constrained.fit_bernoulli_gp`),
``P(feasible) = Phi(mu / sqrt(1 + sigma^2))``. A constant predictor at the feasible share
``p`` scores ``-(p log p + (1 - p) log(1 - p))`` at uniform points.

Usage::

    bo-ncgp label-model-check experiments/chang2023/results/bench_constrained \\
        --models floor=none,floor=0.01,floor=0.1,bernoulli --out label_check.json

Writes ``--out`` (JSON: per problem and model the mean log losses and every value) and prints
a table.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bo_ncgp.cli.common import HelpFormatter
from experiments import harness

#: the problems of the constrained suite
PROBLEMS = ("branin-halfplane", "branin-disc", "hartmann6-ring", "levy4-corner")


def label_model(name: str, U: torch.Tensor, labels: torch.Tensor):
    """``V -> P(feasible at V)`` of the label model ``name`` (module docstring) fitted on the
    0/1 ``labels`` at unit-cube points ``U``.

    Example:
        >>> U = torch.rand(12, 2, dtype=torch.float64)
        >>> p = label_model("floor=0.1", U, (U.sum(-1) > 1).double())
        >>> p(torch.tensor([[0.9, 0.9], [0.05, 0.05]], dtype=torch.float64)).shape
        torch.Size([2])
    """
    from bo_ncgp.campaigns.strategies.bernoulli_constrained import fit_bernoulli_gp
    from bo_ncgp.campaigns.strategies.blackbox import DualConstrainedBO, ObjectiveModelConfig

    if name == "bernoulli":
        gp = fit_bernoulli_gp(U, labels)

        def prob(V: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                post = gp.posterior(V)
            mu, var = post.mean[..., 0], post.variance[..., 0]
            return torch.special.ndtr(mu / (1.0 + var).sqrt())

        return prob
    kind, _, value = name.partition("=")
    if kind != "floor" or not value:
        raise ValueError(f"unknown label model {name!r} (floor=<v>, floor=none or bernoulli)")
    floor = None if value == "none" else float(value)
    s = DualConstrainedBO.label_model(ObjectiveModelConfig(), U.shape[-1], noise_floor=floor)
    DualConstrainedBO.observe_labels(s, U, labels)
    model = s.model

    def prob(V: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            mu, var = model.predict_f(V)
        return torch.special.ndtr(mu / var.clamp_min(1e-18).sqrt())

    return prob


def log_loss(p: torch.Tensor, y: torch.Tensor) -> float:
    """Mean log loss (nats) of probabilities ``p`` for 0/1 outcomes ``y`` (``p`` clipped to
    ``[1e-6, 1 - 1e-6]``).

    Example:
        >>> round(log_loss(torch.tensor([0.5, 0.5]), torch.tensor([0.0, 1.0])), 4)  # log 2
        0.6931
    """
    p = p.clamp(1e-6, 1.0 - 1e-6)
    return float(-(y * p.log() + (1.0 - y) * (1.0 - p).log()).mean())


def check(
    runs: Path,
    strategy: str,
    models: list[str],
    at: list[int],
    uniform: int,
    following: int,
    problems: tuple[str, ...] = PROBLEMS,
) -> dict[str, Any]:
    """The log losses of every label model (module docstring), per problem."""
    from bo_ncgp.problems.registry import make_problem

    out: dict[str, Any] = {"runs": str(runs), "strategy": strategy, "at": at, "problems": {}}
    for name in problems:
        folders = sorted((runs / name / strategy).glob("seed_*"))
        folders = [f for f in folders if (f / "state.json").is_file()]
        if not folders:
            harness.log(f"{name}: no campaigns under {runs / name / strategy}")
            continue
        prob = make_problem(name)
        rng = np.random.default_rng(123)
        V = rng.random((uniform, prob.dim))
        yv = torch.tensor([float(prob.feasible(v)) for v in V])
        Vt = torch.as_tensor(V)
        lo, hi = (np.asarray(b, dtype=float) for b in prob.bounds)
        rows = {m: {"uniform": [], "next": []} for m in models}
        for folder in folders:
            evs = harness.read_json(folder / "state.json")["evaluations"]
            evs = [e for e in evs if e.get("success") is not None]
            X = np.array([e["point"] for e in evs], dtype=float)
            U = torch.as_tensor((X - lo) / (hi - lo))
            y = torch.tensor([float(bool(e["success"])) for e in evs])
            for k in at:
                if k + following > len(evs):
                    continue
                for m in models:
                    p = label_model(m, U[:k], y[:k])
                    rows[m]["uniform"].append(log_loss(p(Vt), yv))
                    rows[m]["next"].append(log_loss(p(U[k : k + following]), y[k : k + following]))
            harness.log(f"{name} {folder.name}: done")
        share = float(yv.mean())
        out["problems"][name] = {
            "feasible_share": share,
            "constant_log_loss": log_loss(torch.full_like(yv, share), yv),
            "models": {
                m: {
                    "uniform": float(np.mean(r["uniform"])),
                    "next": float(np.mean(r["next"])),
                    "values": r,
                }
                for m, r in rows.items()
            },
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bo-ncgp label-model-check",
        description=__doc__.strip().splitlines()[0],
        formatter_class=HelpFormatter,
    )
    p.add_argument("runs", type=Path, help="a bo-ncgp bench --suite constrained folder")
    p.add_argument("--strategy", default="dual", help="whose campaigns (default dual)")
    p.add_argument("--models", default="floor=none,floor=0.1,bernoulli",
                   help="comma-separated label models (module docstring)")  # fmt: skip
    p.add_argument("--at", default="20,30,40", help="comma-separated numbers of evaluations")
    p.add_argument("--uniform", type=int, default=3000, help="uniform test points")
    p.add_argument("--next", type=int, default=5, help="following evaluations scored")
    p.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated problems")
    p.add_argument("--out", type=Path, default=None, help="result file (JSON)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    try:
        at = [int(k) for k in args.at.split(",")]
    except ValueError:
        p.error(f"--at must be comma-separated integers, got {args.at!r}")
    if min(at) < 2 or args.uniform < 1 or args.next < 1:
        p.error("--at values must be >= 2, --uniform and --next >= 1")
    for m in models:
        if m != "bernoulli" and not (m.startswith("floor=") and len(m) > 6):
            p.error(f"unknown label model {m!r} (floor=<v>, floor=none or bernoulli)")
    if not args.runs.is_dir():
        p.error(f"{args.runs} is not a folder")
    harness.setup(args.threads)
    with warnings.catch_warnings():  # the fits' numerical warnings are not the result
        warnings.simplefilter("ignore")
        res = check(
            args.runs,
            args.strategy,
            models,
            at,
            args.uniform,
            args.next,
            tuple(x.strip() for x in args.problems.split(",") if x.strip()),
        )
    out = args.out or args.runs / "label_model_check.json"
    harness.write_json(out, res)
    cells = [
        [name, m, f"{r['uniform']:.3f}", f"{r['next']:.3f}", f"{v['constant_log_loss']:.3f}"]
        for name, v in res["problems"].items()
        for m, r in v["models"].items()
    ]
    head = ["problem", "label model", "log loss, uniform", f"next {args.next}", "constant"]
    print(harness.markdown_table(head, cells))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
