"""Loader of the HIP-GP interstellar-dust subsample (Wu et al. 2022, Sec. 5.5).

``dust/domain_subsample.dat``: 5,000 stars of the simulated "Ananke" Milky-Way-like galaxy.
The file is whitespace separated with a one-line header that names 12 columns while every
row has 13 values: the first value of each row is an unnamed row index (the header was
written by a data-frame library that omits the index's name). Columns, in order:
``index, e, e_err, e_ananke, x, y, z, parallax, parallax_error, distance, ra, dec,
density``. ``e`` is the extinction (a line integral of the dust density from the observer at
the origin to the star at ``(x, y, z)``, kpc); ``density`` the dust density at the star.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.data._paths import data_file
from bo_ncgp.exceptions import InputDataError

__all__ = ["DUST_COLUMNS", "load_dust"]

DUST_COLUMNS = (
    "index",
    "e",
    "e_err",
    "e_ananke",
    "x",
    "y",
    "z",
    "parallax",
    "parallax_error",
    "distance",
    "ra",
    "dec",
    "density",
)
_RELPATH = "dust/domain_subsample.dat"
_HINT = "It is the HIP-GP dust subsample (Wu et al. 2022) shipped in the project's shared data."


def load_dust(
    root: str | os.PathLike | None = None,
    dtype: torch.dtype | None = None,
    verify: bool = True,
) -> dict[str, Tensor]:
    """Load the 5,000-star dust subsample.

    Args:
        root: data root (default: :func:`~bo_ncgp.data.resolve_root`).
        dtype: floating dtype of the tensors (default: torch's default dtype).
        verify: check the file's checksum (see :func:`bo_ncgp.data.data_file`); ``False``
            skips the check and logs a warning.

    Returns:
        A dict with one ``(n,)`` tensor per column of :data:`DUST_COLUMNS` (``index`` as
        int64) and ``"X"``, the ``(n, 3)`` star positions ``(x, y, z)`` in kpc.

    Raises:
        FileNotFoundError: the file is missing (the message names it and the data root).
        DataChecksumError: the file differs from its pinned checksum.
        InputDataError: the file does not have 12 header names and 13 values per row.

    Example:
        >>> d = load_dust()  # doctest: +SKIP
        >>> d["X"].shape, d["e"].shape  # doctest: +SKIP
        (torch.Size([5000, 3]), torch.Size([5000]))
    """
    path = data_file(_RELPATH, root=root, hint=_HINT, verify=verify)
    dtype = dtype or torch.get_default_dtype()
    with open(path) as fh:
        header = fh.readline().split()
    if header != list(DUST_COLUMNS[1:]):
        raise InputDataError(
            f"{path}: unexpected header {header}; expected the 12 names {list(DUST_COLUMNS[1:])}"
        )
    table = np.loadtxt(path, skiprows=1, ndmin=2)
    if table.shape[1] != len(DUST_COLUMNS):
        raise InputDataError(
            f"{path}: rows have {table.shape[1]} values, expected {len(DUST_COLUMNS)} "
            "(an unnamed index followed by the 12 named columns)"
        )
    if table.shape[0] == 0:
        raise InputDataError(f"{path}: no data rows")
    if not np.isfinite(table).all():
        raise InputDataError(f"{path}: contains NaN or inf")
    out: dict[str, Tensor] = {}
    for j, name in enumerate(DUST_COLUMNS):
        col = torch.from_numpy(np.ascontiguousarray(table[:, j]))
        out[name] = col.to(torch.long) if name == "index" else col.to(dtype)
    out["X"] = torch.stack([out["x"], out["y"], out["z"]], dim=-1)
    return out
