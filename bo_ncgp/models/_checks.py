"""Validation of the input locations ``X`` that every model receives (one set of checks and
messages for IterNCGP, HIP-GP and the sparse GAM)."""

from __future__ import annotations

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg._args import cast_with_warning

__all__ = ["cast_to_model_dtype", "check_inputs", "model_dtype"]


def check_inputs(
    X: Tensor,
    who: str,
    *,
    name: str = "X",
    dims: int | None = None,
    min_dims: int | None = None,
    matrix: bool = False,
    allow_empty: bool = True,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Check ``X`` of shape ``(..., n, d)`` and return it; raise :class:`InputDataError`.

    ``X`` of another dtype than the model's (``float32`` or integer data for a ``float64``
    model) is cast to it by :func:`cast_to_model_dtype`, with an :class:`InputDataWarning`.

    Args:
        X: the inputs (a real tensor; cast to ``dtype``).
        who: the model, first word of the messages.
        name: the argument's name in the messages.
        dims: the required number of input dimensions ``d`` (``None``: any).
        min_dims: the smallest ``d`` allowed (inputs with extra, unused columns).
        matrix: require exactly ``(n, d)`` (training data) instead of ``(..., n, d)``.
        allow_empty: accept ``n = 0``.
        dtype: the model's floating dtype (``None``: keep floating ``X``, cast integers to the
            default dtype).

    Example:
        >>> check_inputs(torch.zeros(3, 2), "Model", dims=2).shape
        torch.Size([3, 2])
        >>> check_inputs(torch.zeros(3, 1), "Model", dims=2)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: Model: X must have shape (..., n, 2) ...
    """
    if not isinstance(X, Tensor):
        raise InputDataError(f"{who}: {name} must be a torch.Tensor, got {type(X).__name__}")
    X = cast_to_model_dtype(X, who, name=name, dtype=dtype)
    shape = tuple(X.shape)
    if matrix and X.dim() != 2:
        raise InputDataError(f"{who}: {name} must have shape (n, d), got {shape}")
    if X.dim() < 2 or (dims is not None and X.shape[-1] != dims):
        d = "d" if dims is None else dims
        also = "" if dims is None else f" ({dims} input dimensions)"
        raise InputDataError(f"{who}: {name} must have shape (..., n, {d}){also}, got {shape}")
    if min_dims is not None and X.shape[-1] < min_dims:
        raise InputDataError(
            f"{who}: {name} has {X.shape[-1]} columns, the model needs at least {min_dims} "
            "input dimensions"
        )
    if not allow_empty and X.shape[-2] == 0:
        raise InputDataError(f"{who}: {name} is empty (no data points)")
    if not torch.isfinite(X).all():
        raise InputDataError(f"{who}: {name} contains NaN or inf")
    return X


def model_dtype(*refs: torch.nn.Module | Tensor | None) -> torch.dtype:
    """The floating dtype a model computes in: that of the first floating tensor among
    ``refs`` (tensors, or modules' parameters and buffers); the default dtype if none.

    Example:
        >>> model_dtype(torch.nn.Linear(2, 1).double())
        torch.float64
    """
    for ref in refs:
        if isinstance(ref, Tensor) and ref.is_floating_point():
            return ref.dtype
        if isinstance(ref, torch.nn.Module):
            for t in (*ref.parameters(), *ref.buffers()):
                if t.is_floating_point():
                    return t.dtype
    return torch.get_default_dtype()


def cast_to_model_dtype(
    X: Tensor, who: str, *, name: str = "X", dtype: torch.dtype | None = None
) -> Tensor:
    """``X`` in the model's floating ``dtype``; a cast is announced by one
    :class:`InputDataWarning` naming both dtypes. Complex ``X`` raises
    :class:`InputDataError` (the models are real-valued; dropping the imaginary part would
    give silently wrong answers).

    ``dtype=None`` keeps a floating ``X`` and casts integer or boolean ``X`` to the default
    dtype.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     X = cast_to_model_dtype(torch.ones(2, 1, dtype=torch.float32), "Model",
        ...                             dtype=torch.float64)
        >>> X.dtype, caught[0].category.__name__
        (torch.float64, 'InputDataWarning')
    """
    if dtype is None:
        dtype = X.dtype if X.is_floating_point() else torch.get_default_dtype()
    return cast_with_warning(X, dtype, name, who, stacklevel=4)
