"""The demonstration commands:

* ``bo-ncgp demo``: a short lunar-lander batch-BO campaign against random search, with a plot;
* ``bo-ncgp core-demo``: smoke demo of the numerical core (kernel MVMs, PCG, likelihoods).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bo_ncgp.cli import Command

__all__ = [
    "CORE_DEMO",
    "DEMO",
    "add_core_demo_arguments",
    "add_demo_arguments",
    "run_core_demo",
    "run_demo",
]


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp demo``.

    Example:
        >>> DEMO.parser().parse_args([]).out
        PosixPath('results/demo')
    """
    parser.add_argument("--out", type=Path, default=Path("results/demo"))


def run_demo(args: argparse.Namespace) -> int:
    """``bo-ncgp lunar-lander --quick`` with ``fantasy-batch`` and ``random``, then the plot.

    Example:
        >>> run_demo(argparse.Namespace(out=Path("results/demo")))  # doctest: +SKIP
        0
    """
    from bo_ncgp.cli import main

    out = str(args.out)
    print("Demo: fantasy-batch BO (DualSVGP reward + DualSVGP success classifier, batches of 3")
    print("built by dual conditioning) against random search on the 12-D lunar lander;")
    print("--quick preset: 2 seeds x 15 evaluations of 3 episodes each.\n")
    for strategy in ("fantasy-batch", "random"):
        code = main(["lunar-lander", "--quick", "--strategy", strategy, "--out", out])
        if code:
            return code
    return main(["plot", out, "--output", f"{out}/best.png", "--title", "lunar lander (demo)"])


def add_core_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp core-demo``.

    Example:
        >>> CORE_DEMO.parser().parse_args([]).rank
        50
    """
    parser.add_argument("--n", type=int, default=3000, help="number of points of the kernel system")
    parser.add_argument("--rank", type=int, default=50, help="pivoted-Cholesky preconditioner rank")


def run_core_demo(args: argparse.Namespace) -> int:
    """Solve ``(K + 0.01 I) x = b`` by CG and by pivoted-Cholesky PCG, print both.

    Example:
        >>> run_core_demo(argparse.Namespace(n=200, rank=10))  # doctest: +ELLIPSIS
        (K + 0.01 I) x = b with N = 200, ...
        0
    """
    import gpytorch
    import torch

    from bo_ncgp.likelihoods import Bernoulli
    from bo_ncgp.linalg import KernelOperator, cg, low_rank_plus_diagonal_inverse, pivoted_cholesky

    torch.manual_seed(0)
    dtype = torch.float64
    X = torch.rand(args.n, 3, dtype=dtype)
    kernel = gpytorch.kernels.MaternKernel(nu=2.5).to(dtype)
    kernel.lengthscale = 0.2
    noise = 1e-2
    K = KernelOperator(kernel, X)
    b = torch.randn(args.n, 1, dtype=dtype)
    with torch.no_grad():
        t0 = time.perf_counter()
        plain = cg(lambda V: K @ V + noise * V, b, tol=1e-8)
        t1 = time.perf_counter()
        L = pivoted_cholesky(K, max_rank=args.rank).L
        pre = cg(
            lambda V: K @ V + noise * V,
            b,
            tol=1e-8,
            precond=low_rank_plus_diagonal_inverse(L, noise),
        )
        t2 = time.perf_counter()
    print(f"(K + {noise} I) x = b with N = {args.n}, Matern-5/2, {K.backend} kernel MVMs")
    print(
        f"  CG : {plain.iterations:4d} iterations, "
        f"residual {float(plain.residual_norms[0]):.2e}, {t1 - t0:.2f} s"
    )
    print(
        f"  PCG: {pre.iterations:4d} iterations, residual {float(pre.residual_norms[0]):.2e}, "
        f"{t2 - t1:.2f} s (pivoted-Cholesky rank {args.rank})"
    )
    lik = Bernoulli()
    elp, alpha, beta = lik.expected(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([2.0]))
    print(
        f"  Bernoulli E[log p]={float(elp):.4f}, alpha={float(alpha):.4f}, beta={float(beta):.4f} "
        "under N(0.5, 2)"
    )
    return 0


#: ``bo-ncgp demo``
DEMO = Command(
    "a short lunar-lander batch-BO campaign against random search, with a plot",
    add_demo_arguments,
    run_demo,
)
#: ``bo-ncgp core-demo``
CORE_DEMO = Command(
    "smoke demo of the numerical core (kernel MVMs, PCG, likelihoods)",
    add_core_demo_arguments,
    run_core_demo,
)
