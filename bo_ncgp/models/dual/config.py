"""Settings of the memory-based dual SVGP (Chang et al. 2023, Algorithm 1 and Sec. 3.4-3.5).

:class:`DualSVGPConfig` holds every setting of :class:`~bo_ncgp.models.dual.DualSVGP` with its
default, checked once on construction. The model's keyword arguments build it, and the
model's attributes of the same names read and replace it.

Example:
    >>> cfg = DualSVGPConfig(memory_size=5, num_hyper_steps=0)
    >>> cfg.rho, cfg.memory_size, cfg.hyper_objective
    (1.0, 5, 'dual')
    >>> DualSVGPConfig(rho=0.0)
    Traceback (most recent call last):
    ...
    bo_ncgp.exceptions.InputDataError: DualSVGP: rho must be a finite number in (0, 1], got 0.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg._args import check_count, check_number, check_positive

__all__ = ["DualSVGPConfig", "MemoryRule"]

#: the memory selection rules (:attr:`DualSVGPConfig.memory_selection`)
MemoryRule = Literal[
    "bls", "bls_balanced", "bls_stratified", "random_stratified", "reservoir_stratified", "random"
]


@dataclass(frozen=True)
class DualSVGPConfig:
    """Every setting of :class:`~bo_ncgp.models.dual.DualSVGP` (Chang et al. 2023, Alg. 1).

    Attributes:
        memory_size: points of each new batch added to the memory (``None``: all of them).
        rho: damping of the natural-gradient steps (Eqs. 23-24, 54), in ``(0, 1]``.
        num_inner_steps: damped site updates per round of ``update``.
        num_hyper_steps: hyperparameter steps per round (0: hyperparameters fixed): Adam steps
            for ``hyper_optimizer="adam"``, the most L-BFGS iterations for ``"lbfgs"``.
        num_latents: C; ``None`` takes ``likelihood.num_latents`` (the model stores the
            resolved value).
        inducing_update: ``"pivoted_cholesky"`` (Sec. 3.4) or ``"fixed"``.
        memory_selection: ``"bls"`` (Eq. 31, the paper's), ``"bls_stratified"`` (for class
            labels -- Bernoulli and Softmax likelihoods -- a share of the memory per label in
            proportion to the points of that label seen so far, BLS within each label,
            :func:`~bo_ncgp.models.dual.memory.sample_stratified`: every old class keeps its
            share on class-incremental streams, and a rare label keeps its base rate; plain
            BLS for other likelihoods), ``"random_stratified"`` (the default: the shares of
            ``"bls_stratified"``, drawn uniformly within each label, an unbiased sample of
            every label's points; uniform for other likelihoods; ahead of both BLS rules and
            of random memory on split MNIST and split Fashion-MNIST; under ``memory_cap`` its
            eviction is uniform over the memory and the new points, so each label's memory
            becomes a window over the recent stream), ``"reservoir_stratified"`` (the same
            shares, and under the cap a reservoir: each label's memory stays a uniform sample
            of all the points of that label offered to it,
            :func:`~bo_ncgp.models.dual.memory.sample_reservoir`), ``"bls_balanced"`` (an
            equal share per label, :func:`~bo_ncgp.models.dual.memory.sample_balanced`) or
            ``"random"`` (ablation).
        memory_cap: total memory size (``None``: unbounded); beyond it, points are kept by the
            ``memory_selection`` rule and the sites of evicted points are folded into
            ``B_rest``. Bounds the memory, and with it the cost of an update, over any number
            of updates.
        hyper_objective: ``"dual"`` (Eq. 26 with the Sec. 3.4 scaling) or ``"elbo"`` (Eq. 21).
        hyper_optimizer: ``"lbfgs"`` (L-BFGS with a strong-Wolfe line search on the objective,
            the sites fixed -- a Gaussian likelihood's tied to the noise -- until its gradient
            or change falls below torch's tolerances or ``num_hyper_steps`` iterations, as
            ``fit_gpytorch_mll`` fits an exact GP),
            ``"adam"`` (``num_hyper_steps`` Adam steps from a fresh optimiser state, learning
            rate ``lr``, whether or not the objective has converged, each step projected back
            into the parameters' constraints), or ``"auto"`` (the default): ``"lbfgs"``, unless
            a kernel or likelihood parameter has a constraint without a transform (e.g.
            BoTorch's ``GreaterThan(2.5e-2, transform=None)`` lengthscales, made for bounded
            L-BFGS-B), which torch's unbounded L-BFGS would step through; then ``"adam"``.
        rest_factor: what the hyperparameter objective holds fixed of the summarised old data
            ``(lam_rest, B_rest)``: ``"dual"`` -- the dual pair itself, a factor on
            ``v = K_zz^{-1} u`` (Eq. 26 as written; the factor's information about ``f(Z)``
            then changes with the hyperparameters), or ``"inducing"`` -- the Gaussian factor
            it makes on ``u = f(Z)``, re-expressed at the new hyperparameters with
            ``P = K_zz(theta) K_zz(theta_0)^{-1}`` after the steps (Eq. 27's projection).
        memory_scaling: ``True`` (Sec. 3.4): the memory's expected log likelihood in Eq. 26 is
            scaled by ``n_old / n_M`` to stand for all old data and ``E_q[log T_rest]`` is
            subtracted; ``False``: memory points count once and the summarised factor stands
            for the likelihood of the other old points (a Gaussian site approximation, the
            ``n_M = 0`` case of Eq. 26).
        lr: Adam learning rate of the hyperparameter steps (``hyper_optimizer="adam"``).
        num_rounds: repetitions of (inner steps, hyperparameter steps) per update; the paper's
            Algorithm 1 is ``num_rounds = 1``.
        max_inducing: number of inducing points the pivoted-Cholesky updates keep (Sec. 3.4);
            ``None`` takes the number of initial inducing points (the model stores the
            resolved value).
        mean_constant: the constant prior mean ``c``: ``f = c + g`` with ``g ~ GP(0, k)``
            (its initial value when ``learn_mean_constant``).
        learn_mean_constant: ``True``: ``c`` is a hyperparameter, trained with the kernel and
            likelihood hyperparameters on the same objective (Eq. 26 or Eq. 21), as a
            ``ConstantMean`` is in GPyTorch; ``False``: ``c`` stays fixed. Not available for
            several latents (a constant shared by the latents of a softmax cancels).

    Example:
        >>> from dataclasses import replace
        >>> replace(DualSVGPConfig(), lr=0.1).lr
        0.1
    """

    memory_size: int | None = 10
    rho: float = 1.0
    num_inner_steps: int = 10
    num_hyper_steps: int = 50
    num_latents: int | None = None
    inducing_update: Literal["pivoted_cholesky", "fixed"] = "pivoted_cholesky"
    memory_selection: MemoryRule = "random_stratified"
    memory_cap: int | None = 1000
    hyper_objective: Literal["dual", "elbo"] = "dual"
    hyper_optimizer: Literal["auto", "lbfgs", "adam"] = "auto"
    rest_factor: Literal["dual", "inducing"] = "inducing"
    memory_scaling: bool = False
    lr: float = 0.01
    num_rounds: int = 1
    max_inducing: int | None = None
    mean_constant: float = 0.0
    learn_mean_constant: bool = False

    def __post_init__(self) -> None:
        who = "DualSVGP"
        for key in ("memory_size", "memory_cap"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, check_count(getattr(self, key), key, who))
        check_number(self.rho, "rho", who, low=0, high=1, low_open=True)
        for key in ("num_inner_steps", "num_hyper_steps"):
            check_count(getattr(self, key), key, who)
        check_count(self.num_rounds, "num_rounds", who, minimum=1)
        if self.num_latents is not None:
            check_count(self.num_latents, "num_latents", who, minimum=1)
        if self.max_inducing is not None:
            check_count(self.max_inducing, "max_inducing", who, minimum=1)
        if self.inducing_update not in ("pivoted_cholesky", "fixed"):
            raise InputDataError(
                "DualSVGP: inducing_update must be 'pivoted_cholesky' or 'fixed', got "
                f"{self.inducing_update!r}"
            )
        rules = get_args(MemoryRule)
        if self.memory_selection not in rules:
            raise InputDataError(
                f"DualSVGP: memory_selection must be one of {', '.join(map(repr, rules))}, "
                f"got {self.memory_selection!r}"
            )
        if self.hyper_objective not in ("dual", "elbo"):
            raise InputDataError(
                f"DualSVGP: hyper_objective must be 'dual' or 'elbo', got {self.hyper_objective!r}"
            )
        if self.hyper_optimizer not in ("auto", "lbfgs", "adam"):
            raise InputDataError(
                "DualSVGP: hyper_optimizer must be 'auto', 'lbfgs' or 'adam', got "
                f"{self.hyper_optimizer!r}"
            )
        if self.rest_factor not in ("dual", "inducing"):
            raise InputDataError(
                f"DualSVGP: rest_factor must be 'dual' or 'inducing', got {self.rest_factor!r}"
            )
        if not isinstance(self.memory_scaling, bool):
            raise InputDataError(
                f"DualSVGP: memory_scaling must be True or False, got {self.memory_scaling!r}"
            )
        if not isinstance(self.learn_mean_constant, bool):
            raise InputDataError(
                "DualSVGP: learn_mean_constant must be True or False, got "
                f"{self.learn_mean_constant!r}"
            )
        check_positive(self.lr, "lr", who)
        mi = self.max_inducing
        c = check_number(self.mean_constant, "mean_constant", who)
        normalised = {
            "rho": float(self.rho),
            "num_inner_steps": int(self.num_inner_steps),
            "num_hyper_steps": int(self.num_hyper_steps),
            "lr": float(self.lr),
            "num_rounds": int(self.num_rounds),
            "max_inducing": None if mi is None else int(mi),
            "mean_constant": c,
            "num_latents": None if self.num_latents is None else int(self.num_latents),
        }
        for key, value in normalised.items():
            object.__setattr__(self, key, value)
