"""Log-concave likelihoods with closed-form derivatives and Gaussian expectations.

Example:
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> elp, alpha, beta = Bernoulli().expected(
    ...     torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]))
"""

import torch  # noqa: F401  (used in the doctest namespace)

from bo_ncgp.likelihoods.base import Likelihood
from bo_ncgp.likelihoods.bernoulli import Bernoulli
from bo_ncgp.likelihoods.binomial import Binomial
from bo_ncgp.likelihoods.gaussian import Gaussian
from bo_ncgp.likelihoods.poisson import Poisson
from bo_ncgp.likelihoods.quadrature import gauss_hermite
from bo_ncgp.likelihoods.settings import soft_targets
from bo_ncgp.likelihoods.softmax import Softmax

__all__ = [
    "Bernoulli",
    "Binomial",
    "Gaussian",
    "Likelihood",
    "Poisson",
    "Softmax",
    "gauss_hermite",
    "soft_targets",
]
