"""BoTorch's synthetic test functions as campaign problems (maximised).

``TestFunction("branin")`` wraps ``botorch.test_functions.synthetic.Branin(negate=True)``.
Optional observation noise (seeded per point, so evaluations stay deterministic), an
artificial ``delay`` (to exercise parallel workers) and a ``fail_if`` rule (evaluations whose
first coordinate exceeds the threshold raise, those below ``nan_below`` return NaN) make
it a test bed for campaign infrastructure.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.base import Evaluation, Problem

__all__ = ["TestFunction"]


@dataclass
class TestFunction(Problem):
    """A BoTorch synthetic function, negated so that campaigns maximise it.

    Args:
        function: class name in ``botorch.test_functions.synthetic`` (case-insensitive),
            e.g. ``"branin"``, ``"hartmann"`` (6-D), ``"ackley"``.
        dim: dimension for functions that take one (Ackley, Levy, ...).
        noise_std: observation noise, seeded by the point.
        delay: seconds slept per evaluation.
        fail_above: evaluations with ``x[0] > fail_above`` raise ``RuntimeError``.
        nan_below: evaluations with ``x[0] < nan_below`` return NaN.

    Example:
        >>> TestFunction("branin").evaluate(np.array([np.pi, 2.275])).value  # doctest: +ELLIPSIS
        -0.39788...
    """

    function: str = "branin"
    dim: int | None = None
    noise_std: float = 0.0
    delay: float = 0.0
    fail_above: float | None = None
    nan_below: float | None = None
    __test__ = False  # not a pytest test class

    def __post_init__(self) -> None:
        f = self._f()
        self.dim = int(f.dim)
        self.bounds = f.bounds.numpy().astype(float)
        self.name = f"test-{self.function.lower()}"

    def _f(self):
        from botorch.test_functions import synthetic

        names = {n.lower(): n for n in dir(synthetic)}
        if self.function.lower() not in names:
            raise InputDataError(f"TestFunction: unknown BoTorch test function {self.function!r}")
        cls = getattr(synthetic, names[self.function.lower()])
        kwargs = {"negate": True}
        if self.dim is not None and "dim" in cls.__init__.__code__.co_varnames:
            kwargs["dim"] = self.dim
        return cls(**kwargs)

    def evaluate(self, x: np.ndarray) -> Evaluation:
        import torch

        x = np.asarray(x, dtype=float).reshape(-1)
        if x.shape != (self.dim,):
            raise InputDataError(f"{self.name}: x must have {self.dim} entries, got {x.shape}")
        if self.delay:
            time.sleep(self.delay)
        if self.fail_above is not None and x[0] > self.fail_above:
            raise RuntimeError(f"simulated failure at x[0]={x[0]:.3f} > {self.fail_above}")
        if self.nan_below is not None and x[0] < self.nan_below:
            return Evaluation(float("nan"))
        value = float(self._f()(torch.as_tensor(x, dtype=torch.float64).unsqueeze(0)))
        if self.noise_std:
            seed = int.from_bytes(hashlib.sha256(x.tobytes()).digest()[:8], "little")
            value += self.noise_std * float(np.random.default_rng(seed).standard_normal())
        return Evaluation(value)

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "function": self.function,
            "dim": self.dim,
            "noise_std": self.noise_std,
            "fail_above": self.fail_above,
            "nan_below": self.nan_below,
        }
