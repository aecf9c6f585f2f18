"""Executors: the dask client's security settings, address checks and timeouts."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import time
import warnings

import pytest

from bo_ncgp.campaigns.executors import _check_address, load_security, make_executor
from bo_ncgp.exceptions import InputDataError

distributed = pytest.importorskip("distributed")


def _files(folder, *names):
    for name in names:
        (folder / name).write_text("-----BEGIN CERTIFICATE-----\n")


def test_require_encryption_refuses_plain_tcp():
    sec = distributed.Security(require_encryption=True)
    with pytest.raises(InputDataError, match=r"'tcp://127\.0\.0\.1:8786' is not encrypted.*tls://"):
        with make_executor(dask_scheduler="tcp://127.0.0.1:8786", dask_security=sec):
            pass


def test_security_file_with_require_encryption_refuses_plain_tcp(tmp_path):
    _files(tmp_path, "ca.pem", "me.pem")
    f = tmp_path / "tls.yaml"
    f.write_text("tls_ca_file: ca.pem\ntls_client_cert: me.pem\n")
    with pytest.raises(InputDataError, match="not encrypted"):
        with make_executor(dask_scheduler="tcp://10.0.0.5:8786", dask_security=f):
            pass


def test_no_worker_times_out_quickly():
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError, match=r"no dask worker joined .* within 1 s"):
            with make_executor(dask_scheduler=cluster.scheduler_address, dask_timeout=1):
                pass
        assert time.perf_counter() - t0 < 5


def test_one_worker_runs_the_calls():
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        with make_executor(dask_scheduler=cluster.scheduler_address, dask_timeout=5) as ex:
            assert ex.submit(sum, [1, 2]).result() == 3


def test_unreachable_scheduler_times_out_with_a_clear_error():
    with pytest.raises(
        ConnectionError, match=r"could not connect .*127\.0\.0\.1:9 \(waited up to 0\.5 s"
    ):
        with make_executor(dask_scheduler="tcp://127.0.0.1:9", dask_timeout=0.5):
            pass


def test_plain_tcp_to_another_machine_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="bo_ncgp.campaigns.executors"):
        with pytest.warns(UserWarning, match=r"192\.0\.2\.1.*unencrypted.*--dask-security"):
            with pytest.raises(ConnectionError):  # TEST-NET-1: nothing answers
                with make_executor(dask_scheduler="tcp://192.0.2.1:8786", dask_timeout=0.2):
                    pass
    assert any("unencrypted" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1:8786", "localhost:8786", "tcp://[::1]:8786", "inproc://x/1/2"]
)
def test_local_addresses_do_not_warn(address):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check_address(address, distributed.Security())


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), "soon"])
def test_bad_timeout_is_refused(timeout):
    with pytest.raises(InputDataError, match="dask_timeout must be a positive number"):
        with make_executor(dask_scheduler="tcp://127.0.0.1:8786", dask_timeout=timeout):
            pass


def test_security_file_flat_form(tmp_path):
    _files(tmp_path, "ca.pem", "client.pem", "client-key.pem")
    f = tmp_path / "tls.yaml"
    f.write_text(
        "tls_ca_file: ca.pem\ntls_client_cert: client.pem\ntls_client_key: client-key.pem\n"
    )
    sec = load_security(f)
    assert sec.require_encryption is True
    assert sec.tls_ca_file == str(tmp_path / "ca.pem")
    assert sec.tls_client_key == str(tmp_path / "client-key.pem")
    f.write_text("tls_ca_file: ca.pem\ntls_client_cert: client.pem\nrequire_encryption: false\n")
    assert load_security(f).require_encryption is False


def test_security_file_dask_config_form(tmp_path):
    _files(tmp_path, "ca.pem", "client.pem")
    f = tmp_path / "dask.yaml"
    f.write_text(
        "distributed:\n  comm:\n    tls:\n      ca-file: ca.pem\n"
        "      client:\n        cert: client.pem\n"
    )
    sec = load_security(f)
    assert sec.require_encryption is True
    assert sec.tls_client_cert == str(tmp_path / "client.pem")


@pytest.mark.parametrize(
    "text, error, match",
    [
        ("tls_client_cert: client.pem\n", InputDataError, "tls_ca_file is missing"),
        ("tls_ca_file: ca.pem\n", InputDataError, "tls_client_cert is missing"),
        ("tls_ca_file: ca.pem\ntls_client_cert: gone.pem\n", FileNotFoundError, "gone.pem"),
        ("tls_ca_file: ca.pem\ntls_client_cert: client.pem\ntls_key: k\n", InputDataError,
         "unknown key.*tls_key"),
        ("tls_ca_file: ca.pem\ntls_client_cert: client.pem\nrequire_encryption: 'yes'\n",
         InputDataError, "require_encryption must be true or false"),
        ("- ca.pem\n", InputDataError, "expected a mapping"),
    ],
)  # fmt: skip
def test_security_file_errors(tmp_path, text, error, match):
    _files(tmp_path, "ca.pem", "client.pem")
    f = tmp_path / "tls.yaml"
    f.write_text(text)
    with pytest.raises(error, match=match):
        load_security(f)
    with pytest.raises(FileNotFoundError, match=r"nothere\.yaml"):
        load_security(tmp_path / "nothere.yaml")


def test_hotspots_command_stops_when_no_worker_joins(data_root, tmp_path, capsys):
    from bo_ncgp.cli import main

    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        argv = ["hotspots", "--quick", "--data-root", str(data_root), "--out", str(tmp_path)]
        argv += ["--dask-scheduler", cluster.scheduler_address, "--dask-timeout", "1"]
        assert main(argv) == 2
    assert "no dask worker joined" in capsys.readouterr().err


def test_tls_address_without_tls_settings_is_refused():
    with pytest.raises(InputDataError, match=r"'tls://10\.0\.0\.5:8786' needs TLS settings"):
        with make_executor(dask_scheduler="tls://10.0.0.5:8786", dask_timeout=1):
            pass


# ------------------------------------------------------------------ mutual TLS, end to end
def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _signed(folder, name, ca):
    """``name.pem`` / ``name-key.pem``: an EC key and a certificate signed by ``ca``."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", *ec, "-keyout", f"{name}-key.pem", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=folder)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
             f"{ca}-key.pem", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
             cwd=folder)  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA with a certificate for the cluster and the client, and a rogue CA with its own."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    folder = tmp_path_factory.mktemp("certs")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{ca}-key.pem", "-out", f"{ca}.pem",
                 "-days", "2", "-subj", f"/CN={ca}", cwd=folder)  # fmt: skip
    _signed(folder, "node", "ca")
    _signed(folder, "rogue", "rogue-ca")
    for name, cert in (("good", "node"), ("rogue", "rogue")):
        (folder / f"{name}.yaml").write_text(
            f"tls_ca_file: ca.pem\ntls_client_cert: {cert}.pem\ntls_client_key: {cert}-key.pem\n"
        )
    return folder


@pytest.fixture(scope="module")
def tls_cluster(certs):
    files = {
        f"tls_{role}_{part}": str(certs / f"node{'-key' if part == 'key' else ''}.pem")
        for role in ("scheduler", "worker", "client")
        for part in ("cert", "key")
    }
    sec = distributed.Security(require_encryption=True, tls_ca_file=str(certs / "ca.pem"), **files)
    with distributed.LocalCluster(
        n_workers=1,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        security=sec,
        dashboard_address=None,
    ) as cluster:
        yield cluster


def test_tls_cluster_runs_calls_for_a_client_with_a_certificate_of_its_ca(certs, tls_cluster):
    addr = tls_cluster.scheduler_address
    assert addr.startswith("tls://")
    with make_executor(
        dask_scheduler=addr, dask_security=certs / "good.yaml", dask_timeout=5
    ) as ex:
        assert ex.submit(sum, [1, 2]).result() == 3


def test_tls_cluster_refuses_a_certificate_of_another_ca(certs, tls_cluster):
    addr = tls_cluster.scheduler_address
    with pytest.raises(ConnectionError, match="could not connect"):
        with make_executor(dask_scheduler=addr, dask_security=certs / "rogue.yaml", dask_timeout=2):
            pass


def test_tls_cluster_refuses_a_worker_with_a_certificate_of_another_ca(certs, tls_cluster):
    """The security finding: a rogue worker cannot join, so it cannot send pickles back."""
    rogue = distributed.Security(
        require_encryption=True,
        tls_ca_file=str(certs / "ca.pem"),
        tls_worker_cert=str(certs / "rogue.pem"),
        tls_worker_key=str(certs / "rogue-key.pem"),
    )

    async def join():
        async with distributed.Worker(
            tls_cluster.scheduler_address, security=rogue, death_timeout=1
        ):
            pass

    with pytest.raises(TimeoutError):
        asyncio.run(join())
    assert len(tls_cluster.scheduler_info["workers"]) == 1
