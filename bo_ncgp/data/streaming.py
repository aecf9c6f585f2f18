"""Loaders of the streaming classification data of Chang et al. (2023), Sec. 4.2.

* :func:`load_banana` -- the banana benchmark: ``streaming/banana_{train,test}_{x,y}.txt``,
  400 training and 4,900 test points with 2 inputs; the files store labels in ``{-1, 1}``,
  which are returned as ``{0, 1}`` floats (``1 -> 1``, ``-1 -> 0``) ready for
  ``Bernoulli(labels="01")``.
* :func:`load_uci` -- the preprocessed UCI sets ``streaming/bank.csv`` (4,521 x 17) and
  ``streaming/mammographic.csv`` (961 x 6): comma separated, no header, standardised inputs,
  binary label ``{0, 1}`` in the last column.

Files are found through :func:`bo_ncgp.data.data_file` (``root`` argument, else
:func:`bo_ncgp.data.resolve_root`) and verified against the checksums
pinned in :mod:`bo_ncgp.data.checksums`: a file at one of these paths with other contents
(such as the small examples below) needs ``verify=False``.

Example:
    >>> data = load_banana()  # doctest: +SKIP
    >>> data.X_train.shape, data.y_train.unique()  # doctest: +SKIP
    (torch.Size([400, 2]), tensor([0., 1.]))
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.data._paths import data_file
from bo_ncgp.exceptions import InputDataError

__all__ = ["UCI_DATASETS", "BananaData", "load_banana", "load_uci"]

_HINT = (
    "The streaming data sets are distributed with the project's shared data folder "
    "(see ../shared/data/README.md)"
)

#: name -> (relative path, number of inputs, number of rows)
UCI_DATASETS: dict[str, tuple[str, int, int]] = {
    "bank": ("streaming/bank.csv", 17, 4521),
    "mammographic": ("streaming/mammographic.csv", 6, 961),
}


class BananaData(NamedTuple):
    """Banana train/test split: inputs ``(n, 2)`` and labels ``(n,)`` in ``{0., 1.}``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:  # two points per split, labels -1 / 1
        ...     Path(tmp, "streaming").mkdir()
        ...     for split in ("train", "test"):
        ...         _ = Path(tmp, f"streaming/banana_{split}_x.txt").write_text("0.5,1\\n-1,2\\n")
        ...         _ = Path(tmp, f"streaming/banana_{split}_y.txt").write_text("1\\n-1\\n")
        ...     data = load_banana(root=tmp, verify=False)  # not the shared files
        >>> data._fields, data.X_train.shape, data.y_train.tolist()  # labels mapped to 1 / 0
        (('X_train', 'y_train', 'X_test', 'y_test'), torch.Size([2, 2]), [1.0, 0.0])
    """

    X_train: Tensor
    y_train: Tensor
    X_test: Tensor
    y_test: Tensor


def _load(relpath: str, root, dtype: torch.dtype, delimiter: str | None, verify: bool) -> Tensor:
    path = data_file(relpath, root=root, hint=_HINT, verify=verify)
    try:
        arr = np.loadtxt(path, delimiter=delimiter, ndmin=2)
    except ValueError as err:
        raise InputDataError(f"could not parse {path}: {err}") from err
    if not np.isfinite(arr).all():
        raise InputDataError(f"{path} contains NaN or inf values")
    return torch.as_tensor(arr, dtype=dtype)


def _pm1_to_01(y: Tensor, what: str) -> Tensor:
    bad = (y != 1) & (y != -1)
    if bool(bad.any()):
        raise InputDataError(
            f"{what}: labels must be in {{-1, 1}}, found {y[bad].unique().tolist()}"
        )
    return (y + 1) / 2


def load_banana(
    root: str | os.PathLike | None = None,
    dtype: torch.dtype | None = None,
    verify: bool = True,
) -> BananaData:
    """The banana classification data with labels mapped from ``{-1, 1}`` to ``{0, 1}``.

    Args:
        root: data root (see module docstring).
        dtype: floating dtype of the tensors (default: torch's default dtype).
        verify: check the files' checksums (see :func:`bo_ncgp.data.data_file`); ``False``
            skips the check and logs a warning.

    Example:
        >>> load_banana(root="/nonexistent")  # the message names the missing file
        Traceback (most recent call last):
        ...
        FileNotFoundError: ...banana_train_x.txt...
        >>> data = load_banana()  # the shared data  # doctest: +SKIP
        >>> data.X_train.shape, data.X_test.shape, data.y_train.unique()  # doctest: +SKIP
        (torch.Size([400, 2]), torch.Size([4900, 2]), tensor([0., 1.]))
    """
    dtype = dtype or torch.get_default_dtype()
    out = []
    for split in ("train", "test"):
        X = _load(f"streaming/banana_{split}_x.txt", root, dtype, ",", verify)
        y = _load(f"streaming/banana_{split}_y.txt", root, dtype, None, verify).reshape(-1)
        if X.shape != (y.shape[0], 2):
            raise InputDataError(
                f"banana {split}: inputs have shape {tuple(X.shape)} but there are "
                f"{y.shape[0]} labels"
            )
        out += [X, _pm1_to_01(y, f"banana {split}")]
    return BananaData(*out)


def load_uci(
    name: str,
    root: str | os.PathLike | None = None,
    dtype: torch.dtype | None = None,
    verify: bool = True,
) -> tuple[Tensor, Tensor]:
    """A preprocessed UCI classification set: ``X (n, d)`` and labels ``y (n,)`` in ``{0, 1}``.

    Args:
        name: ``"bank"`` or ``"mammographic"``.
        root: data root (see module docstring).
        dtype: floating dtype of the tensors (default: torch's default dtype).
        verify: check the file's checksum (see :func:`bo_ncgp.data.data_file`); ``False``
            skips the check and logs a warning.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:  # 6 inputs and the label per row
        ...     path = Path(tmp, "streaming", "mammographic.csv")
        ...     path.parent.mkdir()
        ...     _ = path.write_text("0,1,2,3,4,5,1\\n1,1,1,1,1,1,0\\n")
        ...     X, y = load_uci("mammographic", root=tmp, verify=False)  # not the shared file
        >>> X.shape, y.tolist()
        (torch.Size([2, 6]), [1.0, 0.0])
        >>> load_uci("bank")[0].shape  # the shared data  # doctest: +SKIP
        torch.Size([4521, 17])
    """
    if name not in UCI_DATASETS:
        raise InputDataError(
            f"load_uci: unknown data set {name!r}; choose from {sorted(UCI_DATASETS)}"
        )
    relpath, d, _ = UCI_DATASETS[name]
    data = _load(relpath, root, dtype or torch.get_default_dtype(), ",", verify)
    if data.shape[1] != d + 1:
        raise InputDataError(f"{relpath}: expected {d + 1} columns, found {data.shape[1]}")
    X, y = data[:, :-1], data[:, -1]
    bad = (y != 0) & (y != 1)
    if bool(bad.any()):
        raise InputDataError(f"{relpath}: labels must be 0 or 1, found {y[bad].unique().tolist()}")
    return X.contiguous(), y.contiguous()
