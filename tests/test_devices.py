"""Device checks that run without a GPU.

A tensor the library creates without naming its device lands on the CPU whatever the device of
the inputs; on a GPU the first operation that mixes it with the inputs fails. Three checks find
such tensors on the CPU: a static scan of the numerical packages for factory calls without
``device=``, a recorder of the factory calls made while a model runs (the contract suite,
``tests/models/contract.py``, runs it for every model), and runs on the ``meta`` device (shape
only: it stops at the first step that needs values, but a device mix fails before that).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models._checks import check_device, module_device
from bo_ncgp.models.gam import SparseGAM
from bo_ncgp.models.gam.variational import FAMILIES
from tests._devices import FACTORIES, FactoryRecorder
from tests.conftest import device_unavailable, selected_device

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("models", "linalg", "likelihoods", "bo")
FACTORY_NAMES = frozenset(f.__name__ for f in FACTORIES)

#: factory calls without ``device=`` that are correct on every device, with the reason
ALLOWED = {
    ("likelihoods/gaussian.py", "torch.zeros(())"): "a parameter of the module, moved by .to()",
    ("likelihoods/base.py", "torch.as_tensor(y)"): (
        "targets given as a list or array; the models convert them on their own device first"
    ),
    ("models/baselines/offline.py", "torch.as_tensor(inducing_points)"): (
        "the inducing points given to the constructor define the model's device"
    ),
    ("models/gam/components.py", "torch.as_tensor(inducing_points)"): (
        "the inducing points given to the constructor define the model's device"
    ),
    ("models/gam/components.py", "torch.as_tensor(active_dims)"): "column indices (metadata)",
    (
        "models/iterncgp/policies.py",
        "torch.as_tensor(permutation, dtype=torch.long)",
    ): "the order of the unit-vector actions is kept on the CPU (.cpu() right after)",
}


def factory_calls_without_device() -> list[tuple[str, int, str]]:
    """``(path under bo_ncgp/, line, call)`` of each ``torch.<factory>(...)`` without
    ``device=`` (and without ``**kwargs``) in the numerical packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / "bo_ncgp" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "torch"
                    and node.func.attr in FACTORY_NAMES
                ):
                    continue
                keywords = {k.arg for k in node.keywords}
                if "device" not in keywords and None not in keywords:
                    rel = path.relative_to(ROOT / "bo_ncgp").as_posix()
                    found.append((rel, node.lineno, ast.unparse(node)))
    return found


def test_library_factories_name_their_device():
    found = factory_calls_without_device()
    bad = [f"bo_ncgp/{p}:{line}: {call}" for p, line, call in found if (p, call) not in ALLOWED]
    assert not bad, (
        "tensor factories without device= (add device=..., or allow with a reason):\n"
        + ("\n".join(bad))
    )
    stale = set(ALLOWED) - {(p, call) for p, _, call in found}
    assert not stale, f"allowed calls that no longer exist: {sorted(stale)}"


def test_library_converts_to_numpy_only_from_the_cpu():
    """``t.numpy()`` fails for a GPU tensor; the numerical packages call ``t.cpu().numpy()``."""
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / "bo_ncgp" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "numpy"
                    and not (
                        isinstance(node.func.value, ast.Call)
                        and isinstance(node.func.value.func, ast.Attribute)
                        and node.func.value.func.attr == "cpu"
                    )
                ):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- SparseGAM
def gam(posterior: str, whiten: bool, likelihood=None) -> SparseGAM:
    comps = [
        (ScaleKernel(RBFKernel()), [0], torch.linspace(0, 1, 5)),
        (ScaleKernel(RBFKernel()), [1], torch.linspace(0, 1, 4)),
    ]
    return SparseGAM(comps, likelihood or Bernoulli(), posterior, whiten=whiten)


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("posterior", sorted(FAMILIES))
def test_gam_initialisation_and_fit_create_tensors_on_the_inputs_device(posterior, whiten):
    model = gam(posterior, whiten)
    X = torch.rand(30, 2)
    y = (X[:, 0] > 0.5).to(X.dtype)
    with FactoryRecorder() as recorder:
        model.initialize_variational(X, y)
        model.variational.initialize_from_prior(model._kuu())
        model.fit(X, y, num_steps=2)
        model.predict_f(X[:3])
    assert not recorder.created, f"tensors created without a device:\n{recorder.report()}"


def run_on_meta(fn) -> None:
    """Run ``fn`` on meta tensors: it may stop where values are needed, not on a device mix."""
    try:
        fn()
    except RuntimeError as err:
        if "meta" in str(err) and ("expected device" in str(err) or "same device" in str(err)):
            raise AssertionError(f"device mix on the meta device: {err}") from err
        if "meta tensors" not in str(err):
            raise


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("posterior", sorted(FAMILIES))
def test_gam_variational_updates_stay_on_the_meta_device(posterior, whiten):
    q = FAMILIES[posterior]([3, 4], whiten=whiten, dtype=torch.float64, device="meta")
    chol = [torch.eye(m, device="meta") for m in (3, 4)]
    P, m = torch.zeros(7, 7, device="meta"), torch.zeros(7, device="meta")
    run_on_meta(lambda: q.initialize_from_prior(chol))
    run_on_meta(lambda: q.assign_whitened(m, P, chol))
    assert all(p.device.type == "meta" for p in q.parameters())


def test_a_gam_on_meta_rejects_cpu_inputs_naming_both_devices():
    model = gam("mean_field", True).to("meta")
    with pytest.raises(InputDataError, match=r"X is on \S+ but the model is on meta"):
        model.predict_f(torch.rand(3, 2))


def test_a_hipgp_builds_its_tensors_on_the_grid_device():
    from bo_ncgp.linalg.toeplitz import Grid
    from bo_ncgp.models.hipgp import HIPGP

    grid = Grid([0.0], [1.0], (16,))
    with FactoryRecorder() as recorder:
        model = HIPGP(ScaleKernel(RBFKernel()), grid)
    assert not recorder.created, f"tensors created without a device:\n{recorder.report()}"
    assert model.q.mean.device == grid.lower.device


# ---------------------------------------------------------------------------- checks
def test_check_device_names_both_devices_and_how_to_move():
    cpu = torch.zeros(2, device="cpu")
    check_device("M", "cpu", X=cpu, y=None, n=3)
    with pytest.raises(InputDataError, match=r"M: y is on meta but the model is on cpu; .*to"):
        check_device("M", torch.device("cpu"), X=cpu, y=torch.zeros(2, device="meta"))
    check_device("M", None, X=torch.zeros(2, device="meta"))  # no tensors yet: nothing to check


def test_module_device():
    assert module_device(torch.nn.Linear(2, 1).to("meta")) == torch.device("meta")
    assert module_device(torch.nn.Identity()) is None


def trained_gam():
    model = gam("mean_field", True, Gaussian(0.1))
    X = torch.rand(10, 2)
    return model.fit(X, torch.sin(3 * X[:, 0]), num_steps=1), X


def trained_dual():
    from bo_ncgp.models.dual import DualSVGP

    X = torch.rand(12, 2)
    model = DualSVGP(ScaleKernel(RBFKernel()), Bernoulli(), X[::3], num_hyper_steps=1)
    return model.update(X, (X[:, 0] > 0.5).to(X)), X


@pytest.mark.parametrize("build", [trained_gam, trained_dual], ids=["gam", "dual"])
def test_botorch_adapter_rejects_inputs_on_another_device(build):
    from bo_ncgp.bo.base import LatentGPModel

    model, X = build()
    with pytest.raises(InputDataError, match=r"X is on meta but the model is on \S+"):
        LatentGPModel(model).posterior(X[:2].to("meta"))


def test_botorch_adapter_rejects_observation_noise_on_another_device():
    from bo_ncgp.bo.base import LatentGPModel

    model, X = trained_gam()
    noise = torch.full((2, 1), 0.1, device="meta")
    with pytest.raises(InputDataError, match=r"observation_noise is on meta but the model is on"):
        LatentGPModel(model).posterior(X[:2], observation_noise=noise)


# ---------------------------------------------------------------------------- the lane
def test_the_device_fixture_is_the_selected_device(device):
    assert device == selected_device()
    assert torch.zeros(1).device.type == device.type  # tests without a device argument follow


def test_selected_device_reads_the_environment(monkeypatch):
    monkeypatch.setenv("BO_NCGP_TEST_DEVICE", "meta")
    assert selected_device() == torch.device("meta")
    monkeypatch.delenv("BO_NCGP_TEST_DEVICE")
    assert selected_device() == torch.device("cpu")
    monkeypatch.setenv("BO_NCGP_TEST_DEVICE", "no-such-device")
    with pytest.raises(pytest.UsageError, match="no-such-device"):
        selected_device()


def test_an_unavailable_device_is_reported():
    assert device_unavailable(torch.device("cpu")) is None
    assert device_unavailable(torch.device("meta")) is not None
    if not torch.cuda.is_available():
        assert "cuda" in device_unavailable(torch.device("cuda"))


def test_make_test_gpu_runs_the_device_lane():
    from tests.conftest import DEVICE_LANE

    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("test-gpu:") :].split("\n\n")[0]
    assert "BO_NCGP_TEST_DEVICE=" in recipe and "not cpu_only" in recipe
    assert {w.removeprefix("tests/") for w in recipe.split() if w.startswith("tests/")} == set(
        DEVICE_LANE
    )
