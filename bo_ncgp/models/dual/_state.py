"""State handling of the dual SVGP: ``torch.nn.Module`` buffers that may change shape
(streaming state) and still round-trip through ``state_dict`` / ``load_state_dict`` into a
freshly constructed module, and the cache keys of the Eq. 10 factorisations."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from bo_ncgp.models._alias import Alias

T = TypeVar("T")

__all__ = [
    "InducingState",
    "ResizableModule",
    "Snapshot",
    "cached_weights",
    "fixed_hyperparameters",
    "hyperparameters_fixed",
    "same_key",
    "shallow_module_copy",
    "tensor_places",
]


class ResizableModule(torch.nn.Module):
    """Buffers named in ``_resizable`` are replaced by the loaded tensors' shapes on load;
    those also in ``_optional`` may be absent (``None``) on either side."""

    _resizable: tuple[str, ...] = ()
    _optional: tuple[str, ...] = ()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ):
        for name in self._resizable:
            key = prefix + name
            current = self._buffers.get(name)
            if key in state_dict:
                src = state_dict[key]
                like = current if current is not None else src
                self._buffers[name] = torch.empty(
                    src.shape,
                    dtype=src.dtype if current is None else like.dtype,
                    device=like.device,
                )
            elif name in self._optional:
                self._buffers[name] = None
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )
        self._on_state_loaded()

    def _on_state_loaded(self) -> None:
        """Hook run after a state dict was loaded (invalidate caches)."""


class InducingState:
    """Read-only views of a streaming sparse GP's state: the inducing inputs ``_Z``, the
    number of latents ``_C`` and the count of data seen ``_num_data`` (buffers the model
    registers)."""

    _Z: torch.Tensor
    _C: int
    _num_data: torch.Tensor

    Z: Alias[torch.Tensor] = Alias("_Z", "``(m, d)`` current inducing inputs.")

    @property
    def num_inducing(self) -> int:
        """Number of inducing inputs ``m``."""
        return int(self._Z.shape[0])

    num_latents: Alias[int] = Alias("_C", "Number of latent functions ``C``.")

    @property
    def num_data(self) -> int:
        """Number of data points seen so far."""
        return int(self._num_data)


_FIXED_HYPERPARAMETERS = contextvars.ContextVar("bo_ncgp_dual_fixed_hypers", default=False)


@contextlib.contextmanager
def fixed_hyperparameters() -> Iterator[None]:
    """Within this context, DualSVGP posteriors are not differentiated with respect to the
    hyperparameters (gradients with respect to the inputs ``X`` and fantasy targets are kept).

    The base factorisation of Eq. 10 (``chol(K_zz + B_u)`` with the memory's sites, O(n_M m^2
    + m^3)) then depends on nothing that requires grad, so it is computed once and cached
    across calls instead of being rebuilt on every acquisition evaluation. The BoTorch
    adapter :class:`~bo_ncgp.bo.DualSVGPModel` uses it for ``posterior`` and conditioning,
    since acquisition optimisation only needs gradients in ``X``.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> X = torch.rand(20, 1)
        >>> m = DualSVGP(RBFKernel(), Gaussian(0.1), X[:5], num_hyper_steps=0).update(X, X[:, 0])
        >>> x = torch.rand(3, 1, requires_grad=True)
        >>> with fixed_hyperparameters():
        ...     mean, var = m.predict_f(x)  # the base factorisation is cached from here on
        >>> (mean + var).sum().backward()  # gradients in X still flow
        >>> x.grad.shape
        torch.Size([3, 1])
    """
    token = _FIXED_HYPERPARAMETERS.set(True)
    try:
        yield
    finally:
        _FIXED_HYPERPARAMETERS.reset(token)


def hyperparameters_fixed() -> bool:
    """Whether the caller is inside :func:`fixed_hyperparameters`."""
    return _FIXED_HYPERPARAMETERS.get()


class Snapshot:
    """A copy of a (small) hyperparameter tensor, compared by value in cache keys."""

    __slots__ = ("value",)

    def __init__(self, t: torch.Tensor) -> None:
        self.value = t.detach().clone()


def cached_weights(owner: object, source: object, build: Callable[[], T]) -> T:
    """The predictive weights ``owner`` holds for the cached factorisation ``source`` (the
    very object: cached factors are returned by identity while their key holds), built by
    ``build`` without a graph when ``source`` is new.

    Example:
        >>> class Owner: pass
        >>> o, f = Owner(), object()
        >>> w = cached_weights(o, f, lambda: [1.0])
        >>> cached_weights(o, f, lambda: [2.0]) is w, cached_weights(o, object(), lambda: [2.0])
        (True, [2.0])
    """
    held = getattr(owner, "_weights_cache", None)
    if held is not None and held[0] is source:
        return held[1]
    with torch.no_grad():
        weights = build()
    owner._weights_cache = (source, weights)  # type: ignore[attr-defined]
    return weights


def same_key(a: tuple, b: tuple) -> bool:
    """Cache keys are equal: identical objects, or equal snapshots."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, Snapshot):
            if not (isinstance(y, Snapshot) and torch.equal(x.value, y.value)):
                return False
        elif x is not y:
            return False
    return True


def tensor_places(module: torch.nn.Module) -> list[tuple]:
    """``(data_ptr, dtype, device)`` of every parameter and buffer of ``module``: what a
    ``Module._apply`` (``.to``, ``.double``, ...) changes when it moves or converts a tensor,
    and leaves equal when it is a no-op (e.g. BoTorch's ``acqf.to(X)`` on every evaluation).

    Example:
        >>> lin = torch.nn.Linear(2, 1)
        >>> before = tensor_places(lin)
        >>> tensor_places(lin.to(lin.weight)) == before, tensor_places(lin.half()) == before
        (True, False)
    """
    tensors = [*module.parameters(), *module.buffers()]
    return [(t.data_ptr(), t.dtype, t.device) for t in tensors]


def shallow_module_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A new module object whose attribute, buffer and submodule dictionaries are copies of
    ``module``'s (the tensors and submodules themselves are shared)."""
    new = module.__class__.__new__(module.__class__)
    new.__dict__ = module.__dict__.copy()
    new._buffers = dict(module._buffers)
    new._modules = dict(module._modules)
    new._parameters = dict(module._parameters)
    return new
