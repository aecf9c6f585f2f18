"""Read-only attributes that read another attribute of the same object, declared in one line.

A model exposes many views of what it holds (a conditioned model's kernel is its base model's
kernel, a grid model's number of inducing points is its grid's number of points). :class:`Alias`
declares such a view by the dotted path it reads, with its docstring and its type, in place of a
``@property`` whose body only reads that path.

Example:
    >>> class Grid:
    ...     num_points = 16
    >>> class Model:
    ...     num_inducing: Alias[int] = Alias("grid.num_points", "Number of grid points.")
    ...     def __init__(self):
    ...         self.grid = Grid()
    >>> Model().num_inducing, Model.num_inducing.__doc__
    (16, 'Number of grid points.')
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

__all__ = ["Alias"]

T = TypeVar("T")


class Alias(Generic[T]):
    """A read-only attribute whose value is the instance's attribute at the dotted ``path``.

    Args:
        path: attribute names separated by dots, read from the instance one after another.
        doc: the attribute's docstring (what :func:`help` shows).

    Example:
        >>> import torch
        >>> class Buffer:
        ...     data: Alias[torch.Tensor] = Alias("_data", "The stored tensor.")
        ...     def __init__(self):
        ...         self._data = torch.zeros(2)
        >>> buf = Buffer()
        >>> buf.data
        tensor([0., 0.])
        >>> buf.data = torch.ones(2)
        Traceback (most recent call last):
        ...
        AttributeError: Buffer.data is read-only (it reads _data)
    """

    def __init__(self, path: str, doc: str) -> None:
        self.path = path
        self._parts = tuple(path.split("."))
        self.__doc__ = doc
        self._name = path

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = f"{owner.__name__}.{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Alias[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj
        for part in self._parts:
            value = getattr(value, part)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"{self._name} is read-only (it reads {self.path})")
