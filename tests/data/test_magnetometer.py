import pytest
import torch

from bo_ncgp.data import load_magnetometer


def test_load_magnetometer(data_root):
    d = load_magnetometer(paths=[1, 3], root=data_root)
    n = d["X"].shape[0]
    assert d["X"].shape == (n, 2) and d["mag"].shape == (n, 3)
    assert d["y"].shape == d["time"].shape == d["path"].shape == (n,)
    assert set(d["path"].unique().tolist()) == {1, 3}
    torch.testing.assert_close(d["y"], d["mag"].norm(dim=-1))
    one = load_magnetometer(paths=[1], root=data_root)
    assert int((d["path"] == 1).sum()) == one["X"].shape[0]
    # the room is 6 m x 6 m
    assert float(d["X"].abs().max()) < 6.0


def test_load_magnetometer_errors(tmp_path):
    with pytest.raises(ValueError, match=r"1\.\.9"):
        load_magnetometer(paths=[0])
    with pytest.raises(ValueError, match="no paths"):
        load_magnetometer(paths=[])
    with pytest.raises(FileNotFoundError, match=r"1-loc\.csv"):
        load_magnetometer(paths=[1], root=tmp_path)
    d = tmp_path / "streaming" / "invensense"
    d.mkdir(parents=True)
    (d / "1-loc.csv").write_text("0,0\n1,1\n")
    (d / "1-mag.csv").write_text("1,2,3\n")
    (d / "1-time.csv").write_text("0\n1\n")
    with pytest.raises(ValueError, match="2 positions, 1 field"):
        load_magnetometer(paths=[1], root=tmp_path, verify=False)  # not the shared files
