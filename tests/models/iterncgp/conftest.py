"""IterNCGP tests run many tiny tensor operations: one intra-op thread avoids the OpenMP
synchronisation cost that dominates them on a busy machine."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
