"""Settings of the streaming dual SVGP compared on banana and split MNIST (Chang et al. 2023,
Secs. 3.4-3.5, 4.2-4.3), paired over seeds.

Each variant is a set of :class:`~bo_ncgp.models.DualSVGP` settings (:data:`VARIANTS`) on top
of the experiment's own configuration (:mod:`experiments.chang2023.banana`'s or
:mod:`experiments.chang2023.split_mnist`'s ``DEFAULT``, with the size overrides below) and a
memory rule:

* ``paper`` -- Eq. 26 as written: the memory's likelihood scaled by ``n_old / n_M``, the
  summarised old data held fixed as a dual pair, ``hyper_steps`` Adam steps per update;
* ``paper_50`` -- the same with 50 Adam steps (the paper's split-MNIST setting);
* ``default`` -- the library's defaults (L-BFGS to convergence, the summarised old data held
  on ``f(Z)``, memory points counted once);
* ``default_random``, ``default_balanced``, ``default_no_memory`` -- the defaults with a
  uniformly random memory, a label-balanced BLS memory, no memory.

Cells: final test accuracy / NLPD, mean (std) over seeds, seconds per run; the same seeds for
every variant (paired). Results: ``experiments/chang2023/results/streaming_variants/
<dataset>.json``.

Usage::

    bo-ncgp streaming-variants --quick
    bo-ncgp streaming-variants --dataset banana --seeds 5
    bo-ncgp streaming-variants --dataset mnist --seeds 3 --max-train-per-task 500 \\
        --max-test-per-task 200 --batch-size 100 --m 100
"""

from __future__ import annotations

import sys
import time

import torch

from experiments import harness

OUT = harness.results_dir(__file__, "streaming_variants")

PAPER = {"hyper_optimizer": "adam", "rest_factor": "dual", "memory_scaling": True}
#: name -> (DualSVGP settings, memory method, cfg overrides)
VARIANTS = {
    "paper": (PAPER, "ours", {}),
    "paper_50": (PAPER, "ours", {"hyper_steps": 50}),
    "default": ({}, "ours", {}),
    "default_random": ({}, "ours_random", {}),
    "default_balanced": ({"memory_selection": "bls_balanced"}, "ours", {}),
    "default_no_memory": ({}, "ours_no_memory", {}),
}


def run_banana(cfg: dict, settings: dict, method: str, seed: int, root=None) -> dict:
    from experiments.chang2023 import banana

    data = banana.load_data(cfg, root)
    memory = 0 if method == "ours_no_memory" else cfg["memory_size"]
    selection = "random" if method == "ours_random" else "bls"
    torch.manual_seed(seed)
    res = banana.stream(data, dict(cfg, **settings), memory, selection, seed)
    last = res["per_batch"][-1]
    seconds = sum(b["seconds"] for b in res["per_batch"])
    return {"accuracy": last["accuracy"], "nlpd": last["nlpd"], "seconds": seconds,
            "outputscale": res["final_state"]["outputscale"]}  # fmt: skip


def run_mnist(cfg: dict, settings: dict, method: str, seed: int, root=None) -> dict:
    from experiments.chang2023 import split_mnist

    train, test = split_mnist.load_tasks(cfg, seed, root)
    t0 = time.perf_counter()
    res = split_mnist.run_stream(method, train, test, dict(cfg, **settings), seed, progress=False)
    return {
        "accuracy": res["final"]["accuracy"],
        "nlpd": res["final"]["nlpd"],
        "seconds": time.perf_counter() - t0,
        "memory_classes": res.get("memory_classes"),
    }


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, seeds=True, root=True)
    p.add_argument(
        "--dataset", choices=("banana", "mnist"), default="banana", help="the stream to learn"
    )
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=None,
        help="hyperparameter-learning and memory variants to compare (default: all)",
    )
    for name, text in (
        ("m", "inducing points"),
        ("batch-size", "points per streaming update"),
        ("max-train-per-task", "training images per task (split MNIST)"),
        ("max-test-per-task", "test images per task (split MNIST)"),
        ("hyper-steps", "hyperparameter steps per update"),
    ):
        p.add_argument(
            f"--{name}", type=int, default=None, help=f"{text} (default: the experiment's)"
        )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    if args.dataset == "banana":
        from experiments.chang2023 import banana as module
    else:
        from experiments.chang2023 import split_mnist as module
    cfg = harness.preset(module.DEFAULT, module.QUICK, args)
    for key in ("m", "batch_size", "max_train_per_task", "max_test_per_task", "hyper_steps"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    seeds = int(cfg["seeds"]) if args.seeds is None else args.seeds
    names = args.variants or (["paper", "default", "default_random", "default_no_memory"]
                              if args.quick else list(VARIANTS))  # fmt: skip
    run = run_banana if args.dataset == "banana" else run_mnist
    results = {"experiment": "dual_svgp_streaming_variants", "dataset": args.dataset,
               "config": cfg, "runs": {}}  # fmt: skip
    for seed in range(seeds):  # seeds outermost: every variant gets each seed (paired)
        for name in names:
            settings, method, over = VARIANTS[name]
            res = run(dict(cfg, **over), settings, method, seed, args.root)
            results["runs"].setdefault(name, []).append({"seed": seed, **res})
            harness.log(f"{args.dataset} {name} seed {seed}: {res}")
    rows, values = [], []
    for name, rs in results["runs"].items():
        acc = harness.summary([r["accuracy"] for r in rs])
        nlpd = harness.summary([r["nlpd"] for r in rs])
        secs = harness.summary([r["seconds"] for r in rs])
        values += [r["nlpd"] for r in rs]
        rows.append([name, harness.fmt(acc), harness.fmt(nlpd), f"{secs['mean']:.1f}", len(rs)])
    results["summary"] = rows
    harness.write_json(args.out / f"{args.dataset}.json", results)
    print(harness.markdown_table(["variant", "accuracy", "NLPD", "seconds", "seeds"], rows))
    print(f"results written to {args.out}", file=sys.stderr)
    return harness.exit_code(values)


if __name__ == "__main__":
    raise SystemExit(main())
