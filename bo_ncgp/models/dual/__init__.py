"""The memory-based dual SVGP (Chang et al. 2023, ICML) and its building blocks.

* :mod:`~bo_ncgp.models.dual.model`       -- :class:`DualSVGP`: posterior (Eq. 10), prediction,
  caching, objectives (Eqs. 21, 26), conditioning and conversion entry points;
* :mod:`~bo_ncgp.models.dual.config`      -- :class:`DualSVGPConfig`, every setting with its
  default;
* :mod:`~bo_ncgp.models.dual.conditioned` -- :class:`ConditionedDualSVGP`, the result of
  ``DualSVGP.condition`` (dual conditioning on fantasies);
* :mod:`~bo_ncgp.models.dual.streaming`   -- Algorithm 1's ``update`` (site steps,
  hyperparameter steps, memory, inducing update);
* :mod:`~bo_ncgp.models.dual.conversion`  -- a DualSVGP from a Gaussian ``q(u)``;
* :mod:`~bo_ncgp.models.dual.pool`        -- :class:`DualPoolFantasies`, rank-one pool
  conditioning for active learning;
* :mod:`~bo_ncgp.models.dual.memory`      -- the memory and Bayesian leverage scores (Eq. 31);
* :mod:`~bo_ncgp.models.dual.posterior`   -- Eq. 10 predictions from the dual pair, in
  Cholesky form, plus the "site block" of cheap conditioning (the Eq. 10 process conditioned
  on new sites in function space);
* :mod:`~bo_ncgp.models.dual.sites`       -- per-point sites from the likelihood's
  expectations (Eqs. 7-9, 12) and the damped natural-parameter update (Eqs. 23-24, 54);
* :mod:`~bo_ncgp.models.dual.objective`   -- the hyperparameter objectives Eq. 26 (with the
  Sec. 3.4 memory scaling) and the plain sequential ELBO Eq. 21;
* :mod:`~bo_ncgp.models.dual.inducing`    -- pivoted-Cholesky inducing-point selection and the
  projection of the dual pair (Eq. 27).

Notation used throughout (latents ``L``, inducing points ``m``): the posterior over
``v = K_zz^{-1} u`` is Gaussian with precision ``A = K_zz + B`` and mean ``A^{-1} lam``, where
``lam = sum_i k_zi beta_i y_hat_i`` (first natural parameter, Eq. 7 written in k-space) and
``B = sum_i k_zi beta_i k_zi^T`` (Eq. 11). ``alpha_u = E[u] = K_zz A^{-1} lam`` is the mean of
the inducing outputs that appears in Eq. 10.

Example:
    >>> import torch
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Gaussian
    >>> X = torch.rand(10, 1)
    >>> model = DualSVGP(RBFKernel(), Gaussian(0.1), X[:4], config=DualSVGPConfig(rho=0.5))
    >>> model.rho, model.update(X, X[:, 0]).num_data
    (0.5, 10)
"""

from bo_ncgp.models.dual._state import fixed_hyperparameters
from bo_ncgp.models.dual.conditioned import ConditionedDualSVGP
from bo_ncgp.models.dual.config import DualSVGPConfig
from bo_ncgp.models.dual.model import DualSVGP
from bo_ncgp.models.dual.pool import DualPoolFantasies

__all__ = [
    "ConditionedDualSVGP",
    "DualPoolFantasies",
    "DualSVGP",
    "DualSVGPConfig",
    "fixed_hyperparameters",
]
