"""Loader of the schistosomiasis hotspot villages (Andrade-Pacheco et al. 2020).

``hotspots/<country>_data.csv`` holds one village per row with the columns

    lng, lat, bioclim1, bioclim12, bioclim15, bioclim4, dist_to_water_m, elev_m, disease, theta

``theta`` is the true prevalence of the disease named in ``disease``; the eight columns before
it are the village's features. It is the active-learning data of Maddox et al. (2021) and of
Chang et al. (2023), Sec. 4.1 / Fig. 4. The shared ``civ_data.csv`` (Côte d'Ivoire, 1,500
villages) has CR-only line endings; CR, LF and CRLF are all accepted, and so is any country
file with this schema (columns in any order; extra columns are ignored).

A village is a *hotspot* when ``theta > threshold``: 0.1 for ``civ`` and ``mwi``, 0.02 for
``hti`` and ``phl`` (other countries need ``threshold=...``).

Example:
    >>> data = load_hotspots("civ")  # doctest: +SKIP
    >>> data.X.shape, data.theta.shape, data.threshold  # doctest: +SKIP
    (torch.Size([1500, 8]), torch.Size([1500]), 0.1)
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.data._paths import data_file
from bo_ncgp.exceptions import InputDataError

__all__ = ["FEATURES", "HOTSPOT_THRESHOLDS", "HotspotData", "load_hotspots"]

#: the eight village features, in the order of the returned columns
FEATURES = (
    "lng",
    "lat",
    "bioclim1",
    "bioclim12",
    "bioclim15",
    "bioclim4",
    "dist_to_water_m",
    "elev_m",
)
_REQUIRED = (*FEATURES, "disease", "theta")

#: default hotspot prevalence threshold per country code
HOTSPOT_THRESHOLDS = {"civ": 0.1, "mwi": 0.1, "hti": 0.02, "phl": 0.02}

_HINT = (
    "The Côte d'Ivoire file hotspots/civ_data.csv ships with the project's shared data folder "
    "(Andrade-Pacheco et al. 2020, see ../shared/data/README.md); other countries must follow "
    "its schema"
)


class HotspotData(NamedTuple):
    """Villages of one country.

    Attributes:
        X: ``(n, 8)`` features in the order of :data:`FEATURES` (raw units).
        theta: ``(n,)`` true prevalence in ``[0, 1]``.
        threshold: hotspot threshold (``theta > threshold`` is a hotspot).
        disease: ``(n,)`` disease codes (e.g. ``"SM"``).
        path: the file that was read.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:  # a two-village country file
        ...     path = Path(tmp, "hotspots", "xyz_data.csv")
        ...     path.parent.mkdir()
        ...     rows = [",".join(_REQUIRED), "1,2,3,4,5,6,7,8,SM,0.3", "1,2,3,4,5,6,7,9,SH,0.05"]
        ...     _ = path.write_text("\\r".join(rows))  # CR-only line endings, as civ_data.csv
        ...     data = load_hotspots("xyz", root=tmp, threshold=0.1)
        >>> data.X.shape, (data.theta > data.threshold).tolist(), data.disease, data.path.name
        (torch.Size([2, 8]), [True, False], ('SM', 'SH'), 'xyz_data.csv')
    """

    X: Tensor
    theta: Tensor
    threshold: float
    disease: tuple[str, ...]
    path: Path


def _read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a CSV with CR, LF or CRLF line endings."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputDataError(f"{path}: not a UTF-8 text file ({err})") from err
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows:
        raise InputDataError(f"{path}: the file is empty (expected a header and village rows)")
    return [c.strip() for c in rows[0]], rows[1:]


def load_hotspots(
    country: str = "civ",
    root: str | os.PathLike | None = None,
    threshold: float | None = None,
    dtype: torch.dtype | None = None,
    verify: bool = True,
) -> HotspotData:
    """Load ``<root>/hotspots/<country>_data.csv``.

    Args:
        country: file prefix, e.g. ``"civ"`` (Côte d'Ivoire).
        root: data root (default: :func:`~bo_ncgp.data.resolve_root`).
        threshold: hotspot threshold; defaults to :data:`HOTSPOT_THRESHOLDS` ``[country]``.
        dtype: floating dtype of the tensors (default: torch's default dtype).
        verify: check the file's checksum: ``civ_data.csv`` against the one pinned in the
            package (see :func:`bo_ncgp.data.data_file`); ``False``
            skips the check and logs a warning.

    Raises:
        FileNotFoundError: the file is missing (the message names it and the data root).
        DataChecksumError: the file differs from its pinned (or listed) checksum.
        InputDataError: missing columns, an empty file, non-numeric or non-finite values, theta
            outside ``[0, 1]``, or an unknown country without ``threshold`` (the message
            names the file and the problem).

    Example:
        >>> load_hotspots("civ", root="/nonexistent")
        Traceback (most recent call last):
        ...
        FileNotFoundError: ...
        >>> data = load_hotspots("civ")  # needs the shared data  # doctest: +SKIP
    """
    if not isinstance(country, str) or not country or "/" in country or "\\" in country:
        raise InputDataError(
            f"load_hotspots: country must be a file prefix such as 'civ', got {country!r}"
        )
    if threshold is None:
        if country not in HOTSPOT_THRESHOLDS:
            raise InputDataError(
                f"load_hotspots: no default hotspot threshold for country {country!r} (known: "
                f"{', '.join(sorted(HOTSPOT_THRESHOLDS))}); pass threshold=..."
            )
        threshold = HOTSPOT_THRESHOLDS[country]
    threshold = float(threshold)
    if not (math.isfinite(threshold) and 0.0 < threshold < 1.0):
        raise InputDataError(f"load_hotspots: threshold must lie in (0, 1), got {threshold}")
    path = data_file(f"hotspots/{country}_data.csv", root=root, hint=_HINT, verify=verify)
    header, rows = _read_rows(path)
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise InputDataError(
            f"{path}: missing column(s) {', '.join(missing)}; expected the columns "
            f"{', '.join(_REQUIRED)} (found {', '.join(header)})"
        )
    if not rows:
        raise InputDataError(f"{path}: the file has a header but no village rows")
    col = {name: header.index(name) for name in _REQUIRED}
    numeric = (*FEATURES, "theta")
    values = np.empty((len(rows), len(numeric)))
    disease = []
    for i, row in enumerate(rows):
        line = i + 2  # 1-based, after the header
        if len(row) != len(header):
            raise InputDataError(
                f"{path}: line {line} has {len(row)} fields, the header has {len(header)}"
            )
        for j, name in enumerate(numeric):
            try:
                values[i, j] = float(row[col[name]])
            except ValueError:
                raise InputDataError(
                    f"{path}: line {line}, column {name}: {row[col[name]]!r} is not a number"
                ) from None
        disease.append(row[col["disease"]].strip())
    if not np.isfinite(values).all():
        i, j = np.argwhere(~np.isfinite(values))[0]
        raise InputDataError(f"{path}: line {i + 2}, column {numeric[j]} is NaN or infinite")
    theta = values[:, -1]
    bad = (theta < 0) | (theta > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputDataError(
            f"{path}: theta (the prevalence) must lie in [0, 1]; {int(bad.sum())} row(s) do not, "
            f"first at line {i + 2} (theta = {theta[i]})"
        )
    dtype = dtype or torch.get_default_dtype()
    return HotspotData(
        X=torch.as_tensor(values[:, :-1], dtype=dtype),
        theta=torch.as_tensor(theta, dtype=dtype),
        threshold=threshold,
        disease=tuple(disease),
        path=path,
    )
