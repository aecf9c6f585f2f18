"""The surrogate replay feeds a finished campaign to SingleTaskGP's model in our streaming
surrogate and to a refitted SingleTaskGP, and compares them."""

from __future__ import annotations

import json
import math

import pytest

from bo_ncgp.campaigns.bench import run_bench
from bo_ncgp.exceptions import InputDataError
from experiments.chang2023 import surrogate_replay as R


def test_replay_of_a_campaign_compares_the_fits_and_equal_hyperparameters_agree(tmp_path):
    common = {"batch_size": 2, "initial": 6, "progress": None, "plot": False}
    run_bench(["branin"], ["sobol"], [0], tmp_path, evaluations=12, **common)
    run = tmp_path / "branin" / "sobol" / "seed_0"
    out = tmp_path / "replay.json"
    assert R.main([str(run), "--every", "4", "--batches", "6", "--samples", "64", "--out",
                   str(out)]) == 0  # fmt: skip
    res = json.loads(out.read_text())
    assert [r["n"] for r in res["rows"]] == [6, 10, 12]  # the design, every 4th, the end
    for r in res["rows"]:
        for fit in ("singletaskgp", "ours"):
            assert math.isfinite(r[fit]["log_marginal"]) and len(r[fit]["lengthscale"]) == 2
            assert r[fit]["noise"] > 0
    end = res["same_hyperparameters"]
    # with SingleTaskGP given our hyperparameters the two BoTorch models are one posterior
    assert end["posterior_mean_diff"] < 1e-6 * max(1.0, end["posterior_var_max"])
    assert end["posterior_cov_diff"] < 1e-6 * max(1.0, end["posterior_var_max"])
    (b,) = end["by_samples"]
    assert b["samples"] == 64 and -1.0 <= b["rank_correlation"] <= 1.0


def test_replay_refuses_a_strategy_without_singletaskgps_model_and_a_folder_without_state(
    tmp_path,
):
    run_bench(["branin"], ["sobol"], [0], tmp_path, evaluations=6, batch_size=2, initial=4,
              progress=None, plot=False)  # fmt: skip
    run = tmp_path / "branin" / "sobol" / "seed_0"
    with pytest.raises(InputDataError, match="dual-matched"):
        R.replay(run, "dual", every=2, batches=2, samples=[8])
    with pytest.raises(SystemExit):
        R.main([str(tmp_path)])
