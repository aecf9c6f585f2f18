"""Settings of the streaming dual SVGP compared on banana, split MNIST and split Fashion-MNIST
(Chang et al. 2023, Secs. 3.4-3.5, 4.2-4.3), paired over seeds.

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
  uniformly random memory, a label-balanced BLS memory, no memory;
* ``default_stratified``, ``default_random_stratified`` -- the defaults with shares per label
  in proportion to the labels seen, drawn by BLS within each label (``"bls_stratified"``) and
  drawn uniformly within each label (``"random_stratified"``, the library's default memory
  rule); ``default_reservoir_stratified`` -- the same shares kept as a reservoir under the
  memory cap (``"reservoir_stratified"``);
* ``default_50``, ``default_balanced_50``, ``default_random_stratified_50`` -- ``default``,
  ``default_balanced`` and ``default_random_stratified`` with up to 50 hyperparameter steps
  per update (the paper's split-MNIST count);
* ``prior_balanced``, ``prior_random``, ``prior_random_stratified``, ``prior_balanced_50``,
  ``prior_random_stratified_50`` -- split (Fashion-)MNIST only: the defaults (label-balanced,
  random or random-stratified memory, up to 10 or 50 steps) with Gamma priors on the kernel's
  lengthscale and outputscale (means at the initial values, coefficient of variation 0.25):
  the evidence of separable labels keeps rising with the outputscale, so the steps need a
  prior to have a finite optimum;
* ``weak_prior_balanced``, ``weak_prior_random``, ``weak_prior_balanced_50`` -- the same with
  exponential priors (coefficient of variation 1) of the same means.

``default`` and ``default_50`` keep the paper's plain BLS memory whatever the library's default
``memory_selection`` is, so that every rule is named by its variant.

Cells: final test accuracy / NLPD, mean (std) over seeds, seconds per run, and the paired
difference of each variant's accuracy to ``default``'s, mean +- standard error over seeds; the
same seeds for every variant (paired). Results: ``experiments/chang2023/results/
streaming_variants/<dataset>.json``, rewritten after every run; ``--first-seed`` runs a later
range of seeds into ``<dataset>_seeds<a>-<b>.json`` and ``--merge`` summarises all files of a
data set in ``--out`` and its subfolders together (runs split over processes, one ``--out``
subfolder each). A split (Fashion-)MNIST run shows a progress bar over its minibatches on
stderr; each finished run is logged with its accuracy, NLPD, memory by class and kernel.

Usage::

    bo-ncgp streaming-variants --quick
    bo-ncgp streaming-variants --dataset banana --seeds 5
    bo-ncgp streaming-variants --dataset mnist --seeds 3 --max-train-per-task 500 \\
        --max-test-per-task 200 --batch-size 100 --m 100
    bo-ncgp streaming-variants --dataset fashion --seeds 2 --batch-size 2000
    bo-ncgp streaming-variants --dataset fashion --merge
"""

from __future__ import annotations

import math
import sys
import time

import torch

from experiments import harness

OUT = harness.results_dir(__file__, "streaming_variants")

PAPER = {"hyper_optimizer": "adam", "rest_factor": "dual", "memory_scaling": True}
#: Gamma priors on split MNIST's lengthscale and outputscale (:func:`split_mnist.kernel`)
PRIOR = {"kernel_prior_cv": 0.25}
#: ... exponential priors with those means (coefficient of variation 1)
WEAK_PRIOR = {"kernel_prior_cv": 1.0}
BALANCED = {"memory_selection": "bls_balanced"}
RANDOM_STRATIFIED = {"memory_selection": "random_stratified"}
RESERVOIR_STRATIFIED = {"memory_selection": "reservoir_stratified"}
#: name -> (DualSVGP settings, memory method, cfg overrides)
VARIANTS = {
    "paper": (PAPER, "ours", {}),
    "paper_50": (PAPER, "ours", {"hyper_steps": 50}),
    "default": ({}, "ours", {}),
    "default_random": ({}, "ours_random", {}),
    "default_balanced": (BALANCED, "ours", {}),
    "default_stratified": ({"memory_selection": "bls_stratified"}, "ours", {}),
    "default_random_stratified": (RANDOM_STRATIFIED, "ours", {}),
    "default_reservoir_stratified": (RESERVOIR_STRATIFIED, "ours", {}),
    "default_random_stratified_50": (RANDOM_STRATIFIED, "ours", {"hyper_steps": 50}),
    "default_no_memory": ({}, "ours_no_memory", {}),
    "default_50": ({}, "ours", {"hyper_steps": 50}),
    "default_balanced_50": (BALANCED, "ours", {"hyper_steps": 50}),
    "prior_balanced": (BALANCED, "ours", PRIOR),
    "prior_random": ({}, "ours_random", PRIOR),
    "prior_balanced_50": (BALANCED, "ours", dict(PRIOR, hyper_steps=50)),
    "prior_random_stratified": (RANDOM_STRATIFIED, "ours", PRIOR),
    "prior_random_stratified_50": (RANDOM_STRATIFIED, "ours", dict(PRIOR, hyper_steps=50)),
    "weak_prior_balanced": (BALANCED, "ours", WEAK_PRIOR),
    "weak_prior_random": ({}, "ours_random", WEAK_PRIOR),
    "weak_prior_balanced_50": (BALANCED, "ours", dict(WEAK_PRIOR, hyper_steps=50)),
}
#: the variant that the paired differences are taken against
REFERENCE = "default"
HEADER = ["variant", "accuracy", "NLPD", "seconds", "seeds", f"accuracy - {REFERENCE}'s"]


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
    """One stream of split (Fashion-)MNIST with a progress bar over its minibatches."""
    from experiments.chang2023 import split_mnist

    train, test = split_mnist.load_tasks(cfg, seed, root)
    t0 = time.perf_counter()
    res = split_mnist.run_stream(method, train, test, dict(cfg, **settings), seed, progress=True)
    return {
        "accuracy": res["final"]["accuracy"],
        "nlpd": res["final"]["nlpd"],
        "seconds": time.perf_counter() - t0,
        "memory_classes": res.get("memory_classes"),
        "task_accuracy": res["per_task"][-1]["task_accuracy"],
        "kernel": {k: v for k, v in res["curve"][-1].items() if k not in ("task", "accuracy_seen")},
    }


def paired_difference(runs: list[dict], reference: list[dict]) -> dict[str, float] | None:
    """Mean and standard error over the shared seeds of ``accuracy - reference accuracy``
    (``None`` without a shared seed; the standard error is NaN for one seed)."""
    ref = {r["seed"]: r["accuracy"] for r in reference}
    d = [r["accuracy"] - ref[r["seed"]] for r in runs if r["seed"] in ref]
    if not d:
        return None
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1) if len(d) > 1 else math.nan
    return {"mean": mean, "se": math.sqrt(var / len(d)), "n": len(d)}


def summarise(runs: dict[str, list[dict]]) -> list[list]:
    """Table rows: variant, accuracy, NLPD, seconds, seeds, paired accuracy difference to
    :data:`REFERENCE`."""
    rows = []
    for name, rs in runs.items():
        acc = harness.summary([r["accuracy"] for r in rs])
        nlpd = harness.summary([r["nlpd"] for r in rs])
        secs = harness.summary([r["seconds"] for r in rs])
        diff = paired_difference(rs, runs.get(REFERENCE, []))
        cell = "--" if diff is None else f"{diff['mean']:+.3f} +- {diff['se']:.3f}"
        rows.append([name, harness.fmt(acc), harness.fmt(nlpd), f"{secs['mean']:.1f}", len(rs),
                     cell])  # fmt: skip
    return rows


def merge(out, dataset: str) -> dict[str, list[dict]]:
    """All runs of ``dataset`` stored in ``out`` and its subfolders (``<dataset>.json`` and
    its seed ranges), one per (variant, seed), by seed."""
    runs: dict[str, dict[int, dict]] = {}
    paths = sorted(out.rglob(f"{dataset}.json")) + sorted(out.rglob(f"{dataset}_seeds*.json"))
    for path in paths:
        for name, rs in harness.read_json(path)["runs"].items():
            for r in rs:
                runs.setdefault(name, {})[r["seed"]] = r
    return {name: [rs[s] for s in sorted(rs)] for name, rs in runs.items()}


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, OUT, seeds=True, root=True)
    p.add_argument(
        "--dataset",
        choices=("banana", "mnist", "fashion"),
        default="banana",
        help="the stream to learn (fashion: all of split Fashion-MNIST)",
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
    p.add_argument("--first-seed", type=int, default=0, help="the first seed to run")
    p.add_argument(
        "--merge",
        action="store_true",
        help="summarise all stored runs of the data set, compute nothing",
    )
    args = p.parse_args(argv)
    harness.setup(args.threads)
    if args.merge:
        runs = merge(args.out, args.dataset)
        if not runs:
            raise FileNotFoundError(f"no stored runs of {args.dataset!r} in {args.out}")
        rows = summarise(runs)
        summary = {"dataset": args.dataset, "reference": REFERENCE, "summary": rows, "runs": runs}
        harness.write_json(args.out / f"{args.dataset}_summary.json", summary)
        print(harness.markdown_table(HEADER, rows))
        return 0
    if args.dataset == "banana":
        from experiments.chang2023 import banana as module
    else:
        from experiments.chang2023 import split_mnist as module
    cfg = harness.preset(module.DEFAULT, module.QUICK, args)
    if args.dataset == "fashion":
        cfg["dataset"] = "fashion"
    for key in ("m", "batch_size", "max_train_per_task", "max_test_per_task", "hyper_steps"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    seeds = int(cfg["seeds"]) if args.seeds is None else args.seeds
    names = args.variants or (["paper", "default", "default_random", "default_no_memory"]
                              if args.quick else list(VARIANTS))  # fmt: skip
    run = run_banana if args.dataset == "banana" else run_mnist
    results = {"experiment": "dual_svgp_streaming_variants", "dataset": args.dataset,
               "config": cfg, "runs": {}}  # fmt: skip
    seed_range = range(args.first_seed, args.first_seed + seeds)
    name = args.dataset if args.first_seed == 0 else (
        f"{args.dataset}_seeds{seed_range[0]}-{seed_range[-1]}")  # fmt: skip
    for seed in seed_range:  # seeds outermost: every variant gets each seed (paired)
        for variant in names:
            settings, method, over = VARIANTS[variant]
            res = run(dict(cfg, **over), settings, method, seed, args.root)
            results["runs"].setdefault(variant, []).append({"seed": seed, **res})
            harness.log(f"{args.dataset} {variant} seed {seed}: {res}")
            results["summary"] = summarise(results["runs"])
            harness.write_json(args.out / f"{name}.json", results)
    values = [r["nlpd"] for rs in results["runs"].values() for r in rs]
    print(harness.markdown_table(HEADER, results["summary"]))
    print(f"results written to {args.out}", file=sys.stderr)
    return harness.exit_code(values)


if __name__ == "__main__":
    raise SystemExit(main())
