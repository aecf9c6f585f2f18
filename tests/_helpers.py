"""Plain helpers shared by the test modules (fixtures live in ``conftest.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str) -> ModuleType:
    """Import a script of the repository, e.g. ``"benchmarks/hipgp_step.py"``, as a module."""
    path = ROOT / relpath
    if not path.is_file():
        raise FileNotFoundError(f"no script {path}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
