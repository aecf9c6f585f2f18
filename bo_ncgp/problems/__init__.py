"""Objectives and pools that campaigns optimise or explore."""

from bo_ncgp.problems.base import Evaluation, Problem

__all__ = ["Evaluation", "Problem"]
