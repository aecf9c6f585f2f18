"""Tests of bo_ncgp.data.streaming (banana and UCI loaders)."""

from __future__ import annotations

import pytest
import torch

from bo_ncgp.data import load_banana, load_uci


def test_banana_shapes_and_label_mapping(data_root):
    data = load_banana(root=data_root)
    assert data.X_train.shape == (400, 2) and data.y_train.shape == (400,)
    assert data.X_test.shape == (4900, 2) and data.y_test.shape == (4900,)
    assert set(data.y_train.unique().tolist()) == {0.0, 1.0}
    raw = (data_root / "streaming" / "banana_train_y.txt").read_text().split()
    assert [float(v) for v in raw[:20]] == (2 * data.y_train[:20] - 1).tolist()
    assert data.X_train.dtype == torch.get_default_dtype()


@pytest.mark.parametrize("name, shape", [("bank", (4521, 17)), ("mammographic", (961, 6))])
def test_uci_shapes_and_labels(data_root, name, shape):
    X, y = load_uci(name, root=data_root, dtype=torch.float32)
    assert X.shape == shape and y.shape == (shape[0],) and X.dtype == torch.float32
    assert set(y.unique().tolist()) <= {0.0, 1.0}
    assert torch.isfinite(X).all()


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="unknown data set"):
        load_uci("adult", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="banana_train_x"):
        load_banana(root=tmp_path)
    (tmp_path / "streaming").mkdir()
    (tmp_path / "streaming" / "banana_train_x.txt").write_text("0,1\n1,2\n")
    (tmp_path / "streaming" / "banana_train_y.txt").write_text("1\n0\n")
    with pytest.raises(ValueError, match=r"labels must be in \{-1, 1\}"):
        load_banana(root=tmp_path, verify=False)  # small stand-ins, not the shared files
    (tmp_path / "streaming" / "mammographic.csv").write_text("1,2,3\n")
    with pytest.raises(ValueError, match="expected 7 columns"):
        load_uci("mammographic", root=tmp_path, verify=False)
