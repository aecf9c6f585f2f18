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

from bo_ncgp.bo.acquisition import analytic, pool
from bo_ncgp.bo.acquisition.analytic import *  # noqa: F403
from bo_ncgp.bo.acquisition.pool import *  # noqa: F403

__all__ = [*analytic.__all__, *pool.__all__]
