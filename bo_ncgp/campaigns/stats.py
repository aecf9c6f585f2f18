"""The one summary statistic of campaign results over seeds: mean +- standard error.

Convention (used by every summary, table, comparison and plot of the package):

* non-finite values (failed or missing seeds) are left out; ``n`` counts the values used;
* the standard error is ``std(ddof=1) / sqrt(n)``, the sample standard deviation over the
  seeds divided by the square root of their number;
* with one value (one seed) the standard error is undefined and reported as ``nan`` -- never
  ``0``, which would claim a certainty one seed cannot give; plots draw no band there;
* with no value the mean is ``nan`` too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bo_ncgp.exceptions import InputDataError

__all__ = ["mean_se", "mean_se_curve", "mean_se_dict"]


def _finite(values: Any) -> np.ndarray:
    a = np.array(values, dtype=float)
    a[~np.isfinite(a)] = np.nan
    return a


def mean_se(values: Any) -> tuple[float, float, int]:
    """``(mean, standard error, n)`` of the finite entries of ``values`` (module docstring).

    Example:
        >>> mean_se([1.0, 3.0, float("nan")])
        (2.0, 1.0, 2)
        >>> mean_se([2.0])  # one seed: no standard error
        (2.0, nan, 1)
        >>> mean_se([])
        (nan, nan, 0)
    """
    a = np.asarray(values, dtype=float).reshape(-1)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return float("nan"), float("nan"), 0
    se = float(a.std(ddof=1) / np.sqrt(a.size)) if a.size > 1 else float("nan")
    return float(a.mean()), se, int(a.size)


def mean_se_dict(values: Any) -> dict[str, float | int]:
    """:func:`mean_se` as ``{"mean", "se", "n"}`` (the form written to summary files).

    Example:
        >>> mean_se_dict([1.0, 3.0])
        {'mean': 2.0, 'se': 1.0, 'n': 2}
    """
    m, se, n = mean_se(values)
    return {"mean": m, "se": se, "n": n}


def mean_se_curve(curves: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise ``(mean, standard error, n)`` over the rows of ``curves`` (seeds x steps),
    each step by the convention of :func:`mean_se`.

    Example:
        >>> m, se, n = mean_se_curve([[1.0, 2.0], [3.0, float("nan")]])
        >>> m.tolist(), se.tolist(), n.tolist()
        ([2.0, 2.0], [1.0, nan], [2, 1])
    """
    A = _finite(curves)
    if A.ndim != 2:
        raise InputDataError(f"mean_se_curve: expected a (seeds, steps) array, got shape {A.shape}")
    n = np.sum(np.isfinite(A), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.nansum(A, axis=0)
        mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
        dev = np.where(np.isfinite(A), A - mean, 0.0)
        var = np.sum(dev * dev, axis=0) / np.maximum(n - 1, 1)
        se = np.where(n > 1, np.sqrt(var) / np.sqrt(np.maximum(n, 1)), np.nan)
    return mean, se, n
