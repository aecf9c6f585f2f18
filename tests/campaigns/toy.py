"""Importable toy problems for campaign tests (worker processes unpickle them by name)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from bo_ncgp.campaigns.strategies.base import Strategy
from bo_ncgp.problems.base import Evaluation, Problem


@dataclass
class LoggedQuadratic(Problem):
    """-(x - 0.3)^2 summed; appends 'start/finish <point>' lines to ``log`` if given."""

    dim: int = 2
    delay: float = 0.0
    log: str | None = None
    name: str = "logged-quadratic"

    def __post_init__(self):
        self.bounds = np.array([[0.0] * self.dim, [1.0] * self.dim])

    def _log(self, what, x):
        if self.log:
            with open(self.log, "a") as fh:
                fh.write(f"{what} {os.getpid()} {' '.join(f'{v:.12f}' for v in x)}\n")

    def evaluate_heldout(self, x):
        self._log("heldout", np.asarray(x, float))
        return Evaluation(-float(((np.asarray(x) - 0.3) ** 2).sum()))

    def evaluate(self, x):
        x = np.asarray(x, float)
        self._log("start", x)
        time.sleep(self.delay)
        val = -float(((x - 0.3) ** 2).sum())
        self._log("finish", x)
        return Evaluation(val, success=bool(x[0] < 0.5))

    def config(self):
        return {"name": self.name, "dim": self.dim}


@dataclass
class ToyPool(Problem):
    size: int = 30
    name: str = "toy-pool"
    dim: int = 1

    def __post_init__(self):
        self.pool = np.linspace(0, 1, self.size)[:, None]

    def evaluate_index(self, index):
        return Evaluation(float(np.sin(6 * self.pool[index, 0])))


class CountingStrategy(Strategy):
    """Random proposals that also count how often observe() saw each batch (replay check)."""

    name = "counting"

    def setup(self, problem, seed):
        super().setup(problem, seed)
        self.observed = []

    def ask(self, history, q, rng):
        return rng.random((q, self.problem.dim))

    def observe(self, X, evaluations, history):
        self.observed.append(len(evaluations))

    def report(self, history):
        return {"n_seen": float(history.n)}
