"""``svgp-entropy``: the hotspot loop of Chang et al. (2023, Sec. 4.1, Fig. 4) as they ran it.

Chang et al. ran Fig. 4 with the code and model of Maddox et al. (2021), tempering turned
off, replacing online variational conditioning by dual conditioning. That loop differs from
our streaming ``entropy`` strategy in the model, not in the acquisition:

* after every survey a GPyTorch SVGP is **refitted from scratch** on all surveyed villages:
  a learned ``ConstantMean``, a whitened Cholesky ``q(u)``, learned inducing locations that
  start at the surveyed villages, a Matérn-3/2 ARD kernel with the ``Gamma(3, 6)``
  lengthscale prior, and up to ``num_steps`` Adam steps (lr 0.01) on ``ELBO(beta) + log
  prior`` (``beta = 1``: no tempering), stopped early by the moving-average rule of the BoTorch
  fit loop their script calls (``fit_gpytorch_torch``: BoTorch's
  :class:`~botorch.optim.stopping.ExpMAStoppingCriterion`, relative tolerance ``1e-5``;
  ~250-500 steps on 200 villages instead of 1,000). The lengthscales and outputscale of the
  previous fit are the starting point of the next (Maddox et al.'s ``recycle_lengthscales``);
* the fitted ``q(u)`` is converted to a :class:`~bo_ncgp.models.DualSVGP` with
  :meth:`~bo_ncgp.models.DualSVGP.from_inducing_posterior` (same predictions, exactly), and
  the next village maximises the same dual-conditioning entropy reduction as ``entropy``
  (:class:`~bo_ncgp.bo.acquisition.ThresholdEntropyReduction`).

Maddox et al.'s script passes the ``Gamma(2, 0.15)`` outputscale prior to the Matérn kernel,
which ignores it; ``outputscale_prior=False`` (the default here) reproduces that.

Each refit is seeded by the seed and the number of surveyed villages, so a resumed campaign
(which replays ``observe`` batch by batch) repeats the same refits and ends with the same
results -- but replaying a long campaign costs one refit per past survey.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gpytorch
import numpy as np
import torch
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.priors import GammaPrior
from torch import Tensor

from bo_ncgp.campaigns.hotspot_strategies import DTYPE, EntropyStrategy
from bo_ncgp.campaigns.strategy import History
from bo_ncgp.likelihoods import Binomial, Likelihood
from bo_ncgp.linalg import stable_cholesky

__all__ = ["ConstantMeanSVGP", "SVGPEntropyStrategy", "SVGPRandomStrategy"]


def _checked_rel_tol(rel_tol: float | None, who: str) -> float | None:
    """``rel_tol`` as a float (or ``None``: no early stopping); refuses zero, negative, NaN."""
    if rel_tol is not None and not rel_tol > 0:
        raise ValueError(f"{who}: rel_tol must be positive or None, got {rel_tol}")
    return None if rel_tol is None else float(rel_tol)


class ConstantMeanSVGP(gpytorch.models.ApproximateGP):
    """GPyTorch SVGP with a learned constant mean (the hotspot model of Maddox et al. 2021).

    Args:
        Z: ``(m, d)`` initial inducing locations (learned during :meth:`fit`).
        outputscale_prior: put ``Gamma(2, 0.15)`` on the outputscale (Maddox et al.'s script
            effectively does not).

    Example:
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
        q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
        strategy = gpytorch.variational.VariationalStrategy(
            self, Z.detach().clone(), q, learn_inducing_locations=True
        )
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ConstantMean()
        self.kernel = ScaleKernel(
            MaternKernel(nu=1.5, ard_num_dims=Z.shape[-1], lengthscale_prior=GammaPrior(3.0, 6.0)),
            outputscale_prior=GammaPrior(2.0, 0.15) if outputscale_prior else None,
        )
        self.to(Z)

    def forward(self, x: Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.kernel(x))

    def fit(
        self, X: Tensor, y: Tensor, likelihood: Likelihood, beta: float = 1.0,
        steps: int = 1000, lr: float = 0.01, rel_tol: float | None = None,
    ) -> float:  # fmt: skip
        """Adam on ``-(sum_i E_q log p(y_i|f_i) - beta KL[q(u)||p(u)] + log prior) / n``
        (the tempered ELBO; ``beta = 1`` is the ELBO); returns the last loss. Ends in eval
        mode.

        ``rel_tol``: also stop early when BoTorch's
        :class:`~botorch.optim.stopping.ExpMAStoppingCriterion` (window 10) sees a relative
        decrease of the smoothed loss below ``rel_tol`` -- the rule of the BoTorch
        ``fit_gpytorch_torch`` loop Maddox et al.'s script used (``1e-5`` there). ``None``
        runs all ``steps``. The number of steps taken is kept in ``self.steps_taken``."""
        if X.shape[0] == 0 or X.shape[0] != y.shape[0]:
            raise ValueError(f"fit: need matching non-empty X and y, got {X.shape}, {y.shape}")
        rel_tol = _checked_rel_tol(rel_tol, "fit")
        from botorch.optim.stopping import ExpMAStoppingCriterion

        stop = None if rel_tol is None else ExpMAStoppingCriterion(maxiter=steps, rel_tol=rel_tol)
        self.train()
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        loss = torch.zeros(())
        self.steps_taken = 0
        for _ in range(int(steps)):
            opt.zero_grad()
            q = self(X)
            elp = likelihood.expected_log_prob(y, q.mean, q.variance).sum()
            kl = self.variational_strategy.kl_divergence()
            prior = sum(pr.log_prob(cl(mod)).sum() for _, mod, pr, cl, _ in self.named_priors())
            loss = -(elp - beta * kl + prior) / X.shape[-2]
            loss.backward()
            opt.step()
            self.steps_taken += 1
            if stop is not None and stop(loss.detach()):
                break
        self.eval()
        return float(loss.detach())

    def inducing_posterior(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(Z, m, S)``: inducing inputs and the un-whitened ``q(g(Z)) = N(m, S)``, where
        ``g = f - constant`` (``m = L m_w``, ``S = L S_w L^T``, ``L L^T = K_zz``)."""
        vs = self.variational_strategy
        with torch.no_grad():
            Z = vs.inducing_points.detach().clone()
            q = vs.variational_distribution
            L = stable_cholesky(self.kernel(Z).to_dense(), name="K_zz")
            return Z, L @ q.mean, L @ q.covariance_matrix @ L.mT

    def to_dual(self, likelihood: Likelihood, num_data: int = 0, **kwargs: Any):
        """The fitted posterior as a :class:`~bo_ncgp.models.DualSVGP` (a copy of the kernel;
        see :meth:`~bo_ncgp.models.DualSVGP.from_inducing_posterior`)."""
        import copy

        from bo_ncgp.models import DualSVGP

        Z, m, S = self.inducing_posterior()
        return DualSVGP.from_inducing_posterior(
            copy.deepcopy(self.kernel), likelihood, Z, m, S,
            mean_constant=float(self.mean_module.constant.detach()), num_data=num_data, **kwargs,
        )  # fmt: skip


class SVGPEntropyStrategy(EntropyStrategy):
    """``svgp-entropy``: refit :class:`ConstantMeanSVGP` after every survey, convert it to a
    DualSVGP and pick the village with the dual-conditioning entropy reduction (module
    docstring).

    Args:
        num_steps: the most Adam steps per refit (Maddox et al.: 1000).
        rel_tol: early-stopping tolerance of :meth:`ConstantMeanSVGP.fit` (``1e-5``: BoTorch's
            default, as in Maddox et al.'s loop; ``None``: always ``num_steps`` steps).
        lr: Adam learning rate (0.01).
        beta: KL weight of the ELBO (1: Chang et al.'s "tempering off"; Maddox et al.'s
            default is 0.1).
        recycle: start each refit from the previous fit's lengthscales and outputscale.
        outputscale_prior: see :class:`ConstantMeanSVGP`.
        num_fantasies, compute_dtype, chunk_size, criterion, clamp: the acquisition's, as in
            :class:`~bo_ncgp.campaigns.hotspot_strategies.EntropyStrategy`.

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import Campaign
        >>> from bo_ncgp.problems.hotspots import HotspotPool
        >>> pool = HotspotPool(np.random.default_rng(0).random((30, 2)), 0.01 * np.arange(30), 0.1)
        >>> strat = SVGPEntropyStrategy(num_steps=5, num_fantasies=4)
        >>> state = Campaign(pool, strat, budget=9, batch_size=1, num_initial=8, seed=0,
        ...                  out_dir=tempfile.mkdtemp()).run(progress=False)
        >>> strat.model.num_data, strat.model.num_inducing  # refitted on all 9 surveyed villages
        (9, 9)
    """

    name = "svgp-entropy"
    #: campaigns saved before ``rel_tol`` existed ran every refit for ``num_steps`` steps
    legacy_config: ClassVar[dict[str, Any]] = {**EntropyStrategy.legacy_config, "rel_tol": None}

    def __init__(
        self,
        num_steps: int = 1000,
        lr: float = 0.01,
        beta: float = 1.0,
        rel_tol: float | None = 1e-5,
        recycle: bool = True,
        outputscale_prior: bool = False,
        num_fantasies: int = 16,
        compute_dtype: str = "float32",
        chunk_size: int = 16,
        criterion: str = "exceedance",
        clamp: bool = False,
    ) -> None:
        super().__init__(
            num_fantasies=num_fantasies,
            compute_dtype=compute_dtype,
            chunk_size=chunk_size,
            criterion=criterion,
            clamp=clamp,
            outputscale_prior=outputscale_prior,
        )
        if int(num_steps) != num_steps or num_steps < 1:
            raise ValueError(f"svgp-entropy: num_steps must be a positive int, got {num_steps}")
        if not lr > 0 or not beta > 0:
            raise ValueError(f"svgp-entropy: lr and beta must be positive, got {lr}, {beta}")
        self.num_steps, self.svgp_lr, self.beta = int(num_steps), float(lr), float(beta)
        self.rel_tol = _checked_rel_tol(rel_tol, "svgp-entropy")
        self.recycle = bool(recycle)

    def setup(self, problem, seed) -> None:
        super().setup(problem, seed)
        self.seed = int(seed)
        self.gp: ConstantMeanSVGP | None = None
        self.last_loss = float("nan")

    def _fit(self, idx: np.ndarray, y: Tensor) -> None:
        X, counts = self._record(idx, y)
        likelihood = Binomial(self.num_trials).to(DTYPE)
        gp = ConstantMeanSVGP(X, self.outputscale_prior)
        if self.recycle and self.gp is not None:
            gp.kernel.load_state_dict(self.gp.kernel.state_dict())
        with torch.random.fork_rng():  # q(u)'s random initial mean, reproducible per step
            torch.manual_seed(self.seed * 100_003 + len(self.observed))
            self.last_loss = gp.fit(
                X, counts, likelihood, self.beta, self.num_steps, self.svgp_lr, self.rel_tol
            )
        self.gp = gp
        self.model = gp.to_dual(likelihood, num_data=len(self.observed))

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": "GPyTorch SVGP with constant mean, refitted; DualSVGP fantasies",
            "num_steps": self.num_steps,
            "lr": self.svgp_lr,
            "beta": self.beta,
            "rel_tol": self.rel_tol,
            "recycle": self.recycle,
            "outputscale_prior": self.outputscale_prior,
            "num_fantasies": self.num_fantasies,
            "compute_dtype": self.compute_dtype,
            "chunk_size": self.chunk_size,
            "criterion": self.criterion,
            "clamp": self.clamp,
        }


class SVGPRandomStrategy(SVGPEntropyStrategy):
    """``svgp-random``: the ``random`` row of Chang et al.'s Fig. 4 as their script ran it: a
    uniformly random remaining village, with :class:`ConstantMeanSVGP` refitted after every
    survey exactly as in ``svgp-entropy`` (the model is only used for the metrics).

    The village is drawn as in ``random`` (``rng.choice`` over the remaining pool, nothing else
    consumes the campaign's generator), so for the same seed ``svgp-random`` and ``random``
    survey the same villages and differ only in the prevalence model.

    Example:
        >>> import tempfile
        >>> from bo_ncgp.campaigns import Campaign
        >>> from bo_ncgp.problems.hotspots import HotspotPool
        >>> pool = HotspotPool(np.random.default_rng(0).random((30, 2)), 0.01 * np.arange(30), 0.1)
        >>> strat = SVGPRandomStrategy(num_steps=5)
        >>> state = Campaign(pool, strat, budget=11, batch_size=1, num_initial=8, seed=0,
        ...                  out_dir=tempfile.mkdtemp()).run(progress=False)
        >>> strat.model.num_data, state["iterations"][-1]["metrics"]["acquisition_seconds"] < 1
        (11, True)
    """

    name = "svgp-random"

    def _choose(self, history: History, rng: np.random.Generator) -> int:
        return self._random_village(history, rng)

    def config(self) -> dict[str, Any]:
        out = super().config()
        for key in ("num_fantasies", "compute_dtype", "chunk_size", "criterion", "clamp"):
            out.pop(key)  # no acquisition
        out["model"] = "GPyTorch SVGP with constant mean, refitted; random villages"
        return out
