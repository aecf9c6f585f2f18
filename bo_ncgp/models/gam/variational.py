"""Variational families ``q(U)`` over the stacked inducing variables of a sparse GAM.

Adam, Durrande & John, *Scalable GAM using sparse variational Gaussian processes*:

* :class:`MeanFieldPosterior` -- ``q(U) = prod_c N(m_c, S_c)`` (Saul et al. 2016, section 3.2);
* :class:`FullCovariancePosterior` -- one joint ``N(m, S)`` with ``S`` of size ``MC x MC``
  (Adam 2017, section 3.2);
* :class:`CoupledPrecisionPosterior` -- this paper's Eq. 7,
  ``Sigma_U^{-1} = K_UU^{-1} + B B^T`` with ``B = [B_1; ...; B_C]`` of size ``MC x R``
  (``R = M`` in the paper), evaluated with the formulas of Appendix C.

All three share one interface (:class:`VariationalFamily`): :meth:`~VariationalFamily.prepare`
does the per-call factorisations, :meth:`~VariationalFamily.kl` returns ``KL[q(U) || p(U)]``
and :meth:`~VariationalFamily.project` maps the cross-covariances ``K_{U_c f_c}`` at the
inputs to a :class:`Projection`, from which the model reads the posterior of every component
and of their sum. In the notation of the paper the joint posterior of the component values is

    Sigma_{c c'}(x, x') = delta_{cc'} [k_c(x, x') - a_c(x)^T a_c(x')]
                          + sign * G_c(x)^T G_{c'}(x')        (only c = c' if not coupled)

with ``a_c = L_c^{-1} K_{U_c f_c}`` the whitened cross-covariance (``K_{U_c U_c} = L_c L_c^T``)
and ``G_c`` a family-specific factor; the marginal variance of the sum needs
``||sum_c G_c||^2`` only, which is what makes the coupled families cheap (Appendix C.1).

``whiten=True`` (default) parameterises ``q`` in the coordinates ``v_c = L_c^{-1} U_c``, which
keeps the variational parameters well scaled while the kernel hyperparameters move. For the
coupled precision this is the change of variables ``B~_c = L_c^T B_c``, ``m_c = L_c^T alpha_c``,
under which Appendix C holds verbatim with ``K_{U_c U_c} -> I`` and ``K_{U_c f} -> a_c``.
``whiten=False`` uses the paper's own parameterisation (``q(U) = N(K_UU alpha, Sigma_UU)``, no
Cholesky of ``K_UU`` needed for the coupled precision).

Costs (N points, C components of M inducing points, rank R = M), as in Table 1: mean field
KL ``O(C M^3)``, expectation ``O(C M^3 + N C M^2)``; full covariance KL ``O(C^3 M^3)``,
expectation ``O(N C^2 M^2)``; coupled precision KL ``O(C M^3)``, expectation
``O(C M^3 + N C M^2)`` -- one ``M x M`` Cholesky of ``A`` and, because
``sum_{c,c'} G_c^T G_{c'} = ||sum_c G_c||^2``, a cost *linear* in ``C`` for the marginals of the
sum (the paper's Table 1 states the looser ``O(N C^2 M^2)`` of the double sum of C.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor, nn

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.linalg import solve_lower, stable_cholesky, whitened_kl

__all__ = [
    "CoupledPrecisionPosterior",
    "FullCovariancePosterior",
    "MeanFieldPosterior",
    "Projection",
    "VariationalFamily",
    "VariationalState",
]


def _covariance_chol(precision: Tensor, name: str) -> Tensor:
    """Lower Cholesky factor of ``precision^{-1}`` (via two triangular solves, no inverse)."""
    Lp = stable_cholesky(precision, name=name)
    eye = torch.eye(precision.shape[-1], dtype=precision.dtype, device=precision.device)
    cov = torch.cholesky_solve(eye, Lp)
    return stable_cholesky(0.5 * (cov + cov.mT), name=f"inverse of {name}")


@dataclass
class VariationalState:
    """Per-call factorisations shared by :meth:`VariationalFamily.kl` and ``project``.

    Attributes:
        Kuu: ``K_{U_c U_c}`` per component.
        chol: lower Cholesky factors ``L_c`` of ``Kuu`` (``None`` if the family needs none).
        extra: family-specific cached quantities.

    Example:
        >>> q = MeanFieldPosterior([3, 2])
        >>> Kuu = [torch.eye(3), 2.0 * torch.eye(2)]
        >>> state = q.prepare(Kuu, [torch.linalg.cholesky(K) for K in Kuu])
        >>> [tuple(K.shape) for K in state.Kuu], len(state.chol), state.extra
        ([(3, 3), (2, 2)], 2, {})
        >>> round(q.kl(state).item(), 6)  # q(U) starts at the prior: KL = 0
        0.0
    """

    Kuu: list[Tensor]
    chol: list[Tensor] | None
    extra: dict = field(default_factory=dict)


@dataclass
class Projection:
    """Posterior of the components at inputs ``X (..., n, d)`` (see module docstring).

    Attributes:
        means: per component, the posterior mean ``(..., n)``.
        nystrom: per component ``a_c (..., M_c, n)`` whose ``a_c^T a_c`` is subtracted from the
            prior covariance, or ``None`` when the family's covariance has no such term.
        factors: per component ``G_c (..., r_c, n)``.
        sign: ``+1`` (covariance added) or ``-1`` (subtracted).
        coupled: whether ``G_c^T G_{c'}`` couples different components (all ``r_c`` equal).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> k, Z, X = RBFKernel(), torch.linspace(0, 1, 4).unsqueeze(-1), torch.rand(5, 1)
        >>> Kuu = k(Z).to_dense() + 1e-6 * torch.eye(4)
        >>> q = MeanFieldPosterior([4])
        >>> proj = q.project(q.prepare([Kuu], [torch.linalg.cholesky(Kuu)]), [k(Z, X).to_dense()])
        >>> proj.sum_mean().shape, proj.sign, proj.coupled
        (torch.Size([5]), 1.0, False)
        >>> kxx = [k(X, X, diag=True)]
        >>> bool(torch.allclose(proj.sum_variance(kxx), kxx[0]))  # q = p gives the prior variance
        True
    """

    means: list[Tensor]
    nystrom: list[Tensor | None]
    factors: list[Tensor]
    sign: float
    coupled: bool

    def subset(self, idx: Sequence[int]) -> Projection:
        """The projection of the components ``idx`` only (posterior of a partial sum)."""
        return Projection(
            [self.means[i] for i in idx],
            [self.nystrom[i] for i in idx],
            [self.factors[i] for i in idx],
            self.sign,
            self.coupled,
        )

    def sum_mean(self) -> Tensor:
        """Mean of ``rho = sum_c f_c`` (Appendix C.3, ``mu_sum``), ``(..., n)``."""
        return torch.stack(self.means).sum(0)

    def _conditional_diag(self, kxx: list[Tensor]) -> list[Tensor]:
        return [
            k if a is None else k - a.square().sum(-2)
            for k, a in zip(kxx, self.nystrom, strict=True)
        ]

    def sum_variance(self, kxx: list[Tensor]) -> Tensor:
        """Marginal variance of the sum (Appendix C.3, ``Sigma_sum``) from ``k_c(x, x)``.

        ``sum_{c,c'} G_c^T G_c' = ||sum_c G_c||^2``: linear in ``C`` (C.1 writes a double sum).
        """
        base = sum(self._conditional_diag(kxx))
        if self.coupled:
            corr = torch.stack(self.factors).sum(0).square().sum(-2)
        else:
            corr = sum(G.square().sum(-2) for G in self.factors)
        return base + self.sign * corr

    def sum_covariance(self, Kxx: list[Tensor]) -> Tensor:
        """Joint covariance of the sum, ``(..., n, n)``, from ``k_c(X, X)``."""
        base = 0.0
        for K, a in zip(Kxx, self.nystrom, strict=True):
            base = base + (K if a is None else K - a.mT @ a)
        if self.coupled:
            H = torch.stack(self.factors).sum(0)
            corr = H.mT @ H
        else:
            corr = sum(G.mT @ G for G in self.factors)
        cov = base + self.sign * corr
        return 0.5 * (cov + cov.mT)

    def component_variances(self, kxx: list[Tensor]) -> Tensor:
        """Marginal variance of every ``f_c``, ``(..., n, C)``."""
        own = [G.square().sum(-2) for G in self.factors]
        return torch.stack(
            [b + self.sign * o for b, o in zip(self._conditional_diag(kxx), own, strict=True)], -1
        )

    def component_covariance(self, kxx: list[Tensor]) -> Tensor:
        """Covariance between the components at the same input, ``(..., n, C, C)``."""
        base = torch.diag_embed(torch.stack(self._conditional_diag(kxx), -1))
        if self.coupled:
            G = torch.stack(self.factors, dim=-3)  # (..., C, r, n)
            cross = torch.einsum("...crn,...ern->...nce", G, G)
        else:
            cross = torch.diag_embed(torch.stack([G.square().sum(-2) for G in self.factors], -1))
        return base + self.sign * cross


class VariationalFamily(nn.Module):
    """Base class of the three families (module docstring).

    Args:
        sizes: ``M_c`` of every component.
        whiten: parameterise in whitened coordinates ``v_c = L_c^{-1} U_c``.
        dtype, device: of the variational parameters.

    Example:
        >>> q = CoupledPrecisionPosterior([3, 4], rank=2)  # any of the three families
        >>> isinstance(q, VariationalFamily), q.num_components, q.offsets
        (True, 2, [0, 3, 7])
        >>> sorted(FAMILIES)  # the names SparseGAM's ``posterior`` argument accepts
        ['coupled_precision', 'full', 'mean_field']
        >>> q.set_factors([torch.ones(3, 2), torch.ones(4, 2)])  # B = 1: precision K^-1 + B B^T
        >>> state = q.prepare([torch.eye(3), torch.eye(4)], [torch.eye(3), torch.eye(4)])
        >>> round(q.kl(state).item(), 4)  # KL = (log 15 - 14 / 15) / 2
        0.8874
    """

    #: name used by :class:`~bo_ncgp.models.gam.SparseGAM`'s ``posterior`` argument
    name: ClassVar[str] = ""
    #: ``+1`` if the family adds ``G^T G`` to the conditional prior, ``-1`` if it subtracts it
    sign: ClassVar[float] = 1.0
    #: whether the factors couple different components
    coupled: ClassVar[bool] = False

    def __init__(
        self,
        sizes: Sequence[int],
        whiten: bool = True,
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        sizes = [int(s) for s in sizes]
        if not sizes or min(sizes) < 1:
            raise InputDataError(f"{type(self).__name__}: need at least one component with M >= 1")
        self.sizes = sizes
        self.whiten = bool(whiten)
        self._factory = {"dtype": dtype or torch.get_default_dtype(), "device": device}

    @property
    def num_components(self) -> int:
        return len(self.sizes)

    @property
    def offsets(self) -> list[int]:
        """Start of component ``c`` in the stacked ``U`` (and ``offsets[-1] = sum_c M_c``)."""
        out = [0]
        for s in self.sizes:
            out.append(out[-1] + s)
        return out

    @property
    def needs_cholesky(self) -> bool:
        """Whether :meth:`prepare` needs the Cholesky factors of ``K_{U_c U_c}``."""
        return True

    def initialize_from_prior(self, Kuu: Sequence[Tensor]) -> None:
        """Set ``q(U) = p(U)`` (zero mean, prior covariance); ``Kuu`` used if not whitened."""
        raise NotImplementedError

    def assign_whitened(self, mean: Tensor, precision_update: Tensor, chol: list[Tensor]) -> None:
        """Set ``q`` to the family's member nearest ``N(mean, (I + P)^{-1})`` in whitened
        coordinates ``v = blockdiag(L)^{-1} U`` (``P = precision_update``, ``(MC, MC)``, PSD).

        Used by :meth:`~bo_ncgp.models.gam.SparseGAM.initialize_variational`: exact for the
        full family, diagonal blocks of the precision for the mean field (the optimal mean-field
        factors for a Gaussian likelihood), best rank-``R`` approximation of ``P`` for ``B B^T``.
        """
        raise NotImplementedError

    def prepare(self, Kuu: list[Tensor], chol: list[Tensor] | None) -> VariationalState:
        """Factorisations needed by :meth:`kl` and :meth:`project` (once per call)."""
        return VariationalState(Kuu=Kuu, chol=chol)

    def kl(self, state: VariationalState) -> Tensor:
        """``KL[q(U) || p(U)]`` (Eq. 5)."""
        raise NotImplementedError

    def project(self, state: VariationalState, Kux: list[Tensor]) -> Projection:
        """Posterior of the components at the inputs behind ``Kux`` (``(..., M_c, n)`` each)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- helpers
    def _whitened_cross(self, state: VariationalState, Kux: list[Tensor]) -> list[Tensor]:
        """``a_c = L_c^{-1} K_{U_c f_c}``."""
        assert state.chol is not None
        return [solve_lower(L, K) for L, K in zip(state.chol, Kux, strict=True)]

    def _new(self, *shape: int) -> Tensor:
        return torch.zeros(*shape, **self._factory)

    def extra_repr(self) -> str:
        return f"sizes={self.sizes}, whiten={self.whiten}"


class MeanFieldPosterior(VariationalFamily):
    """``q(U) = prod_c N(U_c | m_c, S_c)``, ``S_c = R_c R_c^T`` (Saul et al. 2016).

    Parameters ``mean[c]`` ``(M_c,)`` and the lower triangle of ``chol[c]`` ``(M_c, M_c)``
    (whitened coordinates if ``whiten``).

    Example:
        >>> q = MeanFieldPosterior([3, 4])
        >>> Kuu = [torch.eye(3), 4.0 * torch.eye(4)]
        >>> q.initialize_from_prior(Kuu)  # q(U) = p(U)
        >>> state = q.prepare(Kuu, [K.sqrt() for K in Kuu])  # Cholesky of a diagonal K_uu
        >>> [tuple(R.shape) for R in q.chol], round(q.kl(state).item(), 6)
        ([(3, 3), (4, 4)], 0.0)
    """

    name = "mean_field"
    sign = 1.0
    coupled = False

    def __init__(self, sizes, whiten=True, dtype=None, device=None) -> None:
        super().__init__(sizes, whiten, dtype, device)
        self.mean = nn.ParameterList([nn.Parameter(self._new(m)) for m in self.sizes])
        self.chol = nn.ParameterList(
            [nn.Parameter(torch.eye(m, **self._factory)) for m in self.sizes]
        )

    @torch.no_grad()
    def initialize_from_prior(self, Kuu: Sequence[Tensor]) -> None:
        for c, m in enumerate(self.sizes):
            self.mean[c].zero_()
            if self.whiten:
                self.chol[c].copy_(
                    torch.eye(m, dtype=self.chol[c].dtype, device=self.chol[c].device)
                )
            else:
                self.chol[c].copy_(stable_cholesky(Kuu[c], name=f"K_uu of component {c}"))

    @torch.no_grad()
    def assign_whitened(self, mean: Tensor, precision_update: Tensor, chol: list[Tensor]) -> None:
        o = self.offsets
        for c, L in enumerate(chol):
            sl = slice(o[c], o[c + 1])
            P = precision_update[sl, sl]
            R = _covariance_chol(
                torch.eye(P.shape[0], dtype=P.dtype, device=P.device) + P, f"I + P_{c}{c}"
            )
            m = mean[sl]
            if not self.whiten:
                m, R = L @ m, L @ R
            self.mean[c].copy_(m)
            self.chol[c].copy_(R)

    def _whitened_q(self, state: VariationalState, c: int) -> tuple[Tensor, Tensor]:
        """``(m~_c, R~_c)`` with ``q(v_c) = N(m~_c, R~_c R~_c^T)``, ``v_c = L_c^{-1} U_c``."""
        m, R = self.mean[c], torch.tril(self.chol[c])
        if self.whiten:
            return m, R
        L = state.chol[c]
        return solve_lower(L, m.unsqueeze(-1)).squeeze(-1), solve_lower(L, R)

    def kl(self, state: VariationalState) -> Tensor:
        return sum(whitened_kl(*self._whitened_q(state, c)) for c in range(self.num_components))

    def project(self, state: VariationalState, Kux: list[Tensor]) -> Projection:
        a = self._whitened_cross(state, Kux)
        means, factors = [], []
        for c, a_c in enumerate(a):
            m, R = self._whitened_q(state, c)
            means.append((m.unsqueeze(-1) * a_c).sum(-2))  # K_fu K_uu^{-1} mu_u
            factors.append(R.mT @ a_c)  # G_c = R~_c^T a_c
        return Projection(means, list(a), factors, self.sign, self.coupled)


class FullCovariancePosterior(VariationalFamily):
    """One joint ``q(U) = N(m, S)``, ``S = R R^T`` of size ``MC x MC`` (Adam 2017).

    Parameters ``mean`` ``(sum_c M_c,)`` and the lower triangle of ``chol``.

    Example:
        >>> q = FullCovariancePosterior([3, 4])
        >>> q.chol.shape
        torch.Size([7, 7])
    """

    name = "full"
    sign = 1.0
    coupled = True

    def __init__(self, sizes, whiten=True, dtype=None, device=None) -> None:
        super().__init__(sizes, whiten, dtype, device)
        total = sum(self.sizes)
        self.mean = nn.Parameter(self._new(total))
        self.chol = nn.Parameter(torch.eye(total, **self._factory))

    @torch.no_grad()
    def initialize_from_prior(self, Kuu: Sequence[Tensor]) -> None:
        self.mean.zero_()
        if self.whiten:
            self.chol.copy_(
                torch.eye(self.chol.shape[0], dtype=self.chol.dtype, device=self.chol.device)
            )
        else:
            self.chol.copy_(
                torch.block_diag(
                    *[stable_cholesky(K, name=f"K_uu of component {c}") for c, K in enumerate(Kuu)]
                )
            )

    @torch.no_grad()
    def assign_whitened(self, mean: Tensor, precision_update: Tensor, chol: list[Tensor]) -> None:
        P = precision_update
        R = _covariance_chol(torch.eye(P.shape[0], dtype=P.dtype, device=P.device) + P, "I + P")
        m = mean
        if not self.whiten:
            Lb = torch.block_diag(*chol)
            m, R = Lb @ m, Lb @ R
        self.mean.copy_(m)
        self.chol.copy_(R)

    def prepare(self, Kuu: list[Tensor], chol: list[Tensor] | None) -> VariationalState:
        state = VariationalState(Kuu=Kuu, chol=chol)
        m, R = self.mean, torch.tril(self.chol)
        if not self.whiten:  # v = blockdiag(L)^{-1} U: R~ stays lower triangular
            o = self.offsets
            m = torch.cat(
                [solve_lower(L, m[o[c] : o[c + 1], None])[:, 0] for c, L in enumerate(chol)]
            )
            R = torch.cat([solve_lower(L, R[o[c] : o[c + 1]]) for c, L in enumerate(chol)])
        state.extra["m"], state.extra["R"] = m, R
        return state

    def kl(self, state: VariationalState) -> Tensor:
        return whitened_kl(state.extra["m"], state.extra["R"])

    def project(self, state: VariationalState, Kux: list[Tensor]) -> Projection:
        a = self._whitened_cross(state, Kux)
        m, R, o = state.extra["m"], state.extra["R"], self.offsets
        means, factors = [], []
        for c, a_c in enumerate(a):
            means.append((m[o[c] : o[c + 1], None] * a_c).sum(-2))
            factors.append(R[o[c] : o[c + 1]].mT @ a_c)  # (MC, n): O(N C M^2) per component
        return Projection(means, list(a), factors, self.sign, self.coupled)


class CoupledPrecisionPosterior(VariationalFamily):
    """``q(U) = N(K_UU alpha, (K_UU^{-1} + B B^T)^{-1})`` (Eq. 7, Appendix C).

    Args:
        sizes: ``M_c`` of every component.
        rank: number of columns ``R`` of ``B`` (default ``max_c M_c``: the paper's ``M``).
        whiten: parameterise ``(m, B~) = (L^T alpha, L^T B)`` (module docstring).
        init_scale: standard deviation of the random initial ``B`` (``B = 0``, i.e. ``q`` =
            prior, is a stationary point of the ELBO in ``B``, so ``B`` starts small and random).

    Parameters: ``mean[c]`` (``alpha_c`` when not whitened), ``B_raw[c]`` of shape
    ``(M_c, R)`` and ``log_scale`` ``(R,)``, with ``B_c = B_raw[c] diag(exp(log_scale))``
    (:meth:`factors`). The column scales are a reparameterisation, not a change of family:
    the data part of the optimal precision (Eq. 6) grows with ``n`` so the columns of ``B``
    reach norms of order ``sqrt(n / noise)``, and a log-scale lets Adam follow multiplicative
    changes of that size (e.g. while the noise variance is learned) in a few steps instead of
    thousands.

    Example:
        >>> q = CoupledPrecisionPosterior([3, 4], rank=2)
        >>> [B.shape for B in q.factors()]
        [torch.Size([3, 2]), torch.Size([4, 2])]
    """

    name = "coupled_precision"
    sign = -1.0
    coupled = True

    def __init__(
        self, sizes, rank=None, whiten=True, dtype=None, device=None, init_scale=1e-2
    ) -> None:
        super().__init__(sizes, whiten, dtype, device)
        self.rank = int(rank) if rank is not None else max(self.sizes)
        if self.rank < 1:
            raise InputDataError(f"CoupledPrecisionPosterior: rank must be >= 1, got {rank}")
        self.init_scale = float(init_scale)
        self.mean = nn.ParameterList([nn.Parameter(self._new(m)) for m in self.sizes])
        self.B_raw = nn.ParameterList(
            [
                nn.Parameter(self.init_scale * torch.randn(m, self.rank, **self._factory))
                for m in self.sizes
            ]
        )
        self.log_scale = nn.Parameter(self._new(self.rank))

    def factors(self) -> list[Tensor]:
        """``B_c = B_raw[c] diag(exp(log_scale))`` of Eq. 7 (``L_c^T B_c`` if whitened)."""
        scale = self.log_scale.exp()
        return [Bc * scale for Bc in self.B_raw]

    @torch.no_grad()
    def set_factors(self, B: Sequence[Tensor]) -> None:
        """Set ``B_c`` (column norms go to ``log_scale``, unit columns to ``B_raw``)."""
        norms = torch.stack([Bc.square().sum(0) for Bc in B]).sum(0).sqrt()
        norms = torch.where(norms > 0, norms, torch.ones_like(norms))
        self.log_scale.copy_(norms.log())
        for c, Bc in enumerate(B):
            self.B_raw[c].copy_(Bc / norms)

    @property
    def needs_cholesky(self) -> bool:
        return self.whiten

    @torch.no_grad()
    def initialize_from_prior(self, Kuu: Sequence[Tensor]) -> None:
        self.log_scale.zero_()
        for c, m in enumerate(self.sizes):
            self.mean[c].zero_()
            scale = self.init_scale
            if not self.whiten:  # B~ = L^T B has scale init_scale: B ~ init_scale / sqrt(k)
                scale = scale / float(Kuu[c].diagonal().mean().clamp_min(1e-12).sqrt())
            self.B_raw[c].copy_(
                scale
                * torch.randn(m, self.rank, dtype=self.B_raw[c].dtype, device=self.B_raw[c].device)
            )

    @torch.no_grad()
    def assign_whitened(self, mean: Tensor, precision_update: Tensor, chol: list[Tensor]) -> None:
        evals, evecs = torch.linalg.eigh(0.5 * (precision_update + precision_update.mT))
        k = min(self.rank, evals.shape[0])
        top = evecs[:, -k:] * evals[-k:].clamp_min(0).sqrt()  # best rank-R factor of P
        B = torch.zeros(evals.shape[0], self.rank, dtype=top.dtype, device=top.device)
        B[:, :k] = top
        o = self.offsets
        factors = []
        for c, L in enumerate(chol):
            sl = slice(o[c], o[c + 1])
            m, Bc = mean[sl], B[sl]
            if not self.whiten:  # alpha = L^{-T} m, B = L^{-T} B~
                m = torch.linalg.solve_triangular(L.mT, m.unsqueeze(-1), upper=True)[:, 0]
                Bc = torch.linalg.solve_triangular(L.mT, Bc, upper=True)
            self.mean[c].copy_(m)
            factors.append(Bc)
        self.set_factors(factors)

    def prepare(self, Kuu: list[Tensor], chol: list[Tensor] | None) -> VariationalState:
        state = VariationalState(Kuu=Kuu, chol=chol)
        B = self.factors()
        KB = B if self.whiten else [K @ Bc for K, Bc in zip(Kuu, B, strict=True)]
        A = torch.eye(self.rank, dtype=B[0].dtype, device=B[0].device)
        for Bc, KBc in zip(B, KB, strict=True):
            A = A + Bc.mT @ KBc  # A = I + B^T K_UU B (Appendix C.3), O(C M^3)
        LA = stable_cholesky(A, name="A = I + B^T K_UU B")
        state.extra["LA"] = LA
        state.extra["W"] = [solve_lower(LA, Bc.mT) for Bc in B]  # L_A^{-1} B_c^T (C.1)
        state.extra["KB"] = KB
        return state

    def kl(self, state: VariationalState) -> Tensor:
        # Appendix C.3: KL = 1/2 [log|A| + alpha^T K_UU alpha - sum_c tr(B_c A^{-1} B_c^T K_cc)]
        LA, W = state.extra["LA"], state.extra["W"]
        logdet_A = 2.0 * LA.diagonal().log().sum()
        quad, trace = 0.0, 0.0
        for c, (m, Wc) in enumerate(zip(self.mean, W, strict=True)):
            if self.whiten:
                quad = quad + m.square().sum()
                trace = trace + Wc.square().sum()  # tr(B~ A^{-1} B~^T)
            else:
                K = state.Kuu[c]
                quad = quad + m @ (K @ m)
                trace = trace + ((Wc @ K) * Wc).sum()  # tr(W_c K_cc W_c^T)
        return 0.5 * (logdet_A + quad - trace)

    def project(self, state: VariationalState, Kux: list[Tensor]) -> Projection:
        W = state.extra["W"]
        cross = self._whitened_cross(state, Kux) if self.whiten else Kux
        means, factors = [], []
        for m, Wc, Kc in zip(self.mean, W, cross, strict=True):
            means.append((m.unsqueeze(-1) * Kc).sum(-2))  # mu_c = K_{f_c U_c} alpha_c (C.3)
            factors.append(Wc @ Kc)  # L_A^{-1} B_c^T K_{U_c f_c} (C.1), O(N M R)
        # Sigma_{cc'} = delta_{cc'} k_c - G_c^T G_c' (C.1): the Nystrom terms cancel
        return Projection(means, [None] * len(means), factors, self.sign, self.coupled)


FAMILIES: dict[str, type[VariationalFamily]] = {
    cls.name: cls
    for cls in (MeanFieldPosterior, CoupledPrecisionPosterior, FullCovariancePosterior)
}
