"""Validation of the input locations ``X`` that every model receives (one set of checks and
messages for IterNCGP, HIP-GP and the sparse GAM)."""

from __future__ import annotations

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError

__all__ = ["check_device", "check_inputs", "module_device"]


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


def check_device(who: str, device: torch.device | str | None, **tensors: Tensor | None) -> None:
    """Raise :class:`InputDataError` when a tensor is not on the model's ``device``.

    A model computes on the device of its parameters; inputs on another device are an error
    rather than a silent copy (a copy per call would hide a host-device transfer in a loop).

    Args:
        who: the model, first word of the messages.
        device: the model's device (that of its parameters or training data); ``None`` (a
            model without tensors yet) checks nothing.
        **tensors: the arguments to check by name (``None`` and non-tensors are skipped).

    Example:
        >>> check_device("Model", torch.device("cpu"), X=torch.zeros(2, 1))
        >>> check_device("Model", "cpu", X=torch.zeros(2, 1, device="meta"))
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: Model: X is on meta but the model is on cpu; ...
    """
    if device is None:
        return
    device = torch.device(device)
    for name, t in tensors.items():
        if isinstance(t, Tensor) and not _same_device(t.device, device):
            raise InputDataError(
                f"{who}: {name} is on {t.device} but the model is on {device}; move the "
                f"inputs with {name}.to({str(device)!r}) or the model with .to({str(t.device)!r})"
            )


def _same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` name the same device when the current one is 0."""
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        current = torch.cuda.current_device() if a.type == "cuda" else 0
        return (a.index if a.index is not None else current) == (
            b.index if b.index is not None else current
        )
    return a.index == b.index


def module_device(module: torch.nn.Module) -> torch.device | None:
    """The device of ``module``'s first parameter or buffer (``None`` if it has none).

    Example:
        >>> module_device(torch.nn.Linear(2, 1))
        device(type='cpu')
    """
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return None
