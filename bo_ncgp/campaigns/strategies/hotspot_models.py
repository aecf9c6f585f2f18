"""The models of the hotspot strategies (:mod:`bo_ncgp.campaigns.strategies.hotspots`).

* :func:`hotspot_kernel`: Matérn-3/2 ARD kernel with ``Gamma(3, 6)`` lengthscale and
  ``Gamma(2, 0.15)`` outputscale priors (Maddox et al. 2021 / Chang et al. 2023, Sec. 4.1), with
  an optional learned constant prior mean;
* :func:`minmax_scale`: the campaign's features, min-max scaled with the initial villages;
* :class:`ConstantMeanSVGP`: Maddox et al.'s GPyTorch SVGP with a learned constant mean
  (:class:`bo_ncgp.models.svgp.SVGP`), refitted by Adam after every survey and converted to
  a :class:`~bo_ncgp.models.DualSVGP` (``svgp-entropy``, ``svgp-random``);
* :class:`RefitVariationalGP`: a zero-mean GPyTorch SVGP (Hensman et al. 2015) refitted from
  scratch by natural-gradient descent plus Adam
  (:class:`~bo_ncgp.models.training.AdamStepper`), conditioned on fantasies by batched
  refitting (``refit-entropy``; the standard, slow route).

The data terms use :meth:`bo_ncgp.likelihoods.Likelihood.expected_log_prob` (Gauss–Hermite),
the same expectations as the DualSVGP.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import gpytorch
import numpy as np
import torch
from gpytorch.kernels import ConstantKernel, Kernel, MaternKernel, ScaleKernel
from gpytorch.priors import GammaPrior
from torch import Tensor

from bo_ncgp.bo.acquisition import exceedance_entropy
from bo_ncgp.exceptions import InputDataError, NumericalWarning
from bo_ncgp.likelihoods import Likelihood
from bo_ncgp.linalg._args import check_count
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.base import FitStep
from bo_ncgp.models.svgp import SVGP
from bo_ncgp.models.training import AdamStepper, minimize_adam

__all__ = [
    "CONSTANT_INIT",
    "DTYPE",
    "ConstantMeanSVGP",
    "RefitGPConfig",
    "RefitVariationalGP",
    "RefittedSVGPConfig",
    "hotspot_kernel",
    "minmax_scale",
]

DTYPE = torch.float64
_REFIT = "refit-entropy"
#: initial variance of the constant-mean kernel (logit prevalences of civ are around -3)
CONSTANT_INIT = 10.0


def hotspot_kernel(dim: int, constant_mean: bool = False, outputscale_prior: bool = True) -> Kernel:
    """Matérn-3/2 ARD kernel with ``Gamma(3, 6)`` lengthscale and ``Gamma(2, 0.15)``
    outputscale priors (the model of Maddox et al. 2021 / Chang et al. 2023, Sec. 4.1).

    Args:
        dim: number of features.
        constant_mean: add a learned :class:`~gpytorch.kernels.ConstantKernel` ``c``, i.e. a
            constant prior mean ``b ~ N(0, c)`` integrated out (the models here have a zero
            mean function; Maddox et al.'s hotspot model has a learned ``ConstantMean``).
            Initialised at ``c = CONSTANT_INIT``, no prior.
        outputscale_prior: put the ``Gamma(2, 0.15)`` prior on the outputscale. (Maddox et
            al.'s script passes it to the Matérn kernel, which ignores it, so their
            outputscale is effectively unregularised.)

    Example:
        >>> hotspot_kernel(8).base_kernel.lengthscale.shape
        torch.Size([1, 8])
        >>> round(hotspot_kernel(8, constant_mean=True).kernels[1].constant.item(), 6)
        10.0
    """
    kernel = ScaleKernel(
        MaternKernel(nu=1.5, ard_num_dims=dim, lengthscale_prior=GammaPrior(3.0, 6.0)),
        outputscale_prior=GammaPrior(2.0, 0.15) if outputscale_prior else None,
    )
    if constant_mean:
        bias = ConstantKernel()
        bias.constant = torch.tensor(CONSTANT_INIT)
        kernel = kernel + bias
    return kernel.to(DTYPE)


def minmax_scale(pool: np.ndarray, X_init: np.ndarray) -> tuple[Tensor, np.ndarray, np.ndarray]:
    """``(scaled pool, lo, span)``: the pool min-max scaled with the statistics of ``X_init``
    (constant features get span 1), as the campaign's features.

    Example:
        >>> U, lo, span = minmax_scale(np.array([[0.0, 5.0], [2.0, 5.0], [4.0, 5.0]]),
        ...                            np.array([[0.0, 5.0], [2.0, 5.0]]))
        >>> U.tolist()
        [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]
    """
    lo, hi = X_init.min(0), X_init.max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return torch.as_tensor((pool - lo) / span, dtype=DTYPE), lo, span


def _checked_rel_tol(rel_tol: float | None, who: str) -> float | None:
    """``rel_tol`` as a float (or ``None``: no early stopping); refuses zero, negative, NaN."""
    if rel_tol is not None and not rel_tol > 0:
        raise InputDataError(f"{who}: rel_tol must be positive or None, got {rel_tol}")
    return None if rel_tol is None else float(rel_tol)


class ConstantMeanSVGP(SVGP):
    """GPyTorch SVGP with a learned constant mean (the hotspot model of Maddox et al. 2021):
    :class:`~bo_ncgp.models.svgp.SVGP` with ``mean="constant"``, learned inducing inputs and
    a Cholesky ``q(u)`` on the :func:`hotspot_kernel` without the constant kernel.

    Args:
        Z: ``(m, d)`` initial inducing locations (learned during :meth:`fit`).
        outputscale_prior: put ``Gamma(2, 0.15)`` on the outputscale (Maddox et al.'s script
            effectively does not).

    Example:
        >>> from bo_ncgp.likelihoods import Binomial
        >>> X = torch.rand(20, 2, dtype=torch.float64)
        >>> y = torch.randint(0, 30, (20,)).double()
        >>> gp = ConstantMeanSVGP(X)
        >>> loss = gp.fit(X, y, Binomial(100).double(), steps=5)
        >>> dual = gp.to_dual(Binomial(100).double(), num_data=20)
        >>> with torch.no_grad():
        ...     ref = gp(X).mean
        >>> bool(torch.allclose(dual.predict_f(X)[0], ref, atol=1e-5))
        True
    """

    def __init__(self, Z: Tensor, outputscale_prior: bool = False) -> None:
        kernel = hotspot_kernel(Z.shape[-1], outputscale_prior=outputscale_prior)
        super().__init__(kernel, Z, mean="constant")
        self.steps_taken = 0

    def fit(
        self, X: Tensor, y: Tensor, likelihood: Likelihood, beta: float | None = None,
        steps: int | None = None, lr: float | None = None, rel_tol: float | None = None,
    ) -> float:  # fmt: skip
        """Adam (:func:`~bo_ncgp.models.training.minimize_adam`) on
        ``-(sum_i E_q log p(y_i|f_i) - beta KL[q(u)||p(u)] + log prior) / n`` (the tempered
        ELBO; ``beta = 1`` is the ELBO, Hensman et al. 2015, Eq. 10); returns the last loss.
        Ends in eval mode.

        ``beta``, ``steps`` (the most Adam steps) and ``lr``: ``None`` takes those of
        :class:`~bo_ncgp.campaigns.strategies.hotspots.RefittedSVGPConfig`.

        ``rel_tol``: also stop early when BoTorch's
        :class:`~botorch.optim.stopping.ExpMAStoppingCriterion` (window 10) sees a relative
        decrease of the smoothed loss below ``rel_tol`` -- the rule of the BoTorch
        ``fit_gpytorch_torch`` loop Maddox et al.'s script used (``1e-5`` there). ``None``
        runs all ``steps``. The number of steps taken is kept in ``self.steps_taken``.

        A non-finite loss or gradient ends the fit at the parameters before that step, with
        a :class:`~bo_ncgp.exceptions.NumericalWarning` (:mod:`bo_ncgp.models.training`).

        Example:
            >>> from bo_ncgp.likelihoods import Binomial
            >>> X = torch.rand(15, 2, dtype=DTYPE)
            >>> y = torch.randint(0, 40, (15,)).to(DTYPE)
            >>> gp = ConstantMeanSVGP(X)
            >>> _ = gp.fit(X, y, Binomial(100).to(DTYPE), steps=300, rel_tol=1.0)
            >>> gp.steps_taken  # the first step the 10-wide window can judge
            11
        """
        if X.shape[0] == 0 or X.shape[0] != y.shape[0]:
            raise InputDataError(f"fit: need matching non-empty X and y, got {X.shape}, {y.shape}")
        rel_tol = _checked_rel_tol(rel_tol, "fit")
        if beta is None or steps is None or lr is None:
            defaults = RefittedSVGPConfig()
            beta = defaults.beta if beta is None else beta
            steps = defaults.num_steps if steps is None else steps
            lr = defaults.lr if lr is None else lr
        from botorch.optim.stopping import ExpMAStoppingCriterion

        stop = None if rel_tol is None else ExpMAStoppingCriterion(maxiter=steps, rel_tol=rel_tol)
        n = X.shape[-2]

        def loss_fn(step: int) -> Tensor:
            q = self(X)
            elp = likelihood.expected_log_prob(y, q.mean, q.variance).sum()
            return -(elp - beta * self.kl_divergence() + self.log_prior()) / n

        def early_stop(fit_step: FitStep) -> bool:
            return stop(torch.tensor(fit_step.loss, dtype=X.dtype))

        self.train()
        losses = minimize_adam(
            self.parameters(),
            loss_fn,
            int(steps),
            lr=lr,
            model=self,
            callback=None if stop is None else early_stop,
            name="ConstantMeanSVGP.fit",
        )
        self.eval()
        self.steps_taken = len(losses)
        return losses[-1] if losses else float("nan")

    def to_dual(self, likelihood: Likelihood, num_data: int = 0, **kwargs: Any) -> DualSVGP:
        """The fitted posterior as a :class:`~bo_ncgp.models.DualSVGP` (a copy of the kernel;
        see :meth:`~bo_ncgp.models.DualSVGP.from_inducing_posterior`)."""
        Z, m, S = self.inducing_posterior()
        return DualSVGP.from_inducing_posterior(
            copy.deepcopy(self.kernel), likelihood, Z, m, S,
            mean_constant=float(self.mean_module.constant.detach()), num_data=num_data, **kwargs,
        )  # fmt: skip


def _natural_svgp(kernel: Kernel, Z: Tensor, batch_shape: tuple[int, ...] = ()) -> SVGP:
    """Zero-mean SVGP on fixed inducing inputs with a natural-parameter ``q(u)`` (batched)."""
    svgp = SVGP(
        kernel, Z, batch_shape=batch_shape, variational="natural", learn_inducing_locations=False
    )
    return svgp.to(DTYPE)


@dataclass(frozen=True)
class RefittedSVGPConfig:
    """Settings of the refitted constant-mean SVGP surrogate
    (:class:`~bo_ncgp.campaigns.strategies.hotspots.RefittedSVGP`).

    Attributes:
        num_steps: the most Adam steps per refit (Maddox et al.: 1000).
        lr: Adam learning rate (0.01).
        beta: KL weight of the ELBO (1: Chang et al.'s "tempering off").
        rel_tol: early-stopping tolerance of
            :meth:`~bo_ncgp.campaigns.strategies.hotspot_models.ConstantMeanSVGP.fit`
            (BoTorch's default ``1e-5``, as Maddox et al.'s loop; ``None``: always
            ``num_steps`` steps).
        recycle: start each refit from the previous fit's lengthscales and outputscale.
        outputscale_prior: ``Gamma(2, 0.15)`` on the outputscale (Maddox et al.'s script
            passes it to the Matérn kernel, which ignores it; ``False`` reproduces that).
        refit_every: refit after every ``refit_every``-th survey (counted from the initial
            fit); the surveys in between are added to the converted DualSVGP by streaming
            updates (:meth:`~bo_ncgp.models.DualSVGP.project` onto ``[Z, x_new]``, then
            :meth:`~bo_ncgp.models.DualSVGP.update` with the refit's hyperparameters and
            mean kept). ``1``: a refit after every survey (Maddox et al.'s loop).

    Example:
        >>> RefittedSVGPConfig(rel_tol=None).rel_tol is None
        True
        >>> RefittedSVGPConfig(num_steps=0)
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.InputDataError: svgp: num_steps must be a positive int, got 0
    """

    #: left out of saved campaign configurations while at their defaults (:func:`saved_options`)
    OMITTED_AT_DEFAULT: ClassVar[tuple[str, ...]] = ("refit_every",)

    num_steps: int = 1000
    lr: float = 0.01
    beta: float = 1.0
    rel_tol: float | None = 1e-5
    recycle: bool = True
    outputscale_prior: bool = False
    refit_every: int = 1

    def __post_init__(self) -> None:
        if int(self.num_steps) != self.num_steps or self.num_steps < 1:
            raise InputDataError(f"svgp: num_steps must be a positive int, got {self.num_steps}")
        if not self.lr > 0 or not self.beta > 0:
            raise InputDataError(f"svgp: lr and beta must be positive, got {self.lr}, {self.beta}")
        _checked_rel_tol(self.rel_tol, "svgp")
        check_count(self.refit_every, "refit_every", "svgp", minimum=1)


@dataclass(frozen=True)
class RefitGPConfig:
    """Settings of :class:`RefitVariationalGP` (the ``refit-entropy`` surrogate).

    Attributes:
        num_steps: joint (NGD on ``q(u)``, Adam on hyperparameters) steps of each fit.
        lr: Adam learning rate of the hyperparameters.
        ngd_lr: NGD step size of the joint steps.
        polish_steps, polish_lr: NGD steps on ``q(u)`` alone after the joint steps.
        fantasy_steps: NGD steps of each fantasy refit (warm start, hyperparameters fixed;
            with step size 1, 3-4 steps agree with 20 to about 1% of the entropy change).
        fantasy_lr: NGD step size of the fantasy refits.
        batch_limit: fantasy models trained together in one batched GPyTorch model.
        constant_mean, outputscale_prior: kernel options of :func:`hotspot_kernel`.

    Example:
        >>> RefitGPConfig().num_steps, RefitGPConfig().fantasy_steps
        (200, 4)
    """

    num_steps: int = 200
    lr: float = 0.05
    ngd_lr: float = 0.1
    polish_steps: int = 10
    polish_lr: float = 0.5
    fantasy_steps: int = 4
    fantasy_lr: float = 1.0
    batch_limit: int = 64
    constant_mean: bool = False
    outputscale_prior: bool = True


class RefitVariationalGP:
    """GPyTorch SVGP refitted from scratch; fantasies by batched refitting (module doc).

    Args:
        likelihood: a :class:`bo_ncgp.likelihoods.Likelihood` (here ``Binomial(100)``).
        config: the fit settings (:class:`RefitGPConfig`); its step counts and step sizes
            are kept as attributes (``num_steps``, ``fantasy_steps``, ...).

    Example:
        >>> from bo_ncgp.likelihoods import Binomial
        >>> X = torch.rand(12, 2, dtype=DTYPE)
        >>> y = torch.randint(0, 30, (12,)).to(DTYPE)
        >>> gp = RefitVariationalGP(Binomial(100).to(DTYPE), RefitGPConfig(num_steps=5))
        >>> gp.fit(X, y).predict_f(X[:3])[0].shape
        torch.Size([3])
    """

    def __init__(self, likelihood: Likelihood, config: RefitGPConfig | None = None) -> None:
        c = RefitGPConfig() if config is None else config
        self.likelihood = likelihood
        self.kernel_options = dict(
            constant_mean=bool(c.constant_mean), outputscale_prior=bool(c.outputscale_prior)
        )
        self.polish_lr = float(c.polish_lr)
        self.num_steps = int(c.num_steps)
        self.lr = float(c.lr)
        self.ngd_lr = float(c.ngd_lr)
        self.polish_steps = int(c.polish_steps)
        self.fantasy_steps = int(c.fantasy_steps)
        self.fantasy_lr = float(c.fantasy_lr)
        self.batch_limit = int(c.batch_limit)
        self.gp: SVGP | None = None
        self.X = self.y = None

    def _neg_elbo(self, gp: SVGP, X: Tensor, y: Tensor) -> Tensor:
        """``-ELBO / n`` per batch element (the scaling GPyTorch's NGD expects)."""
        q = gp(X)
        elbo = self.likelihood.expected_log_prob(y, q.mean, q.variance).sum(-1)
        return -(elbo - gp.kl_divergence()) / X.shape[-2]

    def _ngd_steps(self, gp: SVGP, X: Tensor, y: Tensor, steps: int, lr: float) -> None:
        """Natural-gradient steps on ``q(u)`` only (hyperparameters frozen)."""
        hypers = list(gp.kernel.parameters())
        for p in hypers:
            p.requires_grad_(False)
        try:
            ngd = gpytorch.optim.NGD(gp.variational_parameters(), num_data=X.shape[-2], lr=lr)
            for _ in range(steps):
                ngd.zero_grad()
                self._neg_elbo(gp, X, y).sum().backward()
                ngd.step()
        finally:
            for p in hypers:
                p.requires_grad_(True)

    def fit(self, X: Tensor, y: Tensor) -> RefitVariationalGP:
        """Fit a new ``q(u)`` (inducing points = ``X``) and the hyperparameters (started from
        the previous fit's values) on ``(X, y)``."""
        kernel = hotspot_kernel(X.shape[-1], **self.kernel_options)
        if self.gp is not None:
            kernel.load_state_dict(self.gp.kernel.state_dict())
        gp = _natural_svgp(kernel, X)
        gp.train()
        n = X.shape[0]
        ngd = gpytorch.optim.NGD(gp.variational_parameters(), num_data=n, lr=self.ngd_lr)
        adam = AdamStepper(
            gp.hyperparameters(), self.lr, companions=[ngd], on_nonfinite="raise", name=_REFIT
        )
        for _ in range(self.num_steps):
            adam.step(lambda: self._neg_elbo(gp, X, y) - gp.log_prior() / n)
        self._ngd_steps(gp, X, y, self.polish_steps, self.polish_lr)
        gp.eval()
        self.gp, self.X, self.y = gp, X, y
        return self

    @torch.no_grad()
    def predict_f(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Marginals ``(n,)`` of ``q(f)``."""
        out = self.gp(X)
        return out.mean, out.variance.clamp_min(0)

    def fantasy_entropies(self, cand: Tensor, Y: Tensor, pool: Tensor, level: float) -> Tensor:
        """Summed exceedance entropy over ``pool`` after refitting on each fantasy.

        Args:
            cand: ``(n_c, d)`` candidates; Y: ``(n_c, J)`` fantasised observations.
            pool: ``(P, d)``; level: latent threshold.

        Returns:
            ``(n_c, J)`` entropies (nats).
        """
        n_c, J = Y.shape
        Xc = cand.repeat_interleave(J, 0)
        Yc = Y.reshape(-1)
        out = []
        for start in range(0, n_c * J, self.batch_limit):
            sl = slice(start, start + self.batch_limit)
            out.append(self._refit_batch(Xc[sl], Yc[sl], pool, level))
        return torch.cat(out).reshape(n_c, J)

    def _refit_batch(self, xc: Tensor, yc: Tensor, pool: Tensor, level: float) -> Tensor:
        b, n = xc.shape[0], self.X.shape[0]
        base = self.gp.variational_strategy._variational_distribution
        fgp = _natural_svgp(self.gp.kernel, self.gp.inducing_points, (b,))
        dist = fgp.variational_strategy._variational_distribution
        with torch.no_grad():  # warm start at the fitted q(u)
            dist.natural_vec.copy_(base.natural_vec.expand(b, -1))
            dist.natural_mat.copy_(base.natural_mat.expand(b, -1, -1))
            # or GPyTorch re-initialises q(u) from the prior on the first call
            fgp.variational_strategy.variational_params_initialized.fill_(1)
        Xa = torch.cat([self.X.expand(b, n, -1), xc.unsqueeze(-2)], -2)
        ya = torch.cat([self.y.expand(b, n), yc.unsqueeze(-1)], -1)
        fgp.train()
        self._ngd_steps(fgp, Xa, ya, self.fantasy_steps, self.fantasy_lr)
        fgp.eval()
        with torch.no_grad():
            q = fgp(pool.expand(b, *pool.shape))
            H = exceedance_entropy(q.mean, q.variance.clamp_min(0), level).sum(-1)
            bad = ~torch.isfinite(H)
            if bool(bad.any()):  # a diverged refit carries no information: score it as zero
                warnings.warn(
                    f"{_REFIT}: {int(bad.sum())} fantasy refit(s) diverged; they are "
                    "scored as no entropy change",
                    NumericalWarning,
                    stacklevel=2,
                )
                mean, var = self.predict_f(pool)
                H = torch.where(bad, exceedance_entropy(mean, var, level).sum(), H)
            return H
