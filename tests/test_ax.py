"""bo_ncgp's models as Ax surrogates: an Ax optimisation runs, saves to JSON and loads."""

import logging
import math

import pytest
import torch

pytest.importorskip("ax", reason="the optional extra 'ax' is not installed")

from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.generators.torch.botorch_modular.utils import ModelConfig
from botorch.models.transforms import Standardize

from bo_ncgp.ax import generation_strategy
from bo_ncgp.bo import DualSVGPModel
from bo_ncgp.likelihoods import Bernoulli


@pytest.fixture(autouse=True)
def _quiet_ax():
    logging.disable(logging.INFO)  # Ax logs every trial
    yield
    logging.disable(logging.NOTSET)


def branin(p):
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def client_for(gs, constraints=()):
    client = Client()
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x1", parameter_type="float", bounds=(-5.0, 10.0)),
            RangeParameterConfig(name="x2", parameter_type="float", bounds=(0.0, 15.0)),
        ]
    )
    client.configure_optimization(objective="-branin", outcome_constraints=list(constraints))
    client.set_generation_strategy(gs)
    return client


def run(client, trials, evaluate):
    for _ in range(trials):
        ((index, params),) = client.get_next_trials(max_trials=1).items()
        client.complete_trial(index, raw_data=evaluate(params))


def surrogate_models(client):
    """The BoTorch model(s) of the last Modular BoTorch fit."""
    spec = client._generation_strategy.nodes_by_name["MBM"].generator_specs[0]
    model = spec.fitted_adapter.generator.surrogate.model
    return list(getattr(model, "models", [model]))


def test_an_ax_optimisation_with_a_dualsvgp_surrogate_saves_and_loads(tmp_path):
    torch.manual_seed(0)
    config = ModelConfig(
        botorch_model_class=DualSVGPModel, model_options={"num_inducing": 8, "num_hyper_steps": 20}
    )
    client = client_for(generation_strategy(config, initialization_budget=4, seed=0))
    run(client, 6, lambda p: {"branin": branin(p)})
    (model,) = surrogate_models(client)
    assert isinstance(model, DualSVGPModel)
    assert model.model.num_data == 5 and model.model.max_inducing == 8  # options arrived
    assert model.model.num_hyper_steps == 20
    path = str(tmp_path / "experiment.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    assert len(loaded._experiment.trials) == 6
    run(loaded, 1, lambda p: {"branin": branin(p)})  # the loaded strategy still generates
    (model,) = surrogate_models(loaded)
    assert isinstance(model, DualSVGPModel) and model.model.num_data == 6


def test_an_outcome_constraint_modelled_by_a_bernoulli_dualsvgp(tmp_path):
    torch.manual_seed(0)
    reward = ModelConfig(
        botorch_model_class=DualSVGPModel,
        outcome_transform_classes=[Standardize],
        model_options={"num_hyper_steps": 20},
    )
    classifier = ModelConfig(
        botorch_model_class=DualSVGPModel,
        likelihood_class=Bernoulli,
        model_options={"num_hyper_steps": 20},
    )
    gs = generation_strategy(
        reward,
        metric_model_configs={"feasible": classifier},
        transform_outcomes=False,  # the classifier sees the 0/1 labels
        initialization_budget=4,
        seed=0,
    )
    client = client_for(gs, constraints=["feasible >= 0.01"])
    run(client, 5, lambda p: {"branin": branin(p), "feasible": float(p["x2"] >= 5.0)})
    models = surrogate_models(client)
    likelihoods = sorted(type(m.model.likelihood).__name__ for m in models)
    assert likelihoods == ["Bernoulli", "Gaussian"]
    labels = next(m for m in models if isinstance(m.model.likelihood, Bernoulli)).train_data[1]
    assert set(labels.tolist()) <= {0.0, 1.0}  # not standardised by Ax
    path = str(tmp_path / "experiment.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    spec = loaded._generation_strategy.nodes_by_name["MBM"].generator_specs[0]
    configs = spec.generator_kwargs["surrogate_spec"].metric_to_model_configs
    assert configs["feasible"][0].likelihood_class is Bernoulli


@pytest.mark.slow
def test_the_branin_benchmark_quick_tabulates_both_surrogates(tmp_path, capsys):
    from benchmarks.ax_branin import main

    assert main(["--quick", "--out", str(tmp_path / "ax.json")]) == 0
    out = capsys.readouterr().out
    assert "| ax-default |" in out and "| dual-svgp |" in out and "paired difference" in out
    merged = tmp_path / "merged.json"
    assert main(["--merge", str(tmp_path / "ax.json"), "--out", str(merged)]) == 0
    assert "2 seeds" in capsys.readouterr().out
