"""Tests of bo_ncgp.linalg.cg_solve: CG with an adjoint backward pass."""

import pytest
import torch

from bo_ncgp.linalg.cg_solve import cg_solve


def test_gradients_match_dense_solve():
    n = 12
    A0 = torch.randn(n, n)
    P = (A0 @ A0.T / n + torch.eye(n)).requires_grad_(True)
    B = torch.randn(n, 3, requires_grad=True)
    W = torch.randn(n, 3)
    X, res = cg_solve(lambda V, A: A @ V, B, (P,), tol=1e-13)
    assert bool(res.converged.all())
    g = torch.autograd.grad((X * W).sum(), (B, P))
    Xd = torch.linalg.solve(P, B)
    gd = torch.autograd.grad((Xd * W).sum(), (B, P))
    torch.testing.assert_close(X, Xd)
    for a, b in zip(g, gd, strict=True):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)


def test_no_grad_path_and_bad_shape():
    A = torch.eye(3) * 2
    X, _ = cg_solve(lambda V, A_: A_ @ V, torch.ones(3, 1), (A,))
    torch.testing.assert_close(X, torch.full((3, 1), 0.5))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, k\)"):
        cg_solve(lambda V, A_: A_ @ V, torch.ones(3), (A,))
