"""bo_ncgp: Bayesian optimisation and active learning with non-conjugate Gaussian processes.

Layers (imports point downwards only)::

    cli -> campaigns -> problems -> bo -> models -> likelihoods -> linalg

See ``DESIGN.md`` of the project for the architecture and the papers each module implements.
"""

__version__ = "0.1.0"
