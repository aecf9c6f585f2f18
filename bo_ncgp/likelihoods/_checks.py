"""Target checks shared by the count and label likelihoods."""

from __future__ import annotations

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods.settings import soft_targets_enabled


def _examples(values: Tensor, k: int = 5) -> str:
    vals = torch.unique(values.detach().flatten().cpu())[:k]
    return ", ".join(f"{float(v):g}" for v in vals)


def check_integer(name: str, y: Tensor, what: str = "counts") -> Tensor:
    """Float copy of ``y`` after checking every entry is a whole number."""
    yf = y.to(torch.get_default_dtype()) if not y.is_floating_point() else y
    if not torch.isfinite(yf).all():
        raise InputDataError(f"{name}: {what} contain inf")
    limit = 1.0 / torch.finfo(yf.dtype).eps  # above it, floats are not exact integers
    if (yf.abs() > limit).any():
        raise InputDataError(
            f"{name}: {what} must be at most {limit:.6g} in magnitude (the largest exact "
            f"integers of {yf.dtype}); found value(s) {_examples(yf[yf.abs() > limit])}"
        )
    bad = yf != torch.round(yf)
    if not soft_targets_enabled() and bad.any():
        raise InputDataError(
            f"{name}: {what} must be integers; found non-integer value(s) {_examples(yf[bad])}"
        )
    return yf


def check_range(name: str, y: Tensor, low: float, high: float | Tensor | None, what: str) -> None:
    """Raise if any entry of ``y`` lies outside ``[low, high]``."""
    bad = y < low
    if high is not None:
        bad = bad | (y > high)
    if bad.any():
        hi = (
            "inf"
            if high is None
            else (
                f"{float(high):g}"
                if not isinstance(high, Tensor) or high.numel() == 1
                else "num_trials"
            )
        )
        raise InputDataError(
            f"{name}: {what} out of range [{low:g}, {hi}]; found value(s) {_examples(y[bad])}"
        )
