"""Optional dependencies, imported where they are used and reported by the extra that installs
them: :func:`require` imports the modules of an extra (``pyproject.toml``'s
``[project.optional-dependencies]``) or raises :class:`~bo_ncgp.exceptions.MissingExtraError`
naming the missing module and the ``pip install`` line; the ``bo-ncgp`` command reports it in
one line (exit code 2).

Example:
    >>> require("keops", "math", needed_by="the KeOps backend").__name__
    'math'
    >>> require("envs", "no_such_mod", needed_by="the lander")
    Traceback (most recent call last):
    ...
    bo_ncgp.exceptions.MissingExtraError: the lander needs no_such_mod: pip install 'bo-ncgp[envs]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from bo_ncgp.exceptions import InputDataError, MissingExtraError

__all__ = ["EXTRAS", "require"]

#: the optional extras of the distribution -> what they add
EXTRAS: dict[str, str] = {
    "envs": "gymnasium with Box2D (the lunar lander)",
    "keops": "pykeops (the KeOps kernel backend)",
    "distributed": "dask.distributed (campaigns on a dask cluster)",
}


def require(extra: str, *modules: str, needed_by: str) -> ModuleType:
    """Import ``modules`` (in order) and return the first; a module that does not import
    raises :class:`~bo_ncgp.exceptions.MissingExtraError` "<needed_by> needs <module>: pip
    install 'bo-ncgp[<extra>]'" (chained to the ``ImportError``).

    Args:
        extra: the extra of :data:`EXTRAS` that installs the modules.
        modules: dotted module names, at least one.
        needed_by: what needs them, as the start of the message ("the lunar lander").

    Example:
        >>> require("distributed", "json", "math", needed_by="dask campaigns").__name__
        'json'
    """
    if extra not in EXTRAS:
        raise InputDataError(f"unknown extra {extra!r}; the extras are {', '.join(EXTRAS)}")
    if not modules:
        raise InputDataError("require() needs at least one module name")
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except ImportError as err:
            raise MissingExtraError(
                f"{needed_by} needs {name}: pip install 'bo-ncgp[{extra}]'", extra=extra
            ) from err
    return loaded[0]
