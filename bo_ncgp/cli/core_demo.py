"""``bo-ncgp core-demo``: smoke demo of the numerical core (kernel MVMs, PCG, likelihoods)."""

from __future__ import annotations

import argparse
import time

__all__ = ["HELP", "add_arguments", "run"]

HELP = "smoke demo of the numerical core (kernel MVMs, PCG, likelihoods)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bo-ncgp core-demo``.

    Example:
        >>> from bo_ncgp.cli import command_parser
        >>> command_parser("core-demo").parse_args([]).rank
        50
    """
    parser.add_argument("--n", type=int, default=3000, help="number of points of the kernel system")
    parser.add_argument("--rank", type=int, default=50, help="pivoted-Cholesky preconditioner rank")


def run(args: argparse.Namespace) -> int:
    """Solve ``(K + 0.01 I) x = b`` by CG and by pivoted-Cholesky PCG, print both.

    Example:
        >>> run(argparse.Namespace(n=200, rank=10))  # doctest: +ELLIPSIS
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
