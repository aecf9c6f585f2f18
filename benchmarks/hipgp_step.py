"""Time of one HIP-GP natural-gradient step: pruned, chunked FFT products vs whole-embedding ones.

Setting: the magnetometer experiment (``experiments/wu2022/magnetometer.py``): a minibatch of
500 readings, Matern-5/2 with its learned hyperparameters (fixed), a ``G x G`` grid over the
room (``M = G^2``), 2 x 2 variational blocks, PCG capped at 20 iterations (Wu et al. 2022,
Eqs. 20-22). Measured in one process, medians over repetitions:

* ``step``: one ``HIPGP.natgrad_step`` (cross-covariances, whitening by PCG, natural-gradient
  update), with the library's circulant products against the previous implementation
  (``legacy``: every product zero-pads the whole minibatch to the ``2G x 2G`` embedding,
  one ``rfftn``/``irfftn`` pair over all 500 vectors at once, then crops);
* ``product``: one ``K_uu`` product (``kuu_mv``) on 500 vectors, library vs legacy;
* ``rfftn``: ``torch.fft.rfftn`` of a ``(500, 2G, 2G)`` array (and per 32-vector chunks),
  with nanoseconds per element, the reference for what an FFT costs on this machine;
* ``svgp step``: the same step with Cholesky whitening (the SVGP baseline).

The library evaluates products as pruned 1-D FFT passes (the zero rows of the padded input
and the cropped rows of the output are never transformed) on cache-sized chunks of vectors,
and PCG solves run chunk by chunk; huge batched FFTs were several times slower per element
than cache-sized ones.

Results: ``benchmarks/results/hipgp_step.json`` and a markdown table on stdout.

Usage::

    python benchmarks/hipgp_step.py            # G = 30, 50
    python benchmarks/hipgp_step.py --quick    # smoke test (G = 12, fewer repetitions)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.campaigns.storage import write_json
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.linalg.toeplitz import CirculantEmbedding
from bo_ncgp.models.hipgp import HIPGP, Grid
from experiments.harness import markdown_table

OUT = Path(__file__).resolve().parent / "results" / "hipgp_step.json"
# the magnetometer experiment's learned hyperparameters (experiments/wu2022/RESULTS.md)
HYPERS = {"lengthscale": 0.467, "outputscale": 131.6, "noise": 13.44}


class LegacyEmbedding(CirculantEmbedding):
    """The products of the previous implementation: pad everything, one big FFT pair."""

    def _chunk_rows(self) -> int:
        return 2**62

    def _product(self, v: Tensor, lam: Tensor, pad: bool, crop: bool) -> Tensor:
        lead = v.shape[:-1]
        if pad:
            g = v.reshape(*lead, *self.grid_shape)
            widths: list[int] = []
            for m, L in zip(reversed(self.grid_shape), reversed(self.embedding_shape), strict=True):
                widths += [0, L - m]
            x = torch.nn.functional.pad(g, widths)
        else:
            x = v.reshape(*lead, *self.embedding_shape)
        X = torch.fft.rfftn(x, dim=self._fft_dims)
        y = torch.fft.irfftn(X * lam, s=self.embedding_shape, dim=self._fft_dims)
        if not crop:
            return y.reshape(*lead, self.num_whitened)
        for d, s in enumerate(self.grid_shape):
            y = y.narrow(y.dim() - self.D + d, 0, s)
        return y.reshape(*lead, self.num_points)


def _median_time(fn, reps: int) -> float:
    fn()  # warm-up (FFT plans, allocations)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _data(n: int, root=None):
    try:
        from bo_ncgp.data import load_magnetometer

        d = load_magnetometer(root=root)
        X, y = d["X"], d["y"]
        perm = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))[:n]
        return X[perm], y[perm] - y[perm].mean(), "magnetometer"
    except (FileNotFoundError, OSError):  # no shared data: a synthetic room
        g = torch.Generator().manual_seed(0)
        X = torch.rand(n, 2, generator=g) * torch.tensor([9.0, 4.0])
        return X, torch.sin(X[:, 0]) * 20 + torch.randn(n, generator=g), "synthetic"


def bench(side: int, X: Tensor, y: Tensor, reps: int) -> dict:
    lo = (X.min(0).values - 0.1).tolist()
    hi = (X.max(0).values + 0.1).tolist()
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5))
    kernel.base_kernel.lengthscale = HYPERS["lengthscale"]
    kernel.outputscale = HYPERS["outputscale"]
    for p in kernel.parameters():
        p.requires_grad_(False)
    lik = Gaussian(noise=HYPERS["noise"])

    def model(whitening: str) -> HIPGP:
        m = HIPGP(
            kernel,
            Grid(lo, hi, (side, side)),
            likelihood=lik,
            block_shape=(2, 2),
            whitening=whitening,
            pcg_max_iters=20,
            jitter=1e-6,
        )
        with torch.no_grad():
            m.whitener()
        return m

    n = X.shape[0]
    new, old, svgp = model("fft"), model("fft"), model("cholesky")
    with torch.no_grad():  # the cached (no-grad) whitener is the one the steps use
        old.whitener().embedding.__class__ = LegacyEmbedding
        emb_new, emb_old = new.whitener().embedding, old.whitener().embedding
    assert type(emb_old) is LegacyEmbedding and type(emb_new) is CirculantEmbedding

    def step(m):
        return lambda: m.natgrad_step(X, y, num_data=4 * n, lr=0.5)

    # same answer from both implementations (the legacy path is the reference)
    with torch.no_grad():
        K_new = new.whitened_cross_covariance(X, torch.zeros(n, dtype=torch.long))
        K_old = old.whitened_cross_covariance(X, torch.zeros(n, dtype=torch.long))
        assert type(old.whitener().embedding) is LegacyEmbedding
    max_diff = float((K_new - K_old).abs().max() / K_old.abs().max())
    row = {"side": side, "M": side * side, "N_whitened": emb_new.num_whitened, "batch": n}
    row["whitened_rel_diff"] = max_diff
    row["step_legacy_s"] = _median_time(step(old), reps)
    row["step_s"] = _median_time(step(new), reps)
    row["svgp_step_s"] = _median_time(step(svgp), reps)
    V = torch.randn(n, side * side)
    row["product_legacy_s"] = _median_time(lambda: emb_old.kuu_mv(V), reps)
    row["product_s"] = _median_time(lambda: emb_new.kuu_mv(V), reps)
    x = torch.randn(n, 2 * side, 2 * side)
    row["rfftn_batch_s"] = _median_time(lambda: torch.fft.rfftn(x, dim=(-2, -1)), reps)
    row["rfftn_chunk32_s"] = _median_time(
        lambda: [torch.fft.rfftn(x[i : i + 32], dim=(-2, -1)) for i in range(0, n, 32)], reps
    )
    row["rfftn_batch_ns_per_element"] = 1e9 * row["rfftn_batch_s"] / x.numel()
    row["rfftn_chunk32_ns_per_element"] = 1e9 * row["rfftn_chunk32_s"] / x.numel()
    row["step_speedup"] = row["step_legacy_s"] / row["step_s"]
    row["product_speedup"] = row["product_legacy_s"] / row["product_s"]
    row["step_over_svgp"] = row["step_s"] / row["svgp_step_s"]
    row["legacy_step_over_svgp"] = row["step_legacy_s"] / row["svgp_step_s"]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke test")
    p.add_argument("--sides", type=int, nargs="+", default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--root", default=None)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    sides = args.sides or ([12] if args.quick else [30, 50])
    reps = args.reps or (1 if args.quick else 3)
    X, y, source = _data(100 if args.quick else 500, args.root)
    rows = [bench(s, X, y, reps) for s in sides]
    res = {"data": source, "threads": args.threads, "reps": reps, "rows": rows}
    write_json(args.out, res)
    header = ["G x G (M)", "step legacy (s)", "step (s)", "speed-up", "SVGP step (s)",
              "step / SVGP"]  # fmt: skip
    cells = [[f"{r['side']}x{r['side']} ({r['M']})", f"{r['step_legacy_s']:.3f}",
              f"{r['step_s']:.3f}", f"{r['step_speedup']:.1f}", f"{r['svgp_step_s']:.3f}",
              f"{r['step_over_svgp']:.1f}"] for r in rows]  # fmt: skip
    print(markdown_table(header, cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
