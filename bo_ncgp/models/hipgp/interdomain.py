"""Inter-domain covariances for linear observation operators of a stationary GP.

Wu et al. (2022), Sec. 2.1 and Eqs. 6-8: an observation ``y_n = (L_n rho)(x_n) + noise``
of a latent ``rho ~ GP(0, k)`` under a linear operator ``L_n`` needs the inter-domain
covariance ``k*_{u,n} = Cov(rho(z), L_n rho(x_n))`` (Eq. 7) and the transformed-domain
variance ``k**_{n,n}`` (Eq. 8). Operators, coded per observation as integers:

* ``VALUE = 0``: ``rho(x)``;
* ``derivative(d) = d + 1``: ``d rho / d x_d (x)``;
* ``INTEGRAL = -1``: the line integral from the origin to ``x``,
  ``int_0^1 rho(t x) |x| dt`` (the extinction of a star at ``x`` seen from the origin).

Derivative covariances are closed form for RBF and Matern-3/2, 5/2 kernels (optionally
inside a ``ScaleKernel``, with ARD lengthscales). Line integrals are closed form for the RBF
kernel (error functions) and use Gauss-Legendre quadrature along the ray otherwise.
:func:`transformed_covariance` evaluates the full ``Cov(L_i rho(x_i), L_j rho(x_j))`` matrix
by expanding every operator into weighted point functionals (the exact dense inter-domain
GP used as a reference in tests and experiments).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gpytorch
import numpy as np
import torch
from torch import Tensor

from bo_ncgp.exceptions import InputDataError, UnsupportedError

__all__ = [
    "INTEGRAL",
    "VALUE",
    "StationaryProfile",
    "as_op_codes",
    "cross_covariance",
    "derivative",
    "kernel_derivative_pairs",
    "transformed_covariance",
    "transformed_variance",
]

VALUE = 0
INTEGRAL = -1


def derivative(d: int) -> int:
    """Operator code of the partial derivative along input dimension ``d`` (0-based).

    Example:
        >>> derivative(0), derivative(1)  # codes 1..D; VALUE = 0, INTEGRAL = -1
        (1, 2)
        >>> k = gpytorch.kernels.RBFKernel()
        >>> k.lengthscale = 0.5
        >>> codes = torch.tensor([VALUE, derivative(0)])
        >>> var = transformed_variance(k, torch.zeros(2, 1), codes)
        >>> [round(v, 4) for v in var.tolist()]  # Var rho = 1, Var rho' = 1 / l^2
        [1.0, 4.0]
    """
    return int(d) + 1


OpSpec = str | int | tuple | Tensor | None


def as_op_codes(op: OpSpec, n: int, D: int, device=None) -> Tensor:
    """Operator codes ``(n,)`` from ``"value"``, ``"integral"``, ``"derivative"`` (D = 1),
    ``("derivative", d)``, an int code or a tensor of codes.

    Example:
        >>> as_op_codes(("derivative", 1), 3, 2).tolist()
        [2, 2, 2]
    """
    if op is None or (isinstance(op, str) and op == "value"):
        code = VALUE
    elif isinstance(op, str) and op == "integral":
        code = INTEGRAL
    elif isinstance(op, str) and op == "derivative":
        if D != 1:
            raise InputDataError(f"op='derivative' is ambiguous in D = {D}; use ('derivative', d)")
        code = derivative(0)
    elif isinstance(op, tuple) and len(op) == 2 and op[0] == "derivative":
        code = derivative(op[1])
    elif isinstance(op, int):
        code = op
    elif isinstance(op, Tensor):
        codes = op.to(device=device, dtype=torch.long).reshape(-1)
        if codes.numel() == 1:
            codes = codes.expand(n)
        if codes.numel() != n:
            raise InputDataError(f"op codes have {codes.numel()} entries for {n} observations")
        _check_codes(codes, D)
        return codes
    else:
        raise InputDataError(
            f"unknown observation operator {op!r}; use 'value', 'integral', "
            "('derivative', d) or a tensor of codes"
        )
    codes = torch.full((n,), int(code), dtype=torch.long, device=device)
    _check_codes(codes, D)
    return codes


def _check_codes(codes: Tensor, D: int) -> None:
    if codes.numel() and (int(codes.min()) < INTEGRAL or int(codes.max()) > D):
        raise InputDataError(
            f"operator codes must lie in [-1, {D}] (-1 integral, 0 value, d+1 derivative "
            f"along dim d), got range [{int(codes.min())}, {int(codes.max())}]"
        )


# --------------------------------------------------------------------------- kernels
@dataclass
class StationaryProfile:
    """``k(x, x') = outputscale * kappa(r)``, ``r^2 = sum_d (x_d - x'_d)^2 / l_d^2``.

    Example:
        >>> base = gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=2)
        >>> p = StationaryProfile.from_kernel(gpytorch.kernels.ScaleKernel(base))
        >>> p.family, tuple(p.lengthscale.shape), round(p.outputscale.item(), 4)
        ('matern52', (2,), 0.6931)
        >>> StationaryProfile.from_kernel(gpytorch.kernels.PeriodicKernel()) is None
        True
    """

    family: str  # "rbf" | "matern12" | "matern32" | "matern52"
    outputscale: Tensor
    lengthscale: Tensor  # (D,) or (1,)

    @staticmethod
    def from_kernel(kernel: gpytorch.kernels.Kernel) -> StationaryProfile | None:
        """Profile of an RBF / Matern kernel (optionally scaled), ``None`` otherwise."""
        scale = None
        base = kernel
        if isinstance(kernel, gpytorch.kernels.ScaleKernel):
            scale, base = kernel.outputscale, kernel.base_kernel
        if len(getattr(base, "batch_shape", ())) or (scale is not None and scale.dim() > 0):
            return None
        if isinstance(base, gpytorch.kernels.RBFKernel):
            family = "rbf"
        elif isinstance(base, gpytorch.kernels.MaternKernel):
            family = {0.5: "matern12", 1.5: "matern32", 2.5: "matern52"}[float(base.nu)]
        else:
            return None
        ls = base.lengthscale.reshape(-1)
        if scale is None:
            scale = torch.ones((), dtype=ls.dtype, device=ls.device)
        return StationaryProfile(family, scale, ls)


def _r2(tau: Tensor, ls: Tensor) -> Tensor:
    return ((tau / ls) ** 2).sum(-1)


def kernel_derivative_pairs(
    profile: StationaryProfile, tau: Tensor, d1: Tensor, d2: Tensor
) -> Tensor:
    """Elementwise ``Cov(D^{d1} rho(x), D^{d2} rho(x'))`` at ``tau = x - x'`` of shape
    ``(..., D)``; ``d1``, ``d2`` broadcast with ``tau[..., 0]`` and hold ``-1`` (no
    derivative) or a 0-based dimension. Closed forms (kappa_d = dkappa/dtau_d):
    ``(-1,-1) -> kappa``, ``(d,-1) -> kappa_d``, ``(-1,e) -> -kappa_e``,
    ``(d,e) -> -kappa_de``.

    Example:
        >>> p = StationaryProfile("matern52", torch.tensor(2.0), torch.tensor([0.7, 1.3]))
        >>> tau = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
        >>> no, d0 = torch.tensor(-1), torch.tensor(0)
        >>> k = kernel_derivative_pairs(p, tau, no, no)  # Cov(rho(x), rho(x'))
        >>> k_d = kernel_derivative_pairs(p, tau, d0, no)  # Cov(d rho / dx_0 (x), rho(x'))
        >>> k_d.shape, bool(torch.allclose(k_d, torch.autograd.grad(k.sum(), tau)[0][:, 0]))
        (torch.Size([4]), True)
    """
    D = tau.shape[-1]
    ls = profile.lengthscale.expand(D).to(tau)
    s2 = profile.outputscale.to(tau)
    r2 = _r2(tau, ls)
    r = r2.clamp_min(1e-30).sqrt()
    d1, d2 = torch.broadcast_tensors(d1, d2, r)[:2]
    t1 = torch.where(d1 >= 0, tau.gather(-1, d1.clamp_min(0).unsqueeze(-1)).squeeze(-1), 0)
    t2 = torch.where(d2 >= 0, tau.gather(-1, d2.clamp_min(0).unsqueeze(-1)).squeeze(-1), 0)
    l1 = ls[d1.clamp_min(0)] ** 2
    l2 = ls[d2.clamp_min(0)] ** 2
    same = (d1 == d2).to(tau)
    fam = profile.family
    if fam == "rbf":
        e = torch.exp(-0.5 * r2)
        k0 = e
        g1 = -t1 / l1 * e  # kappa_{d1}
        g2 = -t2 / l2 * e
        h = e * (t1 * t2 / (l1 * l2) - same / l1)  # kappa_{d1 d2}
    elif fam == "matern52":
        e = torch.exp(-math.sqrt(5) * r)
        k0 = (1 + math.sqrt(5) * r + 5.0 / 3.0 * r2) * e
        g1 = -(5.0 / 3.0) * t1 / l1 * (1 + math.sqrt(5) * r) * e
        g2 = -(5.0 / 3.0) * t2 / l2 * (1 + math.sqrt(5) * r) * e
        h = -(5.0 / 3.0) * (same / l1 * (1 + math.sqrt(5) * r) - 5 * t1 * t2 / (l1 * l2)) * e
    elif fam == "matern32":
        e = torch.exp(-math.sqrt(3) * r)
        k0 = (1 + math.sqrt(3) * r) * e
        g1 = -3 * t1 / l1 * e
        g2 = -3 * t2 / l2 * e
        h = -3 * (same / l1 - math.sqrt(3) * t1 * t2 / (l1 * l2 * r)) * e
    else:
        if bool(((d1 >= 0) | (d2 >= 0)).any()):
            raise UnsupportedError(
                "derivative observations need a differentiable kernel (RBF, Matern-3/2 or "
                f"Matern-5/2); got {fam}"
            )
        k0 = torch.exp(-r)
        g1 = g2 = h = torch.zeros_like(k0)
    none1, none2 = d1 < 0, d2 < 0
    out = torch.where(none1 & none2, k0, torch.where(none2, g1, torch.where(none1, -g2, -h)))
    return s2 * out


# ----------------------------------------------------------------------- quadrature
def _gauss_legendre(q: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """Nodes and weights on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(q)
    t = torch.as_tensor((x + 1) / 2, dtype=like.dtype, device=like.device)
    return t, torch.as_tensor(w / 2, dtype=like.dtype, device=like.device)


def _erf_diff(a: Tensor, b: Tensor) -> Tensor:
    """``erf(a) - erf(b)`` without cancellation in the tails."""
    both_pos = (a > 0) & (b > 0)
    both_neg = (a < 0) & (b < 0)
    plain = torch.erf(a) - torch.erf(b)
    pos = torch.erfc(b) - torch.erfc(a)
    neg = torch.erfc(-a) - torch.erfc(-b)
    return torch.where(both_pos, pos, torch.where(both_neg, neg, plain))


def _rbf_integral_cross(profile: StationaryProfile, Z: Tensor, X: Tensor) -> Tensor:
    """``|x| int_0^1 k(z, t x) dt`` for RBF, ``(..., M, n)`` (closed form, error functions)."""
    ls = profile.lengthscale.expand(X.shape[-1]).to(X)
    Zs, Xs = Z / ls, X / ls
    a = (Xs**2).sum(-1).clamp_min(1e-300)  # (n,)
    b = Zs @ Xs.mT  # (M, n)
    c = (Zs**2).sum(-1, keepdim=True)  # (M, 1)
    mu = b / a
    sa = (a / 2).sqrt()
    # exp(-(c - 2 b t + a t^2)/2) = exp(-(c - b^2/a)/2) exp(-a (t - mu)^2 / 2)
    # int_0^1 exp(-a (t-mu)^2/2) dt = sqrt(pi/(2a)) (erf(sa (1-mu)) + erf(sa mu))
    integral = math.sqrt(math.pi / 2) / a.sqrt() * _erf_diff(sa * (1 - mu), -sa * mu)
    expo = torch.exp(-0.5 * (c - b * mu).clamp_min(0))
    norm = X.norm(dim=-1)
    return profile.outputscale.to(X) * norm * expo * integral


def _rbf_integral_var(profile: StationaryProfile, X: Tensor) -> Tensor:
    """``|x|^2 int int k(s x, t x) ds dt`` for RBF, ``(..., n)`` (closed form)."""
    ls = profile.lengthscale.expand(X.shape[-1]).to(X)
    a = ((X / ls) ** 2).sum(-1)
    small = a < 1e-8
    a_safe = torch.where(small, torch.ones_like(a), a)
    l = a_safe.rsqrt()  # effective lengthscale of s -> k(s x, 0) on [0, 1]
    val = l * math.sqrt(2 * math.pi) * torch.erf(1 / (math.sqrt(2) * l)) - 2 * l**2 * (
        -torch.expm1(-1 / (2 * l**2))
    )
    val = torch.where(small, 1 - a / 12, val)  # Taylor limit of the double integral
    return profile.outputscale.to(X) * (X**2).sum(-1) * val


# ------------------------------------------------------------------- public helpers
def _require_profile(profile: StationaryProfile | None) -> None:
    if profile is None:
        raise UnsupportedError(
            "derivative observations need an RBF or Matern kernel (optionally scaled)"
        )


def cross_covariance(
    kernel: gpytorch.kernels.Kernel,
    Z: Tensor,
    X: Tensor,
    codes: Tensor,
    num_quad: int = 32,
) -> Tensor:
    """``k*_{u,n} = Cov(rho(Z_m), L_n rho(X_n))`` (Eq. 7), shape ``(M, n)``.

    Args:
        kernel: stationary GPyTorch kernel.
        Z: ``(M, D)`` latent-domain points (inducing points).
        X: ``(n, D)`` observation locations.
        codes: ``(n,)`` operator codes (:func:`as_op_codes`).
        num_quad: Gauss-Legendre nodes for line integrals of non-RBF kernels.

    Example:
        >>> k = gpytorch.kernels.RBFKernel()
        >>> Z, X = torch.rand(5, 2), torch.rand(3, 2)
        >>> cross_covariance(k, Z, X, as_op_codes("integral", 3, 2)).shape
        torch.Size([5, 3])
    """
    M, n = Z.shape[-2], X.shape[-2]
    out = Z.new_zeros(M, n)
    profile = StationaryProfile.from_kernel(kernel)
    vals = codes == VALUE
    if bool(vals.any()):
        out = out.index_copy(-1, vals.nonzero().squeeze(-1), kernel(Z, X[vals]).to_dense())
    ders = codes > 0
    if bool(ders.any()):
        _require_profile(profile)
        idx = ders.nonzero().squeeze(-1)
        tau = Z.unsqueeze(-2) - X[idx].unsqueeze(-3)  # (M, nd, D): tau = z - x
        dcode = (codes[idx] - 1).expand(M, -1)
        none = torch.full_like(dcode, -1)
        out = out.index_copy(-1, idx, kernel_derivative_pairs(profile, tau, none, dcode))
    ints = codes == INTEGRAL
    if bool(ints.any()):
        idx = ints.nonzero().squeeze(-1)
        Xi = X[idx]
        if profile is not None and profile.family == "rbf":
            block = _rbf_integral_cross(profile, Z, Xi)
        else:
            t, w = _gauss_legendre(num_quad, X)
            pts = (t.view(-1, 1, 1) * Xi.unsqueeze(0)).reshape(-1, X.shape[-1])  # (Q*ni, D)
            K = kernel(Z, pts).to_dense().reshape(M, num_quad, -1)
            block = (K * w.view(1, -1, 1)).sum(-2) * Xi.norm(dim=-1)
        out = out.index_copy(-1, idx, block)
    return out


def transformed_variance(
    kernel: gpytorch.kernels.Kernel, X: Tensor, codes: Tensor, num_quad: int = 32
) -> Tensor:
    """``k**_{n,n} = Var(L_n rho(X_n))`` (Eq. 8), shape ``(n,)``.

    Example:
        >>> k = gpytorch.kernels.RBFKernel()
        >>> X = torch.rand(4, 1)
        >>> transformed_variance(k, X, as_op_codes("derivative", 4, 1)).shape
        torch.Size([4])
    """
    out = kernel(X, X, diag=True).clone()
    profile = StationaryProfile.from_kernel(kernel)
    ders = codes > 0
    if bool(ders.any()):
        _require_profile(profile)
        d = codes[ders] - 1
        zero = X.new_zeros(int(ders.sum()), X.shape[-1])
        out = out.masked_scatter(ders, kernel_derivative_pairs(profile, zero, d, d))
    ints = codes == INTEGRAL
    if bool(ints.any()):
        Xi = X[ints]
        if profile is not None and profile.family == "rbf":
            v = _rbf_integral_var(profile, Xi)
        else:
            t, w = _gauss_legendre(num_quad, X)
            lags = (t.view(-1, 1) - t.view(1, -1)).reshape(1, -1, 1) * Xi.unsqueeze(1)
            K = kernel(lags.reshape(-1, X.shape[-1]), X.new_zeros(1, X.shape[-1])).to_dense()
            K = K.reshape(Xi.shape[0], num_quad, num_quad)
            v = torch.einsum("nab,a,b->n", K, w, w) * (Xi**2).sum(-1)
        out = out.masked_scatter(ints, v)
    return out


def _functionals(X: Tensor, codes: Tensor, num_quad: int):
    """Expand observations ``X (..., n, D)`` into weighted point functionals: points
    ``(..., P, D)``, weights ``(..., P)``, derivative dimensions ``(P,)`` and owners ``(P,)``."""
    t, w = _gauss_legendre(num_quad, X)
    lead = X.shape[:-2]
    pts, wts, der, own = [], [], [], []
    n = X.shape[-2]
    ar = torch.arange(n, device=X.device)
    pt = codes >= 0
    pts.append(X[..., pt, :])
    wts.append(X.new_ones(*lead, int(pt.sum())))
    der.append(codes[pt] - 1)
    own.append(ar[pt])
    ints = codes == INTEGRAL
    if bool(ints.any()):
        Xi = X[..., ints, :]
        pts.append((t.view(-1, 1, 1) * Xi.unsqueeze(-3)).reshape(*lead, -1, X.shape[-1]))
        wts.append((w.view(-1, 1) * Xi.norm(dim=-1).unsqueeze(-2)).reshape(*lead, -1))
        der.append(torch.full((num_quad * Xi.shape[-2],), -1, device=X.device))
        own.append(ar[ints].repeat(num_quad))
    return torch.cat(pts, -2), torch.cat(wts, -1), torch.cat(der), torch.cat(own)


def transformed_covariance(
    kernel: gpytorch.kernels.Kernel,
    X1: Tensor,
    codes1: Tensor,
    X2: Tensor | None = None,
    codes2: Tensor | None = None,
    num_quad: int = 64,
) -> Tensor:
    """Dense ``Cov(L_i rho(X1_i), L_j rho(X2_j))``, shape ``(..., n1, n2)``: every operator is
    expanded into weighted point functionals (line integrals by ``num_quad``-point
    Gauss-Legendre quadrature) and the derivative kernels are evaluated in closed form.
    ``O(n1 n2 num_quad^2)`` -- a reference for small problems, not a scalable method.

    ``X1 (..., n1, D)`` and ``X2 (..., n2, D)`` may carry leading batch dimensions (they
    broadcast); the codes ``(n1,)``, ``(n2,)`` are shared by the batch.

    Example:
        >>> k = gpytorch.kernels.RBFKernel()
        >>> X = torch.rand(3, 1)
        >>> c = torch.tensor([0, 1, -1])
        >>> transformed_covariance(k, X, c).shape
        torch.Size([3, 3])
        >>> Xb = torch.rand(4, 2, 1)  # a batch of 4 pairs against the 3 points
        >>> c2 = torch.tensor([1, 0])  # a derivative and a value
        >>> K = transformed_covariance(k, Xb, c2, X, c)
        >>> K.shape, bool(torch.allclose(K[2], transformed_covariance(k, Xb[2], c2, X, c)))
        (torch.Size([4, 2, 3]), True)
    """
    if X2 is None:
        X2, codes2 = X1, codes1
    profile = StationaryProfile.from_kernel(kernel)
    if profile is None:
        raise UnsupportedError("transformed_covariance needs an RBF or Matern kernel")
    p1, w1, d1, o1 = _functionals(X1, codes1, num_quad)
    p2, w2, d2, o2 = _functionals(X2, codes2, num_quad)
    tau = p1.unsqueeze(-2) - p2.unsqueeze(-3)
    K = kernel_derivative_pairs(profile, tau, d1.unsqueeze(-1), d2.unsqueeze(-2))
    K = K * w1.unsqueeze(-1) * w2.unsqueeze(-2)
    n1, n2 = X1.shape[-2], X2.shape[-2]
    A1 = torch.zeros(n1, p1.shape[-2], dtype=X1.dtype, device=X1.device)
    A1[o1, torch.arange(p1.shape[-2], device=X1.device)] = 1.0
    A2 = torch.zeros(n2, p2.shape[-2], dtype=X1.dtype, device=X1.device)
    A2[o2, torch.arange(p2.shape[-2], device=X1.device)] = 1.0
    return A1 @ K @ A2.mT
