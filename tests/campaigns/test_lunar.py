"""Lunar-lander problem and the model-based strategies on tiny budgets."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.box2d.lunar_lander import heuristic

from bo_ncgp.campaigns import Campaign
from bo_ncgp.campaigns.strategies.registry import build_strategy
from bo_ncgp.problems.lunar_lander import DEFAULT_WEIGHTS, LunarLander, heuristic_action


def test_default_weights_reproduce_gymnasium_heuristic():
    env = gym.make("LunarLander-v3")
    for seed in range(2):
        s, _ = env.reset(seed=seed)
        for _ in range(400):
            a = heuristic(env, s)
            assert heuristic_action(s, DEFAULT_WEIGHTS) == a
            s, _, term, trunc, _ = env.step(a)
            if term or trunc:
                break


def test_evaluation_is_deterministic_and_labels_success():
    prob = LunarLander(episode_seeds=[0, 1], heldout_seeds=[5])
    a, b = prob.evaluate(DEFAULT_WEIGHTS), prob.evaluate(DEFAULT_WEIGHTS)
    assert a.value == b.value and a.extra["rewards"] == b.extra["rewards"]
    assert a.value > 100 and a.success  # the hand-tuned controller lands
    crash = prob.evaluate(np.zeros(12))  # never fires the engines
    assert crash.value < 0 and not crash.success
    with pytest.raises(ValueError, match="12 entries"):
        prob.evaluate(np.zeros(3))
    with pytest.raises(ValueError, match="episode_seeds"):
        LunarLander(episode_seeds=[])


@pytest.mark.parametrize(
    "name", ["fantasy-batch", "fantasy-batch-sampled", "kriging-believer", "dual"]
)
def test_model_strategies_tiny_campaign(name, tmp_path):
    options = {"num_inducing": 8, "hyper_steps": 5, "num_restarts": 2, "raw_samples": 32}
    strategy = build_strategy("lunar-lander", name, **options)
    prob = LunarLander(episode_seeds=[0], heldout_seeds=[7])
    st = Campaign(
        prob, strategy, budget=8, batch_size=2, num_initial=4, seed=0, out_dir=tmp_path
    ).run(progress=False)
    assert [len(b) for b in st["batches"]] == [4, 2, 2]
    X = np.array([e["point"] for e in st["evaluations"]])
    assert ((X >= 0) & (X <= 1.2)).all()
    assert np.unique(X.round(8), axis=0).shape[0] == 8
    for it in st["iterations"][1:]:
        assert it["acquisition_seconds"] > 0 and it["update_seconds"] > 0
    assert st["recommendation"]["heldout_value"] is not None
    if name.startswith("fantasy-batch"):  # Z grew from the 4 initial points to all 8
        assert strategy.reward.num_inducing == 8 and strategy.classifier.num_inducing == 8
    _check_report(tmp_path, st)


def _check_report(folder, state):
    """``experiments/lunar_report.py`` summarises the campaign it finds under ``folder``."""
    import json

    from experiments.chang2023 import lunar_report as mod

    out = folder / "report.json"
    assert mod.main([str(folder), "--out", str(out)]) == 0
    (rep,) = json.loads(out.read_text())["strategies"]
    assert rep["strategy"] == state["strategy"]["name"] and rep["finished"] == 1
    assert rep["best_at"] == {}  # fewer than 30 evaluations: no column yet
    assert rep["heldout"]["mean"] == state["recommendation"]["heldout_value"]
    t = rep["seconds_per_iteration"]
    assert t["update_seconds"]["n"] == 2 and t["acquisition_seconds"]["mean"] > 0


def test_sampled_fantasies_are_draws_and_saved_in_the_configuration():
    """``fantasy-batch-sampled`` conditions on draws from the models, ``fantasy-batch`` on
    their means: from the same models and seed the two batches share their first point (the
    acquisition is the same until a fantasy is conditioned on) and part after it; the
    sampled rule is named in the strategy's configuration, the mean rule (the default) not,
    so that campaigns saved before the option resume."""
    import torch

    options = {"num_inducing": 8, "hyper_steps": 5, "num_restarts": 2, "raw_samples": 32}
    prob = LunarLander(episode_seeds=[0], heldout_seeds=[7])
    rng = np.random.default_rng(0)
    X = rng.random((8, 12)) * 1.2
    evs = [prob.evaluate(x) for x in X]
    batches, configs = {}, {}
    for name in ("fantasy-batch", "fantasy-batch-sampled"):
        s = build_strategy("lunar-lander", name, **options)
        s.setup(prob, 0)
        history = _history(X, evs)
        s.observe(X, evs, history)
        torch.manual_seed(3)
        batches[name] = s.ask(history, 3, np.random.default_rng(1))
        configs[name] = s.config()
    mean, sampled = batches["fantasy-batch"], batches["fantasy-batch-sampled"]
    np.testing.assert_allclose(mean[0], sampled[0], atol=1e-6)
    assert np.abs(mean[1:] - sampled[1:]).max() > 1e-3
    assert configs["fantasy-batch-sampled"]["fantasy"] == "sample"
    assert "fantasy" not in configs["fantasy-batch"]


def _history(X, evs):
    from bo_ncgp.campaigns.strategies.base import History

    values = np.array([e.value for e in evs])
    success = np.array([float(e.success) for e in evs])
    return History(X, values, success, None, [np.arange(len(X))])


@pytest.mark.parametrize("name", ["fantasy-batch", "fantasy-batch-sampled"])
def test_resumed_fantasy_batch_proposes_bit_identical_points(name, tmp_path):
    """A campaign resumed after its second batch proposes exactly the uninterrupted run's
    points (the replayed model updates see the same float64 priors as the live ones; the
    sampled fantasies draw from the generator the runner seeds before every step), under
    torch's own default dtype, as ``bo-ncgp lunar-lander`` runs (the fixture restores it)."""
    import json

    import torch

    torch.set_default_dtype(torch.float32)

    options = {"num_inducing": 8, "hyper_steps": 5, "num_restarts": 2, "raw_samples": 32}

    def make():
        prob = LunarLander(episode_seeds=[0], heldout_seeds=[7])
        return prob, build_strategy("lunar-lander", name, **options)

    args = dict(budget=10, batch_size=2, num_initial=4, seed=0)
    ref = Campaign(*make(), out_dir=tmp_path / "ref", **args).run(progress=False)
    state = json.loads((tmp_path / "ref" / "state.json").read_text())
    state.update(  # as killed between its second and third batch
        batches=state["batches"][:2],
        evaluations=state["evaluations"][:6],
        iterations=state["iterations"][:2],
        pending=None,
        finished=False,
        recommendation=None,
    )
    state.pop("checksum", None)
    from bo_ncgp.campaigns.storage import write_json

    write_json(tmp_path / "cut" / "state.json", state, checksum=True)
    resumed = Campaign.resume(tmp_path / "cut", *make()).run(progress=False)
    assert [e["point"] for e in resumed["evaluations"]] == [e["point"] for e in ref["evaluations"]]


def test_report_pairs_strategies_over_shared_finished_seeds():
    """A - B of the final best and of the held-out reward over the seeds both finished;
    an unfinished seed is left out of the pair."""
    from experiments.chang2023.lunar_report import paired

    def state(seed, values, heldout, finished=True):
        return {
            "seed": seed,
            "finished": finished,
            "evaluations": [{"value": v} for v in values],
            "recommendation": {"heldout_value": heldout},
        }

    groups = {
        "a (q=3)": [state(0, [1.0, 5.0], 4.0), state(1, [2.0, 3.0], 1.0), state(2, [9.0], 9.0)],
        "b (q=1)": [state(0, [2.0], 1.0), state(1, [4.0, 0.0], 3.0), state(2, [0.0], 0.0, False)],
    }
    (row,) = paired(groups)
    assert (row["a"], row["b"]) == ("a (q=3)", "b (q=1)")
    best, held = row["best_final"], row["heldout"]
    assert best["n"] == 2 and best["mean"] == pytest.approx((3.0 - 1.0) / 2)  # 5-2, 3-4
    assert best["a_ahead"] == 1
    assert held["n"] == 2 and held["mean"] == pytest.approx((3.0 - 2.0) / 2)  # 4-1, 1-3
