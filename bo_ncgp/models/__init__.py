"""The four algorithms of bo_ncgp, as pure torch + GPyTorch modules (no BoTorch import).

* :class:`DualSVGP`  -- memory-based dual sparse variational GP (Chang et al. 2023);
* :class:`IterNCGP`  -- computation-aware Laplace inference via IterGP (Tatzel et al.);
* :class:`HIPGP`     -- inter-domain SVGP on grid inducing points (Wu et al. 2022);
* :class:`SparseGAM` -- sparse variational additive models with a coupled posterior
  (Adam, Durrande & John).

Classes are imported lazily so that importing one model does not import the others.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "DualSVGP": "bo_ncgp.models.dual_svgp",
    "IterNCGP": "bo_ncgp.models.iterncgp",
    "HIPGP": "bo_ncgp.models.hipgp",
    "SparseGAM": "bo_ncgp.models.gam",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bo_ncgp.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
