"""The experiments package: every experiment module is a declared ``bo-ncgp`` command, runs
through ``main(argv) -> int``, and the wheel carries the modules without the results data."""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("chang2023", "tatzel", "wu2022", "adam")


def _commands() -> dict[str, str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["project"]["entry-points"]["bo_ncgp.commands"]


def _has_main(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)


def test_every_experiment_module_with_main_is_a_declared_command():
    declared = {v.split(":")[0] for v in _commands().values()}
    modules = {
        f"experiments.{paper}.{f.stem}"
        for paper in PAPERS
        for f in (ROOT / "experiments" / paper).glob("*.py")
        if _has_main(f)
    }
    assert modules <= declared, modules - declared


def test_declared_commands_point_at_a_main_returning_int():
    for name, value in _commands().items():
        module, func = value.split(":")
        path = ROOT / (module.replace(".", "/") + ".py")
        if not path.is_file():  # a module of another part of the tree (hotspots, lunar)
            continue
        main = getattr(importlib.import_module(module), func)
        assert callable(main) and main.__annotations__.get("return") in (int, "int"), name


def test_no_experiment_module_edits_sys_path():
    for f in (ROOT / "experiments").rglob("*.py"):
        assert "sys.path.insert" not in f.read_text(), f


def test_packaging_includes_the_experiments_package_only_as_code():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = meta["tool"]["setuptools"]["packages"]["find"]["include"]
    assert "experiments*" in include
    for paper in PAPERS:
        assert (ROOT / "experiments" / paper / "__init__.py").is_file()
        # results folders are data, not packages: find_packages never picks them up
        assert not (ROOT / "experiments" / paper / "results" / "__init__.py").exists()


def test_wheel_carries_modules_only():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["tool"]["setuptools"]["include-package-data"] is False


def test_harness_examples_run():
    import doctest

    from experiments import harness

    failed, attempted = doctest.testmod(harness)
    assert attempted > 0 and failed == 0
