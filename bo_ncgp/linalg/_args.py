"""Checks of numeric arguments and tensors, shared by the public API of linalg, likelihoods
and models (one wording for every message: who, the argument, what is allowed, the value).

Example:
    >>> check_positive(0.1, "lr", "Model")
    0.1
    >>> check_positive(float("inf"), "lr", "Model")
    Traceback (most recent call last):
    ...
    bo_ncgp.exceptions.InputDataError: Model: lr must be a finite positive number, got inf
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, InputDataWarning

__all__ = [
    "cast_with_warning",
    "check_count",
    "check_number",
    "check_positive",
    "check_real_tensor",
]


def _as_float(value: object, name: str, who: str, allowed: str) -> float:
    """``value`` as a Python float; raise when it is not a real number."""
    if isinstance(value, Tensor):
        if value.numel() != 1 or value.is_complex():
            raise InputDataError(f"{who}: {name} must be {allowed}, got a tensor {value!r}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputDataError(f"{who}: {name} must be {allowed}, got {value!r}")
    return float(value)


def check_number(
    value: object,
    name: str,
    who: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite real number in ``[low, high]`` (open ends with ``low_open``/``high_open``),
    returned as a float; otherwise :class:`InputDataError` naming ``who`` and ``name``.

    Example:
        >>> check_number(0.5, "rho", "Model", low=0, high=1, low_open=True)
        0.5
        >>> check_number(float("nan"), "rho", "Model", low=0, high=1, low_open=True)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: Model: rho must be a finite number in (0, 1], got nan
    """
    parts = []
    if low is not None or high is not None:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        parts.append(f" in {'(' if low_open or low is None else '['}{lo}, {hi}")
        parts[-1] += ")" if high_open or high is None else "]"
    allowed = "a finite number" + "".join(parts)
    x = _as_float(value, name, who, allowed)
    bad = not math.isfinite(x)
    if low is not None:
        bad = bad or (x <= low if low_open else x < low)
    if high is not None:
        bad = bad or (x >= high if high_open else x > high)
    if bad:
        raise InputDataError(f"{who}: {name} must be {allowed}, got {value!r}")
    return x


def check_positive(value: object, name: str, who: str, *, allow_zero: bool = False) -> float:
    """A finite number ``> 0`` (``>= 0`` with ``allow_zero``), returned as a float.

    Example:
        >>> check_positive(0.0, "jitter", "Model", allow_zero=True)
        0.0
        >>> check_positive(-1.0, "jitter", "M", allow_zero=True)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: M: jitter must be a finite non-negative number, got -1.0
    """
    allowed = "a finite non-negative number" if allow_zero else "a finite positive number"
    x = _as_float(value, name, who, allowed)
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        raise InputDataError(f"{who}: {name} must be {allowed}, got {value!r}")
    return x


def check_count(value: object, name: str, who: str, *, minimum: int = 0) -> int:
    """A whole number ``>= minimum`` (an ``int``, or a float/tensor with an integral value),
    returned as an ``int``.

    Example:
        >>> check_count(3, "max_iters", "cg")
        3
        >>> check_count(-1, "max_iters", "cg")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: cg: max_iters must be an integer >= 0, got -1
    """
    allowed = f"an integer >= {minimum}"
    x = _as_float(value, name, who, allowed)
    if not math.isfinite(x) or x != round(x) or x < minimum:
        raise InputDataError(f"{who}: {name} must be {allowed}, got {value!r}")
    return int(x)


def check_real_tensor(
    value: object, name: str, who: str, *, finite: bool = True, floating: bool = False
) -> Tensor:
    """A real (not complex) tensor, with only finite entries when ``finite``; a floating-point
    tensor when ``floating``. Returns it unchanged.

    Example:
        >>> check_real_tensor(torch.tensor([1.0, float("inf")]), "B", "cg")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: cg: B contains NaN or inf
    """
    if not isinstance(value, Tensor):
        raise InputDataError(f"{who}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.is_complex():
        raise InputDataError(f"{who}: {name} must be real, got a complex tensor ({value.dtype})")
    if floating and not value.is_floating_point():
        raise InputDataError(f"{who}: {name} must be a floating-point tensor, got {value.dtype}")
    if finite and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise InputDataError(f"{who}: {name} contains NaN or inf")
    return value


def cast_with_warning(
    X: Tensor, dtype: torch.dtype, name: str, who: str, *, stacklevel: int = 3
) -> Tensor:
    """``X`` cast to ``dtype`` (the dtype the model or operator computes in), announced by one
    :class:`~bo_ncgp.exceptions.InputDataWarning` naming both dtypes; complex ``X`` raises
    :class:`InputDataError` (dropping the imaginary part would give silently wrong answers).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     B = cast_with_warning(torch.ones(2, dtype=torch.float32), torch.float64, "B", "cg")
        >>> B.dtype, str(caught[0].message).split(";")[0]
        (torch.float64, 'cg: B has dtype torch.float32, the computation runs in torch.float64')
    """
    if X.is_complex():
        raise InputDataError(f"{who}: {name} must be real, got a complex tensor ({X.dtype})")
    if X.dtype == dtype:
        return X
    warnings.warn(
        f"{who}: {name} has dtype {X.dtype}, the computation runs in {dtype}; {name} was cast "
        f"to {dtype}",
        InputDataWarning,
        stacklevel=stacklevel,
    )
    return X.to(dtype)
