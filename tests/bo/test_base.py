"""LatentGPModel against a toy exact GP whose posterior is known in closed form."""

import pytest
import torch
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.models.transforms import Normalize, Standardize
from botorch.sampling import SobolQMCNormalSampler

from bo_ncgp.bo.base import LatentGPModel
from tests.bo.toy_models import ExactGP, check_posterior


def make(m=1, **kw):
    X = torch.rand(12, 2)
    Y = torch.stack([torch.sin(5 * X[:, 0] + i) for i in range(m)], -1)
    return LatentGPModel(ExactGP(X, Y), num_outputs=m, **kw), X, Y


@pytest.mark.parametrize("shape", [(2,), (4, 2), (3, 4, 2)])
def test_posterior_shapes_and_values(shape):
    model, _, _ = make()
    X = torch.rand(*shape)
    check_posterior(model, X, noise=0.01)


def test_observation_noise_and_gradients():
    model, _, _ = make()
    X = torch.rand(5, 2, requires_grad=True)
    p0 = model.posterior(X)
    p1 = model.posterior(X, observation_noise=True)
    torch.testing.assert_close(p1.variance - p0.variance, torch.full((5, 1), 0.01))
    p2 = model.posterior(X, observation_noise=torch.full((5, 1), 0.5))
    torch.testing.assert_close(p2.variance - p0.variance, torch.full((5, 1), 0.5))
    p0.mean.sum().backward()
    assert X.grad is not None and torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0


def test_multi_output_subset_and_transform():
    model, _, _ = make(m=3)
    X = torch.rand(2, 4, 2)
    post = model.posterior(X)
    assert post.mean.shape == (2, 4, 3)
    mean, cov = model.model.predict(X)
    torch.testing.assert_close(post.variance, cov.diagonal(dim1=-2, dim2=-1).mT)
    sub = model.posterior(X, output_indices=[2])
    torch.testing.assert_close(sub.mean, mean[..., 2:])
    sub2 = model.posterior(X, output_indices=[0, 2])
    torch.testing.assert_close(sub2.variance, post.variance[..., [0, 2]])
    w = torch.tensor([1.0, -2.0, 0.5])
    scal = model.posterior(X, posterior_transform=ScalarizedPosteriorTransform(w))
    torch.testing.assert_close(scal.mean[..., 0], mean @ w)


def test_input_and_outcome_transforms():
    bounds = torch.tensor([[0.0, 0.0], [10.0, 10.0]])
    X = torch.rand(12, 2)
    Y = torch.sin(5 * X[:, :1]) * 3 + 7
    st = Standardize(m=1)
    Y_tf, _ = st(Y)
    st.eval()
    inner = ExactGP(X, Y_tf)
    model = LatentGPModel(inner, input_transform=Normalize(2, bounds=bounds), outcome_transform=st)
    Xt = torch.rand(4, 2)
    post = model.posterior(Xt * 10)
    mean, _ = inner.predict(Xt)
    torch.testing.assert_close(post.mean, mean * Y.std() + Y.mean())


def test_condition_and_fantasize():
    model, X, Y = make()
    Xn, Yn = torch.rand(3, 2), torch.randn(3, 1)
    cond = model.condition_on_observations(Xn, Yn)
    ref = ExactGP(torch.cat([X, Xn]), torch.cat([Y, Yn]))
    Xt = torch.rand(5, 2)
    torch.testing.assert_close(cond.posterior(Xt).mean, ref.predict(Xt)[0])
    assert model.model.X.shape[0] == 12  # original untouched
    fm = model.fantasize(torch.rand(2, 2), SobolQMCNormalSampler(torch.Size([8])))
    assert fm.batch_shape == torch.Size([8])
    assert fm.posterior(torch.rand(4, 2)).mean.shape == (8, 4, 1)


def test_tiny_negative_variances_are_lifted_to_a_floor():
    class Neg(LatentGPModel):
        def _latent_mean_cov(self, X):
            q = X.shape[-2]
            diag = torch.full((q,), 0.3)
            diag[0] = -1e-14  # round-off below zero at an observed point
            return X.new_zeros(*X.shape[:-1], 1), torch.diag(diag)

    model, _, _ = make()
    var = Neg(model.model).posterior(torch.rand(3, 2)).variance[..., 0]
    torch.testing.assert_close(var, torch.tensor([1e-10, 0.3, 0.3]))


def test_slightly_indefinite_joint_covariance_is_repaired_with_a_warning():
    import warnings

    from bo_ncgp.bo.base import _joint_factor
    from bo_ncgp.exceptions import NotPSDError, NumericalWarning

    good = torch.tensor([[1.0, 0.5], [0.5, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PD: the plain factor, no warning
        torch.testing.assert_close(_joint_factor(good), torch.linalg.cholesky(good))
    bad = torch.tensor([[1.0, 1.0 + 1e-7], [1.0 + 1e-7, 1.0]])  # eigenvalue -1e-7
    batch = torch.stack([good, bad])
    with pytest.warns(NumericalWarning, match="not numerically positive definite"):
        L = _joint_factor(batch)
    fixed = L @ L.mT
    torch.testing.assert_close(L[0], torch.linalg.cholesky(good), rtol=0, atol=0)  # untouched
    assert torch.linalg.eigvalsh(fixed[1]).min() > 0
    assert (fixed[1] - bad).abs().max() < 1e-5
    broken = torch.tensor([[1.0, 2.0], [2.0, 1.0]])  # eigenvalue -1: not round-off
    with pytest.raises(NotPSDError, match="not positive definite"):
        _joint_factor(broken)
    # near-noise-free data: variances ~1e-7, round-off of the prior's order (-4e-10) beyond
    # 1e-3 of the mean variance: shifted by the smallest eigenvalue instead of refused
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(58, 58, generator=g, dtype=torch.float64))
    lam = torch.linspace(-4e-10, 7e-7, 58, dtype=torch.float64)
    tiny = (Q * lam) @ Q.mT
    with pytest.warns(NumericalWarning, match="shifted by"):
        L = _joint_factor(tiny)
    assert torch.isfinite(L).all() and ((L @ L.mT) - tiny).abs().max() < 1e-8
    # a deficit of the order of the variances themselves (a q = 4 campaign on Branin: variances
    # 2e-7 to 5e-7, smallest eigenvalue -3.5e-7) is refused, unless the prior variance at the
    # points (here 1) says that it is round-off
    lam = torch.tensor([-3.5e-7, 2.3e-7, 3.5e-7, 4.9e-7, 7.2e-7], dtype=torch.float64)
    Q5, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    near = (Q5 * lam) @ Q5.mT
    assert torch.linalg.eigvalsh(near).min() < -1e-2 * near.diagonal().max()
    with pytest.raises(NotPSDError, match="not positive definite"):
        _joint_factor(near)
    with pytest.raises(NotPSDError, match="not positive definite"):
        _joint_factor(near, torch.tensor(1e-5, dtype=torch.float64))
    with pytest.warns(NumericalWarning, match="shifted by"):
        L = _joint_factor(near, torch.tensor(1.0, dtype=torch.float64))
    assert torch.isfinite(L).all() and ((L @ L.mT) - near).abs().max() < 2e-6
    with pytest.raises(ValueError, match="NaN"):
        _joint_factor(torch.full((2, 2), float("nan")))
    # the scale may come as a function: called only where the plain factorisation fails
    calls = []

    def scale():
        calls.append(1)
        return torch.tensor(1.0, dtype=torch.float64)

    torch.testing.assert_close(
        _joint_factor(good.double(), scale), torch.linalg.cholesky(good.double())
    )
    assert calls == []
    with pytest.warns(NumericalWarning, match="shifted by"):
        L = _joint_factor(near, scale)
    assert calls == [1] and ((L @ L.mT) - near).abs().max() < 2e-6


def test_errors_of_the_generic_adapter():
    from bo_ncgp.exceptions import InputDataError, UnsupportedError

    model, _, _ = make(m=2)
    assert model.num_outputs == 2 and LatentGPModel(model.model).num_outputs == 2  # the default
    with pytest.raises(
        InputDataError, match=r"output indices must be distinct integers in \[0, 2\)"
    ):
        model.subset_output([2])
    with pytest.raises(InputDataError, match=r"Y must have shape \(..., n, 1\)"):
        make()[0].condition_on_observations(torch.rand(2, 2), torch.rand(2))
    with pytest.raises(UnsupportedError, match="does not support conditioning"):
        LatentGPModel(torch.nn.Linear(2, 1), 1).condition_on_observations(
            torch.rand(2, 2), torch.rand(2, 1)
        )
    with pytest.raises(InputDataError, match="fantasy mode"):
        model.fantasy_targets(torch.rand(2, 2), mode="median")


def test_the_dual_adapter_gives_the_prior_variance_as_the_scale_of_round_off():
    from gpytorch.kernels import RBFKernel, ScaleKernel

    from bo_ncgp.bo import DualSVGPModel
    from bo_ncgp.likelihoods import Gaussian
    from bo_ncgp.models import DualSVGP

    X = torch.rand(8, 2, dtype=torch.float64)
    kernel = ScaleKernel(RBFKernel()).to(torch.float64)
    kernel.outputscale = 3.0
    dual = DualSVGP(kernel, Gaussian(0.01).to(torch.float64), X, num_hyper_steps=0)
    adapter = DualSVGPModel.from_model(dual.update(X, X.sum(-1)))
    Xq = torch.rand(5, 4, 2, dtype=torch.float64)
    torch.testing.assert_close(adapter._prior_scale(Xq), torch.full((5,), 3.0).double())
    calls = []
    real = type(adapter)._prior_scale
    adapter._prior_scale = lambda X: calls.append(1) or real(adapter, X)
    post = adapter.posterior(Xq)
    _ = post.mean, post.variance, post.rsample(torch.Size([2]))  # factorised without a fallback
    assert calls == []  # the scale is computed only where it is read
    assert post.distribution.lazy_covariance_matrix.prior_scale.shape == (5,)
    assert calls == [1]
    del adapter._prior_scale
    cond = adapter.condition_on_observations(Xq[0, :2], torch.zeros(2, 1, dtype=torch.float64))
    torch.testing.assert_close(cond._prior_scale(Xq), torch.full((5,), 3.0).double())
