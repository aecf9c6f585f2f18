import pytest
import torch

from bo_ncgp.exceptions import NotPSDError, NumericalWarning
from bo_ncgp.linalg import stable_cholesky


def test_plain_spd_no_warning(recwarn):
    A = torch.randn(6, 6)
    A = A @ A.T + 6 * torch.eye(6)
    L = stable_cholesky(A)
    torch.testing.assert_close(L @ L.T, A)
    assert not [w for w in recwarn if issubclass(w.category, NumericalWarning)]


def test_singular_matrix_gets_jitter_with_warning():
    X = torch.randn(10, 3)
    A = X @ X.T  # rank 3, singular
    with pytest.warns(NumericalWarning, match="jitter"):
        L = stable_cholesky(A)
    assert torch.isfinite(L).all()
    err = (L @ L.T - A).abs().max()
    assert err < 1e-6 * A.diagonal().mean()


def test_batched_only_failing_element_jittered():
    good = torch.eye(4) * 2
    X = torch.randn(4, 1)
    bad = X @ X.T
    A = torch.stack([good, bad])
    with pytest.warns(NumericalWarning, match="1 of 2"):
        L = stable_cholesky(A)
    torch.testing.assert_close(L[0] @ L[0].T, good)


def test_indefinite_raises_with_eigenvalue():
    A = torch.diag(torch.tensor([1.0, -2.0, 3.0]))
    with pytest.raises(NotPSDError, match=r"smallest eigenvalue -2\.000e\+00"):
        stable_cholesky(A, name="K_zz")


def test_nan_and_shape_errors():
    with pytest.raises(ValueError, match="NaN"):
        stable_cholesky(torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="square"):
        stable_cholesky(torch.ones(2, 3))


def test_gradient_matches_autograd_of_plain_cholesky():
    X = torch.randn(5, 5)
    A = (X @ X.T + 5 * torch.eye(5)).requires_grad_(True)
    torch.autograd.gradcheck(lambda a: stable_cholesky(0.5 * (a + a.T)), (A,))


def test_psd_jitter_is_the_jitter_stable_cholesky_adds():
    from bo_ncgp.linalg import psd_jitter

    A = torch.stack([torch.eye(3), torch.ones(3, 3), 2 * torch.eye(3)])  # PD, singular, PD
    with pytest.warns(NumericalWarning, match="1 of 3 matrices"):
        j = psd_jitter(A, name="A")
    assert j.shape == (3,) and j[0] == 0 and j[2] == 0 and j[1] > 0
    with pytest.warns(NumericalWarning):
        L = stable_cholesky(A, name="A")
    torch.testing.assert_close(L @ L.mT, A + j[:, None, None] * torch.eye(3))
    with pytest.raises(NotPSDError):
        psd_jitter(-torch.eye(2))


def test_float32_jitter_warns_once_saying_to_use_float64(monkeypatch, caplog):
    import logging
    import warnings

    from bo_ncgp.linalg import cholesky

    monkeypatch.setattr(cholesky, "_LOW_PRECISION_WARNED", False)
    A = torch.ones(3, 3, dtype=torch.float32)  # singular: jitter every time
    with (
        warnings.catch_warnings(record=True) as caught,
        caplog.at_level(logging.DEBUG, logger="bo_ncgp.linalg.cholesky"),
    ):
        warnings.simplefilter("always")
        for _ in range(5):
            stable_cholesky(A, name="K")
        stable_cholesky(torch.ones(2, 2, dtype=torch.float64), name="K64")
    messages = [str(w.message) for w in caught if issubclass(w.category, NumericalWarning)]
    assert len(messages) == 2 and "use float64" in messages[0] and "K64" in messages[1]
    assert sum("added jitter" in r.getMessage() for r in caplog.records) == 4


def test_eigen_tolerance_shifts_round_off_beyond_the_relative_jitter():
    from bo_ncgp.linalg import psd_jitter

    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(30, 30, generator=g, dtype=torch.float64))
    lam = torch.linspace(-4e-10, 7e-7, 30, dtype=torch.float64)
    tiny = (Q * lam) @ Q.mT  # variances ~1e-7, round-off -4e-10: beyond 1e-3 of the mean
    good = torch.eye(30, dtype=torch.float64)
    with pytest.raises(NotPSDError, match="smallest eigenvalue"):
        psd_jitter(tiny, max_tries=8)
    with pytest.warns(NumericalWarning, match="shifted by"):
        j = psd_jitter(torch.stack([good, tiny]), max_tries=8, eigen_tolerance=1e-2)
    assert float(j[0]) == 0.0  # only the failing matrix is shifted
    assert 8e-10 <= float(j[1]) < 1e-9  # twice the deficit (+ 1e-12 of the largest variance)
    assert torch.linalg.eigvalsh(tiny + j[1] * torch.eye(30, dtype=torch.float64)).min() > 0
    broken = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)  # not round-off
    with pytest.raises(NotPSDError, match=r"smallest eigenvalue -1\.000e\+00"):
        psd_jitter(broken, eigen_tolerance=1e-2)
