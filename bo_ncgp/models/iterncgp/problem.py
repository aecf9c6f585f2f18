"""The GP regression problem solved in one Newton step of IterNCGP.

Tatzel et al., Sec. 3.1 and Algorithm 1, lines 6-7: a Laplace/Newton step at ``f_i`` is the
posterior of a GP regression with pseudo targets and noise covariance ``W(f_i)^{-1}``::

    y_hat(f_i) = f_i + W(f_i)^{-1} grad log p(y | f_i)                       (Eq. 6)
    K_hat(f_i) v = y_hat(f_i) - m,      K_hat(f_i) = K + W(f_i)^{-1}          (Eqs. 6-7)

For the softmax, ``W`` is singular (rank N(C-1)) and the likelihood supplies the
pseudo-inverse ``W^+`` in O(NC) (Sec. A.6).

**Null space of the softmax Hessian (deviation, documented).** The paper substitutes ``W^+``
for ``W^{-1}`` and lets the actions range over all of R^{NC}. ``W^+`` is zero on the null space
of ``W`` (a constant added to all C latents of one point), so an action with a component
there acts like a *noise-free* observation of the class sum, which the data never made: the
variances then fall below the Laplace ones, and with class-specific kernels even the Newton
fixed point moves off the mode. We therefore restrict the regression problem to the range of
``W`` -- actions and residuals are projected by ``P = I_N (x) (I_C - 11^T/C)`` -- which is the
pseudo-inverse solution of the same system: with ``P`` the limit j -> NC reproduces the exact
Laplace approximation (textbook Newton + Cholesky) for any kernel, and for a kernel shared by
all classes with CG actions (the paper's experiments) nothing changes, because the Krylov
space is already centred. Scalar likelihoods have no projection.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bo_ncgp.likelihoods import Likelihood, Softmax
from bo_ncgp.models.iterncgp.operators import (
    LatentKernelOperator,
    from_likelihood_layout,
    to_likelihood_layout,
)

__all__ = ["PseudoRegressionProblem", "null_space_projection"]


def null_space_projection(likelihood: Likelihood):
    """The projection ``P`` onto ``range W`` for likelihoods with a singular ``W`` (else None).

    Returns a function of ``(*b, C, n, k)`` tensors: the softmax centres each point's C
    entries, ``P v = v - mean_c(v)``.

    Example:
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> P = null_space_projection(Softmax(3))
        >>> PV = P(torch.randn(3, 4, 2))  # (C, n, k)
        >>> bool(PV.sum(-3).abs().max() < 1e-5), bool(torch.allclose(P(PV), PV))  # centred, P^2 = P
        (True, True)
        >>> null_space_projection(Bernoulli()) is None  # W invertible: no projection
        True
    """
    if isinstance(likelihood, Softmax):
        return lambda V: V - V.mean(-3, keepdim=True)
    return None


class PseudoRegressionProblem:
    """GP regression with pseudo targets ``y_hat(f_i)`` and noise ``W(f_i)^{-1}`` (or ``W^+``).

    Args:
        kernel_op: products with the prior covariance ``K``.
        likelihood: a bo_ncgp likelihood (supplies ``grad`` and ``neg_hessian_inv_matvec``).
        y: targets ``(*b, n)`` (already validated).
        f: current Newton iterate ``f_i``, ``(*b, C, n, 1)``.
        prior_mean: ``m = m(X)``, broadcastable to ``(*b, C, n, 1)``.

    Attributes:
        rhs: ``y_hat(f_i) - m`` (projected onto ``range W``), ``(*b, C, n, 1)``.

    Example:
        >>> import gpytorch
        >>> from bo_ncgp.likelihoods import Bernoulli
        >>> X = torch.rand(5, 1); y = torch.tensor([0.0, 1, 1, 0, 1])
        >>> K = LatentKernelOperator(gpytorch.kernels.RBFKernel(), X, 1, backend="dense")
        >>> p = PseudoRegressionProblem(K, Bernoulli(), y, torch.zeros(1, 5, 1), 0.0)
        >>> p.rhs.squeeze()  # y_hat(0) = W^{-1} grad = 4 (y - 1/2)
        tensor([-2.,  2.,  2., -2.,  2.])
    """

    def __init__(
        self,
        kernel_op: LatentKernelOperator,
        likelihood: Likelihood,
        y: Tensor,
        f: Tensor,
        prior_mean: Tensor | float,
    ) -> None:
        self.kernel_op = kernel_op
        self.likelihood = likelihood
        self.C = kernel_op.num_latents
        self.y = y
        self.f = f
        self._f_lik = to_likelihood_layout(f[..., 0], self.C)
        self._project = null_space_projection(likelihood)
        grad = from_likelihood_layout(likelihood.grad(y, self._f_lik), self.C).unsqueeze(-1)
        # Alg. 1, line 7 (Eq. 6): y_hat - m = (f_i - m) + W^{-1} grad log p(y | f_i)
        self.rhs = self.project((f - prior_mean) + self.noise_matmul(grad))
        self.rhs_norm = _norm(self.rhs)

    # ------------------------------------------------------------ operators
    def project(self, V: Tensor) -> Tensor:
        """``P V`` (identity for likelihoods with an invertible ``W``)."""
        return V if self._project is None else self._project(V)

    def kernel_matmul(self, V: Tensor) -> Tensor:
        """``K V`` for ``V`` of shape ``(*b, C, n, k)``."""
        return self.kernel_op.matmul(V)

    def noise_matmul(self, V: Tensor) -> Tensor:
        """``W(f_i)^{-1} V`` (softmax: ``W^+ V`` in O(NC)) for ``V`` of shape ``(*b, C, n, k)``."""
        # columns to the front so that they broadcast against f: (k, *b, n, C) or (k, *b, n)
        Vl = to_likelihood_layout(V.movedim(-1, 0), self.C)
        out = self.likelihood.neg_hessian_inv_matvec(self.y, self._f_lik, Vl)
        out = from_likelihood_layout(out, self.C).movedim(0, -1)
        return out.expand(torch.broadcast_shapes(out.shape, V.shape))

    def curvature_matmul(self, V: Tensor) -> Tensor:
        """``W(f_i) V`` (the negative Hessian of the log likelihood) for ``V`` of shape
        ``(*b, C, n, k)``."""
        Vl = to_likelihood_layout(V.movedim(-1, 0), self.C)
        out = self.likelihood.neg_hessian_matvec(self.y, self._f_lik, Vl)
        out = from_likelihood_layout(out, self.C).movedim(0, -1)
        return out.expand(torch.broadcast_shapes(out.shape, V.shape))

    def kernel_diagonal(self) -> Tensor:
        """``diag K`` in the latent layout, ``(*bx, C|1, n, 1)``."""
        return self.kernel_op.prior_diag(self.kernel_op.X).unsqueeze(-1)

    def noise_diagonal(self) -> Tensor:
        """``diag W(f_i)^{-1}`` (softmax: ``diag W^+``), ``(*b, C, n, 1)``, from ``C`` products
        with the per-point noise blocks."""
        C, n = self.C, self.f.shape[-2]
        eye = torch.eye(C, dtype=self.f.dtype, device=self.f.device)
        # column k: class k's unit vector at every point
        E = eye[:, None, :].expand(*self.f.shape[:-3], C, n, C)
        out = self.noise_matmul(E)  # (*b, C, n, C)
        return torch.diagonal(out, dim1=-3, dim2=-1).transpose(-1, -2).unsqueeze(-1)

    def matmul(self, V: Tensor) -> Tensor:
        """``K_hat V = K V + W^{-1} V``."""
        return self.kernel_matmul(V) + self.noise_matmul(V)

    def residual(self, v: Tensor, Kv: Tensor) -> Tensor:
        """``r = P((y_hat - m) - K v - W^{-1} v)`` (Algorithm 2, line 5) given ``K v``."""
        return self.project(self.rhs - Kv - self.noise_matmul(v))


def _norm(V: Tensor) -> Tensor:
    """Euclidean norm of each stacked latent vector: ``(*b, C, n, k)`` -> ``(*b, k)``."""
    return torch.linalg.vector_norm(V, dim=(-3, -2))
