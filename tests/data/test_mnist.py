"""IDX reader and MNIST loader: real test split, synthetic IDX files, corrupt files."""

import numpy as np
import pytest
import torch

from bo_ncgp.data import DataChecksumError, load_idx, load_mnist
from bo_ncgp.data.mnist import MNIST_FILES, split_tasks, to_features, write_idx


def write_array(path, arr, dtype=torch.uint8, gz=False):
    return write_idx(path, torch.as_tensor(np.asarray(arr)).to(dtype), gz=gz)


def make_folder(root, n_train=7, n_test=5, gz=True, train=True):
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    data = {}
    for split, n in (("train", n_train), ("test", n_test)):
        if split == "train" and not train:
            continue
        imgs = rng.integers(0, 256, size=(n, 4, 3))
        labs = rng.integers(0, 10, size=n)
        suffix = ".gz" if gz else ""
        write_array(root / (MNIST_FILES[split][0] + suffix), imgs, gz=gz)
        write_array(root / (MNIST_FILES[split][1] + suffix), labs, gz=gz)
        data[split] = (imgs, labs)
    return data


def test_shared_mnist_test_split(data_root):
    data = load_mnist(root=data_root)
    assert set(data) == {"test"}  # the shared folder has only the 10k test split
    images, labels = data["test"]
    assert images.shape == (10000, 28, 28) and images.dtype == torch.uint8
    assert labels.shape == (10000,) and labels.dtype == torch.int64
    assert labels[:5].tolist() == [7, 2, 1, 0, 4]  # the canonical first test labels
    assert torch.bincount(labels).tolist()[:2] == [980, 1135]
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        load_mnist(root=data_root, split="train")


@pytest.mark.parametrize("gz", [True, False])
def test_any_folder_with_the_four_standard_files(tmp_path, gz):
    ref = make_folder(tmp_path / "fashion-mnist", gz=gz)
    data = load_mnist(root=tmp_path, subdir="fashion-mnist")
    assert list(data) == ["train", "test"]
    for split, (imgs, labs) in ref.items():
        assert torch.equal(data[split].images, torch.as_tensor(imgs, dtype=torch.uint8))
        assert torch.equal(data[split].labels, torch.as_tensor(labs))
    test = load_mnist(root=tmp_path / "fashion-mnist", subdir="", split="test")
    assert torch.equal(test.labels, data["test"].labels)


@pytest.mark.parametrize(
    "dtype", [torch.int8, torch.int16, torch.int32, torch.float32, torch.float64]
)
def test_idx_types_round_trip(tmp_path, dtype):
    arr = np.arange(-12, 12).reshape(2, 3, 4)
    t = load_idx(write_array(tmp_path / "x.idx", arr, dtype))
    assert t.dtype == dtype
    assert t.shape == (2, 3, 4)
    assert torch.equal(t.double(), torch.as_tensor(arr, dtype=torch.float64))


def test_corrupt_files_raise_clear_errors(tmp_path):
    good = write_array(tmp_path / "good", np.zeros((3, 2)))
    raw = good.read_bytes()
    (tmp_path / "magic").write_bytes(b"\x01" + raw[1:])
    with pytest.raises(ValueError, match="not an IDX file"):
        load_idx(tmp_path / "magic")
    (tmp_path / "code").write_bytes(raw[:2] + b"\x07" + raw[3:])
    with pytest.raises(ValueError, match="not an IDX file"):
        load_idx(tmp_path / "code")
    (tmp_path / "short").write_bytes(raw[:-1])
    with pytest.raises(ValueError, match="truncated"):
        load_idx(tmp_path / "short")
    (tmp_path / "long").write_bytes(raw + b"\x00")
    with pytest.raises(ValueError, match="longer than its header"):
        load_idx(tmp_path / "long")
    (tmp_path / "tiny").write_bytes(b"\x00\x00")
    with pytest.raises(ValueError, match="too short"):
        load_idx(tmp_path / "tiny")
    (tmp_path / "badgz").write_bytes(b"\x1f\x8b" + b"junk")
    with pytest.raises(ValueError, match="gzip"):
        load_idx(tmp_path / "badgz")
    with pytest.raises(FileNotFoundError, match="nothere"):
        load_idx(tmp_path / "nothere")


def test_mismatched_counts_missing_files_and_checksums(tmp_path):
    make_folder(tmp_path / "m", train=False)
    write_array(tmp_path / "m" / "t10k-labels-idx1-ubyte.gz", np.zeros(4), gz=True)
    with pytest.raises(ValueError, match=r"5 images but .* 4 labels"):
        load_mnist(root=tmp_path, subdir="m")
    with pytest.raises(FileNotFoundError, match=r"m/train-images-idx3-ubyte\.gz.*BO_NCGP_DATA"):
        load_mnist(root=tmp_path, subdir="m", split="train")
    with pytest.raises(ValueError, match="split"):
        load_mnist(root=tmp_path, split="validation")
    root = tmp_path / "checked"  # a fresh root: SHA256SUMS lists are cached per root
    make_folder(root / "c", train=False)
    (root / "SHA256SUMS").write_text("0" * 64 + "  c/t10k-images-idx3-ubyte.gz\n")
    with pytest.raises(DataChecksumError, match="t10k-images"):
        load_mnist(root=root, subdir="c")
    assert load_mnist(root=root, subdir="c", verify=False)["test"].images.shape == (5, 4, 3)


def test_split_tasks_and_features():
    labels = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 3, 2])
    images = torch.arange(12 * 4, dtype=torch.uint8).reshape(12, 2, 2)
    tasks = split_tasks(images, labels)
    assert len(tasks) == 5
    X1, y1 = tasks[1]
    assert y1.tolist() == [0, 1, 1, 0] and torch.equal(X1, images[[2, 3, 10, 11]])
    raw = split_tasks(images, labels, pairs=((2, 3),), relabel=False)
    assert raw[0][1].tolist() == [2, 3, 3, 2]
    with pytest.raises(ValueError, match="disjoint"):
        split_tasks(images, labels, pairs=((0, 1), (1, 2)))
    with pytest.raises(ValueError, match="no examples"):
        split_tasks(images, labels, pairs=((11,),))
    F = to_features(images)
    assert F.shape == (12, 4) and float(F.max()) <= 1.0 and F.dtype == torch.get_default_dtype()
