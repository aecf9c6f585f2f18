"""The four GP models of bo_ncgp, as pure torch + GPyTorch modules (no BoTorch import).

Every model takes a GPyTorch kernel and a likelihood of :mod:`bo_ncgp.likelihoods` and is a
:class:`~bo_ncgp.models.base.LatentGP`: ``predict_f(X, full_cov=False) -> (mean, var or
cov)`` for the latent function(s), ``predict_y(X) -> E[y]`` and ``log_predictive(X, y)`` for
the observations, ``fit(X, y, *, callback=None)`` or ``update(X, y, *, callback=None)`` with
one callback signature (:class:`~bo_ncgp.models.base.FitStep`). They differ in how they are
trained and in what they scale to.

* :class:`DualSVGP` (:mod:`bo_ncgp.models.dual`) -- memory-based dual sparse
  variational GP for streaming data, any likelihood, C latents (Chang et al. 2023,
  Algorithm 1). Trained batch by batch with ``update(X, y)``; ``condition(X, y)`` gives a
  cheap fantasy model. Pieces: :mod:`bo_ncgp.models.dual` (sites, objectives, inducing
  points), :mod:`bo_ncgp.models.dual.memory` (memory and Bayesian leverage scores).
* :class:`IterNCGP` (:mod:`bo_ncgp.models.iterncgp`) -- computation-aware Laplace
  approximation: Newton steps solved by IterGP with a budget of products with ``K``, whose
  predictive variance includes the computational uncertainty (Tatzel et al.). ``fit(X, y)``;
  ``predict_proba`` / ``predict_rate`` for classifiers and Poisson counts; policies,
  stopping criteria and recycling are pluggable (:mod:`bo_ncgp.models.iterncgp.policies`,
  :mod:`~bo_ncgp.models.iterncgp.stopping`, :mod:`~bo_ncgp.models.iterncgp.recycling`).
* :class:`HIPGP` (:mod:`bo_ncgp.models.hipgp`) -- SVGP with inducing points on a grid,
  FFT whitening and inter-domain observations (values, derivatives, line integrals; Wu et al.
  2022). ``fit(X, y, op=...)`` by natural-gradient SVI; ``predict_f(X, op=...)``. Covariances
  of the observation operators: :mod:`bo_ncgp.models.hipgp.interdomain`.
* :class:`SparseGAM` (:mod:`bo_ncgp.models.gam`) -- sparse variational generalised additive
  model ``sum_c f_c(x[dims_c])`` with a coupled (or mean-field, or full) posterior over the
  components (Adam, Durrande & John). ``fit(X, y)``; ``predict_components`` gives each term
  with its uncertainty; zero-mean ANOVA kernel: :mod:`bo_ncgp.models.gam.anova_kernel`.

Baselines of the streaming experiments (Bui et al. 2017, offline SVGP) are in
:mod:`bo_ncgp.models.baselines`. BoTorch ``Model`` adapters of all four models
(``DualSVGPModel``, ``IterNCGPModel``, ``HIPGPModel``, ``SparseGAMModel``) are in
:mod:`bo_ncgp.bo`. Classes are imported lazily so that importing one model does not import
the others.

Shared pieces: :mod:`bo_ncgp.models.training` (the Adam and L-BFGS loops and their
non-finite policy) and :class:`SVGP` (:mod:`bo_ncgp.models.svgp`, the GPyTorch SVGP of the
baselines and refitted models).

Example:
    >>> import gpytorch, torch
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> from bo_ncgp.models import IterNCGP
    >>> X = torch.linspace(0, 1, 20).unsqueeze(-1); y = (X[:, 0] > 0.5).to(X.dtype)
    >>> model = IterNCGP(gpytorch.kernels.RBFKernel(), Bernoulli(), backend="dense").fit(X, y)
    >>> p = model.predict_proba(torch.tensor([[0.1], [0.9]]))
    >>> p.shape, bool(p[0] < 0.5 < p[1])
    (torch.Size([2]), True)
"""

from __future__ import annotations

from bo_ncgp._lazy import lazy_attributes

_LAZY = {
    "DualSVGP": "bo_ncgp.models.dual",
    "BuiStreamingSVGP": "bo_ncgp.models.baselines",
    "OfflineSVGP": "bo_ncgp.models.baselines",
    "IterNCGP": "bo_ncgp.models.iterncgp",
    "HIPGP": "bo_ncgp.models.hipgp",
    "SparseGAM": "bo_ncgp.models.gam",
    "SVGP": "bo_ncgp.models.svgp",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
