"""The solver core on an accelerator beside the CPU: the papers' headline operations, one process.

Each case runs on ``--device`` and on the CPU in the same process (the CPU figure is the
same measurement when ``--device cpu``), beside the paper's number where the paper gives one:

* ``kernel MVM``: ``K @ V`` (RBF, D = 3, k = 16 columns, float32) with the dense, chunked and
  KeOps backends of :class:`~bo_ncgp.linalg.KernelOperator`, as a share of the device's matmul
  peak measured in the same run (~(3D + 10 + 2k) FLOP per kernel entry). No paper number.
* ``IterNCGP GMM``: IterNCGP-CG (recycling, j <= 5 solver iterations per Newton step, 3 Newton
  steps, full steps) on the 10-class Gaussian mixture of Tatzel et al. (App. C.3), softmax,
  Matern-3/2, at N = 10^5 (the paper's scale; an A100, the paper reports curves over time).
* ``HIP-GP whitening``: FFT + PCG whitening of 200 observations against a 1-D grid of M
  inducing points (Wu et al. 2022, Table 1: 0.0185 s at M = 10^4 and 1.46 s at M = 10^6 on a
  V100).
* ``hotspot step``: one active-learning step of the hotspot problem with the streaming dual
  model (Chang et al. 2023): pool fantasies of a Binomial DualSVGP over 1,350 villages, the
  threshold entropy reduction of every village with 16 fantasies each, then the streaming
  update with the chosen village (paper: 62 s per step on a GPU, with the SVGP loop).
* ``dual conditioning``: ``DualSVGP.condition`` of 1,000 candidates x 64 fantasy targets (one
  point each) and the prediction of every fantasy model at its candidate. No paper number.

Times are medians over repetitions after one warm-up call, with the device synchronised around
each call. Results: ``benchmarks/results/gpu.json`` and ``gpu.md`` (a markdown table), written
after every case, with the versions of torch, CUDA, gpytorch, botorch and pykeops; a case that
raises (out of memory, a device bug) is recorded as failed with its error and the run goes on,
and the name of each case is printed before it starts (a crash of the process names its case).

Usage::

    python -m benchmarks.gpu --device cuda            # the papers' sizes (long on the CPU)
    python -m benchmarks.gpu --device cuda --no-cpu   # the device column only
    python -m benchmarks.gpu --quick                  # small sizes, CPU, < 1 min (smoke test)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import gpytorch
import torch

OUT = Path(__file__).resolve().parent / "results"
DENSE_LIMIT_BYTES = 8 * 2**30  # dense K (with temporaries) larger than this is skipped
LONG = 10.0  # seconds: a case whose warm-up call takes longer is timed once more, not ``reps``

#: the sizes of each preset; ``cpu`` overrides a size for the CPU column (stated in the table)
PRESETS = {
    "full": {
        "matmul": 4096,
        "mvm": {"n": [10_000, 40_000], "k": 16},
        "iterncgp": {"n": 100_000, "n_cpu": 10_000, "iters": 5, "newton": 3},
        "whitening": {"M": [10_000, 1_000_000], "num_obs": 200},
        "hotspot": {"pool": 1350, "start": 150, "m": 100, "fantasies": 16},
        "conditioning": {"n": 400, "m": 25, "candidates": 1000, "fantasies": 64},
        "reps": 3,
    },
    "quick": {
        "matmul": 600,
        "mvm": {"n": [2000], "k": 16},
        "iterncgp": {"n": 1000, "n_cpu": 1000, "iters": 3, "newton": 2},
        "whitening": {"M": [1000, 10_000], "num_obs": 50},
        "hotspot": {"pool": 200, "start": 40, "m": 20, "fantasies": 8},
        "conditioning": {"n": 100, "m": 10, "candidates": 100, "fantasies": 16},
        "reps": 2,
    },
}
#: the papers' numbers (seconds), by case and size; see the module docstring for the setting
PAPER = {
    ("HIP-GP whitening", 10_000): "0.0185 s (V100)",
    ("HIP-GP whitening", 1_000_000): "1.46 s (V100)",
    ("IterNCGP GMM", 100_000): "A100; no time stated (Fig. 6)",
    ("hotspot step", 1350): "62 s per step (GPU, SVGP loop)",
}


# ------------------------------------------------------------------------------ timing
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls after one warm-up call (one call when
    the warm-up took longer than ``LONG`` seconds)."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    times = []
    for _ in range(1 if time.perf_counter() - t0 > LONG else reps):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int) -> float:
    """FLOP/s of a ``size x size`` matmul (best of 3 after a warm-up)."""
    A = torch.randn(size, size, dtype=dtype, device=device)
    B = torch.randn(size, size, dtype=dtype, device=device)
    best = math.inf
    A @ B
    for _ in range(3):
        synchronize(device)
        t0 = time.perf_counter()
        A @ B
        synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


# ------------------------------------------------------------------------------- cases
def case_mvm(device: torch.device, cfg: dict, peak32: float, reps: int) -> list[dict]:
    from bo_ncgp.linalg import KernelOperator
    from bo_ncgp.linalg._keops import keops_available

    rows = []
    k, d = cfg["k"], 3
    flop_per_entry = 3 * d + 10 + 2 * k
    backends = ["dense", "chunked"]
    if keops_available(device):
        backends.append("keops")
    elif keops_available():  # installed, but it failed its probe on this device
        rows.append({"case": "kernel MVM", "size": "keops", "skipped": f"KeOps fails on {device}"})
    for n in cfg["n"]:
        X = torch.rand(n, d, dtype=torch.float32, device=device)
        V = torch.randn(n, k, dtype=torch.float32, device=device)
        kernel = gpytorch.kernels.RBFKernel().to(X)
        kernel.lengthscale = 0.2
        for backend in backends:
            size = f"N={n}, {backend}"
            if backend == "dense" and 3 * n * n * 4 > DENSE_LIMIT_BYTES:
                rows.append({"case": "kernel MVM", "size": size, "skipped": "dense K too large"})
                continue
            op = KernelOperator(kernel, X, backend=backend)

            def product(op=op, V=V):
                op._dense_cache = None  # the kernel evaluation is part of every product
                with torch.no_grad():
                    return op @ V

            s = timed(product, device, reps)
            share = n * n * flop_per_entry / s / peak32
            rows.append(
                {
                    "case": "kernel MVM",
                    "size": size,
                    "n": n,
                    "seconds": s,
                    "note": f"{100 * share:.1f} % of the float32 matmul peak",
                }
            )
    return rows


def case_iterncgp(device: torch.device, cfg: dict, n: int, reps: int) -> dict:
    from bo_ncgp.likelihoods import Softmax
    from bo_ncgp.models import IterNCGP
    from experiments.tatzel.gmm import C, make_gmm, make_kernel

    X, y = make_gmm(n // C, seed=0)
    X, y = X.to(device), y.to(device)
    Xt, yt = make_gmm(200 // C, seed=500)
    Xt, yt = Xt.to(device), yt.to(device)
    model = None

    def fit():
        nonlocal model
        model = IterNCGP(
            make_kernel(C).to(X),
            Softmax(C),
            policy="cg",
            max_solver_iters_per_step=cfg["iters"],
            max_newton_steps=cfg["newton"],
            recycle=True,
            tol=0.0,
            line_search=False,
        )
        model.fit(X, y)

    s = timed(fit, device, max(1, reps - 1))
    acc = float((model.predict_y(Xt).argmax(-1) == yt).to(torch.float64).mean())
    return {
        "case": "IterNCGP GMM",
        "size": n,
        "n": n,
        "seconds": s,
        "note": f"test accuracy {acc:.3f}",
    }


def case_whitening(device: torch.device, M: int, num_obs: int, reps: int) -> dict:
    from bo_ncgp.linalg.toeplitz import CirculantEmbedding, Grid, circulant_first_row
    from experiments.wu2022.whitening import _kernel

    g = torch.Generator().manual_seed(0)
    X = torch.rand(num_obs, 1, generator=g, dtype=torch.float64).to(device)
    k = _kernel(M).to(X)
    grid = Grid([0.0], [1.0], (M,), dtype=X.dtype, device=device)
    iters = []

    @torch.no_grad()
    def whiten():
        emb = CirculantEmbedding(circulant_first_row(k, grid))
        k_un = k(X, grid.points()).to_dense()  # (n, M)
        sol, res = emb.solve(k_un, tol=1e-10)
        iters.append(res.iterations)
        return emb.root_t_mv(sol)

    s = timed(whiten, device, reps)
    return {
        "case": "HIP-GP whitening",
        "size": M,
        "n": M,
        "seconds": s,
        "note": f"{max(iters)} PCG iterations",
    }


def _pool(P: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic survey: ``P`` villages in the unit square, 20 tested per village."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(P, 2, generator=g, dtype=torch.float64)
    prevalence = torch.sigmoid(3 * torch.sin(6 * X[:, 0]) * torch.cos(4 * X[:, 1]) - 1)
    y = torch.binomial(torch.full((P,), 20.0, dtype=torch.float64), prevalence, generator=g)
    return X.to(device), y.to(device)


def case_hotspot(device: torch.device, cfg: dict, reps: int) -> dict:
    from bo_ncgp.bo.acquisition.pool import fantasies_of, threshold_entropy_reduction
    from bo_ncgp.likelihoods import Binomial
    from bo_ncgp.models import DualSVGP

    X, y = _pool(cfg["pool"], device)
    start = cfg["start"]
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5)).to(X)
    model = DualSVGP(kernel, Binomial(20).to(X), X[: cfg["m"]], num_hyper_steps=0)
    model.update(X[:start], y[:start])
    level = math.log(0.1 / 0.9)  # prevalence threshold 10 %

    def step():
        with torch.no_grad():
            fant = fantasies_of(model, X)
            a = threshold_entropy_reduction(
                fant, torch.arange(X.shape[0], device=device), level, cfg["fantasies"]
            )
        i = int(a.argmax())
        model.copy().update(X[i : i + 1], y[i : i + 1])

    s = timed(step, device, reps)
    return {
        "case": "hotspot step",
        "size": cfg["pool"],
        "n": cfg["pool"],
        "seconds": s,
        "note": f"{cfg['pool']} villages x {cfg['fantasies']} fantasies + update",
    }


def case_conditioning(device: torch.device, cfg: dict, reps: int) -> dict:
    from bo_ncgp.likelihoods import Bernoulli
    from bo_ncgp.models import DualSVGP

    g = torch.Generator().manual_seed(0)
    X = torch.rand(cfg["n"], 2, generator=g, dtype=torch.float64)
    y = (torch.sin(6 * X[:, 0]) > X[:, 1] - 0.5).to(X)
    cand = torch.rand(cfg["candidates"], 1, 2, generator=g, dtype=torch.float64)
    nf, nc = cfg["fantasies"], cfg["candidates"]
    fant = torch.bernoulli(torch.full((nf, nc, 1), 0.5, dtype=torch.float64), generator=g)
    X, y, cand, fant = X.to(device), y.to(device), cand.to(device), fant.to(device)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).to(X)
    model = DualSVGP(kernel, Bernoulli(), X[: cfg["m"]], num_hyper_steps=0).update(X, y)

    def condition():
        with torch.no_grad():
            return model.condition(cand, fant).predict_f(cand)

    s = timed(condition, device, reps)
    return {
        "case": "dual conditioning",
        "size": f"{nc} x {nf}",
        "n": nc * nf,
        "seconds": s,
        "note": "condition + predict each fantasy at its candidate",
    }


# -------------------------------------------------------------------------------- run
def measure(
    device: torch.device,
    cfg: dict,
    cpu_column: bool,
    on_rows: Callable[[dict, list[dict]], None] | None = None,
) -> dict:
    """All cases on ``device`` (``cpu_column``: the CPU sizes where they differ).

    ``on_rows(part, new_rows)`` is called after every case with the part measured so far and
    the case's rows (the runner writes them to disk: an interrupted run keeps its finished
    cases)."""
    reps = cfg["reps"]
    peak = {
        str(dt).removeprefix("torch."): matmul_peak(device, dt, cfg["matmul"])
        for dt in (torch.float32, torch.float64)
    }
    part = {"device": str(device), "name": device_name(device), "matmul_peak_flops": peak}
    part["rows"] = rows = []
    it, wh = cfg["iterncgp"], cfg["whitening"]
    n_it = it["n_cpu"] if cpu_column else it["n"]
    cases: list[tuple[str, object, Callable[[], dict | list[dict]]]] = [
        ("kernel MVM", "", lambda: case_mvm(device, cfg["mvm"], peak["float32"], reps)),
        ("IterNCGP GMM", n_it, lambda: case_iterncgp(device, it, n_it, reps)),
        *(
            ("HIP-GP whitening", M, lambda M=M: case_whitening(device, M, wh["num_obs"], reps))
            for M in wh["M"]
        ),
        (
            "hotspot step",
            cfg["hotspot"]["pool"],
            lambda: case_hotspot(device, cfg["hotspot"], reps),
        ),
        (
            "dual conditioning",
            f"{cfg['conditioning']['candidates']} x {cfg['conditioning']['fantasies']}",
            lambda: case_conditioning(device, cfg["conditioning"], reps),
        ),
    ]
    for name, size, case in cases:
        print(f"{device}: {name} ...", flush=True)  # where a crash of the process happened
        try:
            new = case()
        except Exception as err:  # one failing case (out of memory, a device bug) ends only itself
            new = {"case": name, "size": size, "failed": f"{type(err).__name__}: {err}"[:500]}
            if device.type == "cuda":
                torch.cuda.empty_cache()
        new = new if isinstance(new, list) else [new]
        rows.extend(new)
        if on_rows is not None:
            on_rows(part, new)
    return part


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} threads"


def environment(device: torch.device) -> dict:
    """The versions a GPU figure depends on: torch and its CUDA build, the device's compute
    capability, gpytorch, botorch and pykeops (``None`` where absent)."""
    import importlib.metadata as md

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    env = {"torch": torch.__version__, "cuda": torch.version.cuda}
    env.update({d: version(d) for d in ("gpytorch", "botorch", "pykeops")})
    if device.type == "cuda":
        env["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
    return env


def run(
    device: torch.device,
    preset: str,
    cpu: bool = True,
    on_update: Callable[[dict], None] | None = None,
) -> dict:
    """Every case on ``device`` (and on the CPU unless ``cpu`` is False); ``on_update(result)``
    after every case with the result so far (finished cases only)."""
    torch.manual_seed(0)
    cfg = PRESETS[preset]
    result = {"date": time.strftime("%Y-%m-%d"), "preset": preset, **environment(device)}
    parts = [("device", device)]
    if cpu and device.type != "cpu":
        parts.append(("cpu", torch.device("cpu")))
    for key, dev in parts:

        def update(part, new, key=key):
            result[key] = part
            for r in new:
                print(f"{key}: {r['case']} [{r['size']}] {_fmt(r)}", flush=True)
            if on_update is not None:
                on_update(result)

        result[key] = measure(dev, cfg, cpu_column=dev.type == "cpu", on_rows=update)
    return result


def table(result: dict) -> str:
    """The matmul peaks and one markdown row per case: device, CPU, speed-up, paper."""
    from experiments.harness import markdown_table

    dev, cpu = result["device"], result.get("cpu")
    lines = []
    for part in (dev, cpu) if cpu is not None else (dev,):
        p = part["matmul_peak_flops"]
        lines.append(
            f"{part['device']} ({part['name']}): matmul peak float32 "
            f"{p['float32'] / 1e9:.1f} GFLOP/s, float64 {p['float64'] / 1e9:.1f} GFLOP/s"
        )
    header = ["case", "size", f"{dev['device']} (s)"]
    if cpu is not None:
        header += ["cpu (s)", "cpu / device"]
    header += ["paper", "note"]
    cells = []
    for r in dev["rows"]:
        row = [r["case"], r["size"], _fmt(r)]
        if cpu is not None:
            same = [c for c in cpu["rows"] if c["case"] == r["case"] and c["size"] == r["size"]]
            # a case the CPU runs at a smaller size (IterNCGP) shows the CPU's size
            other = [c for c in cpu["rows"] if c["case"] == r["case"]]
            if same and "seconds" in same[0] and "seconds" in r:
                row += [_fmt(same[0]), f"{same[0]['seconds'] / r['seconds']:.1f}x"]
            elif same:
                row += [_fmt(same[0]), ""]
            elif len(other) == 1:
                row += [f"{_fmt(other[0])} (N={other[0]['size']})", ""]
            else:
                row += ["", ""]
        row += [PAPER.get((r["case"], r.get("n")), ""), r.get("note", "")]
        cells.append(row)
    return "\n".join(lines) + "\n\n" + markdown_table(header, cells)


def _fmt(row: dict) -> str:
    if "seconds" in row:
        return f"{row['seconds']:.4g}"
    if "failed" in row:
        return f"failed ({row['failed']})"
    return row.get("skipped", "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke test, < 1 min)")
    p.add_argument("--no-cpu", action="store_true", help="the device column only")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=None, help="JSON file (default results/gpu.json)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    out = args.out or OUT / ("gpu_quick.json" if args.quick else "gpu.json")
    from bo_ncgp.campaigns.storage import write_json

    def save(result: dict) -> None:  # after every case: an interrupted run keeps its rows
        write_json(out, result)
        out.with_suffix(".md").write_text(table(result) + "\n")

    result = run(device, "quick" if args.quick else "full", cpu=not args.no_cpu, on_update=save)
    save(result)
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
