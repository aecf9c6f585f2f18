import pytest

from bo_ncgp.data import DataChecksumError, data_file, resolve_root


def test_missing_file_error_names_file_and_env(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothing/here\.csv.*BO_NCGP_DATA.*get it here"):
        data_file("nothing/here.csv", root=tmp_path, hint="get it here")


def test_env_var_and_checksum(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    f = tmp_path / "a" / "x.txt"
    f.write_text("hello\n")
    good = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
    (tmp_path / "SHA256SUMS").write_text(f"{good}  a/x.txt\n")
    monkeypatch.setenv("BO_NCGP_DATA", str(tmp_path))
    assert resolve_root() == tmp_path
    assert data_file("a/x.txt") == tmp_path / "a" / "x.txt"
    f.write_text("tampered\n")
    with pytest.raises(DataChecksumError, match=r"x\.txt"):
        data_file("a/x.txt", root=tmp_path / ".")


def test_shared_data_checksums_verify(data_root):
    assert data_file("hotspots/civ_data.csv", root=data_root).is_file()
