"""Command line entry point: ``bo-ncgp <command> ...``.

Commands come from two places:

* package modules register themselves in :data:`COMMANDS` (name -> (help, add_arguments,
  run)), e.g. the campaign runners in :mod:`bo_ncgp.campaigns.cli`;
* experiment scripts in the checkout's ``experiments/`` folder that define a module-level
  ``CLI_NAME = "name"`` and ``main(argv) -> int`` are exposed as ``bo-ncgp name ARGS...``
  (arguments are passed through; ``bo-ncgp name --help`` shows the script's own help).

``bo-ncgp --help`` lists all of them.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

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
    p.add_argument("--out", type=Path, default=Path("results/demo"))


@command("demo", "the README's main job: a short lunar-lander batch-BO campaign vs random")(
    _demo_args
)
def _demo(args: argparse.Namespace) -> int:
    out = str(args.out)
    print("Demo: fantasy-batch BO (DualSVGP reward + DualSVGP success classifier, batches of 3")
    print("built by dual conditioning) against random search on the 12-D lunar lander;")
    print("--quick preset: 2 seeds x 15 evaluations of 3 episodes each.\n")
    for strategy in ("fantasy-batch", "random"):
        code = main(["lunar-lander", "--quick", "--strategy", strategy, "--out", out])
        if code:
            return code
    return main(["plot", out, "--output", f"{out}/best.png", "--title", "lunar lander (demo)"])


def _load_plugins() -> None:
    """Import the modules that register further commands (experiments, campaigns)."""
    import importlib

    for mod in (
        "bo_ncgp.campaigns.cli",
        "bo_ncgp.campaigns.hotspots_cli",
        "bo_ncgp.campaigns.compare",
    ):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as err:
            if err.name != mod:
                raise


EXPERIMENTS_DIR = Path(__file__).resolve().parents[1] / "experiments"
_CLI_NAME = re.compile(r'^CLI_NAME\s*=\s*["\']([\w-]+)["\']', re.MULTILINE)


def experiment_scripts(folder: Path = EXPERIMENTS_DIR) -> dict[str, Path]:
    """``{CLI_NAME: path}`` of the experiment scripts in ``folder``."""
    found: dict[str, Path] = {}
    if folder.is_dir():
        for f in sorted(folder.glob("*.py")):
            m = _CLI_NAME.search(f.read_text(errors="replace"))
            if m:
                found[m.group(1)] = f
    return found


def _script_summary(path: Path) -> str:
    """First line of the script's module docstring (read without importing it)."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text(errors="replace"))) or ""
    except SyntaxError:
        doc = ""
    first = " ".join(doc.strip().split("\n\n")[0].split()).rstrip(".")
    return f"{first} (experiments/{path.name})" if first else f"experiments/{path.name}"


def _run_script(path: Path, argv: list[str]) -> int:
    spec = importlib.util.spec_from_file_location(f"bo_ncgp_experiment_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.parent))  # scripts may import experiments.<helper>
    try:
        spec.loader.exec_module(module)
        return int(module.main(argv) or 0)
    finally:
        sys.path.remove(str(path.parent.parent))


def main(argv: list[str] | None = None) -> int:
    """Run ``bo-ncgp`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    Example:
        >>> main(["plot", "/nonexistent"])  # errors are reported, not raised
        2
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    scripts = experiment_scripts()
    if argv and argv[0] in scripts and argv[0] not in COMMANDS:
        return _run_script(scripts[argv[0]], argv[1:])
    _load_plugins()
    parser = argparse.ArgumentParser(
        prog="bo-ncgp", description="bo_ncgp: BO and active learning with non-conjugate GPs"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_, add_args, _) in sorted(COMMANDS.items()):
        add_args(sub.add_parser(name, help=help_, description=help_))
    for name, path in sorted(scripts.items()):
        if name not in COMMANDS:
            sub.add_parser(name, help=_script_summary(path), add_help=False)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(COMMANDS[args.command][2](args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
