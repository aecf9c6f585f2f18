"""A dual SVGP from a Gaussian posterior over inducing outputs (Chang et al. 2023, Sec. 4.1).

:func:`from_inducing_posterior` turns a variational GP trained elsewhere (e.g. a GPyTorch
``ApproximateGP``) into a :class:`~bo_ncgp.models.dual.DualSVGP` by inverting Eqs. 10-11, so
that it gets cheap dual-conditioned fantasies, as Chang et al. (2023, Sec. 4.1) do on the
model of Maddox et al. (2021).

Example:
    >>> import torch
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Bernoulli
    >>> from bo_ncgp.models.dual import DualSVGP
    >>> Z = torch.linspace(0, 1, 4, dtype=torch.float64).unsqueeze(-1)
    >>> kern = RBFKernel().double()
    >>> S = 0.5 * kern(Z).to_dense().detach()
    >>> dual = from_inducing_posterior(DualSVGP, kern, Bernoulli(), Z, torch.zeros(4).double(), S)
    >>> torch.allclose(dual.inducing_posterior()[1][0], S)
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import stable_cholesky

if TYPE_CHECKING:
    from bo_ncgp.models.dual.model import DualSVGP

__all__ = ["from_inducing_posterior"]


def from_inducing_posterior(
    cls: type[DualSVGP],
    kernel: gpytorch.kernels.Kernel,
    likelihood: Likelihood,
    inducing_points: Tensor,
    mean: Tensor,
    covariance: Tensor,
    *,
    mean_constant: float = 0.0,
    num_data: int = 0,
    **kwargs: Any,
) -> DualSVGP:
    """A DualSVGP (of class ``cls``) whose posterior is a given Gaussian
    ``q(u) = N(mean, covariance)``.

    The natural parameters of ``q(u) ∝ p(u) exp(u^T K^{-1} lam - u^T K^{-1} B_u K^{-1} u / 2)``
    (Eqs. 10-11 with ``K = K_zz``) follow from ``S^{-1} = K^{-1} + K^{-1} B_u K^{-1}`` and
    ``S^{-1} m = K^{-1} lam``:

        B_u = K S^{-1} K - K,        lam = K S^{-1} m.

    The result predicts the standard SVGP predictive

        q(f_*) = N(c + k_*z K^{-1} m,  k_** - k_*z K^{-1} (K - S) K^{-1} k_z*),

    and adds new points by dual conditioning (``condition``) or ``update``. The whole
    ``q(u)`` becomes the folded factor; the memory starts empty. On ``f`` (the model's
    convention, :mod:`~bo_ncgp.models.dual.model`) the factor is the Gaussian
    ``exp(a^T f_z - f_z^T Lam f_z / 2)`` on ``f_z = c 1 + u`` with ``Lam = K^{-1} B_u K^{-1}``
    and ``a = K^{-1} lam_f``; so ``s = B_u K^{-1} 1``, ``lam_f = lam + c s`` and the totals
    of its normaliser are ``(1^T K^{-1} lam_f, 1^T Lam 1)``. Where ``c`` is learned afterwards
    (``learn_mean_constant=True``) the factor stays fixed on ``f(Z)``.
    ``B_u`` need not be positive semi-definite (a ``q(u)`` wider than the prior in some
    direction); ``K + B_u = K S^{-1} K`` always is.

    Args:
        cls: the model class (:class:`~bo_ncgp.models.dual.DualSVGP` or a subclass).
        kernel, likelihood: as in the constructor (hyperparameters of the fitted model).
        inducing_points: ``(m, d)`` inducing inputs ``Z`` (no duplicates).
        mean: ``(m,)`` mean of ``g(Z)`` (for ``C > 1`` latents ``(C, m)``).
        covariance: ``(m, m)`` (or ``(C, m, m)``) positive-definite covariance of ``g(Z)``.
        mean_constant: constant prior mean ``c``; ``mean`` is then that of ``g(Z) = f(Z) - c``
            (GPyTorch's convention for a ``ConstantMean``: its whitened ``q(u)`` is for the
            deviation from the prior mean).
        num_data: number of observations ``q(u)`` summarises (used by the memory weights
            of later ``update`` calls).
        **kwargs: further constructor settings (``inducing_update`` defaults to ``"fixed"``
            here, so that ``Z`` stays the fitted one).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models.dual import DualSVGP
        >>> Z = torch.linspace(0, 1, 5, dtype=torch.float64).unsqueeze(-1)
        >>> kern = RBFKernel().double()
        >>> K = kern(Z).to_dense().detach()
        >>> m_u, S_u = torch.linspace(-1, 1, 5).double(), 0.5 * K  # a q(u) tighter than p(u)
        >>> dual = from_inducing_posterior(DualSVGP, kern, Bernoulli(), Z, m_u, S_u,
        ...                                mean_constant=-2.0, num_data=30)
        >>> mean, _ = dual.predict_f(Z)  # f(Z) = c + g(Z)
        >>> torch.allclose(mean, m_u - 2.0)
        True
    """
    kwargs.setdefault("inducing_update", "fixed")
    model = cls(kernel, likelihood, inducing_points, mean_constant=mean_constant, **kwargs)
    C, m = model.num_latents, model.num_inducing
    Z = model.Z
    mean = torch.as_tensor(mean, dtype=Z.dtype, device=Z.device).detach()
    cov = torch.as_tensor(covariance, dtype=Z.dtype, device=Z.device).detach()
    if mean.shape == (m,) and C == 1:
        mean = mean.unsqueeze(0)
    if cov.shape == (m, m) and C == 1:
        cov = cov.unsqueeze(0)
    if mean.shape != (C, m) or cov.shape != (C, m, m):
        raise InputDataError(
            f"DualSVGP.from_inducing_posterior: for {m} inducing points and {C} latent(s) "
            f"mean must be ({m},) or ({C}, {m}) and covariance ({m}, {m}) or ({C}, {m}, "
            f"{m}); got {tuple(mean.shape)} and {tuple(cov.shape)}"
        )
    if not (torch.isfinite(mean).all() and torch.isfinite(cov).all()):
        raise InputDataError("DualSVGP.from_inducing_posterior: mean or covariance has NaN/inf")
    if int(num_data) != num_data or num_data < 0:
        raise InputDataError(
            f"DualSVGP.from_inducing_posterior: num_data must be a non-negative int, got {num_data}"
        )
    try:
        L_S = torch.linalg.cholesky(0.5 * (cov + cov.mT))
    except RuntimeError as err:
        raise InputDataError(
            "DualSVGP.from_inducing_posterior: covariance is not positive definite"
        ) from err
    with torch.no_grad():
        K = model._Kzz()  # (C, m, m)
        Sinv_K = torch.cholesky_solve(K, L_S)
        B = K @ Sinv_K - K
        B = 0.5 * (B + B.mT)
        lam = (Sinv_K.mT @ mean.unsqueeze(-1)).squeeze(-1)  # K S^{-1} m
        model._B_rest = B
        c = model._mean_constant.detach()
        if bool(c != 0) or model.learn_mean_constant:  # the factor on f (docstring)
            L_K = stable_cholesky(K, name="K_zz")
            Kinv1 = torch.cholesky_solve(K.new_ones(C, m, 1), L_K)
            s = (B @ Kinv1).squeeze(-1)
            lam = lam + c * s
            eta_sum = (Kinv1.squeeze(-1) * lam).sum(-1)
            model._s_rest = s
            model._rest_totals = torch.stack([eta_sum, (Kinv1.squeeze(-1) * s).sum(-1)], -1)
        model._lam_rest = lam
        model._num_data = model._num_data.new_tensor(int(num_data))
    model._touch()
    return model
