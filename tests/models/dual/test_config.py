"""Tests of bo_ncgp.models.dual.config: the settings of the dual SVGP, checked once."""

from __future__ import annotations

import inspect
from dataclasses import FrozenInstanceError, fields

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Bernoulli
from bo_ncgp.models.dual import DualSVGP, DualSVGPConfig


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"memory_size": -1}, "memory_size"),
        ({"rho": 1.5}, "rho"),
        ({"num_inner_steps": 1.5}, "num_inner_steps"),
        ({"num_hyper_steps": -2}, "num_hyper_steps"),
        ({"num_rounds": 0}, "num_rounds"),
        ({"inducing_update": "grid"}, "inducing_update"),
        ({"memory_selection": "all"}, "memory_selection"),
        ({"memory_cap": -1}, "memory_cap"),
        ({"hyper_objective": "ml"}, "hyper_objective"),
        ({"lr": 0.0}, "lr"),
        ({"max_inducing": 0}, "max_inducing"),
        ({"mean_constant": float("nan")}, "mean_constant"),
    ],
)
def test_bad_settings_raise_input_data_errors(kw, match):
    with pytest.raises(InputDataError, match=match):
        DualSVGPConfig(**kw)
    with pytest.raises(InputDataError, match=match):
        DualSVGP(gpytorch.kernels.RBFKernel(), Bernoulli(), torch.rand(3, 1), **kw)


def test_model_builds_reads_and_replaces_its_config():
    Z = torch.rand(4, 1)
    model = DualSVGP(gpytorch.kernels.RBFKernel(), Bernoulli(), Z, rho=0.5)
    assert model.config == DualSVGPConfig(rho=0.5, num_latents=1, max_inducing=4)
    model.lr = 0.1
    assert model.config.lr == 0.1 and model.lr == 0.1
    with pytest.raises(InputDataError, match="rho"):
        model.rho = 0.0
    with pytest.raises(FrozenInstanceError):
        model.config.rho = 0.3  # type: ignore[misc]
    other = DualSVGP(gpytorch.kernels.RBFKernel(), Bernoulli(), Z, config=model.config, lr=0.2)
    assert other.rho == 0.5 and other.lr == 0.2
    assert model.copy().config == model.config
    with pytest.raises(TypeError):
        DualSVGP(gpytorch.kernels.RBFKernel(), Bernoulli(), Z, not_a_setting=1)


def test_constructor_signature_lists_the_settings_with_their_defaults():
    params = inspect.signature(DualSVGP).parameters
    for f in fields(DualSVGPConfig):
        assert params[f.name].default == f.default
