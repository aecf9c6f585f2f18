"""The contract every bo_ncgp model satisfies: :class:`LatentGP`.

A bo_ncgp model is a posterior over ``C`` latent functions ``f`` with a likelihood
``p(y | f)`` of :mod:`bo_ncgp.likelihoods`. The BoTorch adapters (:mod:`bo_ncgp.bo`), the
acquisition functions and the campaign strategies are written against this contract only,
never against one model's internals.

The contract (names and return types are the same for every model):

* ``predict_f(X, full_cov=False) -> (mean, var)`` -- latent marginals; ``mean`` and ``var``
  are ``(*batch, n)`` for one latent and ``(*batch, n, C)`` for ``C > 1``; with
  ``full_cov=True`` the second item is the joint covariance where the model supports it.
* ``predict_y(X) -> Tensor`` -- the predictive mean of the observations ``E[y]`` (class-1
  probability for ``Bernoulli``, expected counts for ``Binomial`` / ``Poisson``, class
  probabilities ``(..., n, C)`` for ``Softmax``). Always one tensor.
* ``log_predictive(X, y) -> Tensor`` -- ``log p(y_n | X_n)`` per point (negative NLPD terms).
* ``fit(X, y, *, callback=None) -> self`` -- train on the whole data set (batch learners).
* ``update(X, y, *, callback=None) -> self`` -- stream one batch in (streaming learners).
* ``condition(X, Y) -> LatentGP`` -- a new model conditioned on (fantasy) observations with
  the hyperparameters fixed; leading dimensions of ``X`` / ``Y`` become its ``batch_shape``.
* ``pool_fantasies(X_pool) -> PoolFantasies`` -- the pool's marginals and, for candidates in
  the pool and fantasy observations there, the pool's marginals after conditioning on each
  one (what pool-based active learning needs). The default conditions through
  ``condition``; a model with a cheaper rank-one update overrides it.

A model implements ``fit`` or ``update`` (or both) and says which through
:attr:`LatentGP.supports_fit` / :attr:`LatentGP.supports_update`; the other raises
:class:`~bo_ncgp.exceptions.UnsupportedError`, as does ``condition`` where a model has no
cheap conditioning. Training progress is reported through one callback signature,
``callback(step: FitStep) -> bool | None``; returning ``True`` stops training early.

Example:
    >>> import torch
    >>> from bo_ncgp.likelihoods import Gaussian
    >>> class Prior(LatentGP):  # the smallest model: the GP prior N(0, 1) at every point
    ...     def __init__(self):
    ...         self.likelihood = Gaussian(0.1)
    ...     def predict_f(self, X, full_cov=False):
    ...         n = X.shape[-2]
    ...         return X.new_zeros(n), (X.new_ones(n) if not full_cov else torch.eye(n).to(X))
    >>> model = Prior()
    >>> model.predict_y(torch.zeros(3, 1))
    tensor([0., 0., 0.])
    >>> model.update(torch.zeros(1, 1), torch.zeros(1))
    Traceback (most recent call last):
    ...
    bo_ncgp.exceptions.UnsupportedError: Prior has no streaming update
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError

if TYPE_CHECKING:
    from bo_ncgp.likelihoods import Likelihood

__all__ = [
    "Callback",
    "FitStep",
    "LatentGP",
    "PoolFantasies",
    "check_kernel_and_likelihood",
    "notify",
]


@dataclass(frozen=True)
class FitStep:
    """What a training callback is told after every optimisation step.

    Attributes:
        step: 0-based index of the step (an Adam step, a minibatch, a Newton step).
        model: the model being trained (its state after the step).
        loss: the training objective after the step (negative ELBO or negative log joint per
            datum; ``None`` where the step does not compute it).
        seconds: training time so far, excluding the time spent in callbacks where the model
            measures it.
        info: model-specific counters, e.g. ``{"epoch": 2}`` or ``{"solver_iter": 17}``.

    Example:
        >>> s = FitStep(step=3, model=None, loss=0.5, info={"epoch": 1})
        >>> s.step, s.loss, s.info["epoch"]
        (3, 0.5, 1)
    """

    step: int
    model: Any
    loss: float | None = None
    seconds: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)


#: the one callback signature of ``fit`` / ``update``: return ``True`` to stop training
Callback = Callable[[FitStep], "bool | None"]
#: the default of the arguments that :func:`check_kernel_and_likelihood` leaves unchecked
_UNCHECKED: Any = object()


def notify(callback: Callback | None, step: FitStep) -> bool:
    """Call ``callback(step)`` if given; ``True`` when the callback asks to stop.

    Example:
        >>> notify(None, FitStep(0, None)), notify(lambda s: s.step >= 2, FitStep(2, None))
        (False, True)
    """
    return bool(callback(step)) if callback is not None else False


def check_kernel_and_likelihood(
    model: str, kernel: Any = _UNCHECKED, likelihood: Any = _UNCHECKED
) -> None:
    """The type checks of a model constructor: ``kernel`` must be a GPyTorch ``Kernel`` and
    ``likelihood`` a :class:`bo_ncgp.likelihoods.Likelihood` (an argument left out is not
    checked); otherwise an :class:`~bo_ncgp.exceptions.InputDataError` naming ``model``.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> check_kernel_and_likelihood("MyGP", RBFKernel(), Bernoulli())  # passes
        >>> check_kernel_and_likelihood("MyGP", likelihood="bernoulli")
        Traceback (most recent call last):
        bo_ncgp.exceptions.InputDataError: MyGP: likelihood must be a ...Likelihood, got str
    """
    from gpytorch.kernels import Kernel

    from bo_ncgp.likelihoods import Likelihood

    if kernel is not _UNCHECKED and not isinstance(kernel, Kernel):
        raise InputDataError(
            f"{model}: kernel must be a GPyTorch kernel, got {type(kernel).__name__}"
        )
    if likelihood is not _UNCHECKED and not isinstance(likelihood, Likelihood):
        raise InputDataError(
            f"{model}: likelihood must be a bo_ncgp.likelihoods.Likelihood, got "
            f"{type(likelihood).__name__}"
        )


_ADAPTERS = {"DualSVGP": "DualSVGPModel", "IterNCGP": "IterNCGPModel", "HIPGP": "HIPGPModel",
             "SparseGAM": "SparseGAMModel"}  # fmt: skip


def _not_a_botorch_model(model: object) -> UnsupportedError:
    """The error of a bo_ncgp model handed to BoTorch: it names the model's adapter."""
    name = type(model).__name__
    adapter = _ADAPTERS.get(name, "LatentGPModel")
    built = (
        f" (or build it from data: {adapter}(train_X, train_Y, ...))" if name in _ADAPTERS else ""
    )
    return UnsupportedError(
        f"{name} is a bo_ncgp model, not a BoTorch Model: wrap it for BoTorch with "
        f"bo_ncgp.bo.{adapter}.from_model(model){built}"
    )


class LatentGP(ABC):
    """Abstract base of every bo_ncgp model (mix into a ``torch.nn.Module``).

    Subclasses implement :meth:`predict_f` and at least one of :meth:`fit` / :meth:`update`;
    :meth:`predict_y` and :meth:`log_predictive` follow from the likelihood.

    Example:
        >>> LatentGP.supports_fit, LatentGP.supports_update  # a subclass sets what it supports
        (False, False)
    """

    #: the model trains on the whole data set with :meth:`fit`
    supports_fit: ClassVar[bool] = False
    #: the model streams batches in with :meth:`update`
    supports_update: ClassVar[bool] = False

    likelihood: Likelihood

    @property
    def num_latents(self) -> int:
        """Number of latent functions ``C`` (the likelihood's, by default)."""
        return int(getattr(self.likelihood, "num_latents", 1))

    @property
    def num_outputs(self) -> int:
        """Not defined: a bo_ncgp model is not a BoTorch ``Model``; BoTorch, which reads
        ``num_outputs`` and calls ``posterior``, needs the model's adapter
        (:mod:`bo_ncgp.bo`). The error names it.

        Example:
            >>> from bo_ncgp.likelihoods import Gaussian
            >>> from bo_ncgp.models import DualSVGP
            >>> from gpytorch.kernels import RBFKernel
            >>> DualSVGP(RBFKernel(), Gaussian(), torch.rand(3, 1)).num_outputs
            Traceback (most recent call last):
            ...
            bo_ncgp.exceptions.UnsupportedError: DualSVGP is a bo_ncgp model, not a BoTorch ...
        """
        raise _not_a_botorch_model(self)

    @property
    def posterior(self) -> Any:
        """Not defined (see :attr:`num_outputs`)."""
        raise _not_a_botorch_model(self)

    @property
    def batch_shape(self) -> torch.Size:
        """Leading batch dimensions of the model's predictions (``()`` unless conditioned on a
        batch of fantasies)."""
        return torch.Size()

    @abstractmethod
    def predict_f(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Latent posterior ``(mean, var)`` at ``X`` (``(mean, cov)`` with ``full_cov``)."""

    def predict_y(self, X: Tensor) -> Tensor:
        """Predictive mean of the observations ``E[y | X]`` under the latent posterior."""
        mean, var = self.predict_f(X)
        return self.likelihood.predictive_mean(mean, var)

    def log_predictive(self, X: Tensor, y: Tensor) -> Tensor:
        """``log p(y_n | X_n)`` per point under the latent posterior (negative NLPD terms)."""
        mean, var = self.predict_f(X)
        return self.likelihood.predictive_log_prob(y, mean, var)

    def fit(self, X: Tensor, y: Tensor, *, callback: Callback | None = None) -> LatentGP:
        """Train on all of ``(X, y)`` and return ``self``."""
        raise UnsupportedError(
            f"{type(self).__name__} is a streaming model without a batch fit; call update(X, y)"
        )

    def update(self, X: Tensor, y: Tensor, *, callback: Callback | None = None) -> LatentGP:
        """Stream the batch ``(X, y)`` into the posterior and return ``self``."""
        raise UnsupportedError(f"{type(self).__name__} has no streaming update")

    def condition(self, X: Tensor, Y: Tensor) -> LatentGP:
        """A new model conditioned on ``(X, Y)`` with hyperparameters fixed (fantasies)."""
        raise UnsupportedError(f"{type(self).__name__} does not support conditioning")

    def pool_fantasies(self, X_pool: Tensor) -> PoolFantasies:
        """:class:`PoolFantasies` of this model on the pool ``X_pool (P, d)``."""
        return PoolFantasies(self, X_pool)


class PoolFantasies:
    """A model's marginals on a pool, and the pool's marginals after one fantasy observation.

    This generic version conditions through :meth:`LatentGP.condition` (one batched call per
    :meth:`conditioned`); models with a rank-one update (dual conditioning) subclass it.

    Args:
        model: a single-latent :class:`LatentGP` that supports ``condition``.
        X_pool: ``(P, d)`` pool inputs.

    Attributes:
        X: the pool; mean, var: ``(P,)`` latent marginals of the pool under ``model``.

    Example:
        >>> import torch
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models import DualSVGP
        >>> X, pool = torch.rand(10, 1), torch.linspace(0, 1, 7).unsqueeze(-1)
        >>> dual = DualSVGP(RBFKernel(), Bernoulli(), X[:4], num_hyper_steps=0)
        >>> dual = dual.update(X, (X[:, 0] > 0.5).to(X))
        >>> fant = PoolFantasies(dual, pool)  # the generic path, through condition
        >>> mean, var = fant.conditioned(torch.tensor([0, 3]), torch.tensor([[0.0, 1.0]] * 2))
        >>> mean.shape  # (candidates, fantasies, pool)
        torch.Size([2, 2, 7])
        >>> ref, _ = dual.condition(pool[3:4], torch.tensor([1.0])).predict_f(pool)
        >>> torch.allclose(mean[1, 1], ref)
        True
    """

    def __init__(self, model: LatentGP, X_pool: Tensor) -> None:
        if X_pool.dim() != 2:
            raise InputDataError(f"the pool must be (P, d), got shape {tuple(X_pool.shape)}")
        self.model, self.X = model, X_pool
        with torch.no_grad():
            self.mean, self.var = model.predict_f(X_pool)

    def conditioned(self, index: Tensor, Y: Tensor) -> tuple[Tensor, Tensor]:
        """Pool marginals after conditioning on ``(X[index[i]], Y[i, j])``, for every
        candidate ``i`` and fantasy ``j`` separately.

        Args:
            index: ``(n,)`` positions of the candidates in the pool.
            Y: ``(n, J)`` fantasy observations at the candidates.

        Returns:
            ``mean (n, J, P)`` and ``var (n, J, P)``.
        """
        n, J = Y.shape
        Xc = self.X[index].reshape(n, 1, 1, -1).expand(n, J, 1, self.X.shape[-1])
        with torch.no_grad():
            return self.model.condition(Xc, Y.unsqueeze(-1)).predict_f(self.X)
