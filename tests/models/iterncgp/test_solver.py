"""IterGP pieces: belief update, virtual solver run / compression, W^{-1} products.

Tatzel et al.: Prop. A.3 (variances decrease within a Newton step), Prop. A.4 (the initial
residual after the virtual solver run is orthogonal to span S), Sec. 3.4 (compression),
Sec. A.6 (softmax pseudo-inverse in O(NC)).
"""

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import InputDataError
from bo_ncgp.likelihoods import Bernoulli, Poisson, Softmax
from bo_ncgp.models.iterncgp import (
    ActionBuffers,
    Belief,
    CGPolicy,
    CovariancePolicy,
    IterNCGP,
    JacobiCGPolicy,
    LatentKernelOperator,
    MaxIterations,
    Policy,
    PseudoRegressionProblem,
    itergp,
    virtual_solver_run,
)
from bo_ncgp.models.iterncgp.operators import inner
from tests.models.iterncgp._reference import full_kernel

#: no tolerance stops: every fit runs its whole budget of Newton steps and solver iterations
WHOLE_BUDGET = dict(tol=0.0, solver_rtol=0.0, solver_atol=0.0, backend="dense")


def kernel(C=1, batched=False):
    bs = torch.Size([C]) if batched else torch.Size()
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(batch_shape=bs), batch_shape=bs)
    k.base_kernel.lengthscale = 0.3 if not batched else torch.linspace(0.2, 0.6, C)[:, None, None]
    k.outputscale = 2.0
    return k


def softmax_problem(n=20, C=3, batched=True, f_scale=1.0):
    X = torch.rand(n, 2)
    y = torch.randint(0, C, (n,))
    Kop = LatentKernelOperator(kernel(C, batched), X, C, backend="dense")
    f = f_scale * torch.randn(C, n, 1)
    return PseudoRegressionProblem(Kop, Softmax(C), y, f, 0.0), X, y, f


def random_actions(problem, B):
    C, n = problem.rhs.shape[-3:-1]
    S = problem.project(torch.randn(C, n, B))
    return S, problem.kernel_matmul(S)


# ------------------------------------------------------------------ W^+ products
def test_softmax_noise_matmul_is_the_dense_pseudo_inverse_in_latent_layout():
    problem, X, y, f = softmax_problem()
    n, C = X.shape[0], 3
    lik = problem.likelihood
    F = f[..., 0].mT  # (n, C)
    Wp = torch.block_diag(*lik.neg_hessian_pinv(y, F))  # point-major (n C, n C)
    W = torch.block_diag(*lik.neg_hessian(y, F))
    V = torch.randn(C, n, 4)
    out = problem.noise_matmul(V)  # (C, n, 4) in the latent layout
    dense = (Wp @ V.permute(1, 0, 2).reshape(n * C, 4)).reshape(n, C, 4).permute(1, 0, 2)
    torch.testing.assert_close(out, dense)
    # W W^+ W = W through our layout, and W W^+ is the projection P used for the actions
    Wv = lambda V: lik.neg_hessian_matvec(y, F, V.movedim(-1, 0).mT).mT.movedim(0, -1)  # noqa: E731
    torch.testing.assert_close(Wv(problem.noise_matmul(Wv(V))), Wv(V))
    torch.testing.assert_close(Wv(problem.noise_matmul(V)), problem.project(V))
    torch.testing.assert_close(W @ Wp @ W, W)


@pytest.mark.parametrize("batched", [False, True])
def test_jacobi_policy_divides_the_residual_by_the_diagonal_of_khat(batched):
    problem, _, y, f = softmax_problem(n=7, C=3, batched=batched, f_scale=2.0)
    n, C = 7, 3
    lik = problem.likelihood
    Wp = torch.block_diag(*lik.neg_hessian_pinv(y, f[..., 0].mT))  # point-major (n C, n C)
    noise_diag = Wp.diagonal().reshape(n, C).T[..., None]  # latent layout (C, n, 1)
    torch.testing.assert_close(problem.noise_diagonal(), noise_diag)
    K = torch.stack([problem.kernel_matmul(torch.eye(n).expand(C, n, n))[c] for c in range(C)])
    k_diag = torch.diagonal(K, dim1=-2, dim2=-1)[..., None]
    torch.testing.assert_close(problem.kernel_diagonal().expand(C, n, 1), k_diag)
    policy = JacobiCGPolicy()
    policy.reset(problem, recycled=False)
    r = problem.project(torch.randn(C, n, 1))
    torch.testing.assert_close(policy(r, problem, 0), problem.project(r / (k_diag + noise_diag)))


def test_jacobi_policy_weighs_points_by_their_curvature():
    X = torch.rand(30, 2)
    f = torch.linspace(-8, 8, 30).reshape(1, 30, 1)  # saturated at both ends
    y = (f[0, :, 0] > 0).double()
    Kop = LatentKernelOperator(kernel(), X, 1, backend="dense")
    problem = PseudoRegressionProblem(Kop, Bernoulli(), y, f, 0.0)
    policy = JacobiCGPolicy()
    policy.reset(problem, recycled=False)
    s = policy(torch.ones(1, 30, 1), problem, 0)[0, :, 0]
    assert s[14] > 100 * s[0] and s[15] > 100 * s[-1]


def test_pseudo_targets_are_the_newton_step():
    # Prop. A.1: K (K + W^{-1})^{-1} (y_hat - m) is the Newton update of the log posterior
    n = 15
    X = torch.rand(n, 1)
    y = torch.poisson(torch.full((n,), 3.0))
    k = kernel()
    Kop = LatentKernelOperator(k, X, 1, backend="dense")
    f = 0.3 * torch.randn(1, n, 1)
    problem = PseudoRegressionProblem(Kop, Poisson(), y, f, 0.0)
    K = k(X).to_dense()
    W = torch.exp(f[0, :, 0])
    g = y - W
    # (W + K^{-1}) f_new = W f + g  <=>  f_new = K (I + W K)^{-1} (W f + g)
    newton = K @ torch.linalg.solve(torch.eye(n) + W[:, None] * K, W * f[0, :, 0] + g)
    v = torch.linalg.solve(K + torch.diag(1 / W), problem.rhs[0, :, 0])
    torch.testing.assert_close(K @ v, newton)


# --------------------------------------------------------------------- belief
@pytest.mark.parametrize("batched", [False, True])
def test_belief_root_is_khat_orthonormal_and_v_is_c_times_rhs(batched):
    problem, *_ = softmax_problem(batched=batched)
    res = itergp(problem, CGPolicy(), MaxIterations(12))
    b = res.belief
    Khat_Q = problem.project(problem.matmul(b.Q))
    torch.testing.assert_close(inner(b.Q, Khat_Q), torch.eye(b.rank), atol=1e-10, rtol=0)
    torch.testing.assert_close(b.v, b.precision_matmul(problem.rhs))
    torch.testing.assert_close(b.Kv, problem.kernel_matmul(b.v))
    # C_j = S (S^T K_hat S)^{-1} S^T (Eq. 10) with the actions kept in the buffer
    S = res.S
    M = inner(S, problem.matmul(S))
    C_j = torch.einsum("cnb,dmb->cndm", b.Q, b.Q)
    C_ref = torch.einsum("cnb,bk,dmk->cndm", S, torch.linalg.solve(M, torch.eye(S.shape[-1])), S)
    torch.testing.assert_close(C_j, C_ref, atol=1e-8, rtol=1e-6)


def _precision(Q):
    return torch.einsum("...cnb,...dmb->...cndm", Q, Q)


@pytest.mark.parametrize("batched", [False, True])
def test_block_update_equals_the_same_actions_one_by_one(batched):
    # C_j depends on span S only: a block of k actions conditions like k single updates
    problem, *_ = softmax_problem(batched=batched)
    S0, T0 = random_actions(problem, 3)
    S, T = random_actions(problem, 6)
    one, block = (Belief(S0[..., :0], T0[..., :0], problem.rhs) for _ in range(2))
    for b in (one, block):
        for i in range(3):
            b.update(S0[..., i : i + 1], T0[..., i : i + 1], problem.residual(b.v, b.Kv), problem)
    for i in range(6):
        r = problem.residual(one.v, one.Kv)
        one.update(S[..., i : i + 1], T[..., i : i + 1], r, problem)
    upd = block.update(S, T, problem.residual(block.v, block.Kv), problem)
    assert bool(upd.accepted) and block.rank == one.rank == 9
    torch.testing.assert_close(_precision(block.Q), _precision(one.Q), atol=1e-8, rtol=1e-6)
    torch.testing.assert_close(block.v, one.v, atol=1e-8, rtol=1e-6)
    torch.testing.assert_close(block.Kv, problem.kernel_matmul(block.v))
    Khat_Q = problem.project(problem.matmul(block.Q))
    torch.testing.assert_close(inner(block.Q, Khat_Q), torch.eye(9), atol=1e-10, rtol=0)


def test_block_update_drops_a_dependent_column():
    problem, *_ = softmax_problem()
    S, T = random_actions(problem, 4)
    S = torch.cat([S, S[..., :1] + 2 * S[..., 1:2]], -1)  # the fifth is in the span
    T = torch.cat([T, T[..., :1] + 2 * T[..., 1:2]], -1)
    belief = Belief(S[..., :0], T[..., :0], problem.rhs)
    upd = belief.update(S, T, problem.rhs, problem)
    assert bool(upd.accepted) and belief.rank == 4 and int((upd.eta > 1e-8).sum()) == 4
    Khat_Q = problem.project(problem.matmul(belief.Q))
    torch.testing.assert_close(inner(belief.Q, Khat_Q), torch.eye(4), atol=1e-10, rtol=0)
    torch.testing.assert_close(belief.v, belief.precision_matmul(problem.rhs))


def test_covariance_policy_actions_are_curvature_times_kernel_columns_at_pivots():
    problem, X, *_ = softmax_problem(batched=False)
    policy = CovariancePolicy(targets=4)
    policy.reset(problem, recycled=False)
    S = policy(problem.rhs, problem, 0)
    C, n = problem.C, X.shape[0]
    assert S.shape == (C, n, 1 + 4 * (C - 1)) and policy(problem.rhs, problem, 1) is None
    z = policy._pivots
    Kz = kernel()(X, X[z]).to_dense()
    V = torch.zeros(C, n, C - 1, 4)
    for c in range(C - 1):
        V[c, :, c] = Kz
    WV = problem.project(problem.curvature_matmul(V.reshape(C, n, -1)))
    torch.testing.assert_close(S[..., 1:], WV)
    assert int(z[0]) in range(n) and len(set(z.tolist())) == 4


class RandomPolicy(Policy):
    """A new policy is one small class: Gaussian random actions."""

    stop_on_dependent_action = False

    def __call__(self, residual, problem, iteration):
        return torch.randn_like(residual)


@pytest.mark.parametrize("policy", ["cg", "unit_vector", RandomPolicy()])
def test_marginal_variance_never_increases_within_a_newton_step(policy):
    # Prop. A.3
    n, C = 30, 3
    X = torch.rand(n, 2)
    y = torch.randint(0, C, (n,))
    Xs = torch.rand(10, 2)
    record = {}

    def callback(step):
        record.setdefault(step.info["newton_step"], []).append(step.model.predict_f(Xs)[1])

    IterNCGP(
        kernel(C, batched=True),
        Softmax(C),
        policy=policy,
        max_solver_iters_per_step=8,
        max_newton_steps=4,
        **WHOLE_BUDGET,
    ).fit(X, y, callback=callback)
    assert len(record) == 4
    for variances in record.values():
        V = torch.stack(variances)
        assert len(V) == 9
        assert bool((V[1:] <= V[:-1] + 1e-12).all())
        assert bool((V[-1] < V[0] - 1e-6).any())  # and computation does reduce it


# ------------------------------------------------------------ virtual solver run
@pytest.mark.parametrize("lik", ["bernoulli", "softmax"])
def test_initial_residual_is_orthogonal_to_span_S(lik):
    # Prop. A.4: P_S r_0 = 0 for v_0 = C_0 (y_hat - m)
    if lik == "softmax":
        problem, *_ = softmax_problem()
    else:
        n = 25
        X = torch.rand(n, 2)
        y = torch.bernoulli(torch.full((n,), 0.4))
        Kop = LatentKernelOperator(kernel(), X, 1, backend="dense")
        problem = PseudoRegressionProblem(Kop, Bernoulli(), y, torch.randn(1, n, 1), 0.0)
    S, T = random_actions(problem, 7)
    rec = virtual_solver_run(ActionBuffers(S, T), problem)
    belief = Belief(rec.Q, rec.KQ, problem.rhs)
    r0 = problem.residual(belief.v, belief.Kv)
    St_r0 = inner(S, r0)
    assert float(St_r0.abs().max()) <= 1e-10 * float(problem.rhs.norm() * S.norm())
    # ... and the same via itergp with zero new iterations
    res = itergp(problem, CGPolicy(), MaxIterations(0), ActionBuffers(S, T))
    assert float(inner(S, res.initial_residual).abs().max()) <= 1e-10 * float(
        problem.rhs.norm() * S.norm()
    )
    # C_0 = S M^{-1} S^T with M = S^T (K + W^{-1}) S (Eq. 11), no product with K needed
    M = inner(S, T + problem.noise_matmul(S))
    C0_ref = torch.einsum("cnb,bk,dmk->cndm", S, torch.linalg.solve(M, torch.eye(7)), S)
    C0 = torch.einsum("cnb,dmb->cndm", rec.Q, rec.Q)
    torch.testing.assert_close(C0, C0_ref, atol=1e-9, rtol=1e-7)


def test_compression_rank_at_least_buffer_size_equals_no_compression():
    problem, *_ = softmax_problem()
    S, T = random_actions(problem, 9)
    C0 = lambda r: torch.einsum("cnb,dmb->cndm", r.Q, r.Q)  # noqa: E731
    full = virtual_solver_run(ActionBuffers(S, T), problem, rank=None)
    for R in (9, 15):
        torch.testing.assert_close(
            C0(virtual_solver_run(ActionBuffers(S, T), problem, rank=R)), C0(full)
        )


@pytest.mark.parametrize("R", [0, 1, 4])
def test_rank_R_compression_gives_rank_R_C0_on_the_top_eigenpairs(R):
    problem, *_ = softmax_problem()
    S, T = random_actions(problem, 9)
    rec = virtual_solver_run(ActionBuffers(S, T), problem, rank=R)
    assert rec.Q.shape[-1] == R and rec.S.shape[-1] == R and rec.T.shape[-1] == R
    C, n = S.shape[:2]
    Qflat = rec.Q.reshape(C * n, R)
    assert int(torch.linalg.matrix_rank(Qflat)) == R
    # kept eigenvalues are the R largest of M for unit-norm actions; T stays K S
    Sn = S / S.norm(dim=(0, 1))
    M = inner(Sn, problem.matmul(Sn))
    lam = torch.linalg.eigvalsh(M).flip(0)[:R]
    torch.testing.assert_close(rec.eigenvalues, lam)
    torch.testing.assert_close(rec.T, problem.kernel_matmul(rec.S))
    # C_0 is the exact precision approximation on span(S U): Q^T K_hat Q = I
    G = inner(rec.Q, problem.project(problem.matmul(rec.Q)))
    torch.testing.assert_close(G, torch.eye(R), atol=1e-10, rtol=0)


def test_dependent_actions_are_dropped_by_the_virtual_solver_run():
    problem, *_ = softmax_problem()
    S, T = random_actions(problem, 4)
    S2 = torch.cat([S, S[..., :2] + S[..., 2:3]], -1)  # two dependent columns
    rec = virtual_solver_run(ActionBuffers(S2, problem.kernel_matmul(S2)), problem)
    assert rec.Q.shape[-1] == 4
    ref = virtual_solver_run(ActionBuffers(S, T), problem)
    C0 = lambda r: torch.einsum("cnb,dmb->cndm", r.Q, r.Q)  # noqa: E731
    torch.testing.assert_close(C0(rec), C0(ref), atol=1e-8, rtol=1e-6)


def test_compressed_fit_keeps_buffers_bounded_and_still_converges():
    n, C = 40, 3
    X = torch.rand(n, 2)
    y = torch.randint(0, C, (n,))
    k = kernel(C)
    opts = dict(max_solver_iters_per_step=5, max_newton_steps=6, **WHOLE_BUDGET)
    full = IterNCGP(k, Softmax(C), **opts).fit(X, y)
    comp = IterNCGP(k, Softmax(C), compression_rank=4, **opts).fit(X, y)
    assert full.buffer_size == 30
    assert comp.buffer_size <= 4 + 5
    assert all(h.recycled_rank <= 4 for h in comp.history)
    # the dense K is never needed: the buffers are O(B N C)
    assert comp.state_nbytes() < full.state_nbytes()


def test_full_kernel_reference_layout():
    blocks = torch.arange(8.0).reshape(2, 2, 2)
    K = full_kernel(blocks)
    assert K[0, 0] == blocks[0, 0, 0] and K[1, 1] == blocks[1, 0, 0] and K[0, 1] == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: IterNCGP(kernel(), Bernoulli(), covariance_targets=-1),
        lambda: IterNCGP(kernel(), Bernoulli(), covariance_targets=2.5),
        lambda: CovariancePolicy(targets=0),
        lambda: CovariancePolicy(targets=5, block=0),
    ],
)
def test_covariance_settings_are_checked(make):
    with pytest.raises(InputDataError, match=r"targets|block"):
        make()


@pytest.mark.parametrize("lik", [Bernoulli(), Softmax(3)])
def test_jacobi_policy_with_batched_targets_fits_each_target_as_alone(lik):
    X = torch.rand(30, 2)
    y = torch.stack(
        [torch.randint(0, lik.num_latents + (lik.num_latents == 1), (30,)) for _ in "ab"]
    )
    y = y.to(X.dtype) if lik.num_latents == 1 else y
    opts = dict(policy="pcg", max_solver_iters_per_step=3, max_newton_steps=3, **WHOLE_BUDGET)
    both = IterNCGP(kernel(), lik, **opts).fit(X, y)
    for b in range(2):
        alone = IterNCGP(kernel(), lik, **opts).fit(X, y[b])
        torch.testing.assert_close(both.mode[b], alone.mode, atol=1e-8, rtol=1e-6)
