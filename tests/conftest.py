"""Shared fixtures: float64 by default, seeded RNG, location of the shared data sets, and the
test device.

``BO_NCGP_TEST_DEVICE`` (default ``cpu``) names the device of the device lane: with ``cuda``,
the tests of ``DEVICE_LANE`` not marked ``cpu_only`` run with
``torch.set_default_device("cuda")``, so the tests that build tensors without a device argument
run on the GPU unchanged (``make test-gpu`` selects them with ``-m "not cpu_only"``); the other
tests stay on the CPU. The ``device`` fixture gives the device to tests that name it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def selected_device() -> torch.device:
    """The device of ``$BO_NCGP_TEST_DEVICE`` (default ``cpu``)."""
    name = os.environ.get("BO_NCGP_TEST_DEVICE", "").strip() or "cpu"
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise pytest.UsageError(
            f"BO_NCGP_TEST_DEVICE={name!r} is not a torch device: {err}"
        ) from None


def device_unavailable(device: torch.device) -> str | None:
    """Why ``device`` cannot run tests here, or ``None`` when it can."""
    if device.type == "cpu":
        return None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "BO_NCGP_TEST_DEVICE names cuda but torch.cuda.is_available() is False"
        if device.index is not None and device.index >= torch.cuda.device_count():
            return f"BO_NCGP_TEST_DEVICE names {device}, only {torch.cuda.device_count()} GPUs"
        return None
    if device.type == "mps" and not torch.backends.mps.is_available():
        return "BO_NCGP_TEST_DEVICE names mps but torch.backends.mps.is_available() is False"
    if device.type == "meta":
        return "the meta device has no values; use it in single tests, not as the test device"
    return None


@pytest.fixture
def device() -> torch.device:
    """The test device (``$BO_NCGP_TEST_DEVICE``, default ``cpu``)."""
    return selected_device()


@pytest.fixture(autouse=True)
def _default_device(request):
    """Off the CPU, tensors built without a device argument go to the test device."""
    dev = selected_device()
    if dev.type == "cpu" or request.node.get_closest_marker("cpu_only"):
        yield
        return
    old = torch.get_default_device()
    torch.set_default_device(dev)
    try:
        yield
    finally:
        torch.set_default_device(old)


#: the tests of the device lane (the numerical core and the BoTorch layer); the others stay on
#: the CPU (numpy, files, processes) as if marked ``cpu_only``
DEVICE_LANE = ("models", "linalg", "likelihoods", "bo", "test_devices.py")


def pytest_collection_modifyitems(config, items):
    dev = selected_device()
    if dev.type == "cpu":
        return
    why = device_unavailable(dev)
    for item in items:
        if Path(item.path).relative_to(ROOT / "tests").parts[0] not in DEVICE_LANE:
            item.add_marker(pytest.mark.cpu_only)
        if why is not None and not item.get_closest_marker("cpu_only"):
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(autouse=True)
def _float64_seed_and_threads():
    old, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(old)
    torch.set_num_threads(threads)  # scripts under test may set their own thread count


def shared_data_root() -> Path | None:
    """``$BO_NCGP_DATA`` or ``../shared/data`` next to the project, if it exists."""
    env = os.environ.get("BO_NCGP_DATA")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if cand.is_dir():
            return cand
    return None


@pytest.fixture
def data_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("shared data folder not found (set BO_NCGP_DATA or place ../shared/data)")
    return root


def pytest_configure(config):
    warnings.filterwarnings("ignore", message=".*CUDA libraries not found.*")
    # Tests use small matrices: one BLAS thread per process avoids oversubscribing the cores
    # when pytest-xdist runs several workers (and keeps timings of noisy machines sane).
    torch.set_num_threads(1)
