"""A variational Bernoulli GP baseline of constrained BO, as BoTorch and GPyTorch are used
for unknown feasibility observed as success / failure.

:class:`BernoulliGPConstrainedBO` refits two models before every acquisition:

* the value: BoTorch's ``SingleTaskGP`` of the standardised values of the feasible points,
  fitted with ``fit_gpytorch_mll`` on the exact marginal likelihood (as
  :class:`~bo_ncgp.campaigns.strategies.blackbox.LabelGPConstrainedBO`);
* feasibility: BoTorch's ``SingleTaskVariationalGP`` (a GPyTorch ``ApproximateGP`` with a
  ``VariationalStrategy`` and a Cholesky variational distribution) with GPyTorch's
  ``BernoulliLikelihood`` (probit link, ``P(y = 1 | f) = Phi(f)``) on the 0/1 labels of every
  labelled point, the inducing points fixed at those points, BoTorch's default kernel and
  learned constant mean, every parameter fitted from its initial value by
  ``fit_gpytorch_mll`` on the ``VariationalELBO`` (L-BFGS).

The acquisition, :class:`BernoulliConstrainedLogEI`, is ``log EI`` of the value model over
the best feasible value plus ``log P(feasible)``, the classifier's predictive probability
``Phi(mu / sqrt(1 + sigma^2))`` of its latent posterior ``N(mu, sigma^2)`` (the Bernoulli
likelihood's marginal, in closed form).

Example:
    >>> from bo_ncgp.campaigns.strategies.registry import build_strategy
    >>> s = build_strategy("constrained", "botorch-bernoulli", num_restarts=2)
    >>> s.config()
    {'name': 'botorch-bernoulli', 'num_restarts': 2, 'raw_samples': 512}
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import torch
from botorch.acquisition import AcquisitionFunction, LogExpectedImprovement
from botorch.exceptions import InputDataWarning
from botorch.models.model import Model
from botorch.utils.transforms import t_batch_mode_transform

from bo_ncgp.campaigns.strategies.base import History
from bo_ncgp.campaigns.strategies.blackbox import LabelGPConstrainedBO
from bo_ncgp.campaigns.strategies.lunar import DTYPE
from bo_ncgp.exceptions import UnsupportedError

__all__ = ["BernoulliConstrainedLogEI", "BernoulliGPConstrainedBO", "fit_bernoulli_gp"]


class BernoulliConstrainedLogEI(AcquisitionFunction):
    """``log EI(x) + log P(y = 1 | x)``: BoTorch's ``LogExpectedImprovement`` of a value
    model times the predictive feasibility of a probit-link Bernoulli GP classifier,
    ``P(y = 1 | x) = Phi(mu / sqrt(1 + sigma^2))`` for its latent posterior
    ``N(mu, sigma^2)`` at ``x`` (computed as ``log_ndtr``).

    Args:
        model: the value model (maximised).
        classifier: the latent GP of the classifier (a BoTorch model of one output).
        best_f: the best feasible value (the incumbent of EI).

    Example:
        >>> from botorch.models import SingleTaskGP
        >>> X = torch.rand(12, 2, dtype=torch.float64)
        >>> f = SingleTaskGP(X, torch.sin(3 * X[:, :1]))
        >>> latent = SingleTaskGP(X, X.sum(-1, keepdim=True) - 1.0)
        >>> acq = BernoulliConstrainedLogEI(f, latent, best_f=0.5)
        >>> acq(torch.rand(4, 1, 2, dtype=torch.float64)).shape
        torch.Size([4])
    """

    def __init__(self, model: Model, classifier: Model, best_f: float) -> None:
        super().__init__(model=model)
        self.log_ei = LogExpectedImprovement(model, best_f=best_f)
        self.classifier = classifier

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """``log EI + log Phi(mu / sqrt(1 + sigma^2))`` at ``X`` (``b x 1 x d``)."""
        post = self.classifier.posterior(X)
        mean = post.mean.squeeze(-1).squeeze(-1)
        var = post.variance.squeeze(-1).squeeze(-1).clamp_min(0.0)
        return self.log_ei(X) + torch.special.log_ndtr(mean / torch.sqrt(1.0 + var))


def fit_bernoulli_gp(U: torch.Tensor, labels: torch.Tensor) -> Model:
    """BoTorch's ``SingleTaskVariationalGP`` with GPyTorch's ``BernoulliLikelihood`` on the
    0/1 ``labels`` at ``U`` (``n x d``), inducing points fixed at ``U``, fitted by
    ``fit_gpytorch_mll`` on the ``VariationalELBO``.

    Example:
        >>> U = torch.rand(16, 2, dtype=torch.float64)
        >>> gp = fit_bernoulli_gp(U, (U[:, 0] > 0.5).double())
        >>> p = gp.posterior(torch.tensor([[0.9, 0.5], [0.1, 0.5]], dtype=torch.float64))
        >>> bool(p.mean[0, 0] > p.mean[1, 0])  # the latent rises where the labels are 1
        True
    """
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskVariationalGP
    from gpytorch.likelihoods import BernoulliLikelihood
    from gpytorch.mlls import VariationalELBO

    with warnings.catch_warnings():  # 0/1 labels are not meant to be standardised
        warnings.simplefilter("ignore", InputDataWarning)
        gp = SingleTaskVariationalGP(
            U,
            labels.unsqueeze(-1),
            likelihood=BernoulliLikelihood(),
            inducing_points=U.clone(),
            learn_inducing_points=False,
        )
    fit_gpytorch_mll(VariationalELBO(gp.likelihood, gp.model, num_data=U.shape[0]))
    return gp.eval()


class BernoulliGPConstrainedBO(LabelGPConstrainedBO):
    """The variational Bernoulli GP baseline (module docstring): a refitted ``SingleTaskGP``
    of the value (feasible points) and a refitted variational Bernoulli GP of the success
    labels (every labelled point), with :class:`BernoulliConstrainedLogEI`; one point per
    batch. Until two feasible values are observed, points are drawn uniformly at random.

    Example:
        >>> from bo_ncgp.campaigns.strategies.lunar import BatchConfig, DualModelConfig
        >>> from bo_ncgp.campaigns.strategies.lunar import ExactGPReward
        >>> from bo_ncgp.campaigns.strategies.blackbox import BatchRule
        >>> s = BernoulliGPConstrainedBO("botorch-bernoulli", DualModelConfig(),
        ...                              ExactGPReward(), BatchRule("joint", BatchConfig()))
        >>> s.config()["name"]
        'botorch-bernoulli'
    """

    def ask(self, history: History, q: int, rng: np.random.Generator) -> np.ndarray:
        from botorch.optim import optimize_acqf

        if q != 1:
            raise UnsupportedError(
                f"{self.name} proposes one point per batch (--batch-size 1), got q = {q}"
            )
        if self.Y.numel() < 2:  # too few feasible values for a model: a random point
            return self._from_unit(torch.as_tensor(rng.random((q, self.problem.dim)), dtype=DTYPE))
        t0 = time.perf_counter()
        objective = self.surrogate.botorch_model()
        classifier = fit_bernoulli_gp(self.U_all, self.labels)
        self.fit_seconds = time.perf_counter() - t0
        d = self.problem.dim
        bounds = torch.stack([torch.zeros(d, dtype=DTYPE), torch.ones(d, dtype=DTYPE)])
        acq = BernoulliConstrainedLogEI(objective, classifier, best_f=float(self.Y.max()))
        opts = {"num_restarts": self.rule.config.num_restarts}
        opts["raw_samples"] = self.rule.config.raw_samples
        X, _ = optimize_acqf(acq, bounds, q=1, **opts)
        return self._from_unit(X.detach())
