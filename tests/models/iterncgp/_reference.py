"""Textbook dense Laplace approximation (Newton + Cholesky) used as the reference in tests.

Rasmussen & Williams (2006), Algorithms 3.1/3.2 written for a block-diagonal ``W`` (C x C
blocks per point, point-major ordering), so that it covers binary, count and softmax
likelihoods with one code path:

    B = I + W^{1/2} K W^{1/2} = L L^T,   b = W f + grad,
    a = b - W^{1/2} L^{-T} L^{-1} W^{1/2} K b,   f <- K a,
    mean(x) = m(x) + k(x)^T a,   var(x) = k(x, x) - ||L^{-1} W^{1/2} k(X, x)||^2.

``W^{1/2}`` is the symmetric square root of each PSD block (the softmax blocks are singular,
which this form handles without any pseudo-inverse).
"""

from __future__ import annotations

from typing import Any

import gpytorch
import torch

from bo_ncgp.models.iterncgp import IterNCGP


def dense_cg_model(k: gpytorch.kernels.Kernel, lik, iters: int, **options: Any) -> IterNCGP:
    """IterNCGP on the dense backend with no absolute solver tolerance: each Newton step runs
    ``iters`` solver iterations or until the relative tolerance ``solver_rtol``
    (``options`` override the CG policy, 40 Newton steps, ``tol=1e-12``, ``solver_rtol=0``)."""
    defaults = {"policy": "cg", "max_newton_steps": 40, "tol": 1e-12, "solver_rtol": 0.0}
    fixed = {"max_solver_iters_per_step": iters, "solver_atol": 0.0, "backend": "dense"}
    return IterNCGP(k, lik, **{**defaults, **options, **fixed})


def rbf(outputscale=2.0, lengthscale=0.3, batch_shape=None):
    """Scaled RBF kernel (batch shape ``()`` or ``(C,)``) with fixed hyperparameters."""
    batch_shape = torch.Size() if batch_shape is None else batch_shape
    k = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.RBFKernel(batch_shape=batch_shape), batch_shape=batch_shape
    )
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k


def full_kernel(blocks: torch.Tensor) -> torch.Tensor:
    """(C, n, m) per-latent blocks -> (n C, m C) in point-major ordering."""
    C, n, m = blocks.shape
    out = blocks.new_zeros(n * C, m * C)
    for c in range(C):
        out[c::C, c::C] = blocks[c]
    return out


def _w_blocks(lik, y, F, C):
    W = lik.neg_hessian(y, F if C > 1 else F[:, 0])
    if C == 1:
        W = W[:, None, None]
    return W  # (n, C, C)


def _sqrt_blocks(W):
    ev, U = torch.linalg.eigh(W)
    return U @ torch.diag_embed(ev.clamp_min(0).sqrt()) @ U.mT


def _psi(lik, y, f, a, C):
    F = f.reshape(-1, C)
    return lik.log_prob(y, F if C > 1 else F[:, 0]).sum() - 0.5 * (a * f).sum()


def dense_laplace(kernel, lik, X, y, C, iters=100, tol=1e-12):
    """Mode ``F`` (n, C) and a predictor ``predict(Xs) -> (mean (m, C), var (m, C))``.

    Newton steps are halved while they decrease the log posterior ``log p(y|f) - a^T f / 2``
    (``f = K a``; R&W Sec. 3.4.1, step-size control), so that count data with large rates
    converge."""
    n = X.shape[0]
    Kb = kernel(X).to_dense().detach().expand(C, n, n)
    K = full_kernel(Kb)
    f = torch.zeros(n * C, dtype=X.dtype)
    a_cur = torch.zeros(n * C, dtype=X.dtype)
    eye = torch.eye(n * C, dtype=X.dtype)
    for _ in range(iters):
        F = f.reshape(n, C)
        W = torch.block_diag(*_w_blocks(lik, y, F, C))
        sW = torch.block_diag(*_sqrt_blocks(_w_blocks(lik, y, F, C)))
        g = lik.grad(y, F if C > 1 else F[:, 0]).reshape(-1)
        L = torch.linalg.cholesky(eye + sW @ K @ sW)
        b = W @ f + g
        c = torch.cholesky_solve((sW @ (K @ b)).unsqueeze(-1), L).squeeze(-1)
        a = b - sW @ c
        f_new = K @ a
        done = (f_new - f).norm() <= tol * max(1.0, float(f_new.norm()))
        psi0, step = _psi(lik, y, f, a_cur, C), 1.0
        while _psi(lik, y, f + step * (f_new - f), a_cur + step * (a - a_cur), C) < psi0:
            step /= 2
        f, a_cur = f + step * (f_new - f), a_cur + step * (a - a_cur)
        if done:
            break
    F = f.reshape(n, C)
    sW = torch.block_diag(*_sqrt_blocks(_w_blocks(lik, y, F, C)))
    L = torch.linalg.cholesky(eye + sW @ K @ sW)
    a = lik.grad(y, F if C > 1 else F[:, 0]).reshape(-1)  # K^{-1} f at the mode

    def predict(Xs):
        m = Xs.shape[0]
        Ks = full_kernel(kernel(X, Xs).to_dense().detach().expand(C, n, m))  # (nC, mC)
        mean = (Ks.mT @ a).reshape(m, C)
        V = torch.linalg.solve_triangular(L, sW @ Ks, upper=False)
        prior = kernel(Xs, diag=True).detach().expand(C, m).mT  # (m, C)
        var = prior - V.square().sum(0).reshape(m, C)
        return mean, var

    return F, predict
