"""Loader of the indoor magnetometer data (Solin et al. 2018).

``streaming/invensense/{i}-{loc,mag,time}.csv`` for the 9 paths of a wheeled robot with a
3-axis magnetometer in a 6 m x 6 m room: ``loc`` the 2-D position, ``mag`` the 3-axis
magnetic field, ``time`` the time stamp; one row per reading, no header. The regression
target is the field's norm. Used by the HIP-GP spatial regression experiment (Wu et al.
2022, Sec. 5.4 analogue) and the streaming magnetic-anomaly experiment of the memory-based
dual GP paper.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.data._paths import data_file
from bo_ncgp.exceptions import InputDataError

__all__ = ["load_magnetometer"]

_HINT = "It is the Solin et al. (2018) invensense data (MIT licence) in the shared data."


def _read(path, cols: int) -> np.ndarray:
    a = np.loadtxt(path, delimiter=",", ndmin=2)
    if a.shape[1] != cols:
        raise InputDataError(f"{path}: expected {cols} comma-separated columns, got {a.shape[1]}")
    if not np.isfinite(a).all():
        raise InputDataError(f"{path}: contains NaN or inf")
    return a


def load_magnetometer(
    paths: Iterable[int] = range(1, 10),
    root: str | os.PathLike | None = None,
    dtype: torch.dtype | None = None,
    verify: bool = True,
) -> dict[str, Tensor]:
    """Load robot paths of the magnetometer data set, concatenated in the given order.

    Args:
        paths: path numbers in ``1..9``.
        root: data root (default: :func:`~bo_ncgp.data.resolve_root`).
        dtype: floating dtype (default: torch's default dtype).
        verify: check the file's checksum (see :func:`bo_ncgp.data.data_file`); ``False``
            skips the check and logs a warning.

    Returns:
        A dict with ``"X"`` ``(n, 2)`` positions (m), ``"y"`` ``(n,)`` field norm,
        ``"mag"`` ``(n, 3)`` field, ``"time"`` ``(n,)`` and ``"path"`` ``(n,)`` (int64 path
        number of every row).

    Raises:
        InputDataError: an unknown path number, or files whose lengths/columns disagree.
        FileNotFoundError: a file is missing (the message names it and the data root).
        DataChecksumError: a file differs from its pinned checksum.

    Example:
        >>> d = load_magnetometer(paths=[1, 2])  # doctest: +SKIP
        >>> d["X"].shape[1], d["y"].dim()  # doctest: +SKIP
        (2, 1)
    """
    paths = [int(p) for p in paths]
    if not paths:
        raise InputDataError("load_magnetometer: no paths requested")
    bad = [p for p in paths if p < 1 or p > 9]
    if bad:
        raise InputDataError(f"load_magnetometer: path numbers must lie in 1..9, got {bad}")
    dtype = dtype or torch.get_default_dtype()
    locs, mags, times, ids = [], [], [], []
    for p in paths:
        loc = _read(data_file(f"streaming/invensense/{p}-loc.csv", root, _HINT, verify), 2)
        mag = _read(data_file(f"streaming/invensense/{p}-mag.csv", root, _HINT, verify), 3)
        tim = _read(data_file(f"streaming/invensense/{p}-time.csv", root, _HINT, verify), 1)
        if not (len(loc) == len(mag) == len(tim)):
            raise InputDataError(
                f"load_magnetometer: path {p} has {len(loc)} positions, {len(mag)} field "
                f"readings and {len(tim)} time stamps"
            )
        locs.append(loc)
        mags.append(mag)
        times.append(tim[:, 0])
        ids.append(np.full(len(loc), p))
    mag = torch.from_numpy(np.concatenate(mags)).to(dtype)
    return {
        "X": torch.from_numpy(np.concatenate(locs)).to(dtype),
        "y": torch.linalg.vector_norm(mag, dim=-1),
        "mag": mag,
        "time": torch.from_numpy(np.concatenate(times)).to(dtype),
        "path": torch.from_numpy(np.concatenate(ids)).to(torch.long),
    }
