"""The layering of DESIGN.md: imports point downwards only.

``linalg`` and ``likelihoods`` are the core, ``models`` builds on them without BoTorch, ``bo`` is
the BoTorch layer, ``problems`` / ``campaigns`` / ``cli`` sit on top.
"""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "bo_ncgp"

FORBIDDEN = {
    "linalg": ("botorch", "bo_ncgp.bo", "bo_ncgp.campaigns", "bo_ncgp.models", "bo_ncgp.problems"),
    "likelihoods": ("botorch", "bo_ncgp.bo", "bo_ncgp.campaigns", "bo_ncgp.models"),
    "models": ("botorch", "bo_ncgp.bo", "bo_ncgp.campaigns", "bo_ncgp.problems"),
    "bo": ("bo_ncgp.campaigns",),
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_downwards(layer):
    files = sorted((PKG / layer).rglob("*.py"))
    assert files, f"no modules found in bo_ncgp/{layer}"
    bad = [
        f"{f.relative_to(PKG)} imports {name}"
        for f in files
        for name in _imports(f)
        if any(name == b or name.startswith(b + ".") for b in FORBIDDEN[layer])
    ]
    assert not bad, "\n".join(bad)
