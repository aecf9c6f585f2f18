"""Context managers changing how likelihoods validate targets.

``soft_targets()`` lets the count and label likelihoods accept *relaxed* targets, which the
fantasy machinery of the BoTorch layer uses to condition a classifier on a predictive
probability instead of a hard label (Chang et al. 2023, Algorithm 2, "soft labels"):

* Bernoulli: any ``y`` in ``[0, 1]`` (``[-1, 1]`` with ``labels="pm1"``); ``log p`` becomes the
  cross-entropy ``y f - softplus(f)``;
* Binomial: real ``y`` in ``[0, N]``; Poisson: real ``y >= 0`` (``log y!`` via ``lgamma``).

Range checks and NaN checks still apply. Outside the context, targets must be exact.

Example:
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> with soft_targets():
    ...     Bernoulli().grad(torch.tensor([0.3]), torch.tensor([0.0]))
    tensor([-0.2000])
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch  # noqa: F401  (doctest namespace)

__all__ = ["soft_targets", "soft_targets_enabled"]

_state = threading.local()


def soft_targets_enabled() -> bool:
    """Whether relaxed targets are accepted here (inside :func:`soft_targets`).

    Example:
        >>> soft_targets_enabled()
        False
        >>> with soft_targets():
        ...     inside = soft_targets_enabled()
        >>> inside, soft_targets_enabled()  # the previous state is restored on exit
        (True, False)
    """
    return getattr(_state, "soft", False)


@contextlib.contextmanager
def soft_targets(enabled: bool = True) -> Iterator[None]:
    """Accept relaxed (non-integer) targets inside the ``with`` block (see module doc).

    Example:
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> lik, y = Bernoulli(), torch.tensor([0.7])  # a probability as a soft label
        >>> lik.check_targets(y)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: ...
        >>> with soft_targets():
        ...     lik.check_targets(y)
        tensor([0.7000])
    """
    old = soft_targets_enabled()
    _state.soft = enabled
    try:
        yield
    finally:
        _state.soft = old
