"""Per-update trace of one split-MNIST stream of the dual SVGP (Chang et al. 2023, Sec. 4.3):
after every update the kernel's outputscale and lengthscale, the test accuracy on each task seen
so far and the classes of the inducing inputs ``Z``; or (``--offline K``) one batch fit on a
class-balanced subsample of the first ``K`` tasks, every point held exactly (the evidence's own
optimum, without the streaming summary).

``--cfg`` overrides :data:`experiments.chang2023.split_mnist.DEFAULT` (e.g. ``m``,
``hyper_steps``, ``kernel_prior_cv``), ``--settings`` sets :class:`~bo_ncgp.models.DualSVGP`
attributes (e.g. ``memory_selection``, ``hyper_objective``, ``memory_size``).

Usage::

    bo-ncgp split-mnist-trace --cfg '{"m": 300}' --out trace.json
    bo-ncgp split-mnist-trace --cfg '{"m": 300, "hyper_steps": 0}'
    bo-ncgp split-mnist-trace --offline 5 --per-task 300 --cfg '{"m": 300}'
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from bo_ncgp.cli.common import HelpFormatter
from bo_ncgp.likelihoods import Softmax
from experiments import harness
from experiments.chang2023 import split_mnist as sm
from experiments.chang2023.continual import kernel_hypers, pointwise


def _labels(train) -> dict[bytes, int]:
    return {x.numpy().tobytes(): int(t) for X, y in train for x, t in zip(X, y, strict=True)}


def _accuracy(model, test, eval_lik) -> tuple[float, list[float]]:
    hit, _ = pointwise(model, torch.cat([x for x, _ in test]), torch.cat([y for _, y in test]),
                       eval_lik)  # fmt: skip
    return float(hit.mean()), [float(h.mean()) for h in hit.split([x.shape[0] for x, _ in test])]


def trace(cfg: dict, settings: dict, method: str, seed: int, freeze_after: int | None) -> dict:
    """The stream of :func:`split_mnist.run_stream`, recorded after every update."""
    train, test = sm.load_tasks(cfg, seed)
    labels = _labels(train)
    torch.manual_seed(seed)
    stream = sm.minibatches(train, cfg, seed)
    model = sm.make_model(method, cfg, stream[0][1][: cfg["m"]], seed)
    for key, value in settings.items():
        setattr(model, key, value)
    eval_lik = Softmax(10, num_samples=cfg["eval_samples"])
    rows, t0 = [], time.perf_counter()
    for i, (t, X, y) in enumerate(stream):
        if freeze_after is not None and i == freeze_after:
            model.num_hyper_steps = 0
        model.update(X, y)
        acc, per_task = _accuracy(model, test[: t + 1], eval_lik)
        z = torch.tensor([labels.get(r.numpy().tobytes(), -1) for r in model.Z])
        rows.append({"update": i, "task": t, "accuracy_seen": acc, "task_accuracy": per_task,
                     **kernel_hypers(model), "Z_classes": torch.bincount(z + 1, minlength=11)
                     .tolist()[1:], "seconds": time.perf_counter() - t0})  # fmt: skip
        harness.log(
            json.dumps(
                {
                    k: rows[-1][k]
                    for k in ("update", "accuracy_seen", "outputscale", "lengthscale_min")
                }
            )
        )
    acc, per_task = _accuracy(model, test, eval_lik)
    return {"rows": rows, "final": {"accuracy": acc, "task_accuracy": per_task}}


def offline(cfg: dict, settings: dict, tasks: int, per_task: int, steps: int) -> dict:
    """One batch fit (every point exact, ``memory_cap=None``) on ``per_task`` images of each of
    the first ``tasks`` tasks; its hyperparameters and accuracy on those tasks' test images."""
    train, test = sm.load_tasks(cfg, 0)
    X = torch.cat([x[:per_task] for x, _ in train[:tasks]])
    y = torch.cat([t[:per_task] for _, t in train[:tasks]])
    perm = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))
    X, y = X[perm], y[perm]
    model = sm.make_model("ours", cfg, X[: cfg["m"]], 0)
    model.memory_size, model.memory_cap, model.num_hyper_steps = None, None, steps
    for key, value in settings.items():
        setattr(model, key, value)
    t0 = time.perf_counter()
    model.update(X, y)
    acc, per = _accuracy(model, test[:tasks], Softmax(10, num_samples=cfg["eval_samples"]))
    return {"final": {"accuracy": acc, "task_accuracy": per, **kernel_hypers(model)},
            "seconds": time.perf_counter() - t0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bo-ncgp split-mnist-trace",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    p.add_argument("--cfg", default="{}", help="JSON overrides of split_mnist.DEFAULT")
    p.add_argument("--settings", default="{}", help="JSON DualSVGP attributes")
    p.add_argument(
        "--method", default="ours", choices=("ours", "ours_random"), help="memory selection"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the stream and the model")
    p.add_argument("--freeze-after", type=int, default=None,
                   help="no hyperparameter steps from this update on")  # fmt: skip
    p.add_argument("--offline", type=int, default=None, help="batch fit on the first K tasks")
    p.add_argument("--per-task", type=int, default=300, help="images per task (--offline)")
    p.add_argument("--steps", type=int, default=100, help="L-BFGS iterations (--offline)")
    p.add_argument("--out", default=None, help="JSON file for the trace")
    args = p.parse_args(argv)
    harness.setup(1)
    cfg = dict(sm.DEFAULT, **json.loads(args.cfg))
    settings = json.loads(args.settings)
    if args.offline:
        res = offline(cfg, settings, args.offline, args.per_task, args.steps)
    else:
        res = trace(cfg, settings, args.method, args.seed, args.freeze_after)
    res["args"] = vars(args)
    print(json.dumps(res["final"]))
    if args.out:
        harness.write_json(args.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
