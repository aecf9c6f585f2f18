"""``--no-verify`` reaches the data loaders of every experiment command that reads shared data."""

from __future__ import annotations

import importlib

import pytest

from bo_ncgp.problems.hotspots import HotspotPool


class _Loaded(Exception):
    """Raised by the stand-in loader: the command got as far as loading the data."""


# command module, the module whose loader it calls, the loader, extra argv
COMMANDS = [
    ("experiments.wu2022.dust", None, "load_dust", []),
    ("experiments.wu2022.magnetometer", None, "load_magnetometer", []),
    ("experiments.chang2023.uci", None, "load_uci", []),
    ("experiments.chang2023.streaming_timing", None, "load_uci", []),
    ("experiments.chang2023.magnetometer", None, "load_magnetometer", []),
    ("experiments.chang2023.banana", None, "load_banana", []),
    ("experiments.chang2023.banana_streaming", "experiments.chang2023.banana", "load_banana", []),
    ("experiments.chang2023.split_mnist", None, "load_mnist", ["--force"]),
    ("experiments.tatzel.mnist", "bo_ncgp.data", "load_mnist", ["--inline", "--methods", "sod"]),
]


def _stand_in(calls):
    def load(*args, **kwargs):
        calls.append(kwargs.get("verify", True))
        raise _Loaded

    return load


@pytest.mark.parametrize("no_verify", [False, True])
@pytest.mark.parametrize("module, owner, loader, extra", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_experiment_commands_pass_no_verify_to_the_loader(
    module, owner, loader, extra, no_verify, tmp_path, monkeypatch
):
    mod = importlib.import_module(module)
    calls: list[bool] = []
    monkeypatch.setattr(importlib.import_module(owner or module), loader, _stand_in(calls))
    argv = ["--quick", "--out", str(tmp_path), *extra] + (["--no-verify"] if no_verify else [])
    with pytest.raises(_Loaded):
        mod.main(argv)
    assert calls == [not no_verify]


@pytest.mark.parametrize("no_verify", [False, True])
@pytest.mark.parametrize(
    "module",
    ["experiments.chang2023.hotspots_timing", "experiments.chang2023.hotspots_model_check"],
)
def test_hotspot_scripts_pass_no_verify(module, no_verify, tmp_path, monkeypatch):
    mod = importlib.import_module(module)
    calls: list[bool] = []

    def from_country(*args, verify=True, **kwargs):
        calls.append(verify)
        raise _Loaded

    monkeypatch.setattr(HotspotPool, "from_country", from_country)
    argv = ["--quick", "--out", str(tmp_path / "x.json")] + (["--no-verify"] if no_verify else [])
    with pytest.raises(_Loaded):
        mod.main(argv)
    assert calls and set(calls) == {not no_verify}
