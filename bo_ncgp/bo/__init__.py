"""The BoTorch layer: Model adapters, acquisition functions and the fantasy-batch builder.

Thin translations between BoTorch's shapes (``batch x q x d``, ``GPyTorchPosterior``) and
the methods of :mod:`bo_ncgp.models`. Names are imported lazily.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "DualSVGPModel": "bo_ncgp.bo.models",
    "IterNCGPModel": "bo_ncgp.bo.models",
    "build_fantasy_batch": "bo_ncgp.bo.fantasy",
    "HIPGPModel": "bo_ncgp.bo.hipgp",
    "SparseGAMModel": "bo_ncgp.bo.gam",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bo_ncgp.bo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
