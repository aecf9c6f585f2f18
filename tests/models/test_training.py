"""The Adam loop of bo_ncgp.models.training and its non-finite policy."""

from __future__ import annotations

import warnings

import pytest
import torch

from bo_ncgp.exceptions import NonFiniteError, NumericalWarning
from bo_ncgp.models.base import FitStep
from bo_ncgp.models.training import AdamStepper, minimize_adam


def test_matches_a_plain_adam_loop():
    w1 = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    w2 = torch.nn.Parameter(w1.detach().clone())
    minimize_adam([w1], lambda s: (w1**4).sum() + w1.prod(), 25, lr=0.05)
    opt = torch.optim.Adam([w2], lr=0.05)
    for _ in range(25):
        opt.zero_grad()
        ((w2**4).sum() + w2.prod()).backward()
        opt.step()
    assert torch.equal(w1, w2)


@pytest.mark.parametrize("bad", ["loss", "gradient"])
def test_non_finite_step_is_not_taken_and_training_stops(bad):
    w = torch.nn.Parameter(torch.tensor([1.0]))

    def loss(step):
        if step < 3:
            return (w - 2).square().sum()
        if bad == "loss":
            return w.sum() * float("inf")
        return (w - w.detach()).sqrt().sum()  # loss 0, gradient inf

    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = None

        def cb(s: FitStep):
            nonlocal before
            seen.append(s.step)
            before = w.detach().clone()

        losses = minimize_adam([w], loss, 10, lr=0.1, callback=cb)
    assert seen == [0, 1, 2] and len(losses) == 3
    assert torch.equal(w.detach(), before)  # the bad step left the parameters untouched
    assert sum(issubclass(c.category, NumericalWarning) for c in caught) == 1


def test_raise_policy():
    w = torch.nn.Parameter(torch.tensor([1.0]))
    with pytest.raises(NonFiniteError, match="non-finite"):
        minimize_adam([w], lambda s: w.sum() * float("nan"), 3, on_nonfinite="raise")
    with pytest.raises(ValueError, match="on_nonfinite"):
        AdamStepper([w], 0.1, on_nonfinite="ignore")


def test_optimizer_state_unchanged_by_a_skipped_step():
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    stepper = AdamStepper([w], 0.1)
    stepper.step(w.square().sum())
    state = {k: v.clone() for k, v in stepper.optimizer.state[w].items()}
    with pytest.warns(NumericalWarning):
        assert not stepper.step(w.sum() * float("nan"))
    for k, v in stepper.optimizer.state[w].items():
        assert torch.equal(v, state[k])


def test_callback_gets_loss_seconds_info_and_after_step_order():
    w = torch.nn.Parameter(torch.tensor([1.0]))
    events = []
    minimize_adam(
        [w],
        lambda s: w.square().sum(),
        4,
        model="m",
        callback=lambda s: events.append(("cb", s.step, s.model, s.info["k"])) or s.step == 2,
        after_step=lambda s: events.append(("after", s)),
        info=lambda s: {"k": 10 * s},
    )
    assert events == [
        ("cb", 0, "m", 0),
        ("after", 0),
        ("cb", 1, "m", 10),
        ("after", 1),
        ("cb", 2, "m", 20),
    ]
    with pytest.raises(ValueError, match="num_steps"):
        minimize_adam([w], lambda s: w.sum(), -1)


def test_not_psd_loss_and_non_finite_update_are_undone():
    from bo_ncgp.exceptions import NotPSDError

    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    stepper = AdamStepper([w], 0.1)
    assert stepper.step(lambda: w.square().sum())
    state = {k: v.clone() for k, v in stepper.optimizer.state[w].items()}
    before = w.detach().clone()

    def not_psd():
        raise NotPSDError("K_zz")

    with pytest.warns(NumericalWarning, match="not positive definite"):
        assert not stepper.step(not_psd)
    assert torch.equal(w.detach(), before)

    def blow_up():
        with torch.no_grad():
            w.fill_(float("inf"))

    stepper = AdamStepper([w], 0.1, project=blow_up)
    with pytest.warns(NumericalWarning, match="after the update"):
        stepper.step(w.square().sum())  # fails after the update: undone
    assert torch.equal(w.detach(), before) and stepper.stopped
    assert not stepper.optimizer.state  # the fresh optimiser's state is restored too
    stepper = AdamStepper([w], 0.1)
    stepper.step(w.square().sum())
    stepper.project = blow_up
    with pytest.warns(NumericalWarning, match="after the update"):
        stepper.step(w.square().sum())
    torch.testing.assert_close(w.detach(), before - 0.1)  # only the first step of the three
    assert state.keys() == stepper.optimizer.state[w].keys()
    assert int(stepper.optimizer.state[w]["step"]) == 1


def test_lbfgs_matches_torch_and_restores_on_failure():
    from bo_ncgp.exceptions import NotPSDError
    from bo_ncgp.models.training import minimize_lbfgs

    def f(w):
        return (w**4).sum() + (w[0] - 2 * w[1]) ** 2

    w1 = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    w2 = torch.nn.Parameter(w1.detach().clone())
    kw = dict(tolerance_grad=1e-12, tolerance_change=1e-15, history_size=50)
    loss = minimize_lbfgs([w1], lambda: f(w1), 30, **kw)
    opt = torch.optim.LBFGS([w2], lr=1.0, max_iter=30, line_search_fn="strong_wolfe", **kw)

    def closure():
        opt.zero_grad()
        out = f(w2)
        out.backward()
        return out

    opt.step(closure)
    assert torch.equal(w1, w2) and loss == float(f(w2))
    calls = [0]

    def fails_later():
        calls[0] += 1
        if calls[0] > 3:
            raise NotPSDError("K")
        return f(w1)

    with torch.no_grad():
        w1.copy_(torch.tensor([1.0, -2.0]))
    before = w1.detach().clone()
    with pytest.raises(NonFiniteError):
        minimize_lbfgs([w1], fails_later, 30, on_nonfinite="raise")
    assert torch.equal(w1.detach(), before)
    with pytest.warns(NumericalWarning, match="L-BFGS"):
        minimize_lbfgs([w1], lambda: w1.sum() * float("nan"), 5)


def test_companion_ngd_steps_match_the_joint_loop():
    import gpytorch

    from bo_ncgp.likelihoods import Bernoulli
    from bo_ncgp.models.svgp import SVGP

    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    X = torch.rand(20, 1, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0.5).double()

    def neg_elbo(gp):
        q = gp(X)
        elp = Bernoulli().expected_log_prob(y, q.mean, q.variance).sum()
        return -(elp - gp.kl_divergence()) / 20

    def make():
        torch.manual_seed(0)
        gp = SVGP(gpytorch.kernels.RBFKernel(), X[:6], variational="natural")
        gp.train()
        ngd = gpytorch.optim.NGD(gp.variational_parameters(), num_data=20, lr=0.1)
        return gp, ngd

    gp1, ngd1 = make()
    adam = torch.optim.Adam(gp1.hyperparameters(), lr=0.05)
    for _ in range(5):
        ngd1.zero_grad()
        adam.zero_grad()
        neg_elbo(gp1).backward()
        ngd1.step()
        adam.step()
    gp2, ngd2 = make()
    stepper = AdamStepper(gp2.hyperparameters(), 0.05, companions=[ngd2])
    for _ in range(5):
        assert stepper.step(lambda: neg_elbo(gp2))
    for (n1, p1), (_, p2) in zip(gp1.named_parameters(), gp2.named_parameters(), strict=True):
        assert torch.equal(p1, p2), n1


def test_finish_undoes_the_last_step_when_the_final_loss_is_not_finite():
    from bo_ncgp.exceptions import NotPSDError

    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    stepper = AdamStepper([w], 0.1)
    assert stepper.step(lambda: w.square().sum())
    assert float(stepper.loss) == 5.0
    state = {k: v.clone() for k, v in stepper.optimizer.state[w].items()}
    before = w.detach().clone()
    assert stepper.step(lambda: w.square().sum())
    assert stepper.finish(lambda: w.square().sum()) == float(w.square().sum())
    assert not stepper.stopped

    def not_psd():
        raise NotPSDError("K")

    with pytest.warns(NumericalWarning, match="after the last step"):
        value = stepper.finish(not_psd)
    assert torch.equal(w.detach(), before) and stepper.stopped
    assert value == float(before.square().sum())  # the loss at the restored parameters
    for k, v in stepper.optimizer.state[w].items():
        assert torch.equal(v, state[k])
    strict = AdamStepper([w], 0.1, on_nonfinite="raise")
    nan = strict.finish(lambda: w.sum() * float("nan"))  # no step taken: nothing to undo
    assert nan != nan and not strict.stopped
    strict.step(w.square().sum())
    with pytest.raises(NonFiniteError):
        strict.finish(lambda: w.sum() * float("nan"))
    assert torch.equal(w.detach(), before)
