"""Argument types of the ``bo-ncgp`` commands: ``argparse`` ``type=`` callables that parse a
value and check its range, so that a bad value is refused with a one-line usage error
("argument --batch-size: must be >= 1, got 0") before anything runs.

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="demo")
    >>> _ = p.add_argument("--batch-size", type=POSITIVE_INT, default=3)
    >>> p.parse_args(["--batch-size", "4"]).batch_size
    4
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "NONNEGATIVE_INT",
    "POSITIVE_INT",
    "checked",
    "int_at_least",
    "number_in",
]


def checked(
    cast: Callable[[str], Any], kind: str, ok: Callable[[Any], bool], requirement: str, name: str
) -> Callable[[str], Any]:
    """An ``argparse`` ``type=``: ``cast(text)`` (else "expected <kind>"), then ``ok(value)``
    (else "<requirement>, got <value>"); ``name`` is what argparse calls the type.

    Example:
        >>> even = checked(int, "an integer", lambda v: v % 2 == 0, "must be even", "even")
        >>> even("4"), even.__name__
        (4, 'even')
        >>> even("3")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be even, got 3
    """

    def parse(text: str) -> Any:
        try:
            val = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not ok(val):
            raise argparse.ArgumentTypeError(f"{requirement}, got {val}")
        return val

    parse.__name__ = name
    return parse


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer ``>= low``.

    Example:
        >>> int_at_least(2)("1")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be >= 2, got 1
    """
    return checked(int, "an integer", lambda v: v >= low, f"must be >= {low}", f"int>={low}")


def number_in(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``low_open``).

    Example:
        >>> number_in(0.0, 1.0, low_open=True)("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must lie in (0.0, 1.0], got 0.0
    """
    left = "(" if low_open else "["

    def ok(v: float) -> bool:
        return math.isfinite(v) and (v > low if low_open else v >= low) and v <= high

    span = f"{left}{low}, {high}]"
    return checked(float, "a number", ok, f"must lie in {span}", f"number in {span}")


#: a positive integer (counts, sizes, threads)
POSITIVE_INT = int_at_least(1)
#: a non-negative integer (seeds, step counts that may be zero)
NONNEGATIVE_INT = int_at_least(0)
