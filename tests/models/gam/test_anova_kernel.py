"""The zero-mean ANOVA kernel of Durrande et al. (2013), Eq. 8 of Adam, Durrande & John."""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel
from torch.func import functional_call

from bo_ncgp.models.gam.anova_kernel import ANOVAKernel


def grid(a, b, n=4001):
    return torch.linspace(a, b, n).unsqueeze(-1)


def integrate(values, x):
    """Simpson's rule along dim 0 on the uniform grid x (odd number of points)."""
    h = float(x[1, 0] - x[0, 0])
    w = torch.ones(x.shape[0])
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return (h / 3.0) * (w.reshape(-1, *[1] * (values.dim() - 1)) * values).sum(0)


@pytest.mark.parametrize("ls", [0.05, 0.3, 2.0])
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (-2.0, 3.0)])
def test_components_integrate_to_zero(ls, bounds):
    a, b = bounds
    k = ScaleKernel(ANOVAKernel(lower=a, upper=b))
    k.base_kernel.lengthscale = ls * (b - a)
    k.outputscale = 2.5
    x = grid(a, b)
    y = a + (b - a) * torch.rand(7, 1)
    with torch.no_grad():
        K = k(x, y).to_dense()  # (n, 7)
        integral = integrate(K, x)
    scale = float(K.abs().max()) * (b - a)
    assert integral.abs().max() < 1e-8 * scale
    # ... hence every posterior mean sum_i s(x, z_i) alpha_i and every sample path too
    with torch.no_grad():
        L = torch.linalg.cholesky(k(x[::40]).to_dense() + 1e-9 * torch.eye(101))
        paths = L @ torch.randn(101, 5)
        xs = x[::40]
    assert integrate(paths, xs).abs().max() < 1e-3 * paths.abs().max() * (b - a)


def test_closed_form_integrals_match_quadrature():
    k = ANOVAKernel(lower=0.2, upper=1.7)
    k.lengthscale = 0.35
    g = RBFKernel()
    g.lengthscale = 0.35
    x = grid(0.2, 1.7)
    with torch.no_grad():
        G = g(x).to_dense()
        ell = k.lengthscale[..., 0]
        single = k._single_integral(x[:, 0], ell)
        double = k._double_integral(ell)
        assert torch.allclose(single, integrate(G, x), rtol=1e-8)
        assert torch.allclose(double, integrate(integrate(G, x), x), rtol=1e-8)


def test_definition_eq8_psd_and_diag():
    k = ANOVAKernel()
    k.lengthscale = 0.2
    g = RBFKernel()
    g.lengthscale = 0.2
    x1, x2 = torch.rand(6, 1), torch.rand(4, 1)
    xq = grid(0, 1)
    with torch.no_grad():
        i1 = integrate(g(xq, x1).to_dense(), xq)
        i2 = integrate(g(xq, x2).to_dense(), xq)
        ii = integrate(integrate(g(xq).to_dense(), xq), xq)
        ref = g(x1, x2).to_dense() - i1[:, None] * i2[None, :] / ii  # Eq. 8 by quadrature
        assert torch.allclose(k(x1, x2).to_dense(), ref, atol=1e-9)
        X = torch.rand(40, 1)
        K = k(X).to_dense()
        assert torch.linalg.eigvalsh(K).min() > -1e-10
        assert torch.allclose(k(X, diag=True), K.diagonal())


def test_product_interaction_is_zero_mean_in_each_argument():
    k = ANOVAKernel(active_dims=[0]) * ANOVAKernel(active_dims=[1])
    k.kernels[0].lengthscale = 0.3
    k.kernels[1].lengthscale = 0.5
    t = grid(0, 1, 801)[:, 0]
    y = torch.rand(3, 2)
    for dim in (0, 1):
        pts = torch.stack([t, torch.full_like(t, 0.37)], -1)
        if dim == 1:
            pts = pts.flip(-1)
        with torch.no_grad():
            K = k(pts, y).to_dense()
        assert integrate(K, t.unsqueeze(-1)).abs().max() < 1e-8


def test_batch_shapes_and_gradients():
    k = ANOVAKernel(batch_shape=torch.Size([3]))
    assert k(torch.rand(3, 5, 1), torch.rand(3, 4, 1)).to_dense().shape == (3, 5, 4)
    assert k(torch.rand(3, 5, 1), diag=True).shape == (3, 5)

    # gradients through the hand-written integrals (erf, expm1) against finite differences
    k1 = ANOVAKernel()
    x1, x2 = torch.rand(4, 1, requires_grad=True), torch.rand(3, 1)
    raw = torch.tensor([[-0.7]], requires_grad=True)

    def K(r, x):
        with gpytorch.settings.lazily_evaluate_kernels(False):
            return functional_call(k1, {"raw_lengthscale": r}, (x, x2)).to_dense()

    assert torch.autograd.gradcheck(K, (raw, x1))


def test_bad_input():
    with pytest.raises(ValueError, match="one-dimensional"):
        ANOVAKernel()(torch.rand(4, 2)).to_dense()
    with pytest.raises(ValueError, match="ard_num_dims"):
        ANOVAKernel(ard_num_dims=2)
    with pytest.raises(ValueError, match="lower < upper"):
        ANOVAKernel(lower=1.0, upper=1.0)
    with pytest.raises(ValueError, match="lower < upper"):
        ANOVAKernel(lower=0.0, upper=math.inf)
