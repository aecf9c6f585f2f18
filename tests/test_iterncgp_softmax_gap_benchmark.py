"""Smoke test of ``benchmarks/iterncgp_softmax_gap.py --quick``: well-formed output, the damped
exact Laplace reference converges to its mode, and the split of IterNCGP's NLL gap adds up."""

import json

from benchmarks import iterncgp_softmax_gap


def test_quick_gap_splits_into_mean_and_variance_parts(tmp_path, capsys):
    out = tmp_path / "gap.json"
    assert iterncgp_softmax_gap.main(["--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    exact = res["exact"]
    assert res["threads"] == 1 and exact["seconds"] > 0 and exact["newton_steps"] < 40
    runs = {r["config"]: r for r in res["iterncgp"]}
    assert set(runs) == {"default", "cg-30", "pcg-30", "cov-200"}
    # the covariance step on every point (200) is the exact Laplace approximation
    assert abs(runs["cov-200"]["nll"] - exact["nll"]) < 1e-4
    for converged in (runs["cg-30"], runs["pcg-30"]):
        assert converged["converged"] and converged["max_mode_diff"] < 1e-4
        # the converged mean with the exact variances is the exact Laplace predictive
        assert abs(converged["nll_mean_with_exact_var"] - exact["nll"]) < 1e-6
    for r in runs.values():
        # the exact mean with IterNCGP's variances reproduces IterNCGP's own NLL to the
        # accuracy of its mean; computational uncertainty only adds variance
        assert abs(r["nll_exact_mean_with_own_var"] - r["nll"]) < 1e-2
        # (to the difference of the curvature W at IterNCGP's last iterate and at the mode)
        assert r["mean_var"] >= exact["mean_var"] - 1e-5
        assert r["time_over_exact"] > 0
    table = capsys.readouterr().out
    assert table.count("\n") >= 4 and "IterNCGP pcg-30" in table
