"""A fitted HIP-GP conditioned on new Gaussian observations of values, derivatives or line
integrals (fantasies for look-ahead acquisitions).

The variational posterior of a HIP-GP (Wu et al. 2022, Eq. 14) is a Gaussian process over
every transformed domain: with ``k_x`` the whitened cross covariance of ``L rho(x)`` (Eq. 20),
``q(eps) = N(m, S)`` and the prior inter-domain covariance ``k**`` (Eqs. 7-8),

    mu(x) = k_x^T m,    Sigma(x, x') = k**(x, x') - k_x^T (I - S) k_x'.

:class:`ConditionedHIPGP` conditions this GP on observations ``y = L_c rho(X_c) + e``,
``e ~ N(0, diag(noise))``, jointly over the conditioned points ``c`` and the query points
``t`` (exact Gaussian conditioning; the Gaussian sites ``eta = y / noise``,
``beta = 1 / noise``):

    mean' = mu_t + Sigma_tc (Sigma_cc + diag(noise))^{-1} (y - mu_c)
    cov'  = Sigma_tt - Sigma_tc (Sigma_cc + diag(noise))^{-1} Sigma_ct

with the hyperparameters, the grid and ``q(eps)`` fixed. Query and conditioned points may
carry different operators: ``Sigma_tc`` needs the prior covariance between two transformed
domains, :func:`~bo_ncgp.models.hipgp.interdomain.transformed_covariance` (RBF and Matern
kernels; value-value pairs work with any stationary kernel). Cost: one whitening (PCG with
FFT whitening) of the ``n`` conditioned rows and an ``n x n`` Cholesky factor per batch
element, then per query ``O(q n N)`` on top of the unconditioned prediction.

Example:
    >>> import gpytorch
    >>> from bo_ncgp.likelihoods import Gaussian
    >>> from bo_ncgp.models.hipgp import HIPGP, Grid
    >>> k = gpytorch.kernels.RBFKernel()
    >>> k.lengthscale = 0.2
    >>> hip = HIPGP(k, Grid([0.0], [1.0], (32,)), likelihood=Gaussian(noise=0.01))
    >>> X = torch.rand(20, 1); _ = hip.fit(X, torch.sin(6 * X[:, 0]))
    >>> cond = hip.condition(torch.rand(3, 2, 1), torch.zeros(3, 2))  # 3 fantasies of 2 points
    >>> type(cond).__name__, cond.batch_shape
    ('ConditionedHIPGP', torch.Size([3]))
    >>> cond.predict_f(torch.rand(4, 1))[0].shape
    torch.Size([3, 4])
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, NumericalWarning, UnsupportedError
from bo_ncgp.likelihoods import Gaussian
from bo_ncgp.models._alias import Alias
from bo_ncgp.models._checks import check_device
from bo_ncgp.models.base import LatentGP
from bo_ncgp.models.hipgp.interdomain import VALUE, OpSpec, as_op_codes, transformed_covariance

if TYPE_CHECKING:
    import gpytorch

    from bo_ncgp.likelihoods import Likelihood
    from bo_ncgp.models.hipgp.model import HIPGP

__all__ = ["ConditionedHIPGP"]


class ConditionedHIPGP(torch.nn.Module, LatentGP):
    """A :class:`~bo_ncgp.models.HIPGP` conditioned on Gaussian observations of ``L_c rho``
    (hyperparameters and ``q(eps)`` fixed); see the module docstring for the formulas.

    Built by :meth:`HIPGP.condition <bo_ncgp.models.HIPGP.condition>` (or :meth:`from_model`);
    :meth:`condition` on it conditions further (the observations are concatenated). The
    unconditioned model is shared, not copied: its factors are recomputed when its
    hyperparameters or ``q(eps)`` change.

    Args:
        base: the fitted, unconditioned HIP-GP.
        X: ``(*bx, n, D)`` conditioned inputs.
        codes: ``(n,)`` their operator codes
            (:func:`~bo_ncgp.models.hipgp.interdomain.as_op_codes`).
        y: ``(*b, n)`` observations (``*b`` broadcasts with ``*bx``).
        noise: ``(n,)`` their noise variances.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Gaussian
        >>> from bo_ncgp.models.hipgp import HIPGP, Grid
        >>> k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
        >>> k.base_kernel.lengthscale = 0.3
        >>> hip = HIPGP(k, Grid([0.0], [1.0], (32,)), likelihood=Gaussian(noise=0.01))
        >>> X = torch.rand(30, 1); _ = hip.fit(X, torch.sin(6 * X[:, 0]))
        >>> x = torch.tensor([[0.5]])
        >>> cond = hip.condition(x, torch.tensor([2.0]), op="derivative")  # a slope of 2
        >>> slope = cond.predict_f(x, op="derivative")[0]
        >>> before = hip.predict_f(x, op="derivative")[0]
        >>> bool((slope - 2).abs() < (before - 2).abs())  # pulled towards the observed slope
        True
        >>> cond.condition(x, torch.tensor([0.0])).num_conditioned  # conditions further
        2
    """

    def __init__(self, base: HIPGP, X: Tensor, codes: Tensor, y: Tensor, noise: Tensor) -> None:
        super().__init__()
        self.base = base
        self._X, self._codes, self._y, self._noise = X, codes, y, noise
        self._cache: tuple | None = None

    @classmethod
    def from_model(
        cls,
        model: HIPGP | ConditionedHIPGP,
        X: Tensor,
        Y: Tensor,
        *,
        op: OpSpec = None,
        obs_noise: Tensor | float | None = None,
    ) -> ConditionedHIPGP:
        """``model`` conditioned on ``Y (*by, n)``, observations of ``L rho`` at ``X (*bx, n,
        D)`` with operator(s) ``op`` and noise variances ``obs_noise`` (a number or ``(n,)``;
        default: the noise of the model's Gaussian likelihood, fixed at this call), appended
        to ``model``'s conditioned observations if it has any.

        The leading dimensions become ``batch_shape = broadcast(model.batch_shape, *bx,
        *by)``.
        """
        conditioned = isinstance(model, ConditionedHIPGP)
        base = model.base if conditioned else model
        who = "HIPGP.condition"
        X = base._check_X(X, what="X")
        n = X.shape[-2]
        codes = as_op_codes(op, n, base.dim, X.device)
        Y = torch.as_tensor(Y, device=None if isinstance(Y, Tensor) else X.device)
        check_device(who, X.device, Y=Y)
        if Y.is_complex() or Y.dtype == torch.bool:
            raise InputDataError(f"{who}: Y must be real numbers, got {Y.dtype}")
        Y = Y.to(X.dtype)
        if Y.dim() == 0 or Y.shape[-1] != n:
            raise InputDataError(
                f"{who}: Y must have shape (..., {n}) for {n} conditioned points, got "
                f"{tuple(Y.shape)}"
            )
        if not bool(torch.isfinite(Y).all()):
            raise InputDataError(f"{who}: Y contains NaN or inf")
        noise = _noise(base, obs_noise, n, X)
        try:
            torch.broadcast_shapes(model.batch_shape, X.shape[:-2], Y.shape[:-1])
        except RuntimeError as err:
            raise InputDataError(
                f"{who}: batch shapes do not broadcast: model {tuple(model.batch_shape)}, "
                f"X {tuple(X.shape[:-2])}, Y {tuple(Y.shape[:-1])}"
            ) from err
        if not conditioned:
            return cls(base, X, codes, Y, noise)
        bx = torch.broadcast_shapes(model._X.shape[:-2], X.shape[:-2])
        by = torch.broadcast_shapes(model._y.shape[:-1], Y.shape[:-1])
        Xn = torch.cat([model._X.expand(*bx, -1, -1), X.expand(*bx, -1, -1)], -2)
        yn = torch.cat([model._y.expand(*by, -1), Y.expand(*by, -1)], -1)
        return cls(
            base,
            Xn,
            torch.cat([model._codes, codes]),
            yn,
            torch.cat([model._noise, noise]),
        )

    # -------------------------------------------------------------- properties
    kernel: Alias[gpytorch.kernels.Kernel] = Alias(
        "base.kernel", "The (shared) kernel of the unconditioned model."
    )
    likelihood: Alias[Likelihood] = Alias(
        "base.likelihood", "The (shared) likelihood of the unconditioned model."
    )
    dim: Alias[int] = Alias("base.dim", "Number of input dimensions ``D``.")
    conditioned_inputs: Alias[Tensor] = Alias("_X", "``(*bx, n, D)`` the conditioned inputs.")
    conditioned_targets: Alias[Tensor] = Alias("_y", "``(*b, n)`` the conditioned targets.")
    conditioned_codes: Alias[Tensor] = Alias("_codes", "``(n,)`` their operator codes.")

    @property
    def pcg_tol(self) -> float:
        """The PCG tolerance of the solves, the base HIP-GP's (setting it sets the base's)."""
        return self.base.pcg_tol

    @pcg_tol.setter
    def pcg_tol(self, value: float) -> None:
        self.base.pcg_tol = value

    @property
    def batch_shape(self) -> torch.Size:
        """Leading batch dimensions of the conditioned inputs and targets."""
        return torch.broadcast_shapes(self._X.shape[:-2], self._y.shape[:-1])

    @property
    def num_conditioned(self) -> int:
        """Number ``n`` of conditioned observations (per batch element)."""
        return int(self._X.shape[-2])

    def _apply(self, fn, *args, **kwargs):
        """``.to()``, ``.double()``, ... also move the conditioned data and drop the factors."""
        out = super()._apply(fn, *args, **kwargs)
        self._X, self._y, self._noise = fn(self._X), fn(self._y), fn(self._noise)
        self._codes = self._codes.to(self._X.device)
        self._cache = None
        return out

    # ------------------------------------------------------------- posterior
    def _rows(self, X: Tensor, codes: Tensor) -> Tensor:
        """Whitened rows ``k_x^T`` (Eq. 20) of ``X (..., n, D)``, shape ``(..., n, N)``."""
        base = self.base
        lead, n = X.shape[:-2], X.shape[-2]
        K = base._rows(X.reshape(-1, base.dim), codes.repeat(max(1, lead.numel())))
        return K.reshape(*lead, n, K.shape[-1])

    def _prior(self, X1: Tensor, c1: Tensor, X2: Tensor, c2: Tensor) -> Tensor:
        """Prior ``Cov(L_i rho(X1_i), L_j rho(X2_j))``, ``(..., n1, n2)``."""
        base = self.base
        if bool((c1 == VALUE).all()) and bool((c2 == VALUE).all()):
            lead = torch.broadcast_shapes(X1.shape[:-2], X2.shape[:-2])
            X1, X2 = X1.expand(*lead, -1, -1), X2.expand(*lead, -1, -1)
            return base.kernel(X1, X2).to_dense()
        try:
            return transformed_covariance(base.kernel, X1, c1, X2, c2, num_quad=base.num_quad)
        except UnsupportedError as err:
            raise UnsupportedError(
                "ConditionedHIPGP: derivative and integral observations (conditioned or "
                f"queried) need an RBF or Matern kernel, got {type(base.kernel).__name__}"
            ) from err

    def _minus_S(self, K: Tensor) -> Tensor:
        """Rows of ``K (I - S)`` for ``K (..., N)`` (block solves with ``q``'s precisions)."""
        q = self.base.q
        lead = K.shape[:-1]
        Kf = K.reshape(-1, K.shape[-1])
        Kb = q.to_blocks(Kf).permute(1, 2, 0)  # (B, Mb, r)
        KS = q.from_blocks(torch.cholesky_solve(Kb, q.prec_chol).permute(2, 0, 1))
        return (Kf - KS).reshape(*lead, K.shape[-1])

    def _factors(self) -> tuple:
        """``(G, L, F, alpha, m)``: ``G = K_c (I - S)`` ``(*bx, n, N)``; the Cholesky factor
        ``L`` of ``A = Sigma_cc + diag(noise)`` ``(*bx, n, n)``, or, where ``A`` has none
        (:func:`_positive_root`), ``L = None`` and ``F`` with ``F^T F`` the inverse of ``A``
        on its positive eigendirections; ``alpha = A^{-1} (y - mu_c)`` ``(*b, n)`` and
        ``m = E[eps]``; cached until the base model's hyperparameters or ``q`` change."""
        base, q = self.base, self.base.q
        grad = torch.is_grad_enabled()
        key = (base._state_key(), q.theta1._version, q.prec_chol._version)
        if self._cache is not None and self._cache[0] == key and (self._cache[1] or not grad):
            return self._cache[2]
        X, c = self._X, self._codes
        K = self._rows(X, c)
        m = q.mean.to(K)
        G = self._minus_S(K)
        Kcc = self._prior(X, c, X, c)
        Scc = Kcc - K @ G.mT
        # the variances as HIPGP.predict_f gives them: the Nystrom deficit k** - k^T k
        # clamped at 0 (an approximate R R^T = K_uu, e.g. a clamped circulant embedding, can
        # make it negative; a no-op otherwise)
        deficit = Kcc.diagonal(dim1=-2, dim2=-1) - (K * K).sum(-1)
        lift = (-deficit).clamp_min(0)
        Scc = 0.5 * (Scc + Scc.mT) + torch.diag_embed(lift)
        noise = self._noise.to(Scc)
        A = Scc + torch.diag_embed(noise).expand_as(Scc)
        L, info = torch.linalg.cholesky_ex(A)
        if bool((info > 0).any()) or not bool(torch.isfinite(L).all()):
            F, L = _positive_root(A, 0.5 * float(noise.min())), None  # rows: kept directions
        else:
            F = None
        r = (self._y - K @ m).unsqueeze(-1)
        z = _half_solve(L, F, r)
        lead = z.shape[:-2]
        W = L if F is None else F
        alpha = (
            torch.linalg.solve_triangular(W.expand(*lead, -1, -1).mT, z, upper=True)
            if F is None
            else W.expand(*lead, -1, -1).mT @ z
        ).squeeze(-1)
        factors = (G, L, F, alpha, m)
        self._cache = (key, grad, factors)
        return factors

    def predict_f(
        self, X: Tensor, full_cov: bool = False, *, op: OpSpec = None
    ) -> tuple[Tensor, Tensor]:
        """Conditioned posterior of ``L rho`` at ``X (..., q, D)`` (operator ``op`` as in
        :meth:`HIPGP.predict_f <bo_ncgp.models.HIPGP.predict_f>`).

        Returns:
            ``mean (*batch, q)`` and ``var (*batch, q)`` or ``cov (*batch, q, q)`` with
            ``batch = broadcast(X.shape[:-2], batch_shape)``; differentiable in ``X`` and in
            the conditioned inputs and targets.
        """
        base = self.base
        X = base._check_X(X)
        n = X.shape[-2]
        codes = as_op_codes(op, n, base.dim, X.device)
        G, L, F, alpha, m = self._factors()
        K = self._rows(X, codes)  # (*bq, q, N)
        Sqc = self._prior(X, codes, self._X, self._codes) - K @ G.mT  # (*b1, q, n)
        V = _half_solve(L, F, Sqc.mT)  # (*b1, n, q): L^{-1} Sigma_cq, or F Sigma_cq
        mean = K @ m
        mean = mean + (Sqc @ alpha.unsqueeze(-1)).squeeze(-1)
        batch = mean.shape[:-1]
        if full_cov:
            Sqq = self._prior(X, codes, X, codes) - K @ self._minus_S(K).mT
            cov = Sqq - V.mT @ V
            return mean, cov.expand(*batch, n, n)
        lead_q = X.shape[:-2]
        Kf = K.reshape(-1, K.shape[-1])
        var = base._moments(Kf, X.reshape(-1, base.dim), codes.repeat(max(1, lead_q.numel())))[1]
        var = var.reshape(*lead_q, n) - (V * V).sum(-2)
        return mean, var.clamp_min(0).expand(*batch, n)

    def predict_y(self, X: Tensor, *, op: OpSpec = None) -> Tensor:
        """Predictive mean ``E[y]`` of observations of ``L rho`` at ``X`` (the likelihood's
        ``predictive_mean`` of :meth:`predict_f`)."""
        mean, var = self.predict_f(X, op=op)
        return self.likelihood.predictive_mean(mean, var)

    def condition(
        self, X: Tensor, Y: Tensor, *, op: OpSpec = None, obs_noise: Tensor | float | None = None
    ) -> ConditionedHIPGP:
        """This model conditioned further on ``(X, Y)`` (see :meth:`from_model`)."""
        return type(self).from_model(self, X, Y, op=op, obs_noise=obs_noise)


def _half_solve(L: Tensor | None, F: Tensor | None, B: Tensor) -> Tensor:
    """``L^{-1} B`` (``L`` lower triangular) or ``F B``, broadcast over batch dimensions."""
    W = L if L is not None else F
    lead = torch.broadcast_shapes(W.shape[:-2], B.shape[:-2])
    W, B = W.expand(*lead, -1, -1), B.expand(*lead, -1, -1)
    return torch.linalg.solve_triangular(W, B, upper=False) if L is not None else W @ B


def _positive_root(A: Tensor, floor: float) -> Tensor:
    """``F (..., n, n)`` with ``F^T F = sum_k u_k u_k^T / lambda_k`` over the eigenpairs of
    ``A`` with ``lambda_k > floor`` (the other rows of ``F`` are zero), with one
    :class:`~bo_ncgp.exceptions.NumericalWarning` naming the smallest eigenvalue.

    HIP-GP's posterior covariance ``k** - k^T (I - S) k`` is a covariance only where
    ``R R^T = K_uu`` holds; a clamped circulant embedding or inexact PCG solves can leave it
    indefinite, so that with small observation noise ``A = Sigma_cc + diag(noise)`` has no
    Cholesky factor. For a positive semi-definite ``Sigma_cc`` every eigenvalue of ``A`` is at
    least the smallest noise variance, so with ``floor`` half of it only the directions that
    the approximation got wrong are dropped: the observations are conditioned on along the
    others (the conditioned variances stay below the unconditioned ones and the mean moves at
    most by the residual there).
    """
    evals, evecs = torch.linalg.eigh(A)
    keep = evals > floor
    warnings.warn(
        "HIPGP.condition: the posterior covariance of the conditioned points is indefinite "
        f"(smallest eigenvalue of covariance + noise {float(evals.detach().min()):.3g}; an "
        "approximate circulant embedding or inexact PCG solves); "
        f"{int((~keep).sum())} eigendirection(s) are left unconditioned -- a larger "
        "embedding_factor or a tighter pcg_tol avoids this",
        NumericalWarning,
        stacklevel=5,
    )
    scale = torch.where(keep, evals.clamp_min(floor).rsqrt(), torch.zeros_like(evals))
    return scale.unsqueeze(-1) * evecs.mT


def _noise(base: HIPGP, obs_noise: Tensor | float | None, n: int, like: Tensor) -> Tensor:
    """``(n,)`` noise variances of conditioned observations: ``obs_noise`` or the Gaussian
    likelihood's noise (detached: the hyperparameters are fixed)."""
    if obs_noise is None:
        if not isinstance(base.likelihood, Gaussian):
            raise UnsupportedError(
                "HIPGP.condition conditions on Gaussian observations: it needs the Gaussian "
                f"likelihood or obs_noise, got the {type(base.likelihood).__name__} likelihood "
                "without obs_noise"
            )
        return base.likelihood.noise.detach().to(like).expand(n).clone()
    noise = torch.as_tensor(obs_noise, dtype=like.dtype, device=like.device)
    if noise.dim() > 1 or noise.numel() not in (1, n):
        raise InputDataError(
            f"HIPGP.condition: obs_noise must be a number or have {n} entries, got shape "
            f"{tuple(noise.shape)}"
        )
    noise = noise.expand(n).clone() if noise.numel() == 1 else noise.reshape(n)
    if not bool((torch.isfinite(noise) & (noise > 0)).all()):
        raise InputDataError(
            f"HIPGP.condition: obs_noise must be positive and finite, got {noise.tolist()}"
        )
    return noise
