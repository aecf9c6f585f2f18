"""BoTorch ``Model`` adapters of the bo_ncgp models that need more than
:class:`~bo_ncgp.bo.base.LatentGPModel`.

The generic adapter serves every model of the contract; these subclasses change only what
differs for one model:

* :class:`DualSVGPModel` -- posteriors and conditioning inside
  :func:`~bo_ncgp.models.dual.fixed_hyperparameters` (dual conditioning, Chang et al.
  2023, Sec. 3.3: the new sites are added at the current posterior with ``rho = 1``;
  O(n m^2 + n^3) per batch element, vectorised over fantasies);
* :class:`IterNCGPModel` -- the number of recycled solver iterations of each conditioning;
* :class:`HIPGPModel` -- the observation operator of the posterior (value, derivative, line
  integral; Wu et al. 2022);
* :class:`SparseGAMModel` -- the subset of additive components whose sum is exposed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch  # noqa: F401  (doctest namespace)
from torch.nn import Module

from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.models.dual import fixed_hyperparameters

__all__ = ["DualSVGPModel", "HIPGPModel", "IterNCGPModel", "SparseGAMModel"]


class DualSVGPModel(LatentGPModel):
    """BoTorch model around a :class:`~bo_ncgp.models.DualSVGP` (Chang et al. 2023).

    Posteriors and conditioning run inside
    :func:`~bo_ncgp.models.dual.fixed_hyperparameters`: differentiable in ``X`` (and in
    fantasy inputs), not in the DualSVGP's hyperparameters, so the O(n_M m^2) base
    factorisation is computed once per model instead of once per acquisition evaluation.
    Fit the hyperparameters with :meth:`DualSVGP.update`, not through this adapter.

    Args:
        model: a fitted ``DualSVGP``.
        num_outputs, input_transform, outcome_transform: as for
            :class:`~bo_ncgp.bo.base.LatentGPModel`; the DualSVGP must have been trained on
            transformed data.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models import DualSVGP
        >>> X = torch.rand(12, 2)
        >>> dual = DualSVGP(RBFKernel(), Gaussian(0.01), X[:6], num_hyper_steps=0)
        >>> model = DualSVGPModel(dual.update(X, X.sum(-1)))
        >>> model.condition_on_observations(X[:2], X[:2, :1]).model.num_data
        14
    """

    def _context(self) -> contextlib.AbstractContextManager:
        # acquisitions need gradients in X only: keep the base factorisation cached
        return fixed_hyperparameters()


class IterNCGPModel(LatentGPModel):
    """BoTorch model around a fitted :class:`~bo_ncgp.models.IterNCGP` (Tatzel et al.).

    The posterior includes IterNCGP's computational uncertainty (the uncertainty from
    stopping the solver early), so acquisitions see it. ``condition_on_observations`` adds
    the points and runs ``condition_iters`` warm-started, recycled solver iterations
    (:meth:`IterNCGP.condition`).

    Args:
        model: a fitted ``IterNCGP``.
        condition_iters: solver iterations per Newton step of each conditioning (None: the
            default of :meth:`IterNCGP.condition`).
        **transforms: ``input_transform`` / ``outcome_transform`` of
            :class:`~bo_ncgp.bo.base.LatentGPModel`; the IterNCGP must have been fitted on
            transformed data.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models import IterNCGP
        >>> X = torch.rand(12, 2)
        >>> clf = IterNCGP(RBFKernel(), Bernoulli()).fit(X, (X[:, 0] > 0.5).to(X))
        >>> model = IterNCGPModel(clf, condition_iters=3)
        >>> model.condition_on_observations(X[:2], torch.ones(2, 1)).posterior(X).mean.shape
        torch.Size([12, 1])
    """

    def __init__(
        self, model: Module, condition_iters: int | None = None, **transforms: Module
    ) -> None:
        super().__init__(model, **transforms)
        self.condition_iters = condition_iters

    def _condition_options(self) -> dict[str, Any]:
        return {} if self.condition_iters is None else {"num_iters": self.condition_iters}


class HIPGPModel(LatentGPModel):
    """BoTorch ``Model`` around a fitted :class:`~bo_ncgp.models.HIPGP` (Wu et al. 2022).

    Args:
        model: the HIP-GP (inputs in the transformed space, if ``input_transform`` is given).
        op: observation operator of the posterior (``"value"``, ``"integral"``,
            ``("derivative", d)``); acquisition functions then see ``L rho``.
        **transforms: ``input_transform`` / ``outcome_transform`` of
            :class:`~bo_ncgp.bo.base.LatentGPModel`.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.models import HIPGP
        >>> from bo_ncgp.models.hipgp import Grid
        >>> k = gpytorch.kernels.MaternKernel(nu=2.5)
        >>> k.lengthscale = 0.2  # well inside the grid's domain: no circulant clamping
        >>> hip = HIPGP(k, Grid([0.0], [1.0], (32,)))
        >>> _ = hip.fit(torch.rand(20, 1), torch.rand(20))
        >>> post = HIPGPModel(hip).posterior(torch.rand(5, 2, 1))
        >>> post.mean.shape
        torch.Size([5, 2, 1])
    """

    def __init__(self, model: Module, op: str | tuple | None = None, **transforms: Module) -> None:
        super().__init__(model, 1, **transforms)
        self.op = op

    def _predict_options(self) -> dict[str, Any]:
        return {"op": self.op}

    def _condition_options(self) -> dict[str, Any]:
        # fantasies and conditioned observations are of the posterior's L rho
        return {"op": self.op}


class SparseGAMModel(LatentGPModel):
    """BoTorch ``Model`` around a fitted :class:`~bo_ncgp.models.SparseGAM` (Adam, Durrande
    & John): the posterior of the additive predictor ``rho = sum_c f_c`` or of a partial sum.

    Args:
        model: the sparse GAM (inputs in the transformed space, if ``input_transform`` is
            given; outcomes in the transformed space, if ``outcome_transform`` is given).
        components: indices of the components whose sum the posterior describes (default:
            all, i.e. the full predictor). ``[c]`` exposes one ANOVA term ``f_c`` to an
            acquisition function, e.g. to explore one input group of an additive model.
        **transforms: ``input_transform`` / ``outcome_transform`` of
            :class:`~bo_ncgp.bo.base.LatentGPModel`.

    Conditioning on new observations is not supported (a sparse GAM has no cheap update of
    ``q(U)``; refit instead).

    Example:
        >>> from gpytorch.kernels import RBFKernel, ScaleKernel
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models import SparseGAM
        >>> Z = torch.linspace(0, 1, 6)
        >>> gam = SparseGAM([(ScaleKernel(RBFKernel()), [i], Z) for i in range(2)], Gaussian(0.1))
        >>> X = torch.rand(30, 2)
        >>> _ = gam.fit(X, X.sin().sum(-1), num_steps=10)
        >>> SparseGAMModel(gam, components=[1]).posterior(torch.rand(4, 3, 2)).mean.shape
        torch.Size([4, 3, 1])
    """

    def __init__(
        self, model: Module, components: Sequence[int] | None = None, **transforms: Module
    ) -> None:
        super().__init__(model, 1, **transforms)
        self.components = None if components is None else model._check_subset(components)

    def _predict_options(self) -> dict[str, Any]:
        return {"components": self.components}
