"""Validation of the input locations ``X`` that every model receives (one set of checks and
messages for IterNCGP, HIP-GP and the sparse GAM)."""

from __future__ import annotations

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError

__all__ = ["check_inputs"]


def check_inputs(
    X: Tensor,
    who: str,
    *,
    name: str = "X",
    dims: int | None = None,
    min_dims: int | None = None,
    matrix: bool = False,
    allow_empty: bool = True,
) -> Tensor:
    """Check ``X`` of shape ``(..., n, d)`` and return it; raise :class:`InputDataError`.

    Args:
        X: the inputs (a floating-point tensor).
        who: the model, first word of the messages.
        name: the argument's name in the messages.
        dims: the required number of input dimensions ``d`` (``None``: any).
        min_dims: the smallest ``d`` allowed (inputs with extra, unused columns).
        matrix: require exactly ``(n, d)`` (training data) instead of ``(..., n, d)``.
        allow_empty: accept ``n = 0``.

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
    if not X.is_floating_point():
        raise InputDataError(f"{who}: {name} must be a floating-point tensor, got {X.dtype}")
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
