"""The layering of ARCHITECTURE.md: imports point downwards only.

``exceptions`` is the bottom, ``linalg`` and ``likelihoods`` are the numerical core, ``models``
builds on them without BoTorch, ``bo`` is the BoTorch layer, ``problems`` / ``campaigns`` sit
above it and ``cli`` is the top. The library never imports the paper experiments, no module
below ``cli`` parses command lines, no module imports another that imports it back, and no
library module names an option that exists only to mimic one paper's script.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "bo_ncgp"

#: layers from the bottom up; a layer may import only the layers listed before it
ORDER = (
    "exceptions",
    "linalg",
    "likelihoods",
    "data",
    "models",
    "bo",
    "ax",
    "problems",
    "campaigns",
    "cli",
)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "bo_ncgp" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in ORDER else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> list[str]:
    """Absolute module names imported anywhere in ``path`` (``from a import b`` gives ``a`` and
    ``a.b``), except inside ``if TYPE_CHECKING:`` blocks, which never run."""
    names = []
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            modules = [s for s in subs if _is_module(s)]
            # ``from pkg import submodule`` needs the submodule, not the package's __init__
            names += modules if len(modules) == len(subs) else [node.module, *modules]
        stack.extend(ast.iter_child_nodes(node))
    return names


def _library_files() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def _imports_where(files: list[Path], bad: Callable[[str], bool]) -> list[str]:
    """``"<file> imports <module>"`` for every import of ``files`` for which ``bad`` holds."""
    return [
        f"{f.relative_to(ROOT)} imports {name}" for f in files for name in _imports(f) if bad(name)
    ]


@pytest.mark.parametrize("layer", ORDER)
def test_layer_imports_point_downwards(layer):
    files = [PKG / f"{layer}.py"] if (PKG / f"{layer}.py").exists() else []
    files += sorted((PKG / layer).rglob("*.py")) if (PKG / layer).is_dir() else []
    assert files, f"no modules found for bo_ncgp.{layer}"
    allowed = set(ORDER[: ORDER.index(layer) + 1])
    bad = sorted(set(_imports_where(files, lambda n: _layer(n) not in (None, *allowed))))
    if layer in ("exceptions", "linalg", "likelihoods", "data", "models"):
        bad += _imports_where(files, lambda n: n == "botorch" or n.startswith("botorch."))
    if layer != "ax":  # the optional extra: only bo_ncgp.ax may need it
        bad += _imports_where(files, lambda n: n == "ax" or n.startswith("ax."))
    assert not bad, "\n".join(bad)


def test_no_command_line_parsing_below_cli():
    below_cli = [f for f in _library_files() if _layer(_module_name(f)) != "cli"]
    bad = _imports_where(below_cli, lambda n: n == "argparse" or n.startswith("bo_ncgp.cli"))
    assert not bad, "\n".join(bad)


def test_library_never_imports_the_experiments():
    outside = ("experiments", "benchmarks", "tests", "tutorials")
    bad = _imports_where(_library_files(), lambda n: n.split(".")[0] in outside)
    assert not bad, "\n".join(bad)


def test_no_import_cycle_in_the_package():
    """No module imports (at import time or inside a function) a module that imports it
    back, directly or through others."""
    files = {_module_name(f): f for f in _library_files()}
    graph = {
        mod: sorted({n for n in _imports(path) if n in files} - {mod})
        for mod, path in files.items()
    }
    cycles: list[str] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, "\n".join(cycles)


#: options and names that exist only to mimic one paper's own script
PAPER_SCRIPT_ONLY = re.compile(r"spiked|clamp[-_]per[-_]village|legacy_config|\bclamp\s*[:=]", re.I)


def test_no_library_module_names_a_paper_script_option():
    bad = [
        f"{f.relative_to(ROOT)}:{i}: {line.strip()}"
        for f in _library_files()
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if PAPER_SCRIPT_ONLY.search(line)
    ]
    assert not bad, "\n".join(bad)


def test_no_sys_path_edits_anywhere():
    bad = [
        f"{f.relative_to(ROOT)}"
        for folder in ("bo_ncgp", "experiments", "benchmarks", "tests", "tutorials")
        if (ROOT / folder).is_dir()
        for f in sorted((ROOT / folder).rglob("*.py"))
        if f.name != "test_layers.py" and re.search(r"sys\.path\.(insert|append)\(", f.read_text())
    ]
    assert not bad, "\n".join(bad)
