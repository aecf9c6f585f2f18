"""The BoTorch layer: Model adapters, acquisition functions and the fantasy-batch builder.

Thin translations between BoTorch's shapes (``batch x q x d``, ``GPyTorchPosterior``) and
the methods of :mod:`bo_ncgp.models`:

* :mod:`bo_ncgp.bo.base` -- :class:`LatentGPModel`, the BoTorch ``Model`` of any bo_ncgp model;
* :mod:`bo_ncgp.bo.models` -- its per-model subclasses where a model needs more than the
  generic adapter;
* :mod:`bo_ncgp.bo.acquisition` -- analytic acquisitions and pool-based active learning;
* :mod:`bo_ncgp.bo.fantasy` -- batches built by fantasies (Kriging believer and friends).

Names are imported lazily.

Example:
    >>> import bo_ncgp.bo as bo
    >>> bo.ThresholdEntropyReduction.__module__
    'bo_ncgp.bo.acquisition.pool'
"""

from __future__ import annotations

from bo_ncgp._lazy import lazy_attributes

_ACQ = "bo_ncgp.bo.acquisition"
_LAZY = {
    "LatentGPModel": "bo_ncgp.bo.base",
    "LatentGPMarginalLogLikelihood": "bo_ncgp.bo.base",
    "DualSVGPModel": "bo_ncgp.bo.models",
    "IterNCGPModel": "bo_ncgp.bo.models",
    "HIPGPModel": "bo_ncgp.bo.models",
    "SparseGAMModel": "bo_ncgp.bo.models",
    "FantasyBatch": "bo_ncgp.bo.fantasy",
    "build_fantasy_batch": "bo_ncgp.bo.fantasy",
    "kriging_believer_batch": "bo_ncgp.bo.fantasy",
    "BALD": _ACQ,
    "BinaryPredictiveEntropy": _ACQ,
    "ConstrainedLogExpectedImprovement": _ACQ,
    "LogProbabilityOfSuccess": _ACQ,
    "ProbabilityOfSuccess": _ACQ,
    "CRITERIA": _ACQ,
    "ThresholdEntropyReduction": _ACQ,
    "check_criterion": _ACQ,
    "exceedance_entropy": _ACQ,
    "exceedance_probability": _ACQ,
    "fantasies_of": _ACQ,
    "predictive_quantile_fantasies": _ACQ,
    "register_criterion": _ACQ,
    "threshold_entropy_reduction": _ACQ,
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
