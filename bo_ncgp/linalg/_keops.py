"""Translation of GPyTorch kernels into KeOps LazyTensor formulas.

Supported (the kernels KeOps evaluates symbolically): ``RBFKernel``, ``MaternKernel`` with
``nu`` in {1/2, 3/2, 5/2} (also GPyTorch's own ``gpytorch.kernels.keops`` variants), ARD or
shared lengthscales, ``ScaleKernel`` around a supported kernel, and ``AdditiveKernel`` of
supported kernels; ``active_dims`` are honoured. Batched kernels (``batch_shape``) work.

Formulas: each input point is multiplied once, in torch, by ``c / lengthscale`` (``c`` =
``sqrt(1/2)`` for RBF, ``sqrt(2 nu)`` for Matern-1/2 and 3/2, ``1`` for Matern-5/2), so that
with ``s = |z - z'|`` the per-pair KeOps formulas are ``exp(-s^2)``, ``exp(-s)`` and
``(1 + s) exp(-s)``: neither the lengthscale nor ``sqrt(2 nu)`` is applied per pair (the
per-pair constant left is the square root's offset). Matern-5/2 is
``(sqrt(5) r + (1 + 5 r^2 / 3)) exp(-sqrt(5) r)`` of ``r = |x - x'| / lengthscale`` with
``r^2`` summed from the squared differences, the form of GPyTorch's KeOps Matern: KeOps
compiles it to faster code than the same kernel without the per-pair constants
(``(s + (1 + s^2 / 3)) exp(-s)`` of ``s = sqrt(5) r``, 1.2x slower at N = 10,000).

Gradients: inputs are rescaled in torch before entering KeOps, and the
output scale multiplies the KeOps result in torch, so autograd reaches every hyperparameter
and the inputs through pykeops' own backward formulas.

Availability on a GPU: on CUDA, pykeops loads the CUDA driver and its run-time compiler into
the process, and a broken combination of pykeops, CUDA and driver can end the process with a
segmentation fault that no ``except`` catches (seen with pykeops 2.3, torch 2.11 + CUDA 13.0 and
driver 580 on an H200: pykeops' own ``test_torch_bindings`` died with signal 11). So before the
first KeOps product on a device type of :data:`PROBED_DEVICE_TYPES`,
:func:`keops_available` runs one small KeOps reduction on that device in a child process and
compares it with torch; a child that crashes, fails or disagrees disables KeOps on that device
type for the process, with one warning, and every product falls back to the chunked torch
backend. A probe that passed is remembered in pykeops' build folder (keyed by the pykeops and
torch versions and the device's name), so it runs once per environment. On the CPU, KeOps
compiles with the system C++ compiler, whose failures raise ordinary exceptions (caught by
:class:`~bo_ncgp.linalg.KernelOperator`), and no probe runs. ``BO_NCGP_KEOPS_PROBE=0`` skips the
probe.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import gpytorch
import torch
from torch import Tensor

from bo_ncgp._extras import require
from bo_ncgp.exceptions import MissingExtraError

__all__ = ["PROBED_DEVICE_TYPES", "keops_available", "keops_matmul", "keops_supports"]

_BROKEN = False
#: device types on which KeOps failed its probe in this process -> why
_BROKEN_ON: dict[str, str] = {}
#: device types that passed the probe in this process
_PASSED_ON: set[str] = set()
#: device types whose first KeOps use is probed in a child process (module docstring)
PROBED_DEVICE_TYPES: tuple[str, ...] = ("cuda",)
#: seconds the probe may take (it compiles one formula on a cold cache)
PROBE_TIMEOUT_S = 600.0
#: the probe: one Gaussian-kernel sum reduction by KeOps on ``argv[1]``, checked against torch
PROBE_SCRIPT = """
import os, sys
os.environ["PYKEOPS_VERBOSE"] = os.environ["KEOPS_VERBOSE"] = "0"
import torch
import pykeops
from pykeops.torch import LazyTensor
pykeops.set_verbose(False)
dev = torch.device(sys.argv[1])
g = torch.Generator().manual_seed(0)
x = torch.rand(64, 3, generator=g).to(dev)
v = torch.rand(64, 2, generator=g).to(dev)
out = (-LazyTensor(x[:, None, :]).sqdist(LazyTensor(x[None, :, :]))).exp() @ v
ref = torch.exp(-torch.cdist(x, x) ** 2) @ v
err = float((out - ref).abs().max())
if not err < 1e-3:
    sys.exit(f"KeOps and torch disagree by {err:.3g}")
"""


def _kernel_classes() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """The RBF and Matern kernel classes: GPyTorch's, and its KeOps variants (which share the
    hyperparameters but not the class hierarchy) when ``gpytorch.kernels.keops`` has been
    imported -- a kernel of that module exists only then, and importing it here would import
    pykeops on every use of the library."""
    rbf: tuple[type, ...] = (gpytorch.kernels.RBFKernel,)
    matern: tuple[type, ...] = (gpytorch.kernels.MaternKernel,)
    gk = sys.modules.get("gpytorch.kernels.keops")
    if gk is not None:
        rbf, matern = (*rbf, gk.RBFKernel), (*matern, gk.MaternKernel)
    return rbf, matern


@functools.lru_cache(maxsize=1)
def _import_keops():
    """pykeops' ``LazyTensor``, imported on the first use of the KeOps backend. pykeops prints
    its CUDA status when it is imported (a banner on every CPU-only machine) unless its
    verbosity variables ``PYKEOPS_VERBOSE`` and ``KEOPS_VERBOSE`` are ``0``: that is their
    default here (set ``PYKEOPS_VERBOSE=1`` to see pykeops' messages); compilation errors
    still raise."""
    os.environ.setdefault("PYKEOPS_VERBOSE", "0")
    os.environ.setdefault("KEOPS_VERBOSE", os.environ["PYKEOPS_VERBOSE"])
    pykeops = require("keops", "pykeops", needed_by="the KeOps kernel backend")
    pykeops.set_verbose(os.environ["PYKEOPS_VERBOSE"] != "0")
    from pykeops.torch import LazyTensor

    return LazyTensor


def missing_extra() -> str | None:
    """The message naming the ``keops`` extra when pykeops is not installed, else ``None``."""
    try:
        _import_keops()
    except MissingExtraError as err:
        return str(err)
    except Exception:  # installed but broken: keops_available() says so
        return None
    return None


def keops_available(device: torch.device | str | None = None) -> bool:
    """True when pykeops imports, no earlier KeOps call in this process has failed and, given
    ``device``, KeOps runs there: the first ask for a device type of
    :data:`PROBED_DEVICE_TYPES` runs the probe of the module docstring (a child process, once
    per environment when it passes).

    Example:
        >>> isinstance(keops_available("cpu"), bool)  # no probe on the CPU
        True
    """
    if _BROKEN:
        return False
    try:
        _import_keops()
    except Exception:
        return False
    if device is None:
        return True
    device = torch.device(device)
    kind = device.type
    if kind not in PROBED_DEVICE_TYPES or kind in _PASSED_ON:
        return True
    if kind in _BROKEN_ON:
        return False
    if os.environ.get("BO_NCGP_KEOPS_PROBE", "1").strip() == "0":
        _PASSED_ON.add(kind)
        return True
    failure = _probe(device)
    if failure is None:
        _PASSED_ON.add(kind)
        return True
    _BROKEN_ON[kind] = failure
    warnings.warn(
        f"KeOps does not run on {kind}: {failure}; the chunked torch backend is used there for "
        "the rest of this process (BO_NCGP_KEOPS_PROBE=0 skips this check)",
        RuntimeWarning,
        stacklevel=2,
    )
    return False


def _probe_marker(device: torch.device) -> Path:
    """The file that records a passed probe: in pykeops' build folder, keyed by the versions of
    pykeops and torch, the Python executable and the device's name."""
    import pykeops

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    key = "|".join((pykeops.__version__, torch.__version__, sys.executable, name))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(pykeops.get_build_folder()) / f"bo_ncgp_probe_{device.type}_{digest}.ok"


def _probe(device: torch.device) -> str | None:
    """Run :data:`PROBE_SCRIPT` on ``device`` in a child process: ``None`` when it passed, else
    why not (the exit signal or status and the last line the child wrote)."""
    if device.type == "cuda" and not torch.cuda.is_available():
        return "torch finds no CUDA device"
    try:
        marker = _probe_marker(device)
    except Exception:  # no device name, no build folder: probe without remembering
        marker = None
    if marker is not None and marker.exists():
        return None
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE_SCRIPT, str(device)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"a small KeOps reduction did not finish in {PROBE_TIMEOUT_S:.0f} s"
    except OSError as err:
        return f"the probe could not start ({err})"
    if done.returncode == 0:
        if marker is not None:
            try:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.write_text(f"{device}\n")
            except OSError:
                pass  # unwritable build folder: the probe runs again in the next process
        return None
    if done.returncode < 0:
        try:
            status = f"killed by signal {signal.Signals(-done.returncode).name}"
        except ValueError:
            status = f"killed by signal {-done.returncode}"
    else:
        status = f"exit status {done.returncode}"
    lines = [ln.strip() for ln in (done.stderr or "").splitlines() if ln.strip()]
    last = f" ({lines[-1][:300]})" if lines else ""
    return f"a small KeOps reduction in a child process ended with {status}{last}"


def mark_keops_broken(err: BaseException) -> None:
    """Disable KeOps for the rest of the process after a failure, with a single warning."""
    global _BROKEN
    if not _BROKEN:
        warnings.warn(
            f"KeOps failed ({type(err).__name__}: {err}); falling back to the chunked torch "
            "backend for the rest of this process",
            RuntimeWarning,
            stacklevel=3,
        )
    _BROKEN = True


def keops_supports(kernel: gpytorch.kernels.Kernel) -> bool:
    """Whether :func:`keops_matmul` can evaluate ``kernel`` symbolically."""
    if isinstance(kernel, gpytorch.kernels.ScaleKernel):
        return keops_supports(kernel.base_kernel)
    if isinstance(kernel, gpytorch.kernels.AdditiveKernel):
        return all(keops_supports(k) for k in kernel.kernels)
    rbf, matern = _kernel_classes()
    if isinstance(kernel, matern):
        return float(kernel.nu) in (0.5, 1.5, 2.5)
    return isinstance(kernel, rbf)


def _select(kernel: gpytorch.kernels.Kernel, X: Tensor) -> Tensor:
    ad = getattr(kernel, "active_dims", None)
    if ad is None:
        return X
    return X.index_select(-1, ad.to(X.device))


def _formula(kernel: gpytorch.kernels.Kernel, X1: Tensor, X2: Tensor, LazyTensor):
    """Returns ``(lazy_K, scale)`` pairs: the kernel is ``sum(scale * lazy_K)``."""
    X1 = _select(kernel, X1)
    X2 = _select(kernel, X2)
    if isinstance(kernel, gpytorch.kernels.ScaleKernel):
        terms = _formula(kernel.base_kernel, X1, X2, LazyTensor)
        s = kernel.outputscale
        return [(K, s if sc is None else s * sc) for K, sc in terms]
    if isinstance(kernel, gpytorch.kernels.AdditiveKernel):
        return [t for k in kernel.kernels for t in _formula(k, X1, X2, LazyTensor)]
    # One per-point rescaling in torch folds the lengthscale and the kernel's constant into
    # the inputs: z = x * c / ell, so the per-pair formula scales neither the distance nor
    # the exponent (its only constants: the offset below and Matern-5/2's 1/3).
    rbf, _ = _kernel_classes()
    nu = None if isinstance(kernel, rbf) else float(kernel.nu)
    if nu is None:
        c = math.sqrt(0.5)  # exp(-|x - x'|^2 / (2 ell^2)) = exp(-|z - z'|^2)
    elif nu == 2.5:
        c = 1.0  # r = |x - x'| / ell; the constants are applied per pair (module docstring)
    else:
        c = math.sqrt(2.0 * nu)  # s = sqrt(2 nu) |x - x'| / ell = |z - z'|
    w = c / kernel.lengthscale  # (*batch, 1, d or 1)
    Z1 = X1 * w
    Z2 = Z1 if X2 is X1 else X2 * w
    z1, z2 = LazyTensor(Z1.unsqueeze(-2)), LazyTensor(Z2.unsqueeze(-3))
    # tiny offset keeps the gradient of sqrt finite at s = 0 (where its true limit is 0)
    tiny = torch.finfo(X1.dtype).tiny * 1e4
    if nu == 2.5:
        r2 = ((z1 - z2) ** 2).sum(-1)
        r = (r2 + tiny).sqrt()
        a = math.sqrt(5.0)
        return [(((a * r) + (1 + (5.0 / 3.0) * r2)) * (-a * r).exp(), None)]
    d2 = z1.sqdist(z2)  # s^2
    if nu is None:
        return [((-d2).exp(), None)]
    s = (d2 + tiny).sqrt()
    if nu == 0.5:
        K = (-s).exp()  # exp(-s)
    else:
        K = (1 + s) * (-s).exp()  # (1 + s) exp(-s)
    return [(K, None)]


def keops_matmul(kernel: gpytorch.kernels.Kernel, X1: Tensor, X2: Tensor, V: Tensor) -> Tensor:
    """``K(X1, X2) @ V`` evaluated by KeOps, never forming ``K``.

    Args:
        kernel: a kernel for which :func:`keops_supports` is true.
        X1: ``(..., n1, d)``; X2: ``(..., n2, d)``; V: ``(..., n2, k)``.
    """
    LazyTensor = _import_keops()
    out = None
    for K, scale in _formula(kernel, X1, X2, LazyTensor):
        term = K @ V.contiguous()
        if scale is not None:
            term = scale.reshape(*scale.shape, 1, 1) * term
        out = term if out is None else out + term
    return out
