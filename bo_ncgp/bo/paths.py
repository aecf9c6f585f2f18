"""Posterior sample paths of a :class:`~bo_ncgp.bo.DualSVGPModel` for BoTorch's pathwise
sampling (Matheron's rule, Wilson et al. 2020, Eq. 13 for sparse GPs).

The dual SVGP's posterior (Chang et al. 2023, Eq. 10) is a sparse GP: with ``u = f(Z)``
distributed as ``q(u) = N(alpha_u + c, K_zz A^{-1} K_zz)`` (``A = K_zz + B_u``) and
``f(.) | u`` the prior's conditional, a posterior function draw is

    f(.) = c + g(.) + k(., Z) K_zz^{-1} (u - c - g(Z)),    g ~ GP(0, k),  u ~ q(u),

where ``c`` is the model's constant prior mean. ``g`` is drawn with BoTorch's random Fourier
features (``gen_kernel_features``); ``q(u)`` is the model's own joint posterior at ``Z``.
Registering these paths with BoTorch's ``draw_matheron_paths`` dispatcher makes
``get_optimal_samples`` (hence ``qJointEntropySearch``), ``PathwiseThompsonSampling`` and
``get_matheron_path_model`` run with the adapter. A conditioned (fantasy) model has no paths
here: draw them from the model before conditioning.

Example:
    >>> import torch
    >>> from botorch.sampling.pathwise import draw_matheron_paths
    >>> from bo_ncgp.bo import DualSVGPModel
    >>> X = torch.rand(10, 2, dtype=torch.float64)
    >>> model = DualSVGPModel(X, X.sum(-1, keepdim=True))
    >>> paths = draw_matheron_paths(model, sample_shape=torch.Size([4]))
    >>> paths(torch.rand(7, 2, dtype=torch.float64)).shape  # 4 draws at 7 points
    torch.Size([4, 7])
"""

from __future__ import annotations

from typing import Any

import torch
from botorch.sampling.pathwise import (
    GeneralizedLinearPath,
    KernelEvaluationMap,
    MatheronPath,
    gaussian_update,
    gen_kernel_features,
)
from botorch.sampling.pathwise.posterior_samplers import DrawMatheronPaths
from botorch.sampling.pathwise.prior_samplers import DrawKernelFeaturePaths
from botorch.sampling.pathwise.utils import get_input_transform, get_output_transform
from gpytorch.means import ConstantMean
from torch import Size

from bo_ncgp.bo.base import LatentGPModel
from bo_ncgp.exceptions import UnsupportedError
from bo_ncgp.linalg import stable_cholesky
from bo_ncgp.models.dual import ConditionedDualSVGP, DualSVGP, fixed_hyperparameters

__all__ = ["NUM_FEATURES", "dual_matheron_paths", "dual_prior_paths"]

#: random Fourier features of a prior path (BoTorch's default)
NUM_FEATURES = 1024


def _dual(model: LatentGPModel) -> DualSVGP:
    dual = model.model
    if isinstance(dual, ConditionedDualSVGP):
        raise UnsupportedError(
            "sample paths of a conditioned DualSVGPModel are not supported; draw them from "
            "the model before conditioning"
        )
    if not isinstance(dual, DualSVGP):
        raise UnsupportedError(
            f"sample paths are implemented for DualSVGPModel; {type(model).__name__} wraps a "
            f"{type(dual).__name__}"
        )
    if int(dual.num_latents) != 1:
        raise UnsupportedError(
            f"sample paths need a single latent function, the model has {dual.num_latents}"
        )
    return dual


def dual_prior_paths(
    model: LatentGPModel, sample_shape: Size, num_features: int = NUM_FEATURES, **_: Any
) -> GeneralizedLinearPath:
    """Draws ``c + g`` from the model's prior (constant mean ``c``, ``g ~ GP(0, k)``) by
    random Fourier features of its kernel, on inputs in the original space.

    Args:
        model: the adapter.
        sample_shape: shape of the draws.
        num_features: random features per draw.

    Example:
        >>> from bo_ncgp.bo import DualSVGPModel
        >>> X = torch.rand(8, 1, dtype=torch.float64)
        >>> model = DualSVGPModel(X, X.sin())
        >>> dual_prior_paths(model, Size([3]))(X).shape
        torch.Size([3, 8])
    """
    dual = _dual(model)
    kernel = dual.kernel
    features = gen_kernel_features(kernel, num_inputs=dual.Z.shape[-1], num_outputs=num_features)
    weight = torch.randn(
        *sample_shape, features.num_outputs, dtype=dual.Z.dtype, device=dual.Z.device
    )
    mean = ConstantMean().to(dual.Z)
    with torch.no_grad():
        mean.constant.fill_(dual.mean_constant)
    mean.constant.requires_grad_(False)
    return GeneralizedLinearPath(
        feature_map=features,
        weight=weight,
        bias_module=mean,
        input_transform=get_input_transform(model),
    )


def dual_matheron_paths(
    model: LatentGPModel,
    *,
    sample_shape: Size,
    prior_sampler: Any = dual_prior_paths,
    update_strategy: Any = gaussian_update,
) -> MatheronPath:
    """Posterior draws of the model's latent function by Matheron's rule (module docstring),
    in the model's outcome space (its outcome transform undone).

    Args:
        model: the adapter (not a conditioned one).
        sample_shape: shape of the draws.
        prior_sampler: draws prior paths, called as ``prior_sampler(model=...,
            sample_shape=...)`` (default: :func:`dual_prior_paths`).
        update_strategy: only BoTorch's ``gaussian_update`` (the update is the model's
            own posterior at its inducing inputs).

    Example:
        >>> from bo_ncgp.bo import DualSVGPModel
        >>> X = torch.rand(12, 2, dtype=torch.float64)
        >>> model = DualSVGPModel(X, X.prod(-1, keepdim=True))
        >>> paths = dual_matheron_paths(model, sample_shape=Size([2, 3]))
        >>> paths(X[:5]).shape
        torch.Size([2, 3, 5])
    """
    if update_strategy is not gaussian_update:
        raise UnsupportedError(
            "DualSVGPModel paths take the update from the model's posterior at its inducing "
            f"inputs; update_strategy={update_strategy!r} is not supported"
        )
    dual = _dual(model)
    Z = dual.Z.detach()
    prior = prior_sampler(model=model, sample_shape=sample_shape)
    with torch.no_grad(), fixed_hyperparameters():
        prior_Z = prior.forward(Z)  # (*sample_shape, m); ``forward`` skips the input transform
        mean, cov = dual.predict_f(Z, full_cov=True)
        L_q = stable_cholesky(cov, name="q(u) covariance")
        eps = torch.randn(*sample_shape, Z.shape[0], 1, dtype=Z.dtype, device=Z.device)
        u = mean + (L_q @ eps).squeeze(-1)  # u ~ q(u), (*sample_shape, m)
        L_K = stable_cholesky(dual.kernel(Z).to_dense(), name="K_zz")
        weight = torch.cholesky_solve((u - prior_Z).unsqueeze(-1), L_K).squeeze(-1)
    update = GeneralizedLinearPath(
        feature_map=KernelEvaluationMap(
            kernel=dual.kernel, points=Z, input_transform=get_input_transform(model)
        ),
        weight=weight,
    )
    return MatheronPath(
        prior_paths=prior, update_paths=update, output_transform=get_output_transform(model)
    )


# every adapter dispatches here, so that the others get a clear UnsupportedError
DrawKernelFeaturePaths.register(LatentGPModel)(dual_prior_paths)
DrawMatheronPaths.register(LatentGPModel)(dual_matheron_paths)
