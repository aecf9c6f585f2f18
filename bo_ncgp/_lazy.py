"""Package attributes imported from their modules on first use (PEP 562 ``__getattr__``).

Example:
    >>> getattr_, dir_ = lazy_attributes("pkg", {"sqrt": "math"}, ["extra"])
    >>> getattr_("sqrt")(4.0), dir_()
    (2.0, ['extra', 'sqrt'])
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, lazy: Mapping[str, str], listed: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``: a name of ``lazy`` is
    imported from the module ``lazy[name]`` when first asked for; ``__dir__`` lists the names
    of ``lazy`` with ``listed``, sorted.

    Example:
        >>> getattr_, _ = lazy_attributes("pkg", {"pi": "math"})
        >>> round(getattr_("pi"), 2)
        3.14
        >>> getattr_("tau")
        Traceback (most recent call last):
        AttributeError: module 'pkg' has no attribute 'tau'
    """
    names = sorted({*lazy, *listed})

    def __getattr__(name: str) -> Any:
        if name in lazy:
            return getattr(importlib.import_module(lazy[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return list(names)

    return __getattr__, __dir__
