import pytest
import torch

from bo_ncgp.data import load_dust
from bo_ncgp.data.dust import DUST_COLUMNS


def test_load_dust(data_root):
    d = load_dust(root=data_root)
    assert d["X"].shape == (5000, 3)
    for name in DUST_COLUMNS:
        assert d[name].shape == (5000,)
    assert d["index"].dtype == torch.long
    torch.testing.assert_close(d["X"][:, 0], d["x"])
    # the distance column is the norm of the position; extinctions are non-negative
    torch.testing.assert_close(d["X"].norm(dim=-1), d["distance"], rtol=1e-6, atol=1e-9)
    assert bool((d["e"] >= 0).all())


def test_load_dust_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"domain_subsample\.dat"):
        load_dust(root=tmp_path)
    (tmp_path / "dust").mkdir()
    f = tmp_path / "dust" / "domain_subsample.dat"
    f.write_text(" " + " ".join(DUST_COLUMNS[1:]) + "\n" + " ".join(["1.0"] * 12) + "\n")
    with pytest.raises(ValueError, match="rows have 12 values, expected 13"):
        load_dust(root=tmp_path, verify=False)  # a small stand-in, not the shared file
    f.write_text("a b c\n1 2 3\n")
    with pytest.raises(ValueError, match="unexpected header"):
        load_dust(root=tmp_path, verify=False)
