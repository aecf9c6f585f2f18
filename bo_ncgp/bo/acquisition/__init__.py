"""Acquisition functions of bo_ncgp, on BoTorch's classes.

* :mod:`bo_ncgp.bo.acquisition.analytic` -- closed-form acquisitions of one latent GP
  (probability of success, binary predictive entropy, BALD, constrained log-EI);
* :mod:`bo_ncgp.bo.acquisition.pool` -- pool-based active learning: expected reduction of a
  summed per-point entropy (a registered criterion) with QMC fantasies, written against
  :meth:`bo_ncgp.models.base.LatentGP.pool_fantasies`.

Example:
    >>> from bo_ncgp.bo.acquisition import CRITERIA, check_criterion
    >>> check_criterion("exceedance") in CRITERIA
    True
"""

from bo_ncgp.bo.acquisition.analytic import (
    BALD,
    BinaryPredictiveEntropy,
    ConstrainedLogExpectedImprovement,
    LogProbabilityOfSuccess,
    ProbabilityOfSuccess,
    binary_entropy,
    probit_logit,
)
from bo_ncgp.bo.acquisition.pool import (
    CRITERIA,
    EntropyFn,
    GainFn,
    ThresholdEntropyReduction,
    check_criterion,
    exceedance_entropy,
    exceedance_probability,
    fantasies_of,
    latent_model,
    predictive_quantile_fantasies,
    register_criterion,
    threshold_entropy_reduction,
)

__all__ = [
    "BALD",
    "CRITERIA",
    "BinaryPredictiveEntropy",
    "ConstrainedLogExpectedImprovement",
    "EntropyFn",
    "GainFn",
    "LogProbabilityOfSuccess",
    "ProbabilityOfSuccess",
    "ThresholdEntropyReduction",
    "binary_entropy",
    "check_criterion",
    "exceedance_entropy",
    "exceedance_probability",
    "fantasies_of",
    "latent_model",
    "predictive_quantile_fantasies",
    "probit_logit",
    "register_criterion",
    "threshold_entropy_reduction",
]
