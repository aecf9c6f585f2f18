"""bo_ncgp: Bayesian optimisation and active learning with non-conjugate Gaussian processes.

Layers (imports point downwards only; ``ARCHITECTURE.md`` in the repository describes each)::

    cli -> campaigns -> problems -> bo -> models -> data, likelihoods -> linalg -> exceptions

The most used names are available from the top level (imported on first use):

* models: :class:`DualSVGP`, :class:`IterNCGP`, :class:`HIPGP`, :class:`SparseGAM` and their
  contract :class:`LatentGP` (:mod:`bo_ncgp.models`);
* likelihoods: :class:`Gaussian`, :class:`Bernoulli`, :class:`Binomial`, :class:`Poisson`,
  :class:`Softmax` (:mod:`bo_ncgp.likelihoods`);
* errors: :class:`BoNCGPError`, :class:`InputDataError`, :class:`UnsupportedError`,
  :class:`NotPSDError`, :class:`NumericalWarning` (:mod:`bo_ncgp.exceptions`).

Example:
    >>> import bo_ncgp
    >>> bo_ncgp.Bernoulli().num_latents, issubclass(bo_ncgp.InputDataError, ValueError)
    (1, True)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from bo_ncgp._lazy import lazy_attributes

try:  # the one source of the version is the distribution's metadata (pyproject.toml)
    __version__ = version("bo-ncgp")
except PackageNotFoundError:  # a source tree on sys.path without an installed distribution
    __version__ = "0+unknown"

_LAZY = {
    **dict.fromkeys(("DualSVGP", "IterNCGP", "HIPGP", "SparseGAM"), "bo_ncgp.models"),
    "LatentGP": "bo_ncgp.models.base",
    **dict.fromkeys(
        ("Gaussian", "Bernoulli", "Binomial", "Poisson", "Softmax"), "bo_ncgp.likelihoods"
    ),
    **dict.fromkeys(
        (
            "BoNCGPError",
            "InputDataError",
            "UnsupportedError",
            "NotPSDError",
            "NumericalWarning",
        ),
        "bo_ncgp.exceptions",
    ),
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, ["__version__"])
