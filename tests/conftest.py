"""Shared fixtures: float64 by default, seeded RNG, location of the shared data sets."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


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
