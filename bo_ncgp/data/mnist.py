"""MNIST-style data in the IDX format (LeCun et al.), and split tasks for continual learning.

* :func:`load_idx` reads one IDX file, gzip-compressed or raw, checking the magic number
  (two zero bytes, a type code, the number of dimensions) and that the file holds exactly
  the bytes its header announces.
* :func:`load_mnist` loads the standard files ``train-images-idx3-ubyte``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``
  (each optionally ``.gz``) from ``<root>/<subdir>``: the shared data holds only the 10,000
  test images (``mnist/t10k-*.gz``); any folder with the standard names works, e.g. the
  Fashion-MNIST package (``apt-get install dataset-fashion-mnist``):
  ``load_mnist(root="/usr/share/datasets", subdir="fashion-mnist")``.
* :func:`split_tasks` builds the split-MNIST tasks (0, 1), (2, 3), ... as binary problems.

Files are found through :func:`bo_ncgp.data.data_file` (``root`` argument, else
:func:`bo_ncgp.data.resolve_root`) and verified (see
:func:`bo_ncgp.data.data_file`): the shared ``mnist/t10k-*.gz`` against the checksums pinned in
the package, other files against ``SHA256SUMS`` when the root has one listing them.

Example:
    >>> data = load_mnist()  # doctest: +SKIP
    >>> data["test"].images.shape, data["test"].labels[:5]  # doctest: +SKIP
    (torch.Size([10000, 28, 28]), tensor([7, 2, 1, 0, 4]))
"""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

from bo_ncgp.data._paths import data_file, resolve_root
from bo_ncgp.exceptions import InputDataError

__all__ = [
    "MNIST_FILES",
    "MNISTSplit",
    "load_idx",
    "load_mnist",
    "split_tasks",
    "to_features",
    "write_idx",
]

#: split -> (images file, labels file), without the optional ``.gz`` suffix
MNIST_FILES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# IDX type code -> (big-endian numpy dtype, torch dtype)
_IDX_TYPES: dict[int, tuple[str, torch.dtype]] = {
    0x08: (">u1", torch.uint8),
    0x09: (">i1", torch.int8),
    0x0B: (">i2", torch.int16),
    0x0C: (">i4", torch.int32),
    0x0D: (">f4", torch.float32),
    0x0E: (">f8", torch.float64),
}

_HINT = (
    "The shared data holds mnist/t10k-images-idx3-ubyte.gz and mnist/t10k-labels-idx1-ubyte.gz "
    "(see ../shared/data/README.md); the full MNIST / Fashion-MNIST files come from "
    "http://yann.lecun.com/exdb/mnist/ or `apt-get install dataset-fashion-mnist`"
)


class MNISTSplit(NamedTuple):
    """One split: ``images`` ``(n, rows, cols)`` uint8 and ``labels`` ``(n,)`` int64.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = write_idx(f"{tmp}/t10k-images-idx3-ubyte", torch.zeros(3, 4, 4).byte())
        ...     _ = write_idx(f"{tmp}/t10k-labels-idx1-ubyte", torch.tensor([7, 2, 1]).byte())
        ...     test = load_mnist(root=tmp, subdir="", split="test")
        >>> test._fields, test.images.shape, test.images.dtype, test.labels.dtype
        (('images', 'labels'), torch.Size([3, 4, 4]), torch.uint8, torch.int64)
    """

    images: Tensor
    labels: Tensor


def load_idx(path: str | os.PathLike) -> Tensor:
    """Read an IDX file (gzip-compressed or raw) into a tensor of its stored type.

    Args:
        path: the file.

    Returns:
        A tensor of the shape in the header (uint8 for MNIST images and labels).

    Raises:
        FileNotFoundError: the file does not exist.
        InputDataError: bad magic number, unknown type code, or a size that does not match the
            header (truncated file or trailing bytes).

    Example:
        >>> load_idx("mnist/t10k-labels-idx1-ubyte.gz").shape  # doctest: +SKIP
        torch.Size([10000])
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_idx: no such file: {path}")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip magic
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise InputDataError(f"load_idx: {path} is a corrupt gzip file ({err})") from err
    if len(raw) < 4:
        raise InputDataError(f"load_idx: {path} is too short for an IDX header ({len(raw)} bytes)")
    zero, code, ndim = raw[:2], raw[2], raw[3]
    if zero != b"\x00\x00" or code not in _IDX_TYPES or ndim == 0:
        raise InputDataError(
            f"load_idx: {path} is not an IDX file (magic number {raw[:4].hex()}; expected "
            f"0000 followed by a type code in {{08, 09, 0b, 0c, 0d, 0e}} and the number of "
            "dimensions)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise InputDataError(f"load_idx: {path} is truncated inside its header")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    np_dtype, torch_dtype = _IDX_TYPES[code]
    itemsize = np.dtype(np_dtype).itemsize
    expected = header + math.prod(dims) * itemsize
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "longer than its header says"
        raise InputDataError(
            f"load_idx: {path} is {what}: header announces dims {dims} ({expected} bytes), "
            f"the file holds {len(raw)} bytes"
        )
    arr = np.frombuffer(raw, dtype=np_dtype, offset=header).reshape(dims)
    return torch.from_numpy(arr.astype(np.dtype(np_dtype).newbyteorder("="), copy=True)).to(
        torch_dtype
    )


def _find(root: Path, subdir: str, name: str) -> str | None:
    """Relative path of ``name`` or ``name.gz`` under ``root/subdir`` (gz preferred)."""
    for candidate in (name + ".gz", name):
        rel = f"{subdir}/{candidate}" if subdir else candidate
        if (root / rel).is_file():
            return rel
    return None


def _load_split(root: Path, subdir: str, split: str, verify: bool) -> MNISTSplit:
    files = []
    for name in MNIST_FILES[split]:
        rel = _find(root, subdir, name)
        if rel is None:
            rel = f"{subdir}/{name}.gz" if subdir else name + ".gz"
        files.append(data_file(rel, root=root, hint=_HINT, verify=verify))
    images, labels = load_idx(files[0]), load_idx(files[1])
    if images.dim() != 3:
        raise InputDataError(
            f"load_mnist: {files[0]} must hold (n, rows, cols) images, got "
            f"dims {list(images.shape)}"
        )
    if labels.dim() != 1:
        raise InputDataError(
            f"load_mnist: {files[1]} must hold (n,) labels, got dims {list(labels.shape)}"
        )
    if images.shape[0] != labels.shape[0]:
        raise InputDataError(
            f"load_mnist: {files[0].name} has {images.shape[0]} images but {files[1].name} has "
            f"{labels.shape[0]} labels"
        )
    labels = labels.long()
    bad = (labels < 0) | (labels > 9)
    if bool(bad.any()):
        found = sorted({int(v) for v in labels[bad][:5]})
        raise InputDataError(
            f"load_mnist: {files[1]} holds labels outside [0, 9] (the ten classes): found "
            f"{int(bad.sum())} such label(s), e.g. {found}"
        )
    return MNISTSplit(images=images, labels=labels)


def write_idx(path: str | os.PathLike, data: Tensor, gz: bool = False) -> Path:
    """Write ``data`` as an IDX file (the inverse of :func:`load_idx`): the type code follows
    the dtype (uint8, int8, int16, int32, float32, float64), gzip-compressed if ``gz``.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     labels = load_idx(write_idx(f"{tmp}/labels", torch.tensor([7, 2, 1]).byte()))
        >>> labels
        tensor([7, 2, 1], dtype=torch.uint8)
    """
    codes = {torch_dtype: (code, np_dtype) for code, (np_dtype, torch_dtype) in _IDX_TYPES.items()}
    if data.dtype not in codes:
        raise InputDataError(f"write_idx: IDX has no type for {data.dtype}")
    code, np_dtype = codes[data.dtype]
    arr = data.detach().cpu().numpy().astype(np_dtype)
    dims = b"".join(int(n).to_bytes(4, "big") for n in arr.shape)
    raw = bytes([0, 0, code, arr.ndim]) + dims + arr.tobytes()
    path = Path(path)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def load_mnist(
    root: str | os.PathLike | None = None,
    subdir: str = "mnist",
    split: Literal["auto", "train", "test"] = "auto",
    verify: bool = True,
) -> dict[str, MNISTSplit] | MNISTSplit:
    """Load MNIST-style IDX data from ``<root>/<subdir>``.

    Args:
        root: data root (see module docstring); any folder works.
        subdir: folder below ``root`` holding the files (``""`` for ``root`` itself).
        split: ``"auto"`` returns ``{"train": ..., "test": ...}`` when all four standard files
            are present and ``{"test": ...}`` when only the test files are (the shared data);
            ``"train"`` / ``"test"`` return that split and raise if its files are missing.
        verify: check the files' checksums (see :func:`bo_ncgp.data.data_file`); ``False``
            skips the check and logs a warning.

    Returns:
        A dict of :class:`MNISTSplit` (``split="auto"``) or one :class:`MNISTSplit`.

    Raises:
        FileNotFoundError: naming the missing file and where to obtain it.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:  # only the test files, as the shared data
        ...     _ = write_idx(f"{tmp}/t10k-images-idx3-ubyte", torch.zeros(3, 4, 4).byte())
        ...     _ = write_idx(f"{tmp}/t10k-labels-idx1-ubyte", torch.tensor([7, 2, 1]).byte())
        ...     data = load_mnist(root=tmp, subdir="")
        >>> list(data), data["test"].labels
        (['test'], tensor([7, 2, 1]))
    """
    if split not in ("auto", "train", "test"):
        raise InputDataError(f"load_mnist: split must be 'auto', 'train' or 'test', got {split!r}")
    base = resolve_root(root)
    subdir = str(subdir).strip("/")
    if split != "auto":
        return _load_split(base, subdir, split, verify)
    have_train = all(_find(base, subdir, n) is not None for n in MNIST_FILES["train"])
    out = {"test": _load_split(base, subdir, "test", verify)}
    if have_train:
        out = {"train": _load_split(base, subdir, "train", verify), **out}
    return out


def to_features(images: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Flatten ``(n, rows, cols)`` uint8 images to ``(n, rows * cols)`` floats in ``[0, 1]``.

    Example:
        >>> to_features(torch.full((2, 28, 28), 255, dtype=torch.uint8)).amax().item()
        1.0
    """
    dtype = torch.get_default_dtype() if dtype is None else dtype
    return images.reshape(images.shape[0], -1).to(dtype) / 255.0


def split_tasks(
    images: Tensor,
    labels: Tensor,
    pairs: Sequence[Sequence[int]] = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9)),
    relabel: bool = True,
) -> list[tuple[Tensor, Tensor]]:
    """Split-MNIST tasks: the examples of each group of classes, in data order.

    Args:
        images: ``(n, ...)`` examples (images or features).
        labels: ``(n,)`` integer labels.
        pairs: the class groups, one task each (default (0, 1), (2, 3), ..., (8, 9)).
        relabel: map the labels of a task to their position in its group (``0`` for the
            first class, ``1`` for the second, ...), e.g. binary ``{0, 1}`` for pairs.

    Returns:
        One ``(images, labels)`` tuple per task.

    Example:
        >>> y = torch.tensor([0, 1, 2, 3, 1, 2])
        >>> [t[1].tolist() for t in split_tasks(torch.arange(6), y, pairs=((0, 1), (2, 3)))]
        [[0, 1, 1], [0, 1, 0]]
    """
    if images.shape[0] != labels.shape[0]:
        raise InputDataError(
            f"split_tasks: {images.shape[0]} examples but {labels.shape[0]} labels"
        )
    seen: set[int] = set()
    tasks = []
    for group in pairs:
        group = [int(c) for c in group]
        if not group or len(set(group)) != len(group) or seen & set(group):
            raise InputDataError(
                f"split_tasks: class groups must be non-empty and disjoint, got {list(pairs)}"
            )
        seen |= set(group)
        classes = torch.tensor(group, dtype=labels.dtype, device=labels.device)
        mask = (labels.unsqueeze(-1) == classes).any(-1)
        if not bool(mask.any()):
            raise InputDataError(f"split_tasks: no examples of classes {group}")
        y = labels[mask]
        if relabel:
            y = (y.unsqueeze(-1) == classes).long().argmax(-1)
        tasks.append((images[mask], y))
    return tasks
