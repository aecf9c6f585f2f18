"""Bad input at the public API of the models, likelihoods, linear algebra and the MNIST loader.

Every case either raises an error of :mod:`bo_ncgp.exceptions` whose message names the
offending argument, or returns a finite answer (mixed dtypes: cast to the model's dtype with an
:class:`~bo_ncgp.exceptions.InputDataWarning`). The case id starts with its category (the
first word), which the count table of the validation layer groups by.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from gpytorch.kernels import RBFKernel, ScaleKernel

from bo_ncgp.exceptions import (
    InputDataError,
    InputDataWarning,
    NonFiniteError,
    NumericalWarning,
)
from bo_ncgp.likelihoods import Bernoulli, Binomial, Gaussian, Poisson, Softmax, gauss_hermite
from bo_ncgp.linalg import (
    Grid,
    KernelOperator,
    cg,
    cg_solve,
    low_rank_plus_diagonal_inverse,
    pivoted_cholesky,
)
from bo_ncgp.models import (
    HIPGP,
    SVGP,
    BuiStreamingSVGP,
    DualSVGP,
    IterNCGP,
    OfflineSVGP,
    SparseGAM,
)
from bo_ncgp.models.dual import DualSVGPConfig

NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class Raises:
    """The call raises ``error`` with a message matching ``match``."""

    match: str
    error: type[Exception] = InputDataError


@dataclass(frozen=True)
class Finite:
    """The call returns finite tensors; ``warns`` (a category) must be emitted if given."""

    warns: type[Warning] | None = None


CASES: list = []


def case(cid: str, expect: Raises | Finite) -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        CASES.append(pytest.param(fn, expect, id=cid))
        return fn

    return register


def cases(cid: str, expect: Raises | Finite, fn: Callable) -> None:
    CASES.append(pytest.param(fn, expect, id=cid))


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    if hasattr(out, "predict_f"):  # a fitted model: its predictions
        return _tensors(out.predict_f(torch.rand(3, _dim(out), dtype=torch.float64)))
    if hasattr(out, "solution"):
        return [out.solution]
    if hasattr(out, "L"):
        return [out.L]
    return []


def _dim(model) -> int:
    X = getattr(model, "_X", None)
    return int(X.shape[-1]) if isinstance(X, torch.Tensor) else int(getattr(model, "_fuzz_dim", 1))


# ----------------------------------------------------------------------------- data
def data(n: int = 12, d: int = 1, kind: str = "binary"):
    X = torch.rand(n, d)
    if kind == "binary":
        y = (X[:, 0] > 0.5).double()
    elif kind == "counts":
        y = torch.poisson(torch.full((n,), 3.0))
    else:
        y = torch.sin(6 * X[:, 0])
    return X, y


def bad_X(X: torch.Tensor, what: str) -> torch.Tensor:
    X = X.clone()
    if what in ("nan", "inf", "-inf"):
        X[1, 0] = float(what)
        return X
    if what == "1d":
        return X[:, 0]
    if what == "cols":
        return torch.cat([X, X], -1)
    if what == "float32":
        return X.float()
    if what == "int64":
        return (X > 0.5).long()
    if what == "complex":
        return X.to(torch.complex128)
    if what == "empty":
        return X[:0]
    raise AssertionError(what)


def bad_y(y: torch.Tensor, what: str) -> torch.Tensor:
    y = y.clone()
    if what in ("nan", "inf", "-inf"):
        y[1] = float(what)
        return y
    if what == "length":
        return y[:-1]
    if what == "complex":
        return y.to(torch.complex128)
    if what == "float32":
        return y.float()
    if what == "int64":
        return y.long()
    raise AssertionError(what)


def rbf():
    return ScaleKernel(RBFKernel())


# one builder per model: (construct, train(model, X, y), predict(model, X), kind of targets)
def _dual():
    return DualSVGP(rbf(), Bernoulli(), torch.rand(4, 1), memory_size=3, num_hyper_steps=1)


def _iter():
    return IterNCGP(RBFKernel(), Bernoulli(), backend="dense", max_newton_steps=3)


def _hip():
    return HIPGP(rbf(), Grid([0.0], [1.0], (16,)), likelihood=Gaussian(noise=0.1))


def _gam():
    return SparseGAM([(rbf(), [0], torch.linspace(0, 1, 4))], Gaussian(0.1))


def _bui():
    return BuiStreamingSVGP(rbf(), Bernoulli(), torch.rand(4, 1), num_steps=2)


def _off():
    return OfflineSVGP(rbf(), Bernoulli(), torch.rand(4, 1))


MODELS = {
    "DualSVGP": (_dual, lambda m, X, y: m.update(X, y), "binary"),
    "IterNCGP": (_iter, lambda m, X, y: m.fit(X, y), "binary"),
    "HIPGP": (_hip, lambda m, X, y: m.fit(X, y, num_epochs=1), "real"),
    "SparseGAM": (_gam, lambda m, X, y: m.fit(X, y, num_steps=2), "real"),
    "BuiStreamingSVGP": (_bui, lambda m, X, y: m.update(X, y), "binary"),
    "OfflineSVGP": (_off, lambda m, X, y: m.fit(X, y, num_steps=2), "binary"),
}

X_BAD = {
    "nan": ("nan", Raises(r"X contains NaN or inf")),
    "inf": ("nonfinite", Raises(r"X contains NaN or inf")),
    "-inf": ("nonfinite", Raises(r"X contains NaN or inf")),
    "1d": ("shape", Raises(r"X must have shape")),
    "cols": ("shape", Raises(r"X (must have shape|has 2 columns)")),
    "empty": ("empty", Raises(r"X is empty")),
    "float32": ("dtype", Finite(InputDataWarning)),
    "int64": ("dtype", Finite(InputDataWarning)),
    "complex": ("complex", Raises(r"X must be real")),
}
Y_BAD = {
    "nan": ("nan", Raises(r"(targets|y) contain.* NaN")),
    "inf": ("nonfinite", Raises(r"(targets|y) contain.* inf")),
    "length": ("shape", Raises(r"(mismatch|y must have shape|X has 12 rows|need X)")),
    "complex": ("complex", Raises(r"(targets|y) must be real")),
    "float32": ("dtype", Finite()),
    "int64": ("dtype", Finite()),
}


def _train_case(name: str, which: str, what: str):
    build, train, kind = MODELS[name]

    def run():
        X, y = data(kind=kind)
        if which == "X":
            X = bad_X(X, what)
        else:
            y = bad_y(y, what)
        model = train(build(), X, y)
        return model

    return run


def _predict_case(name: str, what: str):
    build, train, kind = MODELS[name]

    def run():
        X, y = data(kind=kind)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumericalWarning)
            model = train(build(), X, y)
        return model.predict_f(bad_X(torch.rand(5, 1), what))

    return run


for _name in MODELS:
    for _what, (_cat, _expect) in X_BAD.items():
        if _name in ("SparseGAM", "IterNCGP") and _what == "cols":  # any d is allowed
            _expect = Finite()
        cases(f"{_cat}-{_name}-train-X-{_what}", _expect, _train_case(_name, "X", _what))
    for _what, (_cat, _expect) in Y_BAD.items():
        cases(f"{_cat}-{_name}-train-y-{_what}", _expect, _train_case(_name, "y", _what))
    for _what in ("nan", "inf", "complex", "float32", "int64"):
        _cat, _expect = X_BAD[_what]
        cases(f"{_cat}-{_name}-predict-X-{_what}", _expect, _predict_case(_name, _what))


# ------------------------------------------------------------- model arguments
ARG_CASES = [
    # (id, callable, match)
    ("DualSVGP-lr-inf", lambda: DualSVGPConfig(lr=INF), "lr"),
    ("DualSVGP-lr-nan", lambda: DualSVGPConfig(lr=NAN), "lr"),
    ("DualSVGP-lr-zero", lambda: DualSVGPConfig(lr=0.0), "lr"),
    ("DualSVGP-rho-nan", lambda: DualSVGPConfig(rho=NAN), "rho"),
    ("DualSVGP-memory_size-neg", lambda: DualSVGPConfig(memory_size=-1), "memory_size"),
    ("DualSVGP-num_inner_steps-frac", lambda: DualSVGPConfig(num_inner_steps=2.5), "num_inner"),
    ("DualSVGP-num_latents-zero", lambda: DualSVGPConfig(num_latents=0), "num_latents"),
    ("DualSVGP-max_inducing-inf", lambda: DualSVGPConfig(max_inducing=INF), "max_inducing"),
    ("DualSVGP-memory_cap-nan", lambda: DualSVGPConfig(memory_cap=NAN), "memory_cap"),
    ("IterNCGP-tol-nan", lambda: IterNCGP(RBFKernel(), Bernoulli(), tol=NAN), "tol"),
    ("IterNCGP-tol-inf", lambda: IterNCGP(RBFKernel(), Bernoulli(), tol=INF), "tol"),
    (
        "IterNCGP-solver_rtol-neg",
        lambda: IterNCGP(RBFKernel(), Bernoulli(), solver_rtol=-1.0),
        "solver_rtol",
    ),
    (
        "IterNCGP-solver_atol-nan",
        lambda: IterNCGP(RBFKernel(), Bernoulli(), solver_atol=NAN),
        "solver_atol",
    ),
    (
        "IterNCGP-max_newton_steps-inf",
        lambda: IterNCGP(RBFKernel(), Bernoulli(), max_newton_steps=INF),
        "max_newton_steps",
    ),
    (
        "IterNCGP-max_solver_iters-frac",
        lambda: IterNCGP(RBFKernel(), Bernoulli(), max_solver_iters_per_step=2.5),
        "max_solver_iters_per_step",
    ),
    (
        "IterNCGP-compression_rank-neg",
        lambda: IterNCGP(RBFKernel(), Bernoulli(), compression_rank=-2),
        "compression_rank",
    ),
    ("HIPGP-jitter-neg", lambda: HIPGP(rbf(), Grid([0.0], [1.0], (8,)), jitter=-1.0), "jitter"),
    ("HIPGP-jitter-nan", lambda: HIPGP(rbf(), Grid([0.0], [1.0], (8,)), jitter=NAN), "jitter"),
    ("HIPGP-pcg_tol-neg", lambda: HIPGP(rbf(), Grid([0.0], [1.0], (8,)), pcg_tol=-1.0), "pcg_tol"),
    ("HIPGP-pcg_tol-inf", lambda: HIPGP(rbf(), Grid([0.0], [1.0], (8,)), pcg_tol=INF), "pcg_tol"),
    (
        "HIPGP-pcg_max_iters-neg",
        lambda: HIPGP(rbf(), Grid([0.0], [1.0], (8,)), pcg_max_iters=-1),
        "pcg_max_iters",
    ),
    ("HIPGP-num_quad-zero", lambda: HIPGP(rbf(), Grid([0.0], [1.0], (8,)), num_quad=0), "num_quad"),
    (
        "HIPGP-embedding_factor-zero",
        lambda: HIPGP(rbf(), Grid([0.0], [1.0], (8,)), embedding_factor=0),
        "embedding_factor",
    ),
    (
        "HIPGP-fit-num_epochs-neg",
        lambda: _hip().fit(*data(kind="real"), num_epochs=-1),
        "num_epochs",
    ),
    (
        "HIPGP-fit-hyper_lr-inf",
        lambda: _hip().fit(*data(kind="real"), learn_hyperparameters=True, hyper_lr=INF),
        "hyper_lr",
    ),
    (
        "HIPGP-fit-natgrad_lr-nan",
        lambda: _hip().fit(*data(kind="real"), natgrad_lr=NAN),
        "natgrad_lr",
    ),
    (
        "HIPGP-fit-natgrad_lr-big",
        lambda: _hip().fit(*data(kind="real"), natgrad_lr=2.0),
        "natgrad_lr",
    ),
    (
        "HIPGP-fit-batch_size-zero",
        lambda: _hip().fit(*data(kind="real"), batch_size=0),
        "batch_size",
    ),
    (
        "SparseGAM-jitter-nan",
        lambda: SparseGAM([(rbf(), [0], torch.linspace(0, 1, 4))], Gaussian(0.1), jitter=NAN),
        "jitter",
    ),
    (
        "SparseGAM-rank-neg",
        lambda: SparseGAM([(rbf(), [0], torch.linspace(0, 1, 4))], Gaussian(0.1), rank=-1),
        "rank",
    ),
    ("SparseGAM-fit-lr-inf", lambda: _gam().fit(*data(kind="real"), num_steps=2, lr=INF), "lr"),
    ("SparseGAM-fit-lr-zero", lambda: _gam().fit(*data(kind="real"), num_steps=2, lr=0.0), "lr"),
    (
        "SparseGAM-fit-num_steps-neg",
        lambda: _gam().fit(*data(kind="real"), num_steps=-1),
        "num_steps",
    ),
    (
        "SparseGAM-fit-batch_size-zero",
        lambda: _gam().fit(*data(kind="real"), num_steps=2, batch_size=0),
        "batch_size",
    ),
    (
        "Bui-lr-inf",
        lambda: BuiStreamingSVGP(rbf(), Bernoulli(), torch.rand(4, 1), lr=INF),
        "lr",
    ),
    (
        "Bui-jitter-nan",
        lambda: BuiStreamingSVGP(rbf(), Bernoulli(), torch.rand(4, 1), jitter=NAN),
        "jitter",
    ),
    (
        "Bui-num_steps-neg",
        lambda: BuiStreamingSVGP(rbf(), Bernoulli(), torch.rand(4, 1), num_steps=-1),
        "num_steps",
    ),
    (
        "Offline-jitter-neg",
        lambda: OfflineSVGP(rbf(), Bernoulli(), torch.rand(4, 1), jitter=-1.0),
        "jitter",
    ),
    ("Offline-fit-lr-nan", lambda: _off().fit(*data(), num_steps=2, lr=NAN), "lr"),
    ("Offline-fit-num_steps-neg", lambda: _off().fit(*data(), num_steps=-1), "num_steps"),
    (
        "Offline-fit-batch_size-zero",
        lambda: _off().fit(*data(), num_steps=1, batch_size=0),
        "batch_size",
    ),
    ("SVGP-jitter-inf", lambda: SVGP(rbf(), torch.rand(4, 1), jitter=INF), "jitter"),
    ("SVGP-inducing-nan", lambda: SVGP(rbf(), torch.full((4, 1), NAN)), "inducing_points"),
    (
        "DualSVGP-inducing-inf",
        lambda: DualSVGP(rbf(), Bernoulli(), torch.full((4, 1), INF)),
        "inducing_points",
    ),
    (
        "DualSVGP-inducing-complex",
        lambda: DualSVGP(rbf(), Bernoulli(), torch.rand(4, 1).to(torch.complex128)),
        "inducing_points",
    ),
]
for _cid, _fn, _match in ARG_CASES:
    cases(f"argument-{_cid}", Raises(_match), _fn)


# ----------------------------------------------------------------- likelihoods
LIK_ARGS = [
    ("Binomial-inf", lambda: Binomial(INF), "num_trials"),
    ("Binomial-nan", lambda: Binomial(NAN), "num_trials"),
    ("Binomial-zero", lambda: Binomial(0), "num_trials"),
    ("Binomial-frac", lambda: Binomial(2.5), "num_trials"),
    ("Binomial-complex", lambda: Binomial(torch.tensor([3 + 1j])), "num_trials"),
    ("Gaussian-noise-inf", lambda: Gaussian(noise=INF), "noise"),
    ("Gaussian-noise-nan", lambda: Gaussian(noise=NAN), "noise"),
    ("Gaussian-noise-neg", lambda: Gaussian(noise=-0.1), "noise"),
    ("Softmax-num_samples-zero", lambda: Softmax(3, num_samples=0), "num_samples"),
    ("Softmax-num_samples-frac", lambda: Softmax(3, num_samples=2.5), "num_samples"),
    ("Softmax-num_classes-inf", lambda: Softmax(INF), "num_classes"),
    ("Softmax-num_classes-frac", lambda: Softmax(2.5), "num_classes"),
    ("Bernoulli-labels", lambda: Bernoulli(labels="01x"), "labels"),
    (
        "gauss_hermite-zero",
        lambda: gauss_hermite(0, torch.float64, torch.device("cpu")),
        "num_points",
    ),
    (
        "gauss_hermite-nan",
        lambda: gauss_hermite(NAN, torch.float64, torch.device("cpu")),
        "num_points",
    ),
    (
        "expected-num_points-neg",
        lambda: Bernoulli().expected(torch.ones(2), torch.zeros(2), torch.ones(2), num_points=-3),
        "num_points",
    ),
]
for _cid, _fn, _match in LIK_ARGS:
    cases(f"argument-{_cid}", Raises(_match), _fn)

_z, _o = torch.zeros(3), torch.ones(3)
LIK_CALLS = [
    (
        "nonfinite",
        "Gaussian-y-inf",
        lambda: Gaussian(0.1).log_prob(torch.tensor([0, INF, 1]), _z),
        "inf",
    ),
    (
        "nonfinite",
        "Bernoulli-f-inf",
        lambda: Bernoulli().log_prob(_o, torch.tensor([0, INF, 1])),
        "f contains",
    ),
    (
        "nonfinite",
        "Poisson-f-ninf",
        lambda: Poisson().grad(_o, torch.tensor([0, -INF, 1])),
        "f contains",
    ),
    (
        "nonfinite",
        "Poisson-var-inf",
        lambda: Poisson().expected(_o, _z, torch.tensor([1, INF, 1])),
        "var contains",
    ),
    (
        "nonfinite",
        "Bernoulli-mean-inf",
        lambda: Bernoulli().expected(_o, torch.tensor([INF, 0, 0]), _o),
        "mean contains",
    ),
    (
        "nonfinite",
        "Poisson-y-inf",
        lambda: Poisson().log_prob(torch.tensor([1, INF, 1]), _z),
        "inf",
    ),
    (
        "nonfinite",
        "Binomial-y-inf",
        lambda: Binomial(5).log_prob(torch.tensor([1, INF, 1]), _z),
        "inf",
    ),
    (
        "nonfinite",
        "Bernoulli-y-inf",
        lambda: Bernoulli().log_prob(torch.tensor([1, INF, 1]), _z),
        "inf",
    ),
    (
        "nonfinite",
        "Softmax-y-inf",
        lambda: Softmax(3).log_prob(torch.tensor([1, INF, 1]), torch.zeros(3, 3)),
        "inf",
    ),
    (
        "nonfinite",
        "Poisson-huge-counts",
        lambda: Poisson().log_prob(torch.tensor([1e300, 2.0, 1.0]), _z),
        "counts",
    ),
    (
        "nan",
        "Gaussian-f-nan",
        lambda: Gaussian(0.1).grad(_z, torch.tensor([0, NAN, 1])),
        "f contains",
    ),
    (
        "complex",
        "Gaussian-y-complex",
        lambda: Gaussian(0.1).log_prob(_z.to(torch.complex128), _z),
        "must be real",
    ),
    (
        "complex",
        "Poisson-y-complex",
        lambda: Poisson().log_prob(_o.to(torch.complex128), _z),
        "must be real",
    ),
    (
        "complex",
        "Softmax-y-complex",
        lambda: Softmax(3).log_prob(_o.to(torch.complex128), torch.zeros(3, 3)),
        "must be real",
    ),
    (
        "complex",
        "Bernoulli-f-complex",
        lambda: Bernoulli().log_prob(_o, _z.to(torch.complex128)),
        "must be real",
    ),
    (
        "range",
        "Bernoulli-y-2",
        lambda: Bernoulli().log_prob(torch.tensor([0.0, 2.0, 1.0]), _z),
        "out of range|labels",
    ),
    (
        "range",
        "Softmax-y-5",
        lambda: Softmax(3).log_prob(torch.tensor([0, 5, 1]), torch.zeros(3, 3)),
        "out of range",
    ),
    (
        "range",
        "Poisson-y-neg",
        lambda: Poisson().log_prob(torch.tensor([0.0, -1.0, 1.0]), _z),
        "out of range",
    ),
    (
        "range",
        "Binomial-y-above",
        lambda: Binomial(3).log_prob(torch.tensor([0.0, 4.0, 1.0]), _z),
        "out of range",
    ),
    ("shape", "Bernoulli-shape", lambda: Bernoulli().log_prob(torch.ones(4), _z), "shape mismatch"),
]
for _cat, _cid, _fn, _match in LIK_CALLS:
    cases(f"{_cat}-{_cid}", Raises(_match), _fn)


@case("nonfinite-IterNCGP-Poisson-huge-counts", Raises(r"counts"))
def _iter_huge_counts():
    X = torch.rand(8, 1)
    y = torch.full((8,), 1e300)
    return IterNCGP(RBFKernel(), Poisson(), backend="dense").fit(X, y)


@case("nonfinite-IterNCGP-Poisson-counts-1e6", Raises(r"mean function", NonFiniteError))
def _iter_large_counts():
    X = torch.rand(8, 1)
    y = torch.full((8,), 1e6)  # exact integers, far from exp(prior mean) = 1
    return IterNCGP(RBFKernel(), Poisson(), backend="dense").fit(X, y)


@case("nonfinite-SparseGAM-Poisson-counts-1e6", Raises(r"rescale", NonFiniteError))
def _gam_large_counts():
    X = torch.rand(8, 1)
    model = SparseGAM([(rbf(), [0], torch.linspace(0, 1, 4))], Poisson())
    return model.fit(X, torch.full((8,), 1e6), num_steps=2)


# ------------------------------------------------------------------------ linalg
_A = torch.tensor([[4.0, 1.0], [1.0, 3.0]])
_b = torch.ones(2)

LINALG = [
    ("nan", "cg-B-nan", lambda: cg(_A, torch.tensor([1.0, NAN])), "B contains NaN"),
    ("nonfinite", "cg-B-inf", lambda: cg(_A, torch.tensor([1.0, INF])), "B contains NaN or inf"),
    ("nan", "cg-x0-nan", lambda: cg(_A, _b, x0=torch.tensor([NAN, 0.0])), "x0 contains"),
    ("argument", "cg-tol-nan", lambda: cg(_A, _b, tol=NAN), "tol"),
    ("argument", "cg-tol-neg", lambda: cg(_A, _b, tol=-1.0), "tol"),
    ("argument", "cg-max_iters-neg", lambda: cg(_A, _b, max_iters=-1), "max_iters"),
    ("argument", "cg-max_iters-frac", lambda: cg(_A, _b, max_iters=2.5), "max_iters"),
    ("shape", "cg-A-shape", lambda: cg(torch.eye(3), _b), "A"),
    ("shape", "cg-matmul-shape", lambda: cg(lambda V: V[:1], _b), "matmul"),
    ("nan", "cg-matmul-nan", lambda: cg(lambda V: V * NAN, _b), "matmul"),
    ("complex", "cg-B-complex", lambda: cg(_A, _b.to(torch.complex128)), "B must be real"),
    ("dtype", "cg-B-int", lambda: cg(_A, torch.tensor([1, 2])), "B must be a floating"),
    ("shape", "cg-B-scalar", lambda: cg(_A, torch.tensor(1.0)), "B|right-hand side"),
    ("nan", "cg_solve-B-nan", lambda: cg_solve(lambda V: V, torch.full((2, 1), NAN)), "B contains"),
    (
        "argument",
        "cg_solve-tol-nan",
        lambda: cg_solve(lambda V: V, torch.ones(2, 1), tol=NAN),
        "tol",
    ),
    (
        "argument",
        "cg_solve-max_iters-neg",
        lambda: cg_solve(lambda V: V, torch.ones(2, 1), max_iters=-1),
        "max_iters",
    ),
    ("shape", "cg_solve-B-1d", lambda: cg_solve(lambda V: V, torch.ones(2)), "B must have shape"),
    (
        "nan",
        "pivoted_cholesky-nan",
        lambda: pivoted_cholesky(torch.full((3, 3), NAN), 2),
        "contains NaN",
    ),
    (
        "nonfinite",
        "pivoted_cholesky-inf",
        lambda: pivoted_cholesky(torch.eye(3) * INF, 2),
        "contains NaN or inf",
    ),
    (
        "argument",
        "pivoted_cholesky-max_rank-neg",
        lambda: pivoted_cholesky(torch.eye(3), -1),
        "max_rank",
    ),
    (
        "argument",
        "pivoted_cholesky-max_rank-frac",
        lambda: pivoted_cholesky(torch.eye(3), 1.5),
        "max_rank",
    ),
    (
        "argument",
        "pivoted_cholesky-tol-nan",
        lambda: pivoted_cholesky(torch.eye(3), 2, tol=NAN),
        "tol",
    ),
    (
        "argument",
        "pivoted_cholesky-tol-neg",
        lambda: pivoted_cholesky(torch.eye(3), 2, tol=-1.0),
        "tol",
    ),
    (
        "shape",
        "pivoted_cholesky-nonsquare",
        lambda: pivoted_cholesky(torch.ones(3, 2), 2),
        "square",
    ),
    (
        "complex",
        "pivoted_cholesky-complex",
        lambda: pivoted_cholesky(torch.eye(3, dtype=torch.complex128), 2),
        "must be real",
    ),
    (
        "nan",
        "KernelOperator-X1-nan",
        lambda: KernelOperator(RBFKernel(), torch.full((3, 1), NAN)),
        "X1 contains",
    ),
    (
        "nonfinite",
        "KernelOperator-X2-inf",
        lambda: KernelOperator(RBFKernel(), torch.rand(3, 1), torch.full((2, 1), INF)),
        "X2 contains",
    ),
    (
        "complex",
        "KernelOperator-X1-complex",
        lambda: KernelOperator(RBFKernel(), torch.rand(3, 1).to(torch.complex128)),
        "X1 must be real",
    ),
    (
        "shape",
        "KernelOperator-X1-1d",
        lambda: KernelOperator(RBFKernel(), torch.rand(3)),
        "X1 must be",
    ),
    (
        "shape",
        "KernelOperator-X2-cols",
        lambda: KernelOperator(RBFKernel(), torch.rand(3, 1), torch.rand(3, 2)),
        "X2 must be",
    ),
    (
        "argument",
        "KernelOperator-max_memory_bytes-zero",
        lambda: KernelOperator(RBFKernel(), torch.rand(3, 1), max_memory_bytes=0),
        "max_memory_bytes",
    ),
    (
        "argument",
        "KernelOperator-dense_threshold-neg",
        lambda: KernelOperator(RBFKernel(), torch.rand(3, 1), dense_threshold_bytes=-1),
        "dense_threshold_bytes",
    ),
    (
        "nan",
        "KernelOperator-matmul-V-nan",
        lambda: KernelOperator(RBFKernel(), torch.rand(3, 1)).matmul(torch.full((3,), NAN)),
        "V contains",
    ),
    (
        "shape",
        "KernelOperator-matmul-V-rows",
        lambda: KernelOperator(RBFKernel(), torch.rand(3, 1)).matmul(torch.ones(4)),
        "V has 4 rows",
    ),
    (
        "nan",
        "preconditioner-D-nan",
        lambda: low_rank_plus_diagonal_inverse(torch.ones(3, 1), NAN),
        "D",
    ),
    (
        "nonfinite",
        "preconditioner-D-inf",
        lambda: low_rank_plus_diagonal_inverse(torch.ones(3, 1), INF),
        "D",
    ),
    (
        "argument",
        "preconditioner-D-zero",
        lambda: low_rank_plus_diagonal_inverse(torch.ones(3, 1), 0.0),
        "D",
    ),
    (
        "nan",
        "preconditioner-L-nan",
        lambda: low_rank_plus_diagonal_inverse(torch.full((3, 1), NAN), 1.0),
        "L contains",
    ),
    (
        "shape",
        "preconditioner-L-1d",
        lambda: low_rank_plus_diagonal_inverse(torch.ones(3), 1.0),
        "L must",
    ),
    ("nonfinite", "Grid-bounds-inf", lambda: Grid([0.0], [INF], (8,)), "bounds"),
]
for _cat, _cid, _fn, _match in LINALG:
    cases(f"{_cat}-{_cid}", Raises(_match), _fn)


@case("nan-KernelOperator-kernel-nan-lengthscale", Raises(r"kernel.*NaN|NaN.*kernel"))
def _kernel_nan():
    k = RBFKernel()
    k.raw_lengthscale.data.fill_(NAN)
    return KernelOperator(k, torch.rand(3, 1)).matmul(torch.ones(3))


@case("dtype-cg-A-float64-B-float32", Finite(InputDataWarning))
def _cg_mixed():
    return cg(_A.double(), _b.float(), tol=1e-10)


@case("dtype-KernelOperator-matmul-V-float32", Finite(InputDataWarning))
def _kop_mixed():
    return KernelOperator(RBFKernel(), torch.rand(3, 1)).matmul(torch.ones(3, dtype=torch.float32))


@case("dtype-IterNCGP-float64-data-float32-kernel", Finite())
def _iter_promotes():
    X, y = data()
    model = IterNCGP(RBFKernel().float(), Bernoulli(), backend="dense", max_newton_steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputDataWarning)  # lossless: no cast, no warning
        mean, var = model.fit(X, y).predict_f(torch.rand(3, 1))
    assert mean.dtype == torch.float64
    return mean, var


@case("ok-cg-max_iters-zero", Finite())
def _cg_zero_iters():
    return cg(_A, _b, max_iters=0)


@case("ok-pivoted_cholesky-rank-zero", Finite())
def _pc_zero():
    return pivoted_cholesky(torch.eye(3), 0)


# --------------------------------------------------------------------- HIP-GP grid
@case("grid-HIPGP-X-outside-grid", Raises(r"outside the grid"))
def _hip_outside():
    X = 3.0 + torch.rand(12, 1)  # the grid covers [0, 1]
    return _hip().fit(X, torch.sin(X[:, 0]))


@case("grid-HIPGP-X-on-grid-edge", Finite())
def _hip_edge():
    X = torch.linspace(0, 1, 12).unsqueeze(-1)
    return _hip().fit(X, torch.sin(X[:, 0]))


@case("grid-HIPGP-X-within-one-spacing-of-the-grid", Finite())
def _hip_margin():
    X = torch.linspace(-0.05, 1.05, 12).unsqueeze(-1)  # the spacing is 1/15
    return _hip().fit(X, torch.sin(X[:, 0]))


@case("grid-HIPGP-line-integrals-ending-beyond-the-grid", Finite())
def _hip_integral():
    X = torch.linspace(0.5, 1.5, 12).unsqueeze(-1)  # integrals from 0 cross the grid
    return _hip().fit(X, X[:, 0], op="integral")


# ------------------------------------------------------------------------- MNIST
@case("range-mnist-label-200", Raises(r"labels.*\[0, 9\].*200"))
def _mnist_labels(tmp_path_factory=None):
    import tempfile
    from pathlib import Path

    from bo_ncgp.data.mnist import load_mnist, write_idx

    root = Path(tempfile.mkdtemp())
    (root / "m").mkdir()
    write_idx(root / "m" / "t10k-images-idx3-ubyte", torch.zeros(3, 2, 2, dtype=torch.uint8))
    write_idx(root / "m" / "t10k-labels-idx1-ubyte", torch.tensor([7, 200, 1]).byte())
    return load_mnist(root=root, subdir="m", verify=False)


# ------------------------------------------------------- DualSVGP at lr = 1e3
def _sane(model):
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        assert p.abs().max() < 50, (name, p)  # raw hyperparameters stay sane, not +-lr
    return model


def _dual_big_lr(likelihood, objective):
    X = torch.rand(30, 2)
    y = (X[:, 0] > 0.5).double()
    if isinstance(likelihood, Poisson):
        y = torch.poisson(3 * X[:, 0] + 1)
    model = DualSVGP(
        rbf(), likelihood, X[:8], memory_size=5, num_hyper_steps=10, lr=1e3,
        hyper_objective=objective, hyper_optimizer="adam",
    )  # fmt: skip
    model._fuzz_dim = 2
    return _sane(model.update(X[:15], y[:15]).update(X[15:], y[15:]))


for _lik, _obj in ((Bernoulli, "dual"), (Bernoulli, "elbo"), (Poisson, "dual")):
    cases(
        f"rollback-DualSVGP-lr-1e3-{_lik.__name__}-{_obj}",
        Finite(NumericalWarning),
        lambda _lik=_lik, _obj=_obj: _dual_big_lr(_lik(), _obj),
    )


@case("rollback-HIPGP-hyper_lr-1e3", Finite(NumericalWarning))
def _hip_big_lr():
    X, y = data(30, kind="real")
    model = _hip().fit(X, y, num_epochs=5, batch_size=10, learn_hyperparameters=True,
                       hyper_lr=1e3)  # fmt: skip
    return _sane(model)


@case("rollback-SparseGAM-lr-1e3", Finite(NumericalWarning))
def _gam_big_lr():
    X, y = data(30, kind="real")
    model = _gam().fit(X, y, num_steps=10, lr=1e3)
    return [p.detach() for p in model.parameters()]  # stopped at finite parameters


@case("rollback-AdamStepper-diverged-run", Finite(NumericalWarning))
def _adam_diverged():
    from bo_ncgp.models.training import AdamStepper

    w = torch.nn.Parameter(torch.tensor([1.0]))
    stepper = AdamStepper([w], lr=100.0)
    for _ in range(3):
        stepper.step(lambda: w.square().sum())
    assert stepper.finish(lambda: w.square().sum(), max_rise=0.5) == 1.0
    assert float(w) == 1.0 and not stepper.optimizer.state and stepper.stopped
    return w.detach()


# ------------------------------------------------------------ more entry points
def _iter_fitted(lik=None):
    X, y = data()
    if lik is not None:
        y = torch.poisson(torch.full((12,), 3.0))
    return IterNCGP(RBFKernel(), lik or Bernoulli(), backend="dense", max_newton_steps=3).fit(X, y)


def _failing_loss():
    raise ValueError("a loss that cannot be evaluated")


def _adam_step_that_raises():
    from bo_ncgp.models.training import AdamStepper

    w = torch.nn.Parameter(torch.tensor([1.0]))
    stepper = AdamStepper([w], lr=0.5)
    assert stepper.step(lambda: (w - 2.0).square().sum())
    before = w.detach().clone()
    assert not stepper.step(_failing_loss) and stepper.stopped
    assert torch.equal(w.detach(), before)
    return w.detach()


def _lbfgs_that_raises():
    from bo_ncgp.models.training import minimize_lbfgs

    w = torch.nn.Parameter(torch.tensor([3.0]))

    def loss():
        if float(w) < 2.0:  # a region where the objective cannot be evaluated
            raise torch.linalg.LinAlgError("not positive definite")
        return (w - 1.0).square().sum()

    minimize_lbfgs([w], loss, 20)
    assert float(w) == 3.0  # restored
    return w.detach()


def _minimize_adam(**kw):
    from bo_ncgp.models.training import minimize_adam

    w = torch.nn.Parameter(torch.tensor([1.0]))
    return minimize_adam([w], lambda s: w.square().sum(), **kw)


def _stable_cholesky(**kw):
    from bo_ncgp.linalg import stable_cholesky

    return stable_cholesky(-torch.eye(2), **kw)


def _jittered(value):
    from bo_ncgp.linalg import jittered

    return jittered(torch.eye(2), value)


MORE = [
    (
        "argument",
        "IterNCGP-predict_proba-num_samples-zero",
        lambda: _iter_fitted().predict_proba(torch.rand(3, 1), method="mc", num_samples=0),
        "num_samples",
    ),
    (
        "argument",
        "IterNCGP-predict_proba-num_samples-neg",
        lambda: _iter_fitted().predict_proba(torch.rand(3, 1), method="mc", num_samples=-1),
        "num_samples",
    ),
    (
        "argument",
        "IterNCGP-predict_rate-num_samples-zero",
        lambda: _iter_fitted(Poisson()).predict_rate(torch.rand(3, 1), num_samples=0),
        "num_samples",
    ),
    (
        "argument",
        "IterNCGP-predict_rate-level-nan",
        lambda: _iter_fitted(Poisson()).predict_rate(torch.rand(3, 1), level=NAN),
        "level",
    ),
    (
        "complex",
        "IterNCGP-condition-X-complex",
        lambda: _iter_fitted().condition(torch.rand(2, 1).to(torch.complex128), torch.ones(2)),
        "X_new must be real",
    ),
    (
        "nonfinite",
        "IterNCGP-log_predictive-y-inf",
        lambda: _iter_fitted().log_predictive(torch.rand(2, 1), torch.tensor([INF, 0.0])),
        "targets contain inf",
    ),
    (
        "argument",
        "DualSVGP-generator-int",
        lambda: DualSVGP(rbf(), Bernoulli(), torch.rand(4, 1), generator=3),
        "generator",
    ),
    (
        "complex",
        "SparseGAM-component-Z-complex",
        lambda: SparseGAM([(rbf(), [0], torch.rand(3).to(torch.complex128))], Gaussian(0.1)),
        "inducing_points must be real",
    ),
    (
        "nonfinite",
        "HIPGP-obs_noise-inf",
        lambda: _hip().fit(*data(kind="real"), obs_noise=INF),
        "obs_noise",
    ),
    ("argument", "Grid-shape-inf", lambda: Grid([0.0], [1.0], (INF,)), "shape"),
    ("argument", "Grid-shape-frac", lambda: Grid([0.0], [1.0], (2.5,)), "shape"),
    (
        "argument",
        "OfflineSVGP-predict-chunk-zero",
        lambda: _off().predict_f(torch.rand(3, 1), chunk=0),
        "chunk",
    ),
    (
        "shape",
        "Binomial-per-point-mismatch",
        lambda: Binomial(torch.tensor([3.0, 4.0])).log_prob(torch.ones(3), torch.zeros(3)),
        "per-point num_trials",
    ),
    (
        "argument",
        "stable_cholesky-max_tries-neg",
        lambda: _stable_cholesky(max_tries=-1),
        "max_tries",
    ),
    (
        "argument",
        "stable_cholesky-jitter_base-nan",
        lambda: _stable_cholesky(jitter_base=NAN),
        "jitter_base",
    ),
    ("argument", "jittered-nan", lambda: _jittered(NAN), "jitter"),
    (
        "nan",
        "Poisson-sample-f-nan",
        lambda: Poisson().sample(torch.tensor([NAN])),
        "f contains NaN",
    ),
    (
        "nan",
        "Bernoulli-predictive_mean-nan",
        lambda: Bernoulli().predictive_mean(torch.tensor([NAN]), torch.ones(1)),
        "mean contains",
    ),
    (
        "nonfinite",
        "Bernoulli-conditional_mean-inf",
        lambda: Bernoulli().conditional_mean(torch.tensor([INF])),
        "f contains inf",
    ),
    ("argument", "minimize_adam-lr-inf", lambda: _minimize_adam(num_steps=2, lr=INF), "lr"),
    (
        "argument",
        "minimize_adam-num_steps-frac",
        lambda: _minimize_adam(num_steps=2.5),
        "num_steps",
    ),
]


def _stopping(name, *args, **kw):
    from bo_ncgp.models.iterncgp import stopping

    return getattr(stopping, name)(*args, **kw)


def _circulant(**kw):
    from bo_ncgp.linalg import CirculantEmbedding

    return CirculantEmbedding(torch.tensor([1.0, 0.5, 0.1, 0.5]), **kw)


def _natgrad(**kw):
    X, y = data(kind="real")
    return _hip().natgrad_step(X, y, **kw)


MORE += [
    ("argument", "MaxIterations-neg", lambda: _stopping("MaxIterations", -1), "max_iters"),
    ("argument", "ResidualNorm-atol-nan", lambda: _stopping("ResidualNorm", atol=NAN), "atol"),
    ("argument", "RelativeChange-tol-inf", lambda: _stopping("RelativeChange", tol=INF), "tol"),
    ("argument", "CirculantEmbedding-jitter-nan", lambda: _circulant(jitter=NAN), "jitter"),
    (
        "argument",
        "CirculantEmbedding-precond_floor-neg",
        lambda: _circulant(precond_floor=-1.0),
        "precond_floor",
    ),
    ("argument", "HIPGP-natgrad_step-lr-zero", lambda: _natgrad(lr=0.0), "lr"),
    ("argument", "HIPGP-natgrad_step-num_data-zero", lambda: _natgrad(num_data=0), "num_data"),
]
for _cat, _cid, _fn, _match in MORE:
    cases(f"{_cat}-{_cid}", Raises(_match), _fn)


def _adapter_posterior(output_indices):
    from bo_ncgp.bo.base import LatentGPModel
    from tests.bo.toy_models import ExactGP

    X = torch.rand(8, 2)
    Y = torch.stack([torch.sin(4 * X[:, 0] + i) for i in range(2)], -1)
    model = LatentGPModel(ExactGP(X, Y), num_outputs=2)
    post = model.posterior(torch.rand(3, 2), output_indices=output_indices)
    return post.mean, post.variance


for _cid, _idx in [
    ("out-of-range", [2]),
    ("negative", [-1]),
    ("repeated", [0, 0]),
    ("empty", []),
    ("fractional", [0.5]),
    ("string", ["a"]),
]:
    cases(
        f"range-LatentGPModel-output_indices-{_cid}",
        Raises("output indices"),
        lambda i=_idx: _adapter_posterior(i),
    )
cases("ok-LatentGPModel-output_indices", Finite(), lambda: _adapter_posterior([1]))
cases("rollback-AdamStepper-ValueError", Finite(NumericalWarning), _adam_step_that_raises)
cases("rollback-minimize_lbfgs-LinAlgError", Finite(NumericalWarning), _lbfgs_that_raises)


# ---------------------------------------------------------------------- the test
@pytest.mark.parametrize(("fn", "expect"), CASES)
def test_bad_input_gives_a_clear_error_or_a_finite_answer(fn, expect):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if isinstance(expect, Raises):
            with pytest.raises(expect.error, match=expect.match):
                fn()
            return
        out = fn()
        tensors = _tensors(out)
    assert tensors, "the call returned nothing to check"
    for t in tensors:
        assert torch.isfinite(t).all(), t
    if expect.warns is not None:
        assert any(issubclass(w.category, expect.warns) for w in caught), [
            str(w.message) for w in caught
        ]


def test_the_suite_covers_every_category():
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 80
    cats = {i.split("-")[0] for i in ids}
    assert cats >= {"nan", "nonfinite", "shape", "dtype", "complex", "empty", "argument"}


def test_a_collapsing_outputscale_is_detected():
    from bo_ncgp.models.dual.streaming import _collapse

    one = [("outputscale", torch.tensor(1.0))]
    assert "fell from 1 to 0.0001" in _collapse(one, [("outputscale", torch.tensor(1e-4))])
    assert _collapse(one, [("outputscale", torch.tensor(0.5))]) is None
    ls = [("lengthscale", torch.tensor([[1.0, 2.0]]))]
    assert "lengthscale fell from 2 to 1e-06" in _collapse(
        ls, [("lengthscale", torch.tensor([[1.0, 1e-6]]))]
    )
    assert _collapse(ls, [("lengthscale", torch.tensor([[3.0, 0.01]]))]) is None
