"""Tests of bo_ncgp.data.hotspots (the schistosomiasis hotspot villages)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bo_ncgp.data import load_hotspots
from bo_ncgp.data.hotspots import FEATURES, HOTSPOT_THRESHOLDS

HEADER = "lng,lat,bioclim1,bioclim12,bioclim15,bioclim4,dist_to_water_m,elev_m,disease,theta"
ROWS = [
    "-8.2,6.5,256,1784,62,905,1330,260,SM,0.0145",
    "-6.3,4.9,257,1481,91,907,3763,62,SM,0.2774",
    "-5.5,9.6,267,1260,85,1411,5076,340,SM,0.0178",
]


def _write(root, name="toy", lines=(HEADER, *ROWS), newline="\n"):
    (root / "hotspots").mkdir(exist_ok=True)
    path = root / "hotspots" / f"{name}_data.csv"
    path.write_bytes(newline.join(lines).encode() + newline.encode())
    return path


def test_civ_file_matches_raw_text(data_root):
    data = load_hotspots("civ", root=data_root)
    assert data.X.shape == (1500, 8) and data.theta.shape == (1500,)
    assert data.threshold == HOTSPOT_THRESHOLDS["civ"] == 0.1
    assert set(data.disease) == {"SM"}
    raw = (data_root / "hotspots" / "civ_data.csv").read_bytes()
    assert b"\n" not in raw and b"\r" in raw  # the shared file really is CR-only
    lines = raw.decode().split("\r")
    header = lines[0].split(",")
    for i in (0, 1, 777, 1499):
        fields = lines[i + 1].split(",")
        expect = [float(fields[header.index(c)]) for c in FEATURES]
        assert data.X[i].tolist() == expect
        assert float(data.theta[i]) == float(fields[header.index("theta")])
    assert ((data.theta >= 0) & (data.theta <= 1)).all()
    assert data.X.dtype == torch.get_default_dtype()


@pytest.mark.parametrize("newline", ["\r", "\n", "\r\n"])
def test_line_endings(tmp_path, newline):
    _write(tmp_path, newline=newline)
    data = load_hotspots("toy", root=tmp_path, threshold=0.1)
    assert data.X.shape == (3, 8)
    assert data.X[1, 6].item() == 3763 and data.theta.tolist() == [0.0145, 0.2774, 0.0178]
    assert data.disease == ("SM", "SM", "SM")


def test_column_order_does_not_matter_and_extra_columns_are_ignored(tmp_path):
    cols = HEADER.split(",")
    order = [9, 0, 8, 1, 2, 3, 4, 5, 6, 7]
    lines = [",".join([cols[j] for j in order] + ["note"])]
    for r in ROWS:
        f = r.split(",")
        lines.append(",".join([f[j] for j in order] + ["x"]))
    _write(tmp_path, "perm", lines)
    _write(tmp_path, "ref")
    a = load_hotspots("perm", root=tmp_path, threshold=0.1)
    b = load_hotspots("ref", root=tmp_path, threshold=0.1)
    assert torch.equal(a.X, b.X) and torch.equal(a.theta, b.theta)


def test_default_thresholds_and_override(tmp_path):
    for country, t in (("civ", 0.1), ("mwi", 0.1), ("hti", 0.02), ("phl", 0.02)):
        _write(tmp_path, country)
        # small stand-ins: the civ one is not the shared file
        assert load_hotspots(country, root=tmp_path, verify=False).threshold == t
    assert load_hotspots("hti", root=tmp_path, threshold=0.3).threshold == 0.3
    _write(tmp_path, "toy")
    with pytest.raises(ValueError, match=r"no default hotspot threshold.*'toy'"):
        load_hotspots("toy", root=tmp_path)
    with pytest.raises(ValueError, match=r"threshold must lie in \(0, 1\)"):
        load_hotspots("toy", root=tmp_path, threshold=1.5)


def test_errors_name_the_file_and_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hotspots/civ_data\.csv"):
        load_hotspots("civ", root=tmp_path)
    path = _write(
        tmp_path, "nocol", [HEADER.replace(",theta", ""), *(r[: r.rindex(",")] for r in ROWS)]
    )
    with pytest.raises(ValueError, match=rf"{path}.*missing column\(s\) theta"):
        load_hotspots("nocol", root=tmp_path, threshold=0.1)
    path = _write(tmp_path, "range", [HEADER, ROWS[0], ROWS[1].replace("0.2774", "1.2774")])
    with pytest.raises(ValueError, match=rf"{path}.*theta.*\[0, 1\].*line 3"):
        load_hotspots("range", root=tmp_path, threshold=0.1)
    path = _write(tmp_path, "neg", [HEADER, ROWS[0].replace("0.0145", "-0.1")])
    with pytest.raises(ValueError, match=rf"{path}.*theta"):
        load_hotspots("neg", root=tmp_path, threshold=0.1)
    path = _write(tmp_path, "text", [HEADER, ROWS[0].replace("256", "warm")])
    with pytest.raises(ValueError, match=rf"{path}: line 2, column bioclim1: 'warm'"):
        load_hotspots("text", root=tmp_path, threshold=0.1)
    path = _write(tmp_path, "nan", [HEADER, ROWS[0].replace("260", "nan")])
    with pytest.raises(ValueError, match=rf"{path}: line 2, column elev_m is NaN"):
        load_hotspots("nan", root=tmp_path, threshold=0.1)
    path = _write(tmp_path, "short", [HEADER, ROWS[0][: ROWS[0].rindex(",")]])
    with pytest.raises(ValueError, match=rf"{path}: line 2 has 9 fields"):
        load_hotspots("short", root=tmp_path, threshold=0.1)
    path = _write(tmp_path, "empty", [HEADER])
    with pytest.raises(ValueError, match=rf"{path}.*no village rows"):
        load_hotspots("empty", root=tmp_path, threshold=0.1)
    with pytest.raises(ValueError, match="file prefix"):
        load_hotspots("../etc", root=tmp_path, threshold=0.1)


def test_dtype_argument(tmp_path):
    _write(tmp_path)
    data = load_hotspots("toy", root=tmp_path, threshold=0.1, dtype=torch.float32)
    assert data.X.dtype == data.theta.dtype == torch.float32
    assert np.allclose(data.theta.numpy(), [0.0145, 0.2774, 0.0178])
