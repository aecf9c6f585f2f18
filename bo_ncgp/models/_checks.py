"""Validation of the input locations ``X`` that every model receives (one set of checks and
messages for IterNCGP, HIP-GP and the sparse GAM)."""

from __future__ import annotations

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg._args import cast_with_warning, check_real_tensor

__all__ = ["cast_to_model_dtype", "check_device", "check_inputs", "model_dtype", "module_device"]


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
    device: torch.device | str | None = None,
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
        device: the model's device: data that is not a tensor (lists, arrays) is built there,
            and a tensor on another device is refused (:func:`check_device`); ``None`` accepts
            tensors only, on any device.

    Example:
        >>> check_inputs(torch.zeros(3, 2), "Model", dims=2).shape
        torch.Size([3, 2])
        >>> check_inputs(torch.zeros(3, 1), "Model", dims=2)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: Model: X must have shape (..., n, 2) ...
    """
    if device is not None:
        X = X if isinstance(X, Tensor) else torch.as_tensor(X, device=device)
        check_device(who, device, **{name: X})
    X = cast_to_model_dtype(
        check_real_tensor(X, name, who, finite=False), who, name=name, dtype=dtype
    )
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
    return check_real_tensor(X, name, who)


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
