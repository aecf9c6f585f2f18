"""Streaming sparse variational GP of Bui, Nguyen & Turner (2017) for any likelihood.

The baseline of Chang et al. (2023), Secs. 4.2-4.4: each streaming step maximises the online
ELBO of Eq. 5 (:func:`bo_ncgp.models.baselines.objective.streaming_elbo`) jointly over the
variational parameters of ``q(b)``, the kernel/likelihood hyperparameters and (optionally)
the inducing inputs, by gradient steps (Adam, or L-BFGS); the previous posterior and
hyperparameters enter only through the two KL terms at the old inducing inputs. This is the
uncollapsed version of Bui et al.'s bound, which they use for non-Gaussian likelihoods; with a
Gaussian likelihood its optimum is their collapsed (closed-form) one.

One call of :meth:`BuiStreamingSVGP.update` is one streaming step:

1. the current posterior is frozen as ``q_old`` at ``Z_old`` with ``theta_old``;
2. new inducing inputs are chosen by pivoted Cholesky on ``[Z_old, X_new]`` (the same rule as
   :class:`bo_ncgp.models.DualSVGP`, Sec. 3.4), or kept (``inducing_update="fixed"``);
3. ``q(b)`` is initialised at the old posterior's predictive at the new ``Z`` (the prior on
   the first step), whitened;
4. ``num_steps`` optimiser steps on ``-Eq. 5 / n_new`` (plus the hyperparameters' log priors).

Textbook limits (tested): on the first batch the objective is the batch SVGP ELBO (Eq. 3);
with a Gaussian likelihood, fixed hyperparameters and ``Z`` fixed, the streamed posterior
equals the batch (Titsias) posterior with the same ``Z`` -- the exact GP posterior when ``Z``
holds every input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import gpytorch
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg import jittered, latent_block, log_prior, solve_lower, stable_cholesky
from bo_ncgp.linalg._args import check_count, check_positive
from bo_ncgp.models._checks import check_device, check_inputs
from bo_ncgp.models.base import Callback, LatentGP
from bo_ncgp.models.baselines.objective import (
    OldPosterior,
    old_posterior,
    predictive_marginals,
    streaming_elbo,
)
from bo_ncgp.models.dual._state import InducingState, ResizableModule
from bo_ncgp.models.dual.inducing import (
    check_inducing_points,
    check_latent_kernel,
    select_inducing_points,
)
from bo_ncgp.models.training import AdamStepper, FitClock, minimize_lbfgs

__all__ = ["BuiStreamingSVGP"]


class BuiStreamingSVGP(InducingState, ResizableModule, LatentGP):
    """Streaming sparse GP of Bui et al. (2017) with the uncollapsed objective of Eq. 5.

    Args:
        kernel: a GPyTorch kernel; for ``C > 1`` latents either shared (``batch_shape ()``)
            or one per latent (``batch_shape (C,)``).
        likelihood: a :class:`bo_ncgp.likelihoods.Likelihood` (Gaussian, Bernoulli,
            Softmax, ...); its expectations ``expected_log_prob`` give the data term.
        inducing_points: ``(m, d)`` initial inducing inputs; ``m`` is the size kept by the
            pivoted-Cholesky update (raise :attr:`max_inducing` to let ``Z`` grow).
        num_steps: optimiser steps per :meth:`update`.
        lr: Adam learning rate (ignored by L-BFGS, which uses a line search).
        learn_hyperparameters: optimise the kernel and likelihood parameters too.
        learn_inducing: optimise ``Z`` by gradients (as Bui et al.) after the pivoted-Cholesky
            initialisation.
        inducing_update: ``"pivoted_cholesky"`` on ``[Z_old, X_new]`` or ``"fixed"``.
        optimizer: ``"adam"`` (the baseline) or ``"lbfgs"`` (tight convergence for tests).
        jitter: relative jitter ``jitter * mean(diag K)`` added to ``K_bb`` and ``K_aa``.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> X = torch.rand(40, 2); y = (X[:, 0] > 0.5).double()
        >>> k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
        >>> model = BuiStreamingSVGP(k, Bernoulli(), X[:8], num_steps=5)
        >>> model.update(X[:20], y[:20]).update(X[20:], y[20:]).num_data
        40
        >>> mean, var = model.predict_f(torch.rand(3, 2))
    """

    supports_update = True
    _resizable = ("_Z", "_mu", "_L")

    def __init__(
        self,
        kernel: gpytorch.kernels.Kernel,
        likelihood: Likelihood,
        inducing_points: Tensor,
        *,
        num_steps: int = 100,
        lr: float = 0.01,
        learn_hyperparameters: bool = True,
        learn_inducing: bool = False,
        inducing_update: Literal["pivoted_cholesky", "fixed"] = "pivoted_cholesky",
        optimizer: Literal["adam", "lbfgs"] = "adam",
        jitter: float = 1e-6,
    ) -> None:
        super().__init__()
        C = check_latent_kernel("BuiStreamingSVGP", kernel, likelihood)
        num_steps = check_count(num_steps, "num_steps", "BuiStreamingSVGP")
        lr = check_positive(lr, "lr", "BuiStreamingSVGP")
        if inducing_update not in ("pivoted_cholesky", "fixed"):
            raise InputDataError(
                "BuiStreamingSVGP: inducing_update must be 'pivoted_cholesky' or 'fixed', got "
                f"{inducing_update!r}"
            )
        if optimizer not in ("adam", "lbfgs"):
            raise InputDataError(
                f"BuiStreamingSVGP: optimizer must be 'adam' or 'lbfgs', got {optimizer!r}"
            )
        jitter = check_positive(jitter, "jitter", "BuiStreamingSVGP", allow_zero=True)
        Z = check_inducing_points(inducing_points).detach().clone()
        m = Z.shape[0]
        self.kernel = kernel
        self.likelihood = likelihood
        self.num_steps = int(num_steps)
        self.lr = float(lr)
        self.learn_hyperparameters = bool(learn_hyperparameters)
        self.learn_inducing = bool(learn_inducing)
        self.inducing_update = inducing_update
        self.optimizer = optimizer
        self.jitter = float(jitter)
        self.max_inducing = m
        self._C = C
        self.register_buffer("_Z", Z)
        self.register_buffer("_mu", Z.new_zeros(C, m))
        self.register_buffer("_L", torch.eye(m, dtype=Z.dtype, device=Z.device).repeat(C, 1, 1))
        self.register_buffer("_num_data", torch.zeros((), dtype=torch.long, device=Z.device))
        self.last_objective: float = float("nan")

    # ----------------------------------------------------------------- kernels
    def _k(self, X1: Tensor, X2: Tensor | None = None, diag: bool = False) -> Tensor:
        """Kernel block with a latent dimension (size 1 for a shared kernel)."""
        return latent_block(self.kernel, X1, X2, diag)

    def _Kzz(self, Z: Tensor) -> Tensor:
        return jittered(self._k(Z), self.jitter)

    def _chol(self, K: Tensor, name: str) -> Tensor:
        return stable_cholesky(K, name=name)

    # --------------------------------------------------------------- posterior
    def inducing_posterior(self) -> tuple[Tensor, Tensor]:
        """``(m_u, S_u)`` of ``q(u = f(Z))``: ``(L, m)``, ``(L, m, m)`` (un-whitened)."""
        with torch.no_grad():
            L_b = self._chol(self._Kzz(self._Z), "K_zz")
            m_u = (L_b @ self._mu.unsqueeze(-1)).squeeze(-1)
            G = L_b @ self._L
            return m_u, G @ G.mT

    def _marginals(self, X: Tensor) -> tuple[Tensor, Tensor]:
        L_b = self._chol(self._Kzz(self._Z), "K_zz")
        return predictive_marginals(L_b, self._k(self._Z, X), self._k(X, diag=True),
                                    self._mu, self._L)  # fmt: skip

    def _out(self, t: Tensor) -> Tensor:
        return t.squeeze(-2) if self._C == 1 else t.mT

    def predict_f(self, X: Tensor, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Marginal posterior of the latent function(s) at ``X (n, d)`` (Eq. 4).

        Returns ``mean``, ``var`` of shape ``(n,)`` (one latent) or ``(n, C)``; joint
        covariances (``full_cov=True``) are not supported.
        """
        if full_cov:
            raise UnsupportedError("BuiStreamingSVGP: predict_f has marginals only (full_cov)")
        X = self._check_X(X, allow_empty=True)
        mean, var = self._marginals(X)
        return self._out(mean), self._out(var)

    # ------------------------------------------------------------------ checks
    def _check_X(self, X, allow_empty: bool = False) -> Tensor:
        d = self._Z.shape[-1]
        return check_inputs(
            X,
            "BuiStreamingSVGP",
            dims=d,
            matrix=True,
            allow_empty=allow_empty,
            dtype=self._Z.dtype,
            device=self._Z.device,
        )

    def _check_y(self, y, n: int) -> Tensor:
        y = torch.as_tensor(y, device=None if isinstance(y, Tensor) else self._Z.device)
        check_device("BuiStreamingSVGP", self._Z.device, y=y)
        if y.dim() != 1 or y.shape[0] != n:
            raise InputDataError(
                f"BuiStreamingSVGP: y must have shape ({n},) to match X, got {tuple(y.shape)}"
            )
        self.likelihood.check_targets(y)
        return y.to(dtype=self._Z.dtype, device=self._Z.device)

    # ------------------------------------------------------------------ update
    def _freeze_old(self) -> OldPosterior | None:
        if self.num_data == 0:
            return None
        with torch.no_grad():
            L_a = self._chol(self._Kzz(self._Z), "K(Z_old, Z_old)")
        return old_posterior(self._Z, L_a, self._mu, self._L)

    def _initial_q(self, Z_new: Tensor) -> tuple[Tensor, Tensor]:
        """The current posterior's predictive at ``Z_new``, whitened w.r.t. ``K(Z_new)``."""
        with torch.no_grad():
            if self.num_data == 0:
                m = Z_new.shape[0]
                eye = torch.eye(m, dtype=Z_new.dtype, device=Z_new.device)
                return Z_new.new_zeros(self._C, m), eye.repeat(self._C, 1, 1)
            L_b = self._chol(self._Kzz(self._Z), "K_zz")
            H = solve_lower(L_b, self._k(self._Z, Z_new))
            L_n = self._chol(self._Kzz(Z_new), "K(Z_new, Z_new)")
            # whitened map v_new = L_n^{-1} u_new with u_new | v ~ N(H^T v, K_nn - H^T H)
            G = solve_lower(L_n, H.mT)  # L_n^{-1} H^T
            mu = (G @ self._mu.unsqueeze(-1)).squeeze(-1)
            eye = torch.eye(Z_new.shape[0], dtype=Z_new.dtype, device=Z_new.device)
            GL = G @ self._L
            S = eye - G @ G.mT + GL @ GL.mT
            L = self._chol(0.5 * (S + S.mT), "initial S")
            return mu, L.expand(self._C, *L.shape[-2:]).clone()

    def _objective(self, X, y, Z, mu, L_raw, old: OldPosterior | None) -> Tensor:
        L = torch.tril(L_raw)
        L_b = self._chol(self._Kzz(Z), "K_zz")
        K_ab = K_aa = None
        if old is not None:
            K_ab = self._k(old.Z, Z)
            K_aa = self._Kzz(old.Z)
        elbo = streaming_elbo(self.likelihood, y, L_b, self._k(Z, X), self._k(X, diag=True),
                              mu, L, old, K_ab, K_aa)  # fmt: skip
        return elbo + self._log_prior()

    def _log_prior(self) -> Tensor:
        return log_prior(self.kernel, self.likelihood, dtype=self._Z.dtype, device=self._Z.device)

    def objective(self, X: Tensor, y: Tensor, old: OldPosterior | None = None) -> Tensor:
        """Eq. 5 (plus log priors) of the *current* ``q`` on ``(X, y)`` against ``old``
        (``None``: the batch ELBO, Eq. 3); differentiable in the hyperparameters."""
        X = self._check_X(X, allow_empty=True)
        y = self._check_y(y, X.shape[0])
        return self._objective(X, y, self._Z, self._mu, self._L, old)

    def update(self, X: Tensor, y: Tensor, *, callback: Callback | None = None) -> BuiStreamingSVGP:
        """One streaming step on the batch ``(X (n, d), y (n,))``; returns self.

        ``callback`` gets a :class:`~bo_ncgp.models.base.FitStep` after every Adam step (the
        loss is ``-Eq. 5 / n`` before the step; the variational parameters are written to the
        model at the end of the update), or once after L-BFGS; returning ``True`` stops the
        optimisation of this batch.
        """
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0])
        X, y = X.detach(), y.detach()
        old = self._freeze_old()
        with torch.no_grad():
            Z = self._Z
            if self.inducing_update == "pivoted_cholesky":
                Z = select_inducing_points(self.kernel, torch.cat([self._Z, X]), self.max_inducing)
        mu0, L0 = self._initial_q(Z)
        mu = mu0.clone(memory_format=torch.contiguous_format).requires_grad_(True)
        L_raw = L0.clone(memory_format=torch.contiguous_format).requires_grad_(True)
        Zp = Z.clone().requires_grad_(self.learn_inducing)
        params = [mu, L_raw] + ([Zp] if self.learn_inducing else [])
        if self.learn_hyperparameters:
            params += [p for p in self.parameters() if p.requires_grad]
        n = X.shape[0]

        def loss_fn() -> Tensor:
            return -self._objective(X, y, Zp, mu, L_raw, old) / n

        value = self._optimise(params, loss_fn, callback)
        with torch.no_grad():
            self._Z = Zp.detach().clone()
            self._mu = mu.detach().clone()
            self._L = torch.tril(L_raw.detach()).clone()
            self._num_data = self._num_data + n
        self.last_objective = -value * n
        return self

    def _optimise(
        self, params: list[Tensor], loss_fn: Callable[[], Tensor], callback: Callback | None
    ) -> float:
        """Minimise ``loss_fn`` under the non-finite policy of :mod:`bo_ncgp.models.training`
        (a failed step is undone and ends the optimisation with a
        :class:`~bo_ncgp.exceptions.NumericalWarning`);
        returns the final loss."""
        if self.num_steps == 0:
            with torch.no_grad():
                return float(loss_fn())
        clock = FitClock()
        if self.optimizer == "lbfgs":
            last = minimize_lbfgs(params, loss_fn, self.num_steps, lr=1.0,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                                  tolerance_change=1e-15, history_size=50,
                                  name="BuiStreamingSVGP")  # fmt: skip
            clock.notify(callback, 0, self, last, {"optimizer": "lbfgs"})
            return last
        stepper = AdamStepper(params, self.lr, name="BuiStreamingSVGP")
        last = float("nan")
        with torch.enable_grad():
            for step in range(self.num_steps):
                if not stepper.step(loss_fn):
                    # the loss failed at the last step's parameters: undo that step as well
                    return stepper.finish(loss_fn) if stepper.loss is not None else last
                last = float(stepper.loss)
                if clock.notify(callback, step, self, last, {"optimizer": "adam"}):
                    break
        return stepper.finish(loss_fn)

    def extra_repr(self) -> str:
        return (
            f"num_inducing={self.num_inducing}, num_latents={self._C}, "
            f"num_data={self.num_data}, optimizer={self.optimizer}, num_steps={self.num_steps}"
        )
