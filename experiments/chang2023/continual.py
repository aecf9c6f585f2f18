"""Model factories and metrics of the continual and streaming experiments (Chang et al. 2023,
Secs. 4.2-4.4).

* :func:`make_dual` (ours, with or without memory, BLS or random memory), :func:`make_bui`
  (Bui et al. 2017), :func:`fit_offline` (offline GPyTorch SVGP on all data), :func:`matern`;
* :func:`evaluate` -- accuracy / NLPD (classification) or RMSE / NLPD (regression), from the
  per-point :func:`pointwise` and :func:`metrics`;
* :func:`timed_update`, :func:`kernel_hypers` -- seconds of one update, hyperparameters after it.

Storage, resume and seed summaries are :mod:`experiments.harness`'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.base import FitStep
from bo_ncgp.models.baselines import BuiStreamingSVGP, OfflineSVGP

__all__ = [
    "evaluate",
    "fit_offline",
    "kernel_hypers",
    "make_bui",
    "make_dual",
    "matern",
    "metrics",
    "pointwise",
    "timed_update",
]


def matern(
    nu: float = 2.5,
    lengthscale: float = 1.0,
    outputscale: float = 1.0,
    ard_num_dims: int | None = None,
    constant: float | None = None,
    lengthscale_prior: gpytorch.priors.Prior | None = None,
) -> gpytorch.kernels.Kernel:
    """``ScaleKernel(Matern)`` (+ a learnable constant ``sigma_0^2`` when ``constant`` is set,
    the magnetometer prior of Sec. 4.2), with ``lengthscale_prior`` on the lengthscales."""
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.MaternKernel(
            nu=nu, ard_num_dims=ard_num_dims, lengthscale_prior=lengthscale_prior
        )
    )
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    if constant is not None:
        c = gpytorch.kernels.ConstantKernel()
        c.constant = torch.tensor(float(constant))
        k = k + c
    return k


def make_dual(
    kernel: gpytorch.kernels.Kernel,
    likelihood: Likelihood,
    Z0: Tensor,
    cfg: dict,
    memory_size: int,
    selection: str = "bls",
    seed: int = 0,
    max_inducing: int | None = None,
) -> DualSVGP:
    """Ours (:class:`DualSVGP`): ``cfg`` holds ``rho``, ``inner_steps``, ``hyper_steps``,
    ``lr`` and optionally ``rounds`` and the settings of :data:`DUAL_SETTINGS`;
    ``memory_size = 0`` is the no-memory (VCL-style) variant."""
    model = DualSVGP(
        kernel,
        likelihood,
        Z0,
        memory_size=memory_size,
        rho=cfg["rho"],
        num_inner_steps=cfg["inner_steps"],
        num_hyper_steps=cfg["hyper_steps"],
        num_rounds=cfg.get("rounds", 1),
        lr=cfg["lr"],
        memory_selection=selection,
        generator=torch.Generator().manual_seed(seed),
    )
    if max_inducing is not None:
        model.max_inducing = int(max_inducing)  # Z grows by pivoted Cholesky up to this size
    for key in DUAL_SETTINGS:  # optional settings (experiments.chang2023.streaming_variants)
        if key in cfg:
            setattr(model, key, cfg[key])
    return model


#: DualSVGP settings that a ``cfg`` of :func:`make_dual` may name (the library's defaults
#: otherwise)
DUAL_SETTINGS = ("hyper_optimizer", "rest_factor", "memory_scaling", "memory_cap",
                 "memory_selection")  # fmt: skip


def make_bui(
    kernel: gpytorch.kernels.Kernel,
    likelihood: Likelihood,
    Z0: Tensor,
    cfg: dict,
    max_inducing: int | None = None,
) -> BuiStreamingSVGP:
    """Bui et al. (2017): ``cfg`` holds ``bui_steps``, ``bui_lr`` and optionally
    ``bui_learn_inducing`` / ``bui_learn_hypers``."""
    model = BuiStreamingSVGP(
        kernel,
        likelihood,
        Z0,
        num_steps=cfg["bui_steps"],
        lr=cfg["bui_lr"],
        learn_hyperparameters=cfg.get("bui_learn_hypers", True),
        learn_inducing=cfg.get("bui_learn_inducing", False),
    )
    if max_inducing is not None:
        model.max_inducing = int(max_inducing)
    return model


def fit_offline(
    kernel: gpytorch.kernels.Kernel,
    likelihood: Likelihood,
    X: Tensor,
    y: Tensor,
    cfg: dict,
    seed: int = 0,
    progress: Callable[[FitStep], bool | None] | None = None,
) -> OfflineSVGP:
    """Offline SVGP on all data: ``cfg`` holds ``m``, ``offline_steps``, ``offline_lr`` and
    ``offline_batch`` (``None``: full batch). Inducing inputs start at random data points."""
    g = torch.Generator().manual_seed(seed)
    m = min(int(cfg["m"]), X.shape[0])
    Z0 = X[torch.randperm(X.shape[0], generator=g)[:m]]
    model = OfflineSVGP(kernel, likelihood, Z0)
    return model.fit(
        X,
        y,
        num_steps=cfg["offline_steps"],
        batch_size=cfg.get("offline_batch"),
        lr=cfg["offline_lr"],
        generator=g,
        callback=progress,
    )


def timed_update(model, X: Tensor, y: Tensor) -> float:
    """Seconds taken by ``model.update(X, y)``."""
    t0 = time.perf_counter()
    model.update(X, y)
    return time.perf_counter() - t0


@torch.no_grad()
def kernel_hypers(model) -> dict[str, float]:
    """Outputscale and smallest / largest lengthscale of ``model.kernel`` when it is a
    ``ScaleKernel`` (empty otherwise): logged per update to follow hyperparameter drift."""
    k = getattr(model, "kernel", None)
    if not isinstance(k, gpytorch.kernels.ScaleKernel):
        return {}
    ls = k.base_kernel.lengthscale.detach().reshape(-1)
    return {
        "outputscale": float(k.outputscale.detach().reshape(-1)[0]),
        "lengthscale_min": float(ls.min()),
        "lengthscale_max": float(ls.max()),
    }


def pointwise(
    model,
    X: Tensor,
    y: Tensor,
    likelihood: Likelihood | None = None,
    chunk: int = 2000,
) -> tuple[Tensor, Tensor]:
    """Per-point ``(hit, log_pred)``: ``hit`` is 1 for a correct class (argmax of the
    predictive class probabilities; threshold 0.5 for one latent) or the squared error for a
    Gaussian likelihood; ``log_pred`` is the log predictive density. ``likelihood``
    overrides the model's (e.g. a softmax with more Monte-Carlo samples for evaluation)."""
    lik = likelihood if likelihood is not None else model.likelihood
    regression = type(lik).__name__ == "Gaussian"
    hits, logp = [], []
    for s in range(0, X.shape[0], chunk):
        Xc, yc = X[s : s + chunk], y[s : s + chunk]
        mean, var = model.predict_f(Xc)
        mean, var = mean.detach(), var.detach()
        logp.append(lik.predictive_log_prob(yc, mean, var).detach())
        if regression:
            hits.append((mean - yc).square())
        else:
            p = lik.predictive_mean(mean, var)
            pred = p.argmax(-1) if p.dim() == 2 else (p > 0.5).to(yc.dtype)
            hits.append((pred.to(yc.dtype) == yc).to(yc.dtype))
    if not hits:
        return X.new_zeros(0), X.new_zeros(0)
    return torch.cat(hits), torch.cat(logp)


def metrics(hit: Tensor, logp: Tensor, regression: bool = False) -> dict[str, float]:
    """``accuracy`` (or ``rmse``) and ``nlpd`` from :func:`pointwise` outputs."""
    out = {"nlpd": float(-logp.mean())}
    if regression:
        out["rmse"] = math.sqrt(float(hit.mean()))
    else:
        out["accuracy"] = float(hit.mean())
    return out


def evaluate(model, X: Tensor, y: Tensor, **options) -> dict[str, float]:
    """Test metrics of anything with ``predict_f``: ``accuracy`` and ``nlpd`` for classifiers,
    ``rmse`` and ``nlpd`` for a Gaussian likelihood: :func:`metrics` of :func:`pointwise`
    (``options``: its ``likelihood`` and ``chunk``)."""
    lik = options.get("likelihood") or model.likelihood
    return metrics(*pointwise(model, X, y, **options), regression=type(lik).__name__ == "Gaussian")
