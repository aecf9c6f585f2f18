"""Loaders for the real data sets (paths from an argument or ``BO_NCGP_DATA``).

Names are imported lazily so that one loader's dependencies do not burden the others.
"""

from __future__ import annotations

from bo_ncgp._lazy import lazy_attributes
from bo_ncgp.data._paths import DataChecksumError, data_file, resolve_root

_LAZY = {
    "load_idx": "bo_ncgp.data.mnist",
    "load_mnist": "bo_ncgp.data.mnist",
    "load_hotspots": "bo_ncgp.data.hotspots",
    "load_banana": "bo_ncgp.data.streaming",
    "load_uci": "bo_ncgp.data.streaming",
    "load_magnetometer": "bo_ncgp.data.magnetometer",
    "load_dust": "bo_ncgp.data.dust",
}

__all__ = ["DataChecksumError", "data_file", "resolve_root", *sorted(_LAZY)]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
