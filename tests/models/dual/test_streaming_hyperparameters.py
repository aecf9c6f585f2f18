"""Hyperparameter learning, drift diagnostics, bounded memory, collapse warning and
label-balanced memory of the streaming dual SVGP."""

from __future__ import annotations

import copy
import warnings

import gpytorch
import pytest
import torch

from bo_ncgp.exceptions import InputDataError, ModelCollapseWarning
from bo_ncgp.likelihoods import Bernoulli, Gaussian
from bo_ncgp.models import DualSVGP
from bo_ncgp.models.dual import DualSVGPConfig
from bo_ncgp.models.dual.diagnostics import (
    DriftTracker,
    fit_offline,
    hyperparameter_distance,
)
from bo_ncgp.models.dual.memory import (
    sample_balanced,
    sample_by_score,
    sample_reservoir,
    sample_stratified,
)


def rbf(lengthscale: float = 0.5, outputscale: float = 1.0) -> gpytorch.kernels.Kernel:
    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
    k.base_kernel.lengthscale = lengthscale
    k.outputscale = outputscale
    return k


def reg_data(n: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.linspace(0, 5, n)[torch.randperm(n, generator=g)].unsqueeze(-1)
    y = torch.sin(4 * X[:, 0]) + 0.2 * torch.randn(n, generator=g)
    return X, y


def exact_gradient(model: DualSVGP, X, y, noise: float) -> float:
    """The largest gradient of the exact GP log marginal likelihood (fixed noise) with
    respect to the model's raw kernel hyperparameters, at the model's values."""
    kernel = copy.deepcopy(model.kernel)
    K = kernel(X).to_dense() + noise * torch.eye(X.shape[0])
    lml = torch.distributions.MultivariateNormal(torch.zeros(X.shape[0]), K).log_prob(y)
    grads = torch.autograd.grad(lml, list(kernel.parameters()))
    return max(float(g.abs().max()) for g in grads)


def _gaussian_model(X, **kw):
    lik = Gaussian(0.04)
    lik.raw_noise.requires_grad_(False)
    return DualSVGP(rbf(), lik, X, memory_size=None, inducing_update="fixed", **kw)


def test_lbfgs_update_reaches_an_exact_ml2_optimum_adam_does_not():
    # Gaussian likelihood, Z = data, every point in memory: Eq. 26 is the exact log
    # marginal likelihood, so converged hyperparameter learning is exact ML-II
    X, y = reg_data()
    lbfgs = _gaussian_model(X, hyper_optimizer="lbfgs", num_hyper_steps=100)
    adam = _gaussian_model(X, hyper_optimizer="adam", num_hyper_steps=10)  # lr 0.01
    for model in (lbfgs, adam):
        model.update(X, y)
    assert exact_gradient(lbfgs, X, y, 0.04) < 1e-3
    assert exact_gradient(adam, X, y, 0.04) > 1.0


@pytest.mark.parametrize("learn_mean", [False, True])
def test_learned_noise_and_mean_reach_exact_ml2_in_one_round(learn_mean):
    # Gaussian sites are the likelihood itself at the current noise: tied to it in the
    # hyperparameter steps, one L-BFGS round with the noise (and the constant mean) learned
    # ends at an exact ML-II optimum, where fixed sites end at an EM step; the sites kept
    # are those at the fitted noise, so the posterior is the exact GP's
    g = torch.Generator().manual_seed(0)
    X = torch.linspace(0, 3, 12, dtype=torch.float64).unsqueeze(-1)
    y = torch.sin(3 * X[:, 0]) + 0.1 * torch.randn(12, generator=g, dtype=torch.float64) + 1.5
    model = DualSVGP(rbf().double(), Gaussian(0.3).double(), X, memory_size=None,
                     inducing_update="fixed", hyper_optimizer="lbfgs", num_hyper_steps=200,
                     learn_mean_constant=learn_mean)  # fmt: skip
    model.update(X, y)
    kernel, lik = copy.deepcopy(model.kernel), copy.deepcopy(model.likelihood)
    c = torch.tensor(model.mean_constant, dtype=X.dtype, requires_grad=learn_mean)
    K = kernel(X).to_dense() + lik.noise * torch.eye(X.shape[0])
    exact = torch.distributions.MultivariateNormal(c.expand(X.shape[0]), K)
    lml = exact.log_prob(y)
    params = [*kernel.parameters(), lik.raw_noise] + ([c] if learn_mean else [])
    grads = torch.autograd.grad(lml, params)
    assert max(float(g.abs().max()) for g in grads) < 0.05  # fixed sites: 2.4-2.8
    assert float(lik.noise) == pytest.approx(0.01, rel=0.5)  # the noise's 0.1 ** 2
    assert float(model.log_marginal(include_prior=False)) == pytest.approx(float(lml), abs=1e-4)
    with torch.no_grad():
        Xt = torch.linspace(0, 3, 7, dtype=X.dtype).unsqueeze(-1)
        Kt = kernel(Xt, X).to_dense()
        mean = c + Kt @ torch.linalg.solve(K, y - c)
        pred, _ = model.predict_f(Xt)
    assert torch.allclose(pred, mean, atol=1e-4)


def test_lbfgs_hyperparameters_stay_at_the_optimum_as_data_arrive():
    X, y = reg_data(30)  # (more points on [0, 5] make K_zz numerically singular)
    model = _gaussian_model(X[:10], hyper_optimizer="lbfgs", num_hyper_steps=100)
    for k in range(3):
        idx = slice(10 * k, 10 * (k + 1))
        if k:
            model.project(torch.cat([model.Z, X[idx]]))
        model.update(X[idx], y[idx])
        assert exact_gradient(model, X[: 10 * (k + 1)], y[: 10 * (k + 1)], 0.04) < 1e-3


def test_hyper_optimizer_and_rest_factor_are_checked():
    with pytest.raises(InputDataError, match="hyper_optimizer must be 'auto', 'lbfgs' or 'adam'"):
        DualSVGPConfig(hyper_optimizer="sgd")
    with pytest.raises(InputDataError, match="rest_factor must be 'dual' or 'inducing'"):
        DualSVGPConfig(rest_factor="u")
    with pytest.raises(InputDataError, match="memory_scaling must be True or False"):
        DualSVGPConfig(memory_scaling=1)


@pytest.mark.parametrize("rest", ["inducing", "dual"])
def test_without_memory_the_factor_on_f_z_keeps_exact_ml2(rest):
    # Gaussian, Z = all data seen, no memory: every old point survives only in the summarised
    # factor. Held fixed on u = f(Z) that factor is the old points' exact likelihood at any
    # hyperparameters, so converged streaming learning is exact ML-II on all data after every
    # update; held fixed on K_zz^{-1} u (Eq. 26 as written) it is not
    X, y = reg_data(30)
    model = _gaussian_model(X[:10], hyper_optimizer="lbfgs", num_hyper_steps=100,
                            rest_factor=rest)  # fmt: skip
    model.memory_size = 0
    grads = []
    for k in range(3):
        idx = slice(10 * k, 10 * (k + 1))
        if k:
            model.project(torch.cat([model.Z, X[idx]]))
        model.update(X[idx], y[idx])
        grads.append(exact_gradient(model, X[: 10 * (k + 1)], y[: 10 * (k + 1)], 0.04))
    if rest == "inducing":
        assert max(grads) < 1e-3
    else:
        assert grads[-1] > 0.1


def test_fit_offline_is_exact_ml2_in_the_gaussian_limit_and_tracker_records_the_gap():
    X, y = reg_data()
    model = _gaussian_model(X, hyper_optimizer="adam", num_hyper_steps=10)  # not converged
    model.update(X, y)
    off = fit_offline(model, X, y)
    assert exact_gradient(off, X, y, 0.04) < 1e-3
    tracker = DriftTracker()
    rec = tracker.record(model, X, y)
    assert rec.gap > 1e-3 and rec.gap_per_point == pytest.approx(rec.gap / 30)
    assert rec.distance_stream_offline > 0.01
    assert rec.distance_own_offline < 1e-3  # all data in memory: its objective is the offline one
    assert len(tracker.as_dicts()) == 1


def test_hyperparameter_distance_is_in_orders_of_magnitude():
    a = {"k": [1.0, 3.0], "c": [-1.0]}
    assert hyperparameter_distance(a, {"k": [100.0, 3.0], "c": [-1.5]}) == pytest.approx(2.0)


def test_default_memory_is_bounded_and_evicts_by_the_rule():
    assert DualSVGPConfig().memory_cap == 1000
    X = torch.rand(80, 1) * 5
    y = (X[:, 0] > 2.5).double()
    model = DualSVGP(rbf(), Bernoulli(), X[:6], memory_size=5, memory_cap=12, num_hyper_steps=0)
    for idx in torch.arange(80).split(10):
        model.update(X[idx], y[idx])
        assert len(model.memory) <= 12
    assert model.num_data == 80


def test_collapse_is_warned_once():
    X = torch.rand(40, 1) * 5
    y = (X[:, 0] > 2.5).double()
    model = DualSVGP(rbf(), Bernoulli(), X[:6], memory_size=0, num_hyper_steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelCollapseWarning)
        model.update(X[:10], y[:10])
        model.update(X[10:20], y[10:20])
    model.kernel.outputscale = 1e-4  # what memory_size=0 drifts to on a long stream
    with pytest.warns(ModelCollapseWarning, match="prior variance of latent 0 fell"):
        model.update(X[20:30], y[20:30])
    with warnings.catch_warnings():  # not repeated while it stays collapsed
        warnings.simplefilter("error", ModelCollapseWarning)
        model.update(X[30:], y[30:])


def test_balanced_sampling_keeps_every_label():
    # class-incremental: the learnt label 0 has tiny scores, the new label 1 large ones
    scores = torch.cat([torch.full((50,), 1e-4), torch.ones(50)])
    labels = torch.cat([torch.zeros(50), torch.ones(50)])
    g = torch.Generator().manual_seed(0)
    plain = labels[sample_by_score(scores, 20, "bls", g)]
    balanced = labels[sample_balanced(scores, labels, 20, g)]
    assert int((plain == 0).sum()) <= 1
    assert int((balanced == 0).sum()) == 10 and int((balanced == 1).sum()) == 10
    few = torch.cat([torch.zeros(3), torch.ones(50)])  # a label with fewer points keeps them
    idx = sample_balanced(torch.ones(53), few, 20, g)
    assert int((few[idx] == 0).sum()) == 3 and idx.shape == (20,)
    assert torch.equal(idx, idx.sort().values)


def test_stratified_sampling_shares_the_budget_as_the_weights():
    labels = torch.cat([torch.zeros(60), torch.ones(40)])
    g = torch.Generator().manual_seed(0)
    idx = sample_stratified(torch.ones(100), labels, 20, torch.tensor([3.0, 1.0]), g)
    assert int((labels[idx] == 0).sum()) == 15 and int((labels[idx] == 1).sum()) == 5
    # equal (or no usable) weights: the label-balanced quotas, point for point
    for w in (None, torch.tensor([2.0, 2.0]), torch.zeros(2)):
        a = sample_stratified(torch.rand(100, generator=torch.Generator().manual_seed(3)),
                              labels, 7, w, torch.Generator().manual_seed(4))  # fmt: skip
        b = sample_balanced(torch.rand(100, generator=torch.Generator().manual_seed(3)),
                            labels, 7, torch.Generator().manual_seed(4))  # fmt: skip
        assert torch.equal(a, b)
    # three labels, shares below one point: whole points by the largest remainders
    three = torch.tensor([0, 0, 1, 1, 2, 2])
    idx = sample_stratified(torch.ones(6), three, 2, torch.tensor([5.0, 1.0, 4.0]), g)
    assert three[idx].tolist() == [0, 2]
    with pytest.raises(ValueError, match="2 weights for 3 labels"):
        sample_stratified(torch.ones(6), three, 2, torch.ones(2))
    with pytest.raises(ValueError, match="finite and >= 0"):
        sample_stratified(torch.ones(6), three, 2, torch.tensor([1.0, -1.0, 1.0]))


def test_stratified_random_sampling_draws_uniformly_within_each_label():
    # the learnt label 0 has tiny scores in its first half: BLS within the label skips them,
    # the uniform draw does not
    scores = torch.cat([torch.full((25,), 1e-6), torch.ones(25), torch.ones(50)])
    labels = torch.cat([torch.zeros(50), torch.ones(50)])
    low = {"bls": 0, "random": 0}
    for seed in range(20):
        for method in low:
            g = torch.Generator().manual_seed(seed)
            idx = sample_stratified(scores, labels, 20, torch.tensor([1.0, 1.0]), g, method)
            assert int((labels[idx] == 0).sum()) == 10  # the same quotas for both
            low[method] += int((idx < 25).sum())
    assert low["bls"] == 0
    assert 60 <= low["random"] <= 140  # about half of the 200 label-0 draws


def stream_labels(X, y, rule: str, cap: int, batch: int) -> DualSVGP:
    """A Bernoulli DualSVGP (10 memory points per batch, ``cap`` in all, memory rule ``rule``)
    fed ``(X, y)`` in batches of ``batch``."""
    model = DualSVGP(rbf(), Bernoulli(), X[:6], memory_size=10, memory_cap=cap,
                     memory_selection=rule, num_hyper_steps=0,
                     generator=torch.Generator().manual_seed(1))  # fmt: skip
    for idx in torch.arange(X.shape[0]).split(batch):
        model.update(X[idx], y[idx])
    return model


def test_stratified_memory_keeps_the_base_rate_and_every_old_class():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(400, 1, generator=g, dtype=torch.float64) * 6
    rare = (torch.rand(400, generator=g, dtype=torch.float64) < 0.1).double()  # 10 % positives
    kept = {}
    for rule in ("bls_balanced", "bls_stratified", "random_stratified"):
        model = stream_labels(X, rare, rule, cap=50, batch=40)
        kept[rule] = int(model.memory_targets.sum())
        assert model._label_counts.tolist() == [400 - rare.sum().item(), rare.sum().item()]
    assert kept["bls_balanced"] == 25  # half the memory for a tenth of the data
    assert 2 <= kept["bls_stratified"] <= 8  # about the base rate of 50 points
    assert 2 <= kept["random_stratified"] <= 8
    # class-incremental, equally frequent classes: every old class keeps its share
    y = (X[:, 0] > 3).double()
    order = torch.argsort(y, stable=True)
    model = stream_labels(X[order], y[order], "bls_stratified", cap=20, batch=20)
    old = int((model.memory_targets == 0).sum())
    assert abs(old - 20 * float((y == 0).double().mean())) <= 2


def test_balanced_memory_keeps_old_classes_under_a_cap():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(120, 1, generator=g) * 6
    y = (X[:, 0] > 3).double()
    order = torch.argsort(y, stable=True)  # class 0 first, then class 1 (class-incremental)
    X, y = X[order], y[order]
    counts = {}
    for rule in ("bls", "bls_balanced"):
        model = stream_labels(X, y, rule, cap=20, batch=20)
        counts[rule] = int((model.memory_targets == 0).sum())
    assert counts["bls_balanced"] == 10


def test_default_memory_keeps_each_label_at_its_share_under_a_cap():
    # class-incremental: the learnt class 0 has small scores once class 1 arrives; plain BLS
    # eviction would hand its share of the capped memory to class 1; the default keeps it at
    # its share of the points seen
    g = torch.Generator().manual_seed(0)
    X = torch.rand(120, 1, generator=g) * 6
    y = (X[:, 0] > 3).double()
    order = torch.argsort(y, stable=True)
    X, y = X[order], y[order]
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        model = DualSVGP(rbf(), Bernoulli(), X[:6], memory_size=10, memory_cap=20,
                         num_hyper_steps=0, generator=gen)  # fmt: skip
        for idx in torch.arange(120).split(20):
            model.update(X[idx], y[idx])
        share = 20 * float((y == 0).double().mean())
        assert abs(int((model.memory_targets == 0).sum()) - share) <= 1


def exact_lml(model: DualSVGP, X, y, noise: float) -> float:
    with torch.no_grad():
        K = model.kernel(X).to_dense() + noise * torch.eye(X.shape[0])
        return float(torch.distributions.MultivariateNormal(torch.zeros(X.shape[0]), K).log_prob(y))


def test_elbo_steps_take_an_em_step_from_the_posterior_of_the_batch():
    # Gaussian, Z = X, every point in memory: the update's site steps reach the exact posterior,
    # where Eq. 21 touches the log marginal likelihood; its maximiser over the hyperparameters
    # (q fixed) is an EM step, which raises the evidence -- from the first batch on
    X, y = reg_data()
    model = _gaussian_model(X, hyper_objective="elbo", num_hyper_steps=100)
    before = exact_lml(model, X, y, 0.04)
    model.update(X, y)
    assert exact_lml(model, X, y, 0.04) > before + 0.25


def test_an_inducing_set_whose_kernel_matrix_fails_is_not_taken(monkeypatch):
    # at extreme lengthscales the kernel's distances lose exact zeros to cancellation and the
    # matrix of a new inducing set can be indefinite: the update keeps the current set
    from bo_ncgp.exceptions import NumericalWarning

    g = torch.Generator().manual_seed(0)
    X = torch.rand(40, 2, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0.5).double()
    model = DualSVGP(rbf(), Bernoulli(), X[:4], max_inducing=30, num_hyper_steps=0)
    model.update(X[:20], y[:20])
    Z, kzz = model.Z.clone(), model._Kzz

    def indefinite_for_a_new_set(Z_new=None):
        K = kzz(Z_new)
        return K if Z_new is None else K - 2 * torch.eye(K.shape[-1], dtype=K.dtype)

    monkeypatch.setattr(model, "_Kzz", indefinite_for_a_new_set)
    with pytest.warns(NumericalWarning, match="current inducing set is kept"):
        model.update(X[20:], y[20:])
    assert torch.equal(model.Z, Z) and model.num_data == 40
    monkeypatch.undo()
    model.update(X[20:], y[20:])  # factorisable again: the set grows
    assert model.Z.shape[0] > Z.shape[0]


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_a_round_that_runs_a_lengthscale_to_zero_is_undone(monkeypatch, optimizer):
    """A round of hyperparameter steps that shrinks a lengthscale by more than
    COLLAPSE_FACTOR (what the evidence of a handful of points does to a categorical input
    without priors) is undone with a warning; a moderate move is kept."""
    import bo_ncgp.models.dual.streaming as streaming
    from bo_ncgp.exceptions import NumericalWarning

    X = torch.rand(30, 2, dtype=torch.float64)
    y = (X[:, 0] > 0.5).double()
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(ard_num_dims=2))
    model = DualSVGP(
        kernel.double(), Bernoulli(), X[:8], num_hyper_steps=3, hyper_optimizer=optimizer
    )
    model.update(X[:10], y[:10])
    before = model.kernel.base_kernel.lengthscale.detach().clone()
    shrink = {"factor": 1e-5}

    def jump(*args, **kwargs):  # an optimiser that runs the second lengthscale to ~0
        with torch.no_grad():
            model.kernel.base_kernel.lengthscale = before * torch.tensor([1.0, shrink["factor"]])
        return 0.0

    if optimizer == "lbfgs":
        monkeypatch.setattr(streaming, "minimize_lbfgs", jump)
    else:
        step = streaming.AdamStepper.step  # a real step, then the jump
        monkeypatch.setattr(
            streaming.AdamStepper, "step", lambda self, fn: (step(self, fn), jump())[0]
        )
    with pytest.warns(NumericalWarning, match="lengthscale fell from"):
        model.update(X[10:20], y[10:20])
    assert torch.allclose(model.kernel.base_kernel.lengthscale, before)
    shrink["factor"] = 0.1  # a move by a factor of 10 is a fit, not a collapse
    with warnings.catch_warnings():
        warnings.simplefilter("error", NumericalWarning)
        model.update(X[20:], y[20:])
    assert not torch.allclose(model.kernel.base_kernel.lengthscale, before)


def _kept_arrivals(select, batches: int, batch: int, cap: int, seed: int) -> torch.Tensor:
    """Arrival indices left in a memory of ``cap`` after ``batches`` batches of one label,
    evicting by ``select(labels, new, offered, generator)`` whenever the memory overflows."""
    g = torch.Generator().manual_seed(seed)
    kept = torch.zeros(0, dtype=torch.long)
    offered = torch.zeros(1, dtype=torch.long)
    for t in range(batches):
        fresh = torch.arange(t * batch, (t + 1) * batch)
        new = torch.cat(
            [torch.zeros(len(kept), dtype=torch.bool), torch.ones(batch, dtype=torch.bool)]
        )
        kept = torch.cat([kept, fresh])
        if len(kept) > cap:
            kept = kept[select(torch.zeros(len(kept), dtype=torch.long), new, offered, g)]
        offered = offered + batch
    return kept


def test_reservoir_memory_is_a_uniform_sample_of_the_whole_stream():
    # 200 batches of 10 into a memory of 100: the reservoir keeps each of the 2,000 points
    # with probability 1/20, so half the memory comes from the first half of the stream;
    # uniform eviction over the memory and the new points keeps a point for t more batches
    # with probability (100/110)^t: almost all of the memory is from the last 50 batches
    cap, batches, batch = 100, 200, 10
    first_half = {"reservoir": 0, "uniform": 0}
    for seed in range(5):
        res = _kept_arrivals(
            lambda y, new, off, g: sample_reservoir(y, new, cap, off, generator=g),
            batches, batch, cap, seed,
        )  # fmt: skip
        uni = _kept_arrivals(
            lambda y, new, off, g: sample_stratified(torch.ones(len(y)), y, cap, None, g, "random"),
            batches, batch, cap, seed,
        )  # fmt: skip
        assert len(res) == len(uni) == cap and len(set(res.tolist())) == cap
        first_half["reservoir"] += int((res < batches * batch // 2).sum())
        first_half["uniform"] += int((uni < batches * batch // 2).sum())
    # 500 kept points, each from the first half with probability 1/2: s.d. ~11
    assert 200 <= first_half["reservoir"] <= 300
    assert first_half["uniform"] <= 5


def test_reservoir_memory_keeps_the_shares_and_counts_what_it_was_offered():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(600, 1, generator=g, dtype=torch.float64) * 6
    rare = (torch.rand(600, generator=g, dtype=torch.float64) < 0.1).double()
    model = stream_labels(X, rare, "reservoir_stratified", cap=50, batch=40)
    assert len(model.memory_targets) == 50
    assert 2 <= int(model.memory_targets.sum()) <= 8  # about the base rate, as stratified
    # 10 of each batch of 40 offered: 150 points, by label
    offered = model._offered_counts
    assert float(offered.sum()) == 150 and 5 <= float(offered[1]) <= 30
    # the counts travel with the state, and a state saved without them still loads
    fresh = stream_labels(X[:40], rare[:40], "reservoir_stratified", cap=50, batch=40)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh._offered_counts, offered)
    old = {k: v for k, v in model.state_dict().items() if not k.endswith("_offered_counts")}
    fresh.load_state_dict(old)
    assert float(fresh._offered_counts.sum()) == 0
    fresh.update(X[:40], rare[:40])  # the memory then stands for the points it holds
    assert float(fresh._offered_counts.sum()) == 60 and len(fresh.memory_targets) == 50
