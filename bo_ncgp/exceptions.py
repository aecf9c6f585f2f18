"""The errors and warnings of bo_ncgp, one hierarchy for the whole library.

Catch :class:`BoNCGPError` for anything the library raises on purpose; the subclasses tell
*why*:

* :class:`InputDataError` -- the caller passed bad data or a bad argument (wrong shape,
  dtype, NaN/inf, a value outside its range). Also a ``ValueError``, so code written against
  the standard exception keeps working.
* :class:`UnsupportedError` -- the request is well formed but this model, likelihood or
  setting does not support it (streaming updates of a batch model, a multi-latent model
  where one latent is needed). Also a ``ValueError``.
* :class:`NotPSDError` -- a matrix that must be positive definite is not, even after the
  jitter of :func:`bo_ncgp.linalg.stable_cholesky`. Also a ``ValueError``.
* :class:`NonFiniteError` -- a training step produced a NaN or infinite loss, gradient or
  parameter and the caller asked for an error rather than a warning
  (``on_nonfinite="raise"`` of :mod:`bo_ncgp.models.training`). Also a
  ``FloatingPointError``.
* :class:`StateError` -- a saved campaign cannot be used: its ``state.json`` or
  ``evaluations.csv`` is damaged, edited, inconsistent, or was made with other settings than
  the ones given. Also a ``ValueError``.
* :class:`StorageError` -- campaign files cannot be written or the output folder cannot be
  used: a full disk, a read-only folder, a missing permission, another process holding the
  folder. Also an ``OSError``.
* :class:`MissingExtraError` -- an optional dependency is not installed; the message names the
  module and the extra that installs it (``pip install 'bo-ncgp[envs]'``). Also an
  ``ImportError``.
* :class:`InputDataWarning` -- input data was repaired on the way in (integer or
  ``float32`` data cast to the model's dtype); a ``UserWarning``.
* :class:`NumericalWarning` -- a numerical repair (jitter, clamping, a rolled-back step)
  that changes results slightly; a ``RuntimeWarning``.
* :class:`ModelCollapseWarning` -- a learned model collapsed towards its prior mean (its
  prior variance fell by orders of magnitude while training); a :class:`NumericalWarning`.

The layout follows BoTorch's ``botorch.exceptions.errors`` (``BotorchError``,
``InputDataError``, ``UnsupportedError``).

Example:
    >>> from bo_ncgp.exceptions import BoNCGPError, InputDataError
    >>> try:
    ...     raise InputDataError("X must have shape (n, 2), got (3,)")
    ... except BoNCGPError as err:
    ...     print(type(err).__name__, isinstance(err, ValueError))
    InputDataError True
"""

from __future__ import annotations

__all__ = [
    "BoNCGPError",
    "InputDataError",
    "InputDataWarning",
    "MissingExtraError",
    "ModelCollapseWarning",
    "NonFiniteError",
    "NotPSDError",
    "NumericalWarning",
    "StateError",
    "StorageError",
    "UnsupportedError",
]


class BoNCGPError(Exception):
    """Base class of every error bo_ncgp raises on purpose.

    Example:
        >>> issubclass(InputDataError, BoNCGPError), issubclass(UnsupportedError, BoNCGPError)
        (True, True)
    """


class InputDataError(BoNCGPError, ValueError):
    """Bad input data or a bad argument: shape, dtype, device, non-finite or out-of-range values.

    Example:
        >>> raise InputDataError("y contains NaN at index 3")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: y contains NaN at index 3
    """


class UnsupportedError(BoNCGPError, ValueError):
    """A well-formed request that this model, likelihood or setting does not support.

    Example:
        >>> raise UnsupportedError("IterNCGP has no streaming update; call fit on all data")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.UnsupportedError: IterNCGP has no streaming update; call fit on all data
    """


class NotPSDError(BoNCGPError, ValueError):
    """A matrix that must be positive definite is not, even after jitter.

    Example:
        >>> from bo_ncgp.linalg import stable_cholesky
        >>> import torch
        >>> stable_cholesky(-torch.eye(2), name="K")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.NotPSDError: ...
    """


class NonFiniteError(BoNCGPError, FloatingPointError):
    """A training step produced a NaN or infinite loss, gradient or parameter (raised by the
    training loops of :mod:`bo_ncgp.models.training` with ``on_nonfinite="raise"``; the
    step is undone first).

    Example:
        >>> issubclass(NonFiniteError, FloatingPointError), issubclass(NonFiniteError, BoNCGPError)
        (True, True)
    """


class StateError(BoNCGPError, ValueError):
    """A saved campaign file (``state.json``, ``evaluations.csv``, an archive) is damaged,
    edited or inconsistent, or its settings differ from the ones given; the message names the
    file and what is wrong.

    Example:
        >>> raise StateError("out/state.json: truncated or not JSON (line 3, column 1)")
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.StateError: out/state.json: truncated or not JSON (line 3, column 1)
    """


class StorageError(BoNCGPError, OSError):
    """Campaign files cannot be written, or the output folder is held by another process
    (the message names the file or folder and the cause: no space left, read-only, no
    permission, the holder's pid).

    Example:
        >>> issubclass(StorageError, OSError), issubclass(StorageError, BoNCGPError)
        (True, True)
    """


class MissingExtraError(BoNCGPError, ImportError):
    """An optional dependency is missing: the message names the module, what needs it and the
    extra that installs it; ``extra`` holds the extra's name (raised by
    :func:`bo_ncgp._extras.require`).

    Example:
        >>> err = MissingExtraError("the lunar lander needs gymnasium: pip install "
        ...                         "'bo-ncgp[envs]'", extra="envs")
        >>> err.extra, isinstance(err, ImportError)
        ('envs', True)
    """

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


class NumericalWarning(RuntimeWarning):
    """Warning for numerical repairs (jitter, clamping, rollbacks) that change results slightly.

    Example:
        >>> import torch, warnings
        >>> from bo_ncgp.linalg import stable_cholesky
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     L = stable_cholesky(torch.ones(2, 2), name="A")  # singular: jitter is added
        >>> caught[0].category.__name__
        'NumericalWarning'
    """


class ModelCollapseWarning(NumericalWarning):
    """Warning that a learned model collapsed: its prior variance (e.g. a kernel outputscale)
    fell by orders of magnitude while it was trained, so its predictions go to the prior mean
    (``p = 0.5`` for a Bernoulli likelihood) whatever the data say.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warnings.warn("the prior variance fell from 1 to 2e-4", ModelCollapseWarning)
        >>> caught[0].category.__name__, issubclass(ModelCollapseWarning, NumericalWarning)
        ('ModelCollapseWarning', True)
    """


class InputDataWarning(UserWarning):
    """Warning for input data that the library repaired on the way in, e.g. ``float32`` or
    integer inputs cast to the ``float64`` of the model (BoTorch's ``InputDataWarning``).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warnings.warn("X was cast from torch.float32 to torch.float64", InputDataWarning)
        >>> caught[0].category.__name__
        'InputDataWarning'
    """
