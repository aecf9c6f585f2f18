import contextlib
import hashlib
import logging
import shutil

import pytest

import bo_ncgp.data._paths as _paths
from bo_ncgp.data import (
    DataChecksumError,
    data_file,
    load_banana,
    load_dust,
    load_hotspots,
    load_magnetometer,
    load_mnist,
    load_uci,
    resolve_root,
)
from bo_ncgp.data.checksums import PINNED_SHA256


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


def test_pinned_checksums_cover_the_shared_data(data_root):
    """Every file of the shared data is pinned, with its real SHA-256."""
    listed = {
        line.split()[1]: line.split()[0]
        for line in (data_root / "SHA256SUMS").read_text().splitlines()
        if line.strip()
    }
    assert PINNED_SHA256 == listed
    for rel, digest in PINNED_SHA256.items():
        assert hashlib.sha256((data_root / rel).read_bytes()).hexdigest() == digest, rel


# loader call, the files it reads (the first one gets altered)
LOADERS = {
    "hotspots": (lambda root, **kw: load_hotspots("civ", root=root, **kw),
                 ["hotspots/civ_data.csv"]),
    "dust": (lambda root, **kw: load_dust(root=root, **kw), ["dust/domain_subsample.dat"]),
    "banana": (lambda root, **kw: load_banana(root=root, **kw),
               [f"streaming/banana_{s}_{v}.txt" for s in ("test", "train") for v in "yx"]),
    "uci": (lambda root, **kw: load_uci("mammographic", root=root, **kw),
            ["streaming/mammographic.csv"]),
    "magnetometer": (lambda root, **kw: load_magnetometer([1], root=root, **kw),
                     [f"streaming/invensense/1-{k}.csv" for k in ("time", "loc", "mag")]),
    "mnist": (lambda root, **kw: load_mnist(root=root, split="test", **kw),
              ["mnist/t10k-labels-idx1-ubyte.gz", "mnist/t10k-images-idx3-ubyte.gz"]),
}  # fmt: skip


def _altered_copy(data_root, dest, files, with_sums):
    """Copy ``files`` of the shared data to ``dest`` and change one byte of the first; with
    ``with_sums`` a ``SHA256SUMS`` beside them lists the altered file's own checksum."""
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data_root / rel, dest / rel)
    target = dest / files[0]
    raw = bytearray(target.read_bytes())
    i = len(raw) - 2  # inside the last row / the gzip trailer: still parseable text
    raw[i] = ord("7") if raw[i] != ord("7") else ord("8")
    target.write_bytes(bytes(raw))
    actual = hashlib.sha256(bytes(raw)).hexdigest()
    if with_sums:
        (dest / "SHA256SUMS").write_text(f"{actual}  {files[0]}\n")
    return target, actual


@pytest.mark.parametrize("with_sums", [False, True], ids=["no-SHA256SUMS", "forged-SHA256SUMS"])
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_altered_copy_of_shared_data_is_refused(data_root, tmp_path, loader, with_sums):
    load, files = LOADERS[loader]
    target, actual = _altered_copy(data_root, tmp_path, files, with_sums)
    expected = PINNED_SHA256[files[0]]
    with pytest.raises(DataChecksumError) as info:
        load(tmp_path)
    msg = str(info.value)
    assert str(target) in msg and expected in msg and actual in msg
    assert "verify=False" in msg and "--no-verify" in msg


def test_verify_false_is_explicit_and_logged(data_root, tmp_path, caplog):
    target, _ = _altered_copy(data_root, tmp_path, ["hotspots/civ_data.csv"], False)
    with caplog.at_level(logging.WARNING, logger="bo_ncgp.data._paths"):
        data = load_hotspots("civ", root=tmp_path, verify=False)
    assert data.X.shape == (1500, 8)
    assert any(
        str(target) in r.getMessage() and "verification skipped" in r.getMessage()
        for r in caplog.records
    )


def test_own_files_are_checked_only_against_their_folders_list(tmp_path):
    (tmp_path / "mine").mkdir()
    f = tmp_path / "mine" / "x.csv"
    f.write_text("1,2\n")
    assert data_file("mine/x.csv", root=tmp_path) == f  # not pinned, no SHA256SUMS: loaded
    (tmp_path / "SHA256SUMS").write_text("0" * 64 + "  mine/x.csv\n")
    with pytest.raises(DataChecksumError, match=r"x\.csv.*expected sha256 0{64}.*SHA256SUMS"):
        data_file("mine/x.csv", root=tmp_path)


def test_unnormalised_relative_path_is_still_pinned(tmp_path):
    (tmp_path / "hotspots").mkdir()
    (tmp_path / "hotspots" / "civ_data.csv").write_text("lng,lat\n")
    with pytest.raises(DataChecksumError, match="pinned"):
        data_file("./hotspots/../hotspots/civ_data.csv", root=tmp_path)


def test_each_file_is_hashed_once_until_it_changes(tmp_path, monkeypatch):
    calls = []
    real = _paths.sha256
    monkeypatch.setattr(_paths, "sha256", lambda p: calls.append(p) or real(p))
    f = tmp_path / "x.txt"
    f.write_text("hello\n")
    good = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
    (tmp_path / "SHA256SUMS").write_text(f"{good}  x.txt\n")
    for _ in range(3):
        data_file("x.txt", root=tmp_path)
    assert len(calls) == 1
    f.write_text("tampered\n")  # another size: hashed again, and refused
    with pytest.raises(DataChecksumError):
        data_file("x.txt", root=tmp_path)
    assert len(calls) == 2


def test_hotspots_command_refuses_an_altered_copy_unless_no_verify(data_root, tmp_path, capsys):
    from bo_ncgp.cli import main

    root = tmp_path / "data"
    _altered_copy(data_root, root, ["hotspots/civ_data.csv"], True)
    out = tmp_path / "out"
    argv = ["hotspots", "--quick", "--data-root", str(root), "--out", str(out), "--summary-only"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "checksum mismatch" in err and "civ_data.csv" in err and "--no-verify" in err
    with contextlib.suppress(FileNotFoundError):  # past the data check: OUT holds no campaign
        main([*argv, "--no-verify"])
    assert "checksum mismatch" not in capsys.readouterr().err
