"""The label-model check fits the constrained strategies' feasibility models on the first
evaluations of finished campaigns and scores their P(feasible)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bo_ncgp.campaigns.bench import run_bench
from experiments.chang2023 import label_model_check as L


def test_check_scores_every_model_on_a_finished_campaign(tmp_path):
    run_bench(["branin-halfplane"], ["sobol"], [0], tmp_path, evaluations=14, batch_size=2,
              initial=6, progress=None, plot=False)  # fmt: skip
    out = tmp_path / "check.json"
    argv = [str(tmp_path), "--strategy", "sobol", "--problems", "branin-halfplane", "--at",
            "8", "--uniform", "200", "--next", "3", "--models", "floor=none,floor=0.1",
            "--out", str(out)]  # fmt: skip
    assert L.main(argv) == 0
    res = json.loads(out.read_text())["problems"]["branin-halfplane"]
    assert 0.3 < res["feasible_share"] < 0.7  # the half-plane holds about half the square
    for model in ("floor=none", "floor=0.1"):
        r = res["models"][model]
        assert len(r["values"]["uniform"]) == 1 and len(r["values"]["next"]) == 1
        assert math.isfinite(r["uniform"]) and r["uniform"] > 0


def test_the_label_model_follows_the_labels_and_unknown_models_are_refused(tmp_path):
    g = torch.Generator().manual_seed(0)
    U = torch.rand(14, 2, generator=g, dtype=torch.float64)
    labels = (U.sum(-1) > 1).double()
    p = L.label_model("floor=0.1", U, labels)
    probs = p(torch.tensor([[0.95, 0.95], [0.02, 0.02]], dtype=torch.float64))
    assert probs[0] > 0.5 > probs[1]  # the labels' trend, inside and outside
    assert L.log_loss(torch.tensor([1.0 - 1e-9]), torch.tensor([1.0])) < 1e-5
    with pytest.raises(ValueError, match="unknown label model"):
        L.label_model("noise=0.1", U, labels)
    with pytest.raises(SystemExit):
        L.main([str(tmp_path), "--models", "gauss"])
