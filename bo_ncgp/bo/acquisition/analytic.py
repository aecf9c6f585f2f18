"""Acquisition functions for latent-GP classifiers and constrained BO, on BoTorch's classes.

All functions here take a BoTorch model whose posterior is the Gaussian over a *latent*
function ``f`` (our adapters of :mod:`bo_ncgp.bo.models`, or any ``GPyTorchPosterior``
model) and use the logistic-probit approximation (MacKay 1992)

    P(y = 1 | x) = E[sigmoid(f)] ≈ sigmoid(kappa(sigma^2) * mu),
    kappa(s) = 1 / sqrt(1 + pi s / 8),

for the predictive probability of a Bernoulli (logit-link) classifier.

* :class:`ProbabilityOfSuccess` / :class:`LogProbabilityOfSuccess`: ``P(y=1|x)``;
* :class:`ConstrainedLogExpectedImprovement`: ``log EI(x) + log P(success | x)`` -- the
  lunar-lander acquisition of Chang et al. (2023), Sec. 4.1 (EI of the reward model times the
  predictive probability of the success classifier), in log space for stable optimisation;
* :class:`BinaryPredictiveEntropy`: ``H[y | x]`` (nats);
* :class:`BALD`: mutual information between ``y`` and ``f`` (Houlsby et al. 2011),
  ``H[E sigmoid(f)] - E[H(sigmoid(f))]`` with both expectations by Gauss–Hermite quadrature
  (accurate for the logistic link, unlike the closed form of Houlsby et al., Eq. 5, which
  assumes a probit link).

Example:
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.bo import DualSVGPModel
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> from bo_ncgp.models import DualSVGP
    >>> X = torch.rand(20, 2)
    >>> clf = DualSVGP(RBFKernel(), Bernoulli(), X[:8], num_hyper_steps=0)
    >>> clf = DualSVGPModel.from_model(clf.update(X, (X.sum(-1) > 1.0).to(X)))  # x1 + x2 > 1
    >>> ProbabilityOfSuccess(clf)(torch.rand(5, 1, 2)).shape  # 5 candidates x (q=1) x d
    torch.Size([5])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from botorch.acquisition import AcquisitionFunction
from botorch.acquisition.analytic import AnalyticAcquisitionFunction, LogExpectedImprovement
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from bo_ncgp.likelihoods.quadrature import gh_points

__all__ = [
    "BALD",
    "BinaryPredictiveEntropy",
    "ConstrainedLogExpectedImprovement",
    "LogProbabilityOfSuccess",
    "ProbabilityOfSuccess",
    "binary_entropy",
    "probit_logit",
]

_LAMBDA2 = math.pi / 8.0


def probit_logit(mean: Tensor, var: Tensor) -> Tensor:
    """Logit of the probit-approximated ``E[sigmoid(f)]``, ``f ~ N(mean, var)``:
    ``mean / sqrt(1 + pi var / 8)`` (MacKay 1992).

    Example:
        >>> probit_logit(torch.tensor([2.0]), torch.tensor([0.0]))  # no uncertainty: mean
        tensor([2.])
    """
    return mean / torch.sqrt(1.0 + _LAMBDA2 * var)


def binary_entropy(logit: Tensor) -> Tensor:
    """Entropy (nats) of a Bernoulli with the given logit, stable for large ``|logit|``.

    Example:
        >>> binary_entropy(torch.tensor([0.0, 100.0]))  # p = 1/2: log 2; p ~ 1: ~0
        tensor([0.6931, 0.0000])
    """
    p = torch.sigmoid(logit)
    # H = -p log p - (1-p) log(1-p) = softplus(l) - p l  (with log p = -softplus(-l))
    return F.softplus(logit) - p * logit


class ProbabilityOfSuccess(AnalyticAcquisitionFunction):
    """Predictive probability ``P(y = 1 | x)`` of a latent binary classifier (probit approx.).

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X, x = torch.rand(20, 2), torch.rand(5, 1, 2)  # 5 candidates x (q=1) x d
        >>> latent = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)  # success where f > 0
        >>> p = ProbabilityOfSuccess(latent)(x)
        >>> p.shape, bool(((p > 0) & (p < 1)).all())
        (torch.Size([5]), True)
    """

    #: the acquisition value as a function of the probit-approximated logit (per subclass)
    _of_logit = staticmethod(torch.sigmoid)

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        mean, sigma = self._mean_and_sigma(X, min_var=0.0)
        return self._of_logit(probit_logit(mean, sigma**2).squeeze(-1))


class LogProbabilityOfSuccess(ProbabilityOfSuccess):
    """``log P(y = 1 | x)``, computed as ``logsigmoid`` of the probit-approximated logit.

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X, x = torch.rand(20, 2), torch.rand(5, 1, 2)  # 5 candidates x (q=1) x d
        >>> latent = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)  # success where f > 0
        >>> log_p = LogProbabilityOfSuccess(latent)(x)
        >>> torch.allclose(log_p.exp(), ProbabilityOfSuccess(latent)(x))
        True
    """

    _log: bool = True
    _of_logit = staticmethod(F.logsigmoid)


class BinaryPredictiveEntropy(ProbabilityOfSuccess):
    """Predictive entropy ``H[y | x]`` in nats (uncertainty sampling for classifiers).

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X, x = torch.rand(20, 2), torch.rand(5, 1, 2)  # 5 candidates x (q=1) x d
        >>> latent = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)  # success where f > 0
        >>> H = BinaryPredictiveEntropy(latent)(x)
        >>> bool(((H >= 0) & (H <= math.log(2))).all())  # at most log 2 nats
        True
    """

    _of_logit = staticmethod(binary_entropy)


class BALD(AnalyticAcquisitionFunction):
    """Bayesian active learning by disagreement, ``I[y; f | x]`` in nats, for a logit-link
    binary classifier: ``H[E sigmoid(f)] - E[H(sigmoid(f))]``, ``f ~ N(mu, s^2)``, both
    expectations by ``num_points``-node Gauss–Hermite quadrature.

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X, x = torch.rand(20, 2), torch.rand(5, 1, 2)  # 5 candidates x (q=1) x d
        >>> latent = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)  # success where f > 0
        >>> bald = BALD(latent)(x)
        >>> bool(((bald >= 0) & (bald <= BinaryPredictiveEntropy(latent)(x) + 1e-3)).all())
        True
    """

    def __init__(
        self,
        model: Model,
        posterior_transform: PosteriorTransform | None = None,
        num_points: int = 32,
    ):
        super().__init__(model=model, posterior_transform=posterior_transform)
        self.num_points = num_points

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        mean, sigma = self._mean_and_sigma(X, min_var=0.0)
        f, w = gh_points(mean.squeeze(-1), sigma.squeeze(-1) ** 2, self.num_points)
        p = (torch.sigmoid(f) * w).sum(-1)
        h_cond = (binary_entropy(f) * w).sum(-1)
        return binary_entropy(torch.logit(p.clamp(1e-300, 1 - 1e-16))) - h_cond


class ConstrainedLogExpectedImprovement(AcquisitionFunction):
    """``log EI(x) + log P(success | x)``: log of EI of a regression model times the success
    probability of a classifier (Chang et al. 2023, Sec. 4.1), built from BoTorch's
    :class:`~botorch.acquisition.analytic.LogExpectedImprovement`.

    Args:
        model: regression model of the objective.
        classifier: latent binary classifier of feasibility / success.
        best_f: incumbent for EI (e.g. the best observed successful value).
        maximize: maximise (default) or minimise the objective.

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X, x = torch.rand(20, 2), torch.rand(5, 1, 2)  # 5 candidates x (q=1) x d
        >>> latent = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)  # success where f > 0
        >>> reg = SingleTaskGP(X, torch.sin(3 * X[:, :1]))  # the objective
        >>> ConstrainedLogExpectedImprovement(reg, latent, best_f=0.5)(x).shape
        torch.Size([5])
    """

    _log: bool = True

    def __init__(
        self, model: Model, classifier: Model, best_f: float | Tensor, maximize: bool = True
    ) -> None:
        super().__init__(model=model)
        self.log_ei = LogExpectedImprovement(model, best_f=best_f, maximize=maximize)
        self.log_pos = LogProbabilityOfSuccess(classifier)
        self.classifier = classifier

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        return self.log_ei(X) + self.log_pos(X)
