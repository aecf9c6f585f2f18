"""Command line entry point: ``bo-ncgp <command> ...``.

Commands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)) so that
each experiment module owns its own arguments. ``bo-ncgp --help`` lists them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

__all__ = ["COMMANDS", "main"]

Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: dict[str, Command] = {}


def command(name: str, help: str):
    """Decorator registering ``add_arguments`` and returning a decorator for ``run``."""

    def wrap(add_arguments):
        def wrap_run(run):
            COMMANDS[name] = (help, add_arguments, run)
            return run

        return wrap_run

    return wrap


def _core_demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=3000, help="number of points of the kernel system")
    p.add_argument("--rank", type=int, default=50, help="pivoted-Cholesky preconditioner rank")


@command("core-demo", "smoke demo of the numerical core (kernel MVMs, PCG, likelihoods)")(
    _core_demo_args
)
def _core_demo(args: argparse.Namespace) -> int:
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


def _demo_args(p: argparse.ArgumentParser) -> None:
    _core_demo_args(p)


@command("demo", "the README's main-job demo")(_demo_args)
def _demo(args: argparse.Namespace) -> int:
    return _core_demo(args)


def _load_plugins() -> None:
    """Import the modules that register further commands (experiments, campaigns)."""
    import importlib

    for mod in ("bo_ncgp.campaigns.cli",):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as err:
            if err.name is None or not err.name.startswith("bo_ncgp"):
                raise


def main(argv: list[str] | None = None) -> int:
    """Run ``bo-ncgp`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    _load_plugins()
    parser = argparse.ArgumentParser(prog="bo-ncgp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_, add_args, _) in sorted(COMMANDS.items()):
        add_args(sub.add_parser(name, help=help_, description=help_))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(COMMANDS[args.command][2](args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
