"""The rule behind ``backend="auto"``: memory probe, dense / KeOps / chunked choice, and that
every caller (KernelOperator, IterNCGP's latent operator) goes through it."""

import logging

import gpytorch
import pytest
import torch

from bo_ncgp.likelihoods import Bernoulli, Softmax
from bo_ncgp.linalg import KernelOperator, _keops
from bo_ncgp.linalg import backend as backend_module
from bo_ncgp.linalg.backend import available_memory_bytes, choose_backend
from bo_ncgp.models import IterNCGP
from bo_ncgp.models.iterncgp.operators import LatentKernelOperator

GiB = 2**30


@pytest.fixture
def memory(monkeypatch):
    """Set the probed available memory: ``memory(bytes)``."""

    def set_memory(nbytes):
        monkeypatch.setattr(backend_module, "available_memory_bytes", lambda device="cpu": nbytes)

    return set_memory


@pytest.fixture
def keops(monkeypatch):
    """``keops(True/False)``: pretend pykeops works (or is missing)."""

    def set_keops(ok):
        monkeypatch.setattr(_keops, "keops_available", lambda device=None: ok)

    return set_keops


def _k():
    return gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5))


def test_n10000_float64_is_dense_with_plenty_of_memory(memory, keops):
    keops(True)
    memory(16 * GiB)  # K: 0.8 GB, with temporaries 2.4 GB <= 8 GB
    assert choose_backend("auto", _k(), (10_000, 10_000), torch.float64, "cpu") == "dense"


@pytest.mark.parametrize(("keops_ok", "expected"), [(True, "keops"), (False, "chunked")])
def test_small_memory_falls_back_to_keops_or_chunked(memory, keops, keops_ok, expected):
    keops(keops_ok)
    memory(2 * GiB)  # 2.4 GB needed > 1 GB allowed
    assert choose_backend("auto", _k(), (10_000, 10_000), torch.float64, "cpu") == expected


def test_the_latent_batch_counts_towards_the_dense_memory(memory, keops):
    keops(False)
    memory(16 * GiB)
    shape = (10, 10_000, 10_000)  # ten per-class kernel matrices: 24 GB with temporaries
    assert choose_backend("auto", _k(), shape, torch.float64, "cpu") == "chunked"
    assert choose_backend("auto", _k(), shape[1:], torch.float32, "cpu") == "dense"


def test_keops_is_skipped_for_many_columns_and_unsupported_kernels(memory, keops):
    keops(True)
    memory(0)
    shape = (50_000, 50_000)
    assert choose_backend("auto", _k(), shape, torch.float64, "cpu", columns=64) == "keops"
    assert choose_backend("auto", _k(), shape, torch.float64, "cpu", columns=65) == "chunked"
    periodic = gpytorch.kernels.PeriodicKernel()
    assert choose_backend("auto", periodic, shape, torch.float64, "cpu") == "chunked"
    assert choose_backend("keops", periodic, shape, torch.float64, "cpu") == "chunked"
    assert choose_backend("auto", _k(), shape, torch.float64, "cpu", allow_keops=False) == (
        "chunked"
    )


def test_explicit_backends_and_limit_override_the_probe(memory, keops):
    keops(True)
    memory(0)
    for b in ("dense", "chunked", "keops"):
        assert choose_backend(b, _k(), (10**6, 10**6), torch.float64, "cpu") == b
    limit = 3 * 100 * 100 * 8  # exactly the dense need of a 100 x 100 float64 K
    assert choose_backend("auto", _k(), (100, 100), torch.float64, "cpu",
                          dense_limit_bytes=limit) == "dense"  # fmt: skip
    assert choose_backend("auto", _k(), (100, 101), torch.float64, "cpu",
                          dense_limit_bytes=limit) == "keops"  # fmt: skip


def test_the_choice_is_logged_at_debug_level(memory, keops, caplog):
    keops(False)
    memory(16 * GiB)
    with caplog.at_level(logging.DEBUG, logger="bo_ncgp.linalg.backend"):
        choose_backend("auto", _k(), (10_000, 10_000), torch.float64, "cpu")
    (rec,) = caplog.records
    assert rec.levelno == logging.DEBUG and "'dense'" in rec.getMessage()
    assert "2400000000" in rec.getMessage()


def test_memory_probe_without_psutil_reads_proc_meminfo(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_psutil(name, *args, **kwargs):
        if name == "psutil":
            raise ImportError("no psutil")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psutil)
    assert backend_module._host_available() > 0
    assert available_memory_bytes("cpu") > 0


def test_kernel_operator_and_iterncgp_use_the_rule(memory, keops):
    keops(True)
    X = torch.rand(300, 2, dtype=torch.float64)
    memory(16 * GiB)
    assert KernelOperator(_k(), X).backend == "dense"
    # 288 MB of K at N = 6,000 (no K is formed here): dense when memory allows
    assert KernelOperator(_k(), torch.rand(6000, 2, dtype=torch.float64)).backend == "dense"
    k_shared = gpytorch.kernels.RBFKernel()
    assert LatentKernelOperator(k_shared, torch.rand(6000, 2), 10).op.backend == "dense"
    memory(1000)
    assert KernelOperator(_k(), X).backend == "keops"
    # a per-class kernel: IterNCGP's operator resolves through the same rule
    k = gpytorch.kernels.RBFKernel(batch_shape=torch.Size([3]))
    assert LatentKernelOperator(k, X, 3).op.backend == "keops"
    keops(False)
    assert LatentKernelOperator(k, X, 3).op.backend == "chunked"
    assert LatentKernelOperator(k, X.expand(2, 300, 2), 3).op.backend == "chunked"
    memory(16 * GiB)
    assert LatentKernelOperator(k, X.expand(2, 300, 2), 3).op.backend == "dense"
    assert LatentKernelOperator(k, X, 3).op.backend == "dense"


def test_the_resolved_backend_is_kept_when_memory_changes(memory, keops):
    keops(False)
    memory(16 * GiB)
    op = KernelOperator(_k(), torch.rand(50, 2))
    assert op.backend == "dense"
    memory(0)  # the cached K itself takes memory: the operator does not flip
    assert op.backend == "dense"


@pytest.mark.parametrize("C", [1, 3])
def test_auto_fit_equals_dense_fit(memory, C):
    memory(16 * GiB)
    g = torch.Generator().manual_seed(0)
    X = torch.rand(60, 2, generator=g, dtype=torch.float64)
    if C == 1:
        lik, y = Bernoulli(), (torch.sin(6 * X[:, 0]) > 0).double()
    else:
        lik, y = Softmax(C), torch.randint(0, C, (60,), generator=g)
    Xs = torch.rand(7, 2, generator=g, dtype=torch.float64)
    out = {}
    for b in ("dense", "auto"):
        k = gpytorch.kernels.RBFKernel().double()
        m = IterNCGP(k, lik, max_solver_iters_per_step=5, max_newton_steps=4, backend=b)
        m.fit(X, y)
        assert m._K.op.backend == "dense"
        out[b] = m.predict_f(Xs)
    torch.testing.assert_close(out["auto"][0], out["dense"][0], rtol=0, atol=0)
    torch.testing.assert_close(out["auto"][1], out["dense"][1], rtol=0, atol=0)


def test_cuda_memory_is_the_free_memory_plus_the_unused_cache(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * GiB, 80 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2 * GiB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: GiB)
    assert available_memory_bytes("cuda:0") == 4 * GiB


def test_a_cgroup_limit_caps_the_host_memory(monkeypatch):
    monkeypatch.setattr(backend_module, "_host_available", lambda: 64 * GiB)
    monkeypatch.setattr(backend_module, "_cgroup_available", lambda: 2 * GiB)
    assert available_memory_bytes("cpu") == 2 * GiB
    monkeypatch.setattr(backend_module, "_cgroup_available", lambda: None)
    assert available_memory_bytes("cpu") == 64 * GiB
