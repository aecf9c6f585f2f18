"""Lunar lander: tune the 12 constants of gymnasium's heuristic controller.

The controller is gymnasium's ``heuristic`` for ``LunarLander-v3`` (discrete actions) with
its 12 hand-set constants exposed as parameters ``w`` in ``[0, 1.2]^12`` (the benchmark of
Eriksson et al. 2019, used in Chang et al. 2023, Sec. 4.1). :data:`DEFAULT_WEIGHTS`
reproduces gymnasium's own heuristic exactly.

One evaluation is the mean total reward over a fixed list of episode seeds (common random
numbers), each episode capped at ``max_steps = 1000`` (an episode that times out gets no
landing bonus), plus a success label: the episode ended with the +100 landing bonus (the
lander came to rest) in at least ``success_fraction`` of the episodes.

``enable_wind=True`` turns on gymnasium's wind and turbulence (``wind_power``, default 15,
and ``turbulence_power``, default 1.5): a further source of randomness in each episode,
seeded by the episode seed like the terrain and the initial push.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bo_ncgp._extras import require
from bo_ncgp.exceptions import InputDataError
from bo_ncgp.problems.base import Evaluation, Problem

__all__ = ["DEFAULT_WEIGHTS", "LunarLander", "heuristic_action", "run_episode"]

#: gymnasium's heuristic constants, in the order used by :func:`heuristic_action`
DEFAULT_WEIGHTS = np.array([0.5, 1.0, 0.4, 0.55, 0.5, 1.0, 0.5, 0.5, 0.0, 0.5, 0.05, 0.05])


def heuristic_action(s: np.ndarray, w: np.ndarray) -> int:
    """Discrete action of the parametrised heuristic for state ``s`` (8 values).

    With ``w = DEFAULT_WEIGHTS`` this is ``gymnasium.envs.box2d.lunar_lander.heuristic``.

    Example:
        >>> s = np.zeros(8)  # at rest above the pad, level: no engine needed
        >>> heuristic_action(s, DEFAULT_WEIGHTS)
        0
    """
    angle_targ = s[0] * w[0] + s[2] * w[1]  # point towards the centre
    angle_targ = min(max(angle_targ, -w[2]), w[2])
    hover_targ = w[3] * abs(s[0])
    angle_todo = (angle_targ - s[4]) * w[4] - s[5] * w[5]
    hover_todo = (hover_targ - s[1]) * w[6] - s[3] * w[7]
    if s[6] or s[7]:  # legs have contact
        angle_todo = w[8]
        hover_todo = -s[3] * w[9]
    if hover_todo > abs(angle_todo) and hover_todo > w[10]:
        return 2
    if angle_todo < -w[11]:
        return 3
    if angle_todo > w[11]:
        return 1
    return 0


def _gymnasium():
    """gymnasium, with the Box2D physics of the lander (the ``envs`` extra)."""
    return require("envs", "gymnasium", "Box2D", needed_by="the lunar lander")


def run_episode(
    w: np.ndarray, seed: int, max_steps: int = 1000, **wind: Any
) -> tuple[float, bool, int]:
    """Total reward, whether the episode ended with the landing bonus, and its length;
    ``wind`` are gymnasium's ``enable_wind``, ``wind_power`` and ``turbulence_power``.

    Example:
        >>> reward, landed, steps = run_episode(DEFAULT_WEIGHTS, seed=0)
        >>> landed, reward > 200  # gymnasium's hand-tuned controller lands
        (True, True)
        >>> windy, _, _ = run_episode(DEFAULT_WEIGHTS, seed=0, enable_wind=True)
        >>> windy != reward
        True
    """
    gym = _gymnasium()
    env = gym.make("LunarLander-v3", max_episode_steps=max_steps, **wind)
    try:
        s, _ = env.reset(seed=int(seed))
        total, landed, steps = 0.0, False, 0
        while True:
            s, r, terminated, truncated, _ = env.step(heuristic_action(s, w))
            total += float(r)
            steps += 1
            if terminated:
                lander = env.unwrapped.lander
                landed = (not env.unwrapped.game_over) and (not lander.awake)
                break
            if truncated:
                break
        return total, landed, steps
    finally:
        env.close()


@dataclass
class LunarLander(Problem):
    """The 12-D lunar-lander controller problem (maximise mean reward).

    Args:
        episode_seeds: seeds of the K episodes of one evaluation (common random numbers).
        heldout_seeds: seeds used to score final recommendations.
        max_steps: episode cap (1000).
        success_fraction: fraction of landed episodes for the success label.
        enable_wind, wind_power, turbulence_power: gymnasium's wind (off by default).

    Example:
        >>> prob = LunarLander(episode_seeds=list(range(2)))
        >>> ev = prob.evaluate(DEFAULT_WEIGHTS)   # doctest: +SKIP
    """

    episode_seeds: list[int] = field(default_factory=lambda: list(range(10)))
    heldout_seeds: list[int] = field(default_factory=lambda: list(range(1000, 1050)))
    max_steps: int = 1000
    success_fraction: float = 1.0
    enable_wind: bool = False
    wind_power: float = 15.0
    turbulence_power: float = 1.5
    name: str = "lunar-lander"
    dim: int = 12
    #: the strategies of the lunar lander (:mod:`bo_ncgp.campaigns.strategies.registry`)
    strategy_family = "lunar-lander"

    def __post_init__(self) -> None:
        _gymnasium()  # a missing extra is reported before any evaluation
        self.bounds = np.array([[0.0] * 12, [1.2] * 12])
        if not self.episode_seeds:
            raise InputDataError("LunarLander: episode_seeds must not be empty")
        if not 0.0 < self.success_fraction <= 1.0:
            raise InputDataError(
                f"LunarLander: success_fraction must be in (0, 1], got {self.success_fraction}"
            )
        if not (0.0 <= self.wind_power <= 20.0 and 0.0 <= self.turbulence_power <= 2.0):
            raise InputDataError(
                "LunarLander: wind_power must lie in [0, 20] and turbulence_power in [0, 2] "
                f"(gymnasium's ranges), got {self.wind_power} and {self.turbulence_power}"
            )
        if self.name == "lunar-lander" and self.enable_wind:
            self.name = "lunar-lander-wind"

    def _wind(self) -> dict[str, Any]:
        if not self.enable_wind:
            return {}
        return {
            "enable_wind": True,
            "wind_power": float(self.wind_power),
            "turbulence_power": float(self.turbulence_power),
        }

    def _check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float).reshape(-1)
        if x.shape != (12,):
            raise InputDataError(f"LunarLander: x must have 12 entries, got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise InputDataError("LunarLander: x contains NaN or inf")
        return x

    def _evaluate(self, x: np.ndarray, seeds: list[int]) -> Evaluation:
        w = self._check(x)
        rewards, landed, steps = [], [], []
        for s in seeds:
            r, ok, n = run_episode(w, s, self.max_steps, **self._wind())
            rewards.append(r)
            landed.append(ok)
            steps.append(n)
        frac = float(np.mean(landed))
        return Evaluation(
            value=float(np.mean(rewards)),
            success=frac >= self.success_fraction - 1e-12,
            extra={"rewards": rewards, "landed_fraction": frac, "steps": steps},
        )

    def evaluate(self, x: np.ndarray) -> Evaluation:
        return self._evaluate(x, self.episode_seeds)

    def evaluate_heldout(self, x: np.ndarray) -> Evaluation:
        return self._evaluate(x, self.heldout_seeds)

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dim": self.dim,
            "episode_seeds": list(self.episode_seeds),
            "heldout_seeds": list(self.heldout_seeds),
            "max_steps": self.max_steps,
            "success_fraction": self.success_fraction,
            **self._wind(),  # no keys without wind: campaigns saved before wind resume
        }
