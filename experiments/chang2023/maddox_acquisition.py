"""The hotspot acquisition of Maddox et al.'s script, as Chang et al. (2023) ran it for Fig. 4.

The hotspot script of Maddox et al. (2021), which Chang et al. (2023), Sec. 4.1, Fig. 4 ran,
differs from the library's entropy reduction (:mod:`bo_ncgp.bo.acquisition.pool`) in two
knobs, both provided here:

* the per-point uncertainty is the Bernoulli entropy of the *prevalence itself*, counted only
  where it exceeds the threshold,

      h_spiked(x) = E_{f ~ q(f(x))}[ h(sigmoid f) 1(f > logit t) ],

  estimated there by QMC samples of ``f``; :func:`spiked_entropy` looks the expectation up in
  precomputed quadrature tables (no sampling noise). Importing this module registers it as
  the criterion ``"spiked"`` (:func:`bo_ncgp.bo.acquisition.register_criterion`);
* each pool village's entropy decrease is clamped at zero before summing
  (:func:`clamped_gain`, the ``gain`` of
  :class:`~bo_ncgp.bo.acquisition.ThresholdEntropyReduction`). Importing this module
  registers it as the gain ``"clamped"`` (:func:`bo_ncgp.bo.acquisition.register_gain`).

With both registered, the hotspot strategies take them by name (``criterion="spiked"``,
``gain="clamped"``), and so does the command :mod:`experiments.chang2023.hotspots`.

Their Monte Carlo estimates of both entropies (16 samples each) are not reproduced; the
fantasies and the conditioning are the library's.

Example:
    >>> import torch
    >>> from bo_ncgp.bo.acquisition import CRITERIA, GAINS
    >>> CRITERIA["spiked"] is spiked_entropy, GAINS["clamped"] is clamped_gain  # on import
    (True, True)
    >>> clamped_gain(torch.tensor([0.5, 0.1]), torch.tensor([[[0.2, 0.3]]]))
    tensor([[[0.3000, 0.0000]]])
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bo_ncgp.bo.acquisition import ThresholdEntropyReduction, register_criterion, register_gain

__all__ = ["bernoulli_entropy_of_logit", "clamped_gain", "maddox_acquisition", "spiked_entropy"]


def bernoulli_entropy_of_logit(f: Tensor) -> Tensor:
    """``h(sigmoid f) = softplus(-|f|) + |f| sigmoid(-|f|)`` (symmetric, no cancellation).

    Example:
        >>> round(float(bernoulli_entropy_of_logit(torch.tensor(0.0))), 6)  # log 2
        0.693147
    """
    a = f.abs()
    return torch.nn.functional.softplus(-a) + a * torch.sigmoid(-a)


# Tables of spiked_entropy (built once per level in float64, bilinear lookup): the truncated
# expectation over (z = (mean - level) / sd, log sd) for |z| <= _Z_MAX, and the untruncated
# E[h(sigmoid f)] over (mean, log sd) for z > _Z_MAX (the part below the level is < 1e-15).
_Z_MAX, _Z_STEP = 8.0, 0.05
_M_MAX, _M_STEP = 40.0, 0.1
_LOG_SD_MIN, _LOG_SD_STEP, _LOG_SD_POINTS = math.log(1e-3), 0.05, 186  # sd in [1e-3, 10.3]
_E_MAX, _E_POINTS = 10.0, 301
_TABLES: dict[float | str, Tensor] = {}  # float64: truncated ones by level, and "full"
_CONVERTED: dict[tuple, Tensor] = {}  # the tables in other dtypes / on other devices


def _normal_expectation(lower: Tensor, shift: Tensor, sd: float) -> Tensor:
    """``int_{lower}^{_E_MAX} h(sigmoid(shift + sd e)) phi(e) de`` (trapezoid rule) for
    ``lower, shift (A,)``, float64."""
    e = lower.unsqueeze(-1) + (_E_MAX - lower).unsqueeze(-1) * torch.linspace(
        0, 1, _E_POINTS, dtype=torch.float64
    )  # (A, U)
    g = bernoulli_entropy_of_logit(shift.unsqueeze(-1) + sd * e) * torch.exp(-0.5 * e.square())
    return torch.trapezoid(g, e, dim=-1) / math.sqrt(2 * math.pi)


def _grid(start: float, step: float, n: int) -> Tensor:
    return start + step * torch.arange(n, dtype=torch.float64)


def _spiked_tables(level: float, like: Tensor) -> tuple[Tensor, Tensor]:
    """The truncated table of ``level`` and the (level-free) untruncated one, as ``like``."""
    sds = _grid(_LOG_SD_MIN, _LOG_SD_STEP, _LOG_SD_POINTS).exp().tolist()
    if "full" not in _TABLES:
        m = _grid(-_M_MAX, _M_STEP, round(2 * _M_MAX / _M_STEP) + 1)
        lower = torch.full_like(m, -_E_MAX)
        _TABLES["full"] = torch.stack([_normal_expectation(lower, m, s) for s in sds], -1)
    key = round(float(level), 9)  # one table for levels equal up to rounding
    if key not in _TABLES:
        z = _grid(-_Z_MAX, _Z_STEP, round(2 * _Z_MAX / _Z_STEP) + 1)
        # f = level + sd (z + e) over e > -z
        _TABLES[key] = torch.stack([_normal_expectation(-z, level + s * z, s) for s in sds], -1)
    return _converted(key, like), _converted("full", like)


def _converted(key: float | str, like: Tensor) -> Tensor:
    table = _TABLES[key]
    if table.dtype == like.dtype and table.device == like.device:
        return table
    ckey = (key, like.dtype, str(like.device))
    if ckey not in _CONVERTED:
        _CONVERTED[ckey] = table.to(like)
    return _CONVERTED[ckey]


def _bilinear(table: Tensor, x: Tensor, x0: float, dx: float, y: Tensor, y0: float, dy: float):
    """Bilinear interpolation of ``table[i, j]`` at ``(x0 + i dx, y0 + j dy)``, clamped."""
    fx = ((x - x0) / dx).clamp(0, table.shape[0] - 1)
    fy = ((y - y0) / dy).clamp(0, table.shape[1] - 1)
    i = fx.floor().clamp(max=table.shape[0] - 2)  # the last cell includes its upper edge
    j = fy.floor().clamp(max=table.shape[1] - 2)
    tx, ty = fx - i, fy - j
    i, j = i.long(), j.long()
    row = table.shape[1]
    flat = table.reshape(-1)
    k = i * row + j
    top = torch.lerp(flat[k], flat[k + 1], ty)
    bottom = torch.lerp(flat[k + row], flat[k + row + 1], ty)
    return torch.lerp(top, bottom, tx)


def spiked_entropy(mean: Tensor, var: Tensor, level: float | Tensor) -> Tensor:
    """``E[h(sigmoid f) 1(f > level)]`` for ``f ~ N(mean, var)``, elementwise (nats): the
    per-point uncertainty of Maddox et al.'s hotspot acquisition (module docstring).

    Evaluated by bilinear lookup in two tables built on first use for each ``level`` (about
    10 s; trapezoid quadrature in the standardised variable): the truncated expectation over
    ``z = (mean - level) / sd`` in [-8, 8] and the full one over ``mean`` in [-40, 40]
    (``z > 8``), both over ``sd`` in [1e-3, 10] on a log grid; inputs outside are clamped to
    the tables (``z < -8`` gives 0). Against dense quadrature at 300 random (mean in [-10, 10],
    sd in [0.01, 10]) the largest error was 3.8e-4 nats (values up to 0.69) and at most 1 % of
    values above 0.01; the tests check an absolute error below 5e-4 nats.

    Example:
        >>> e = spiked_entropy(torch.tensor([0.0, -5.0]), torch.tensor([1e-6, 1e-6]), -1.0)
        >>> [round(v, 4) for v in e.tolist()]  # [h(1/2) = log 2 (surely above), 0 (below)]
        [0.6931, 0.0]
    """
    dtype = torch.promote_types(mean.dtype, var.dtype)
    mean, var = mean.to(dtype), var.to(dtype)
    trunc, full = _spiked_tables(float(level), mean)
    log_sd = 0.5 * var.clamp_min(torch.finfo(var.dtype).tiny).log()
    z = (mean - level) * torch.exp(-log_sd)
    g_trunc = _bilinear(trunc, z, -_Z_MAX, _Z_STEP, log_sd, _LOG_SD_MIN, _LOG_SD_STEP)
    g_full = _bilinear(full, mean, -_M_MAX, _M_STEP, log_sd, _LOG_SD_MIN, _LOG_SD_STEP)
    out = torch.where(z > _Z_MAX, g_full, g_trunc)
    return torch.where(z < -_Z_MAX, torch.zeros_like(out), out)


def clamped_gain(h_now: Tensor, h_after: Tensor) -> Tensor:
    """Per-village entropy decreases only, ``max(0, h(x) - h_j(x))``: with it the acquisition
    is ``a(x*) = (1/J) sum_j sum_x max(0, h(x) - h_j(x))``, the reduction of Maddox et al.'s
    script (there on Monte Carlo estimates of ``h``; here exact).

    Args:
        h_now: ``(P,)`` per-village entropies now; h_after: ``(b, J, P)`` after each fantasy.

    Example:
        >>> clamped_gain(torch.tensor([0.2]), torch.tensor([[[0.5], [0.1]]])).flatten()
        tensor([0.0000, 0.1000])
    """
    return (h_now - h_after).clamp_min_(0)


def maddox_acquisition(
    model, pool: Tensor, threshold: float, **kwargs
) -> ThresholdEntropyReduction:
    """Maddox et al.'s acquisition: the spiked criterion with per-village clamped gains.

    Args:
        model, pool, threshold, **kwargs: as for
            :class:`~bo_ncgp.bo.acquisition.ThresholdEntropyReduction` (without ``criterion``
            and ``gain``).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> from bo_ncgp.models import DualSVGP
        >>> X = torch.rand(10, 1)
        >>> dual = DualSVGP(RBFKernel(), Bernoulli(), X[:4], num_hyper_steps=0)
        >>> acq = maddox_acquisition(dual.update(X, (X[:, 0] > 0.3).to(X)), X, 0.3, num_fantasies=4)
        >>> scores = acq.score_pool()
        >>> scores.shape, bool((scores >= 0).all())  # clamped gains are never negative
        (torch.Size([10]), True)
    """
    return ThresholdEntropyReduction(
        model, pool, threshold, criterion="spiked", gain=clamped_gain, **kwargs
    )


register_criterion("spiked", spiked_entropy)
register_gain("clamped", clamped_gain)
