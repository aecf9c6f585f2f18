"""The child-process probe that keeps a crashing KeOps (a segmentation fault on a GPU) from
taking the process down: the probe is pointed at the CPU here, with scripts that crash, fail,
hang or pass."""

from __future__ import annotations

import subprocess

import gpytorch
import pytest
import torch

from bo_ncgp.linalg import KernelOperator, _keops
from bo_ncgp.linalg.backend import choose_backend

pytestmark = [
    pytest.mark.cpu_only,
    pytest.mark.skipif(not _keops.keops_available(), reason="pykeops not installed"),
]


@pytest.fixture
def probed_cpu(monkeypatch, tmp_path):
    """KeOps on the CPU treated as a probed device type, with a fresh process state and the
    marker of a passed probe in ``tmp_path``."""
    monkeypatch.setattr(_keops, "PROBED_DEVICE_TYPES", ("cpu",))
    monkeypatch.setattr(_keops, "_BROKEN_ON", {})
    monkeypatch.setattr(_keops, "_PASSED_ON", set())
    monkeypatch.delenv("BO_NCGP_KEOPS_PROBE", raising=False)
    marker = tmp_path / "probe.ok"
    monkeypatch.setattr(_keops, "_probe_marker", lambda device: marker)
    return marker


#: a probe that crashes: a check that finds KeOps working has not run it
CRASH = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"


def no_child(monkeypatch):
    """Any further probe crashes (and would make ``keops_available`` False with a warning)."""
    monkeypatch.setattr(_keops, "PROBE_SCRIPT", CRASH)


def test_a_crashing_probe_disables_keops_on_that_device_only(probed_cpu, monkeypatch):
    monkeypatch.setattr(_keops, "PROBE_SCRIPT", CRASH)
    with pytest.warns(RuntimeWarning, match="KeOps does not run on cpu: .*signal SIGSEGV"):
        assert not _keops.keops_available("cpu")
    assert not probed_cpu.exists()
    # asked again: no second child, no second warning
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: pytest.fail("a second probe"))
    assert not _keops.keops_available(torch.device("cpu"))
    assert _keops.keops_available()  # pykeops itself still imports
    # products fall back to the chunked torch backend, with the dense product's values
    k = gpytorch.kernels.RBFKernel().double()
    X, V = torch.rand(50, 2, dtype=torch.float64), torch.randn(50, 3, dtype=torch.float64)
    assert choose_backend("keops", k, (50, 50), torch.float64, "cpu") == "chunked"
    big = choose_backend("auto", k, (50, 50), torch.float64, "cpu", dense_limit_bytes=1)
    assert big == "chunked"
    op = KernelOperator(k, X, backend="keops")
    assert op.backend == "chunked"
    torch.testing.assert_close(op @ V, k(X).to_dense() @ V)


def test_a_failing_probe_names_its_exit_status_and_last_line(probed_cpu, monkeypatch):
    monkeypatch.setattr(
        _keops, "PROBE_SCRIPT", "import sys; print('noise'); sys.exit('nvrtc: no GPU here')"
    )
    with pytest.warns(RuntimeWarning, match=r"exit status 1 \(nvrtc: no GPU here\)"):
        assert not _keops.keops_available("cpu")


def test_a_hanging_probe_times_out(probed_cpu, monkeypatch):
    monkeypatch.setattr(_keops, "PROBE_SCRIPT", "import time; time.sleep(60)")
    monkeypatch.setattr(_keops, "PROBE_TIMEOUT_S", 1.0)
    with pytest.warns(RuntimeWarning, match="did not finish in 1 s"):
        assert not _keops.keops_available("cpu")


def test_the_real_probe_passes_once_per_environment(probed_cpu, monkeypatch):
    assert _keops.keops_available("cpu")
    assert probed_cpu.read_text().strip() == "cpu"
    # a new process (empty state) reads the marker instead of probing again
    monkeypatch.setattr(_keops, "_PASSED_ON", set())
    no_child(monkeypatch)
    assert _keops.keops_available("cpu")
    # the products of the backend then use KeOps
    k = gpytorch.kernels.MaternKernel(nu=1.5).double()
    X, V = torch.rand(40, 2, dtype=torch.float64), torch.randn(40, 2, dtype=torch.float64)
    op = KernelOperator(k, X, backend="keops")
    assert op.backend == "keops"
    torch.testing.assert_close(op @ V, k(X).to_dense() @ V)


def test_the_probe_is_skipped_when_asked(probed_cpu, monkeypatch):
    monkeypatch.setenv("BO_NCGP_KEOPS_PROBE", "0")
    no_child(monkeypatch)
    assert _keops.keops_available("cpu")
    assert not probed_cpu.exists()


def test_unprobed_devices_and_the_device_free_question_run_no_child(monkeypatch):
    monkeypatch.setattr(_keops, "_PASSED_ON", set())
    no_child(monkeypatch)
    assert _keops.PROBED_DEVICE_TYPES == ("cuda",)
    assert _keops.keops_available("cpu")
    assert _keops.keops_available()
