"""bo_ncgp's models as surrogates of Ax's Modular BoTorch (the optional extra ``ax``).

Importing this module registers, once:

* the adapters (:class:`~bo_ncgp.bo.DualSVGPModel`, :class:`~bo_ncgp.bo.IterNCGPModel`,
  :class:`~bo_ncgp.bo.HIPGPModel`, :class:`~bo_ncgp.bo.SparseGAMModel`) with Ax's ``Model``
  registry, and bo_ncgp's likelihood classes as a class registry of Ax's JSON storage, so an
  experiment whose generation strategy names them saves to JSON and loads;
* a fit of the adapters with Ax's ``fit_botorch_model`` dispatcher: the adapter's own
  training (:meth:`~bo_ncgp.bo.LatentGPModel.custom_fit`, through BoTorch's
  ``fit_gpytorch_mll``) in place of Ax's default ``ExactMarginalLogLikelihood``, which
  accepts only GPyTorch's exact GPs.

A surrogate is then an Ax ``ModelConfig``: ``ModelConfig(botorch_model_class=DualSVGPModel,
model_options={...})``; ``model_options`` go to the adapter's constructor through
``construct_inputs`` (e.g. ``num_inducing``, ``num_hyper_steps``), and a bo_ncgp likelihood
is chosen with Ax's ``likelihood_class``/``likelihood_options`` (e.g. ``Bernoulli`` for a
0/1 outcome). :func:`generation_strategy` builds Ax's own Sobol + Modular BoTorch strategy
around them.

Ax builds the surrogate from all data at every fit (its ``Surrogate`` constructs the model
from the data set and fits it) and re-standardises the outcomes over all data
(``StandardizeY``), so a DualSVGP's streaming state cannot carry over from one trial to the
next: each trial costs one batch fit on all data.

An outcome constraint modelled by a Bernoulli ``DualSVGPModel`` (a 0/1 feasibility metric,
``transform_outcomes=False`` so that the model sees the labels): Ax compares the model's
Gaussian posterior, the latent logit ``f``, with the constraint's bound ``c``, while its
checks of observed data compare the labels with ``c``. ``feasible >= c`` with a small
``c > 0`` (e.g. 0.01) is consistent for both: a label 1 is feasible and 0 is not, and the
acquisition weights a candidate by the posterior probability that ``sigmoid(f) >=
sigmoid(c)``, i.e. that success is (slightly) more likely than failure.

Example:
    >>> from ax.generators.torch.botorch_modular.utils import ModelConfig
    >>> from bo_ncgp.bo import DualSVGPModel
    >>> gs = generation_strategy(ModelConfig(botorch_model_class=DualSVGPModel), seed=0)
    >>> [node.name for node in gs._nodes]
    ['CenterOfSearchSpace', 'Sobol', 'MBM']
"""

from __future__ import annotations

from typing import Any

from ax.adapter.registry import MBM_X_trans
from ax.adapter.transforms.derelativize import Derelativize
from ax.api.utils.generation_strategy_dispatch import choose_generation_strategy
from ax.api.utils.structs import GenerationStrategyDispatchStruct
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig, fit_botorch_model
from ax.storage.botorch_modular_registry import (
    CLASS_TO_REGISTRY,
    CLASS_TO_REVERSE_REGISTRY,
    register_model,
)
from ax.storage.json_store.encoders import botorch_modular_to_dict
from ax.storage.json_store.registry import CORE_CLASS_ENCODER_REGISTRY
from gpytorch.mlls import ExactMarginalLogLikelihood, MarginalLogLikelihood

import bo_ncgp.likelihoods as likelihoods
from bo_ncgp.bo.base import LatentGPMarginalLogLikelihood, LatentGPModel
from bo_ncgp.bo.models import DualSVGPModel, HIPGPModel, IterNCGPModel, SparseGAMModel
from bo_ncgp.exceptions import UnsupportedError

__all__ = ["ADAPTERS", "generation_strategy", "register"]

#: the adapters registered with Ax's ``Model`` registry
ADAPTERS: tuple[type[LatentGPModel], ...] = (
    DualSVGPModel,
    IterNCGPModel,
    HIPGPModel,
    SparseGAMModel,
)


def _fit_adapter(
    model: LatentGPModel,
    mll_class: type[MarginalLogLikelihood] | None = None,
    mll_options: dict[str, Any] | None = None,
) -> None:
    """Ax's ``fit_botorch_model`` for the adapters: ``fit_gpytorch_mll`` on a
    :class:`~bo_ncgp.bo.LatentGPMarginalLogLikelihood` (the model's own training)."""
    from botorch.fit import fit_gpytorch_mll

    if mll_class not in (None, ExactMarginalLogLikelihood, LatentGPMarginalLogLikelihood):
        raise UnsupportedError(
            f"{type(model).__name__} is trained by its own training; ModelConfig.mll_class "
            f"must be left unset (or LatentGPMarginalLogLikelihood), got {mll_class.__name__}"
        )
    if mll_options:
        raise UnsupportedError(
            f"{type(model).__name__}: ModelConfig.mll_options are not used by its training "
            f"(got {sorted(mll_options)}); pass the training settings as model_options"
        )
    fit_gpytorch_mll(LatentGPMarginalLogLikelihood(model.likelihood, model))


def register() -> None:
    """Register the adapters, their fit and bo_ncgp's likelihood classes with Ax (idempotent;
    importing :mod:`bo_ncgp.ax` calls it).

    Example:
        >>> from ax.storage.botorch_modular_registry import REVERSE_MODEL_REGISTRY
        >>> register()
        >>> REVERSE_MODEL_REGISTRY["DualSVGPModel"].__name__
        'DualSVGPModel'
    """
    for adapter in ADAPTERS:
        register_model(adapter)
    fit_botorch_model.register(LatentGPModel)(_fit_adapter)
    base = likelihoods.Likelihood
    classes = {
        getattr(likelihoods, name): name
        for name in likelihoods.__all__
        if isinstance(getattr(likelihoods, name), type)
        and issubclass(getattr(likelihoods, name), base)
    }
    CLASS_TO_REGISTRY.setdefault(base, {}).update(classes)
    CLASS_TO_REVERSE_REGISTRY.setdefault(base, {}).update({v: k for k, v in classes.items()})
    CORE_CLASS_ENCODER_REGISTRY.setdefault(base, botorch_modular_to_dict)


def generation_strategy(
    model_config: ModelConfig,
    *,
    metric_model_configs: dict[str, ModelConfig] | None = None,
    transform_outcomes: bool = True,
    initialization_budget: int | None = None,
    seed: int | None = None,
    **options: Any,
) -> GenerationStrategy:
    """Ax's default generation strategy (center point, Sobol initialisation, then Modular
    BoTorch) with the surrogate ``model_config``: what ``Client.configure_generation_strategy``
    builds, with a custom model.

    Args:
        model_config: an Ax ``ModelConfig`` of every metric, e.g.
            ``ModelConfig(botorch_model_class=DualSVGPModel, model_options={"num_inducing":
            32})``.
        metric_model_configs: ``ModelConfig`` of single metrics (Ax's
            ``metric_to_model_configs``), e.g. a Bernoulli ``DualSVGPModel`` of a 0/1
            feasibility metric.
        transform_outcomes: keep Ax's outcome transforms (winsorising, ``BilogY`` of
            constraint metrics, ``StandardizeY``). ``False`` drops them, so that a model sees
            the observations themselves: needed for a classifier of 0/1 labels or a count
            model; a Gaussian model then standardises its outcomes itself
            (``outcome_transform_classes=[Standardize]`` in its ``ModelConfig``).
        initialization_budget: Sobol trials before the model (``None``: Ax's choice).
        seed: seed of the Sobol initialisation.
        **options: further fields of Ax's ``GenerationStrategyDispatchStruct``
            (``initialize_with_center``, ...).

    Example:
        >>> from ax.generators.torch.botorch_modular.utils import ModelConfig
        >>> from bo_ncgp.bo import DualSVGPModel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> gs = generation_strategy(
        ...     ModelConfig(botorch_model_class=DualSVGPModel),
        ...     metric_model_configs={"feasible": ModelConfig(botorch_model_class=DualSVGPModel,
        ...                                                   likelihood_class=Bernoulli)},
        ...     transform_outcomes=False, initialization_budget=4, seed=1)
        >>> gs.name
        'Center+Sobol+MBM:custom_config'
    """
    struct = GenerationStrategyDispatchStruct(
        method="custom",
        initialization_budget=initialization_budget,
        initialization_random_seed=seed,
        **options,
    )
    gs = choose_generation_strategy(struct, model_config=model_config)
    kwargs = gs.nodes_by_name["MBM"].generator_specs[0].generator_kwargs
    if metric_model_configs:
        kwargs["surrogate_spec"] = SurrogateSpec(
            model_configs=[model_config],
            metric_to_model_configs={k: [v] for k, v in metric_model_configs.items()},
        )
    if not transform_outcomes:
        kwargs["transforms"] = [*MBM_X_trans, Derelativize]
    return gs


register()
