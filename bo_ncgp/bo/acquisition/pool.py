"""Pool-based active learning: expected reduction of a summed per-point entropy over a pool.

The hotspot acquisition of Chang et al. (2023), Sec. 4.1 (setup of Maddox et al. 2021):
choose the candidate ``x*`` that maximises the expected reduction, over fantasised
observations ``y* ~ p(y | x*)``, of the summed uncertainty of a pool,

    a(x*) = H(q) - E_{y*}[ H(q | x*, y*) ],     H(q) = sum_{x in pool} w_x h_q(x),

where ``h_q(x)`` is a per-point entropy of the latent marginal ``q(f(x)) = N(mu, sigma^2)``
(a *criterion*, see :func:`register_criterion`). The library's criterion ``"exceedance"`` is
the Bernoulli entropy of the exceedance probability of a threshold ``t`` on the logit scale,

    h(x) = h_B( P(theta(x) > t) ),  P(theta(x) > t) = P(f(x) > logit t)
         = Phi((mu(x) - logit t) / sigma(x)),   h_B(p) = -p log p - (1 - p) log(1 - p).

The acquisition is written against the model contract only
(:meth:`bo_ncgp.models.base.LatentGP.pool_fantasies`): the model returns the pool's marginals
and, for a candidate in the pool and a fantasy observation there, the pool's marginals after
conditioning on it. Models with a rank-one update (dual conditioning, Chang et al. 2023,
Eqs. 10-12) make each (candidate, fantasy) pair O(P); the generic path conditions through
``condition``.

Fantasies (QMC). ``y*`` is discrete for the count likelihoods used here, so instead of
sampling the latent and then the count, the exact predictive ``p(y | x*) = int p(y | f)
N(f | mu, var) df`` is computed on the likelihood's finite support (Gauss–Hermite in ``f``)
and the fantasies are its quantiles at the one-dimensional lattice points ``u_j = (j +
shift) / J`` -- a rank-1 lattice (QMC) rule in the inverse-CDF coordinate with equal weights.
With ``shift = 1/2`` (default) it is the midpoint rule, deterministic and reproducible.

How the per-point entropy changes count is a *gain* (see :func:`register_gain`): the
library's gain ``"reduction"`` (the default) is the reduction of the summed entropy,
``sum_x w_x (h(x) - h_j(x))``; another ``gain(h_now, h_after)`` replaces the per-point change
``h_now - h_after`` before the weighted sum (e.g. to count only decreases).

Example:
    >>> from gpytorch.kernels import RBFKernel
    >>> from bo_ncgp.likelihoods import Binomial
    >>> from bo_ncgp.models import DualSVGP
    >>> X, pool = torch.rand(12, 1), torch.linspace(0, 1, 20).unsqueeze(-1)
    >>> dual = DualSVGP(RBFKernel(), Binomial(10), X[:4], num_hyper_steps=0)
    >>> dual = dual.update(X, torch.randint(0, 11, (12,)).to(X))
    >>> acq = ThresholdEntropyReduction(dual, pool, threshold=0.3, num_fantasies=4)
    >>> scores = acq.score_pool()  # one score per pool member
    >>> scores.shape, bool(scores.max() > 0)
    (torch.Size([20]), True)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from botorch.acquisition import AcquisitionFunction
from botorch.models.model import Model
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError
from bo_ncgp.likelihoods import Bernoulli, Binomial, Likelihood
from bo_ncgp.likelihoods.quadrature import gh_points
from bo_ncgp.models.base import PoolFantasies

__all__ = [
    "CRITERIA",
    "GAINS",
    "EntropyFn",
    "GainFn",
    "ThresholdEntropyReduction",
    "check_criterion",
    "check_gain",
    "entropy_reduction",
    "exceedance_entropy",
    "exceedance_probability",
    "fantasies_of",
    "latent_model",
    "predictive_quantile_fantasies",
    "register_criterion",
    "register_gain",
    "resolve_gain",
    "threshold_entropy_reduction",
]

#: a per-point criterion: ``entropy_fn(mean, var, level) -> h`` elementwise (nats)
EntropyFn = Callable[[Tensor, Tensor, float], Tensor]
#: how per-point entropies count: ``gain(h_now (P,), h_after (b, J, P)) -> (b, J, P)``
GainFn = Callable[[Tensor, Tensor], Tensor]


# --------------------------------------------------------------------------- pointwise
def exceedance_probability(mean: Tensor, var: Tensor, level: float | Tensor) -> Tensor:
    """``P(f > level) = Phi((mean - level) / sqrt(var))`` for ``f ~ N(mean, var)``.

    With the logit link and ``level = logit(t)`` this is ``P(sigmoid(f) > t)``.

    Example:
        >>> exceedance_probability(torch.tensor([0.0]), torch.tensor([1.0]), 0.0)
        tensor([0.5000])
    """
    return torch.special.ndtr((mean - level) / var.clamp_min(torch.finfo(var.dtype).tiny).sqrt())


def _entropy_from_z(z: Tensor) -> Tensor:
    """``h(Phi(z))`` in nats, symmetric in ``z``; the tail ``Phi(-|z|)`` keeps it accurate."""
    p = torch.special.ndtr(-z.abs())
    return -(torch.special.xlogy(p, p) + (1 - p) * torch.log1p(-p))


def exceedance_entropy(mean: Tensor, var: Tensor, level: float | Tensor) -> Tensor:
    """Bernoulli entropy (nats) of ``P(f > level)``, ``f ~ N(mean, var)``, elementwise: the
    criterion ``"exceedance"`` (module docstring).

    Example:
        >>> round(float(exceedance_entropy(torch.tensor(0.0), torch.tensor(1.0), 0.0)), 6)  # log 2
        0.693147
    """
    sd = var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()
    return _entropy_from_z((mean - level) / sd)


# --------------------------------------------------------------------------- registries
def _register(table: dict[str, Callable], kind: str, name: str, fn: Callable) -> Callable:
    """Put ``fn`` in ``table`` under ``name`` (a no-op for the same function; another function
    under a taken name is an error). ``kind`` names the table in the messages."""
    if not isinstance(name, str) or not name:
        raise InputDataError(f"a {kind} name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise InputDataError(f"{kind} {name!r}: the {kind} function must be callable")
    if table.get(name, fn) is not fn:
        raise InputDataError(f"{kind} {name!r} is already registered with another function")
    table[name] = fn
    return fn


def _check(table: dict[str, Callable], kind: str, name: str) -> str:
    """``name`` if it is a key of ``table``, else an error naming the keys."""
    if name not in table:
        raise InputDataError(f"{kind} must be one of {tuple(table)}, got {name!r}")
    return name


# --------------------------------------------------------------------------- criteria
#: registered per-point criteria by name (:func:`register_criterion`)
CRITERIA: dict[str, EntropyFn] = {"exceedance": exceedance_entropy}


def register_criterion(name: str, entropy_fn: EntropyFn) -> EntropyFn:
    """Register ``entropy_fn(mean, var, level) -> h`` (elementwise, nats) as criterion ``name``.

    Registering the same function twice is a no-op; another function under a taken name is an
    :class:`~bo_ncgp.exceptions.InputDataError`.

    Example:
        >>> def variance(mean, var, level):  # a toy criterion: the latent variance itself
        ...     return var
        >>> _ = register_criterion("toy-variance", variance)
        >>> check_criterion("toy-variance"), "toy-variance" in CRITERIA
        ('toy-variance', True)
        >>> del CRITERIA["toy-variance"]
    """
    return _register(CRITERIA, "criterion", name, entropy_fn)


def check_criterion(criterion: str) -> str:
    """``criterion`` if it is registered in :data:`CRITERIA`, else an
    :class:`~bo_ncgp.exceptions.InputDataError` naming them.

    Example:
        >>> check_criterion("exceedance")
        'exceedance'
    """
    return _check(CRITERIA, "criterion", criterion)


# --------------------------------------------------------------------------- gains
def entropy_reduction(h_now: Tensor, h_after: Tensor) -> Tensor:
    """The gain ``"reduction"``: the per-point change ``h(x) - h_j(x)`` (module docstring), so
    that ``a(x*) = H(q) - (1/J) sum_j H(q | x*, y_j)``.

    Args:
        h_now: ``(P,)`` per-point entropies now; h_after: ``(b, J, P)`` after each fantasy.

    Example:
        >>> entropy_reduction(torch.tensor([0.5, 0.1]), torch.tensor([[[0.2, 0.3]]]))
        tensor([[[ 0.3000, -0.2000]]])
    """
    return h_now - h_after


#: registered gains by name (:func:`register_gain`)
GAINS: dict[str, GainFn] = {"reduction": entropy_reduction}


def register_gain(name: str, gain: GainFn) -> GainFn:
    """Register ``gain(h_now (P,), h_after (b, J, P)) -> (b, J, P)`` as the gain ``name``, by
    the rules of :func:`register_criterion`.

    Example:
        >>> def doubled(h_now, h_after):  # a toy gain: twice the per-point change
        ...     return 2 * (h_now - h_after)
        >>> _ = register_gain("toy-doubled", doubled)
        >>> check_gain("toy-doubled"), resolve_gain("toy-doubled") is doubled
        ('toy-doubled', True)
        >>> del GAINS["toy-doubled"]
    """
    return _register(GAINS, "gain", name, gain)


def check_gain(gain: str) -> str:
    """``gain`` if it is registered in :data:`GAINS`, else an
    :class:`~bo_ncgp.exceptions.InputDataError` naming them.

    Example:
        >>> check_gain("reduction")
        'reduction'
    """
    return _check(GAINS, "gain", gain)


def resolve_gain(gain: str | GainFn | None) -> GainFn | None:
    """The gain function of ``gain`` (a registered name, a function or ``None``), ``None``
    for the plain reduction (:func:`entropy_reduction`, summed without per-point gains).

    Example:
        >>> resolve_gain("reduction") is None, resolve_gain(None) is None
        (True, True)
    """
    fn = GAINS[check_gain(gain)] if isinstance(gain, str) else gain
    if fn is not None and not callable(fn):
        raise InputDataError(f"gain must be a registered name, a callable or None, got {gain!r}")
    return None if fn is entropy_reduction else fn


# --------------------------------------------------------------------------- fantasies
def _support(likelihood: Likelihood, like: Tensor) -> tuple[Tensor, Tensor, float]:
    """Finite support ``y``, its success counts ``k`` and the number of trials ``N``."""
    if isinstance(likelihood, Binomial):
        N = likelihood.num_trials
        if N.numel() != 1:
            raise UnsupportedError(
                "predictive_quantile_fantasies: Binomial needs a scalar num_trials"
            )
        y = torch.arange(int(N) + 1, dtype=like.dtype, device=like.device)
        return y, y, float(N)
    if isinstance(likelihood, Bernoulli):
        lo = 0.0 if likelihood.labels == "01" else -1.0
        y = torch.tensor([lo, 1.0], dtype=like.dtype, device=like.device)
        return y, torch.tensor([0.0, 1.0], dtype=like.dtype, device=like.device), 1.0
    raise UnsupportedError(
        "predictive_quantile_fantasies: needs a likelihood with finite support (Binomial or "
        f"Bernoulli), got {likelihood.name}"
    )


def _log_pmf_grid(likelihood: Likelihood, f: Tensor) -> tuple[Tensor, Tensor]:
    """Support ``(S,)`` and ``log p(y_s | f)`` ``(*f.shape, S)`` for the logit-link count
    likelihoods, using ``log p(y | f) = log p(y | 0) + k f - N (softplus(f) - log 2)`` (the
    constant ``log p(y | 0)`` comes from the likelihood itself, so no ``lgamma`` per ``f``)."""
    support, k, N = _support(likelihood, f)
    base = likelihood.log_prob(support, torch.zeros_like(support))  # (S,)
    shift = N * (torch.nn.functional.softplus(f) - math.log(2.0))
    return support, base + f.unsqueeze(-1) * k - shift.unsqueeze(-1)


def predictive_quantile_fantasies(
    likelihood: Likelihood,
    mean: Tensor,
    var: Tensor,
    num_fantasies: int = 16,
    shift: float = 0.5,
    num_points: int = 32,
) -> Tensor:
    """QMC fantasies of observations: quantiles of the exact predictive ``p(y | x)``.

    Args:
        likelihood: ``Binomial`` (scalar ``num_trials``) or ``Bernoulli``.
        mean, var: ``(n,)`` latent marginals at the candidates.
        num_fantasies: ``J``.
        shift: lattice offset in ``[0, 1)``; ``u_j = (j + shift) / J``.
        num_points: Gauss–Hermite nodes for the mixture over ``f``.

    Returns:
        ``(n, J)`` fantasised observations (non-decreasing in ``j``).

    Example:
        >>> y = predictive_quantile_fantasies(Binomial(10), torch.zeros(1), torch.ones(1), 4)
        >>> y.shape, bool((y[:, 1:] >= y[:, :-1]).all())
        (torch.Size([1, 4]), True)
    """
    if int(num_fantasies) != num_fantasies or num_fantasies < 1:
        raise InputDataError(f"num_fantasies must be a positive int, got {num_fantasies}")
    if not 0.0 <= shift < 1.0:
        raise InputDataError(f"shift must lie in [0, 1), got {shift}")
    if mean.shape != var.shape or mean.dim() != 1:
        raise InputDataError(
            f"mean and var must both be (n,), got {tuple(mean.shape)} and {tuple(var.shape)}"
        )
    f, w = gh_points(mean, var, num_points)  # (n, K), (K,)
    support, logp = _log_pmf_grid(likelihood, f)  # (S,), (n, K, S)
    S = support.shape[0]
    pmf = (logp.exp() * w.unsqueeze(-1)).sum(-2)  # (n, S)
    cdf = pmf.cumsum(-1)
    cdf = cdf / cdf[..., -1:]  # exact normalisation up to rounding
    u = (torch.arange(num_fantasies, dtype=mean.dtype, device=mean.device) + shift) / num_fantasies
    idx = torch.searchsorted(cdf.contiguous(), u.expand(mean.shape[0], -1).contiguous())
    return support[idx.clamp_max(S - 1)]


# --------------------------------------------------------------------------- the model
def latent_model(model):
    """The bo_ncgp model behind ``model`` (a BoTorch adapter's ``.model``, or ``model``
    itself), checked to be one unbatched latent function.

    Raises:
        UnsupportedError: not a bo_ncgp model, several latent functions, or a batch of models.

    Example:
        >>> latent_model(torch.nn.Linear(2, 1))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        bo_ncgp.exceptions.UnsupportedError: pool active learning needs a bo_ncgp model ...Linear
    """
    inner = model.model if isinstance(model, Model) else model
    if not callable(getattr(inner, "predict_f", None)) or not hasattr(inner, "likelihood"):
        raise UnsupportedError(
            "pool active learning needs a bo_ncgp model (LatentGP) or its BoTorch adapter, "
            f"got {type(inner).__name__}"
        )
    num_latents = int(getattr(inner, "num_latents", inner.likelihood.num_latents))
    if num_latents != 1:
        raise UnsupportedError(
            f"pool active learning needs a single-latent model, got {type(inner).__name__} "
            f"with {num_latents} latent functions"
        )
    if torch.Size(getattr(inner, "batch_shape", ())):
        raise UnsupportedError(
            f"pool active learning needs an unbatched model, got {type(inner).__name__} with "
            f"batch_shape {tuple(inner.batch_shape)}"
        )
    return inner


def fantasies_of(model, X_pool: Tensor) -> PoolFantasies:
    """:class:`~bo_ncgp.models.base.PoolFantasies` of ``model`` (or of its BoTorch adapter's
    model) on ``X_pool (P, d)``: ``model.pool_fantasies`` where the model has it, the generic
    conditioning path otherwise.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models import DualSVGP
        >>> X = torch.rand(8, 1)
        >>> dual = DualSVGP(RBFKernel(), Bernoulli(), X[:3], num_hyper_steps=0)
        >>> fant = fantasies_of(dual.update(X, (X[:, 0] > 0.5).to(X)), torch.rand(5, 1))
        >>> fant.mean.shape, fant.var.shape
        (torch.Size([5]), torch.Size([5]))
    """
    inner = latent_model(model)
    if X_pool.dim() != 2:
        raise InputDataError(f"the pool must be (P, d), got shape {tuple(X_pool.shape)}")
    if callable(getattr(inner, "pool_fantasies", None)):
        return inner.pool_fantasies(X_pool)
    return PoolFantasies(inner, X_pool)


# --------------------------------------------------------------------------- reduction
def _summed_entropy(z: Tensor, weights: Tensor | None) -> Tensor:
    """``sum_p w_p h(Phi(z_p))`` over the last dimension, overwriting ``z`` (one temporary per
    transcendental; the products and sums are fused into dot products)."""
    p = torch.special.ndtr(z.abs_().neg_())  # the tail Phi(-|z|) <= 1/2, accurate
    logp = p.clamp_min(torch.finfo(p.dtype).tiny).log_()
    minus_p = p.neg_()
    log_q = torch.log1p(minus_p)
    if weights is None:  # h = -(p log p + (1 - p) log(1 - p))
        return (
            torch.linalg.vecdot(minus_p, logp) - log_q.sum(-1) - torch.linalg.vecdot(minus_p, log_q)
        )
    return torch.linalg.vecdot(minus_p * weights, logp) - (
        (log_q * weights).sum(-1) + torch.linalg.vecdot(minus_p * weights, log_q)
    )


def threshold_entropy_reduction(
    fantasies: PoolFantasies,
    index: Tensor,
    level: float,
    num_fantasies: int = 16,
    shift: float = 0.5,
    chunk_size: int = 16,
    pool_weights: Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
    criterion: str = "exceedance",
    gain: str | GainFn | None = None,
    pool_size: int | None = None,
) -> Tensor:
    """``a(x*) = H(q) - (1/J) sum_j H(q | x*, y_j)`` for the candidates ``index`` of a pool
    (nats; module docstring).

    Args:
        fantasies: :func:`fantasies_of` the model on the points (pool and candidates).
        index: ``(n,)`` positions of the candidates in ``fantasies.X``. The conditioned
            variances may come shared by the fantasies, as ``(n, 1, P)``.
        level: latent threshold (``logit(t)`` for a prevalence threshold ``t``).
        num_fantasies, shift: see :func:`predictive_quantile_fantasies`.
        chunk_size: candidates per vectorised block (memory ``chunk * J * P``).
        pool_weights: optional ``(P,)`` weights of the pool points in the entropy sum.
        compute_dtype: dtype of the O(n J P) entropy evaluations (e.g. ``torch.float32``,
            about 3x faster on CPU, absolute error ~1e-4 nats on sums over ~1,000 points);
            default: the model's dtype. The conditioning itself runs in the model's dtype.
        criterion: a registered criterion (:data:`CRITERIA`), default ``"exceedance"``.
        gain: a registered gain (:data:`GAINS`) or a ``gain(h_now (P,), h_after (b, J, P))
            -> (b, J, P)`` replacing the per-point change ``h_now - h_after``; then ``a(x*) =
            (1/J) sum_j sum_x w_x gain``. Default (``None``): ``"reduction"``.
        pool_size: the entropies are summed over the first ``pool_size`` points of
            ``fantasies.X`` (default: all); candidates may lie beyond them.

    Returns:
        ``(n,)`` expected entropy reductions (in the model's dtype).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Binomial
        >>> from bo_ncgp.models import DualSVGP
        >>> X, y = torch.rand(12, 1), torch.randint(0, 11, (12,)).double()
        >>> dual = DualSVGP(RBFKernel(), Binomial(10), X[:4], num_hyper_steps=0).update(X, y)
        >>> fant = fantasies_of(dual, torch.linspace(0, 1, 20).unsqueeze(-1))  # 20 pool points
        >>> a = threshold_entropy_reduction(fant, torch.arange(20), 0.0, num_fantasies=4)
        >>> Y = predictive_quantile_fantasies(dual.likelihood, fant.mean, fant.var, 4)
        >>> m, v = fant.conditioned(torch.arange(20), Y)  # the same fantasies, (20, 4, 20)
        >>> H_after = exceedance_entropy(m, v, 0.0).sum(-1).mean(-1)  # mean over fantasies
        >>> a.shape, torch.allclose(a, exceedance_entropy(fant.mean, fant.var, 0.0).sum() - H_after)
        (torch.Size([20]), True)
    """
    if chunk_size < 1:
        raise InputDataError(f"chunk_size must be >= 1, got {chunk_size}")
    entropy_fn = CRITERIA[check_criterion(criterion)]
    gain = resolve_gain(gain)
    index = torch.as_tensor(index, dtype=torch.long, device=fantasies.mean.device)
    if index.dim() != 1:
        raise InputDataError(f"index must be (n,), got shape {tuple(index.shape)}")
    P = fantasies.mean.shape[-1] if pool_size is None else int(pool_size)
    mean_now, var_now = fantasies.mean[:P], fantasies.var[:P]
    if pool_weights is not None and pool_weights.shape != (P,):
        raise InputDataError(f"pool_weights must be ({P},), got shape {tuple(pool_weights.shape)}")
    likelihood = fantasies.model.likelihood
    dtype = compute_dtype or mean_now.dtype
    # the exceedance entropy of a sum is fused into dot products (one temporary per function)
    fused = entropy_fn is exceedance_entropy and gain is None
    with torch.no_grad():
        Y = predictive_quantile_fantasies(
            likelihood, fantasies.mean[index], fantasies.var[index], num_fantasies, shift
        )  # (n, J)
        h_now = entropy_fn(mean_now, var_now, level)
        w = None if pool_weights is None else pool_weights.to(h_now)
        H_now = h_now.sum() if w is None else (h_now * w).sum()
        wc = None if w is None else w.to(dtype)
        tiny = torch.finfo(var_now.dtype).tiny
        out = []
        for start in range(0, index.shape[0], chunk_size):
            sl = slice(start, start + chunk_size)
            mean, var = fantasies.conditioned(index[sl], Y[sl])  # (b, J, P')
            mean, var = mean[..., :P], var[..., :P]
            if fused:
                z = (mean - level).mul_(var.clamp_min(tiny).rsqrt_())
                H = _summed_entropy(z.to(dtype), wc)  # (b, J)
            else:
                h = entropy_fn(mean.to(dtype), var.clamp_min(0).to(dtype), level)
                if gain is not None:  # per-point gains, summed, then averaged over fantasies
                    g = gain(h_now.to(dtype), h)
                    G = g.sum(-1) if wc is None else g @ wc
                    out.append(G.to(H_now.dtype).mean(-1))
                    continue
                H = h.sum(-1) if wc is None else h @ wc
            out.append(H_now - H.to(H_now.dtype).mean(-1))
        return torch.cat(out) if out else mean_now.new_zeros(0)


def _logit(threshold: float) -> float:
    if not 0.0 < threshold < 1.0:
        raise InputDataError(f"threshold must lie in (0, 1), got {threshold}")
    return math.log(threshold) - math.log1p(-threshold)


class ThresholdEntropyReduction(AcquisitionFunction):
    """Expected reduction of the summed per-point entropy over a pool from one more
    observation (module docstring), as a BoTorch acquisition function.

    Args:
        model: a single-latent bo_ncgp model with a logit-link ``Binomial`` or ``Bernoulli``
            likelihood, or its BoTorch adapter (no input transform: ``X`` and ``pool`` are in
            the model's input space).
        pool: ``(P, d)`` points whose entropies are summed.
        threshold: threshold on the probability scale (e.g. prevalence 0.1); the latent level
            is ``logit(threshold)``.
        num_fantasies: ``J`` QMC fantasies per candidate.
        shift: lattice offset of the fantasies.
        chunk_size: candidates per vectorised block.
        compute_dtype: dtype of the entropy evaluations (see
            :func:`threshold_entropy_reduction`).
        criterion: a registered criterion (:data:`CRITERIA`), default ``"exceedance"``.
        gain: a registered gain (:data:`GAINS`) or a per-point gain function (see
            :func:`threshold_entropy_reduction`); default ``"reduction"``.

    ``forward(X)`` scores ``X (b, 1, d)`` (any candidate points); :meth:`score_pool` scores
    pool members by index and reuses the pool's fantasies. Not differentiable in ``X`` (the
    fantasies are quantiles): optimise over a discrete set, e.g. with
    ``botorch.optim.optimize_acqf_discrete``.

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.bo import DualSVGPModel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models import DualSVGP
        >>> X = torch.rand(10, 1)
        >>> dual = DualSVGP(RBFKernel(), Bernoulli(), X[:4], num_hyper_steps=0)
        >>> model = DualSVGPModel.from_model(dual.update(X, (X[:, 0] > 0.5).to(X)))
        >>> acq = ThresholdEntropyReduction(model, torch.rand(9, 1), 0.5, num_fantasies=4)
        >>> acq(torch.rand(5, 1, 1)).shape  # any 5 candidates, (q=1) x d each
        torch.Size([5])
    """

    def __init__(
        self,
        model,
        pool: Tensor,
        threshold: float,
        num_fantasies: int = 16,
        shift: float = 0.5,
        chunk_size: int = 16,
        compute_dtype: torch.dtype | None = None,
        criterion: str = "exceedance",
        gain: str | GainFn | None = None,
    ) -> None:
        super().__init__(model=model)
        self.criterion = check_criterion(criterion)
        self.gain = resolve_gain(gain)
        if getattr(model, "input_transform", None) is not None:
            raise UnsupportedError(
                "ThresholdEntropyReduction: models with an input transform are not supported"
            )
        self.latent = latent_model(model)
        self.level = _logit(float(threshold))
        self.num_fantasies = int(num_fantasies)
        self.shift = float(shift)
        self.chunk_size = int(chunk_size)
        self.compute_dtype = compute_dtype
        self.pool = pool
        self.fantasies = fantasies_of(self.latent, pool)

    def entropy(self) -> Tensor:
        """Current summed uncertainty of the pool (nats) under the criterion."""
        return CRITERIA[self.criterion](self.fantasies.mean, self.fantasies.var, self.level).sum()

    def exceedance(self) -> Tensor:
        """``(P,)`` current ``P(f > logit t)`` on the pool."""
        return exceedance_probability(self.fantasies.mean, self.fantasies.var, self.level)

    def _score(self, fantasies: PoolFantasies, index: Tensor) -> Tensor:
        return threshold_entropy_reduction(
            fantasies, index, self.level, self.num_fantasies, self.shift, self.chunk_size,
            compute_dtype=self.compute_dtype, criterion=self.criterion, gain=self.gain,
            pool_size=self.pool.shape[0],
        )  # fmt: skip

    def score_pool(self, indices: Tensor | None = None) -> Tensor:
        """Scores of pool members ``indices`` (default: all), ``(n,)``."""
        P = self.pool.shape[0]
        device = self.fantasies.mean.device
        idx = (
            torch.arange(P, device=device)
            if indices is None
            else torch.as_tensor(indices, dtype=torch.long, device=device)
        )
        return self._score(self.fantasies, idx)

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        Xc = X.squeeze(-2).to(self.fantasies.mean)
        P = self.pool.shape[0]
        fantasies = fantasies_of(self.latent, torch.cat([self.pool.to(Xc), Xc]))
        return self._score(fantasies, P + torch.arange(Xc.shape[0], device=Xc.device))
