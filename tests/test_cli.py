import importlib
import sys
from importlib.metadata import EntryPoint

import pytest

from bo_ncgp import cli


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("demo", "core-demo", "lunar-lander", "plot", "hotspots", "compare"):
        assert name in out


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2


def test_unknown_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_commands_are_command_objects_of_their_modules(name):
    module, attribute = cli.COMMANDS[name].split(":")
    cmd = getattr(importlib.import_module(module), attribute)
    assert isinstance(cmd, cli.Command) and cmd is cli.command(name)
    assert isinstance(cmd.help, str) and "\n" not in cmd.help
    assert callable(cmd.add_arguments) and callable(cmd.run)


def _plugin_module(tmp_path, monkeypatch):
    pkg = tmp_path / "toy_plugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "toy_exp.py").write_text(
        '"""A toy experiment.\n\nMore text."""\n\n'
        "import sys\n\n"
        "def main(argv=None):\n"
        '    print("ARGS", argv, "PROG", sys.argv[0])\n'
        "    return 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("toy_plugins", "toy_plugins.toy_exp"):  # fresh, not from an earlier test
        monkeypatch.delitem(sys.modules, name, raising=False)
    eps = [
        EntryPoint("toy-exp", "toy_plugins.toy_exp:main", cli.ENTRY_POINT_GROUP),
        EntryPoint("plot", "toy_plugins.toy_exp:main", cli.ENTRY_POINT_GROUP),  # shadowed
    ]

    def entry_points(group):
        return [ep for ep in eps if ep.group == group]

    monkeypatch.setattr(cli, "entry_points", entry_points)


def test_experiment_entry_points_pass_arguments_through(tmp_path, monkeypatch, capsys):
    _plugin_module(tmp_path, monkeypatch)
    assert list(cli.experiment_commands()) == ["toy-exp"]  # package commands win
    program = sys.argv[0]
    assert cli.main(["toy-exp", "--quick", "x"]) == 3
    # the experiment's argparse names the command the user typed; sys.argv is restored
    assert "ARGS ['--quick', 'x'] PROG bo-ncgp toy-exp" in capsys.readouterr().out
    assert sys.argv[0] == program


def test_help_lists_experiments_with_their_docstring_without_importing_them(
    tmp_path, monkeypatch, capsys
):
    _plugin_module(tmp_path, monkeypatch)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "toy-exp" in out and "A toy experiment" in out
    assert "toy_plugins.toy_exp" not in sys.modules


def test_core_demo_runs(capsys):
    assert cli.main(["core-demo", "--n", "300", "--rank", "20"]) == 0
    out = capsys.readouterr().out
    assert "PCG" in out and "iterations" in out


def test_no_argparse_and_no_cli_import_below_the_cli_package():
    import ast
    from pathlib import Path

    pkg = Path(cli.__file__).resolve().parents[1]
    bad = []
    for f in sorted(pkg.rglob("*.py")):
        if f.is_relative_to(pkg / "cli"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name == "argparse" or name == "bo_ncgp.cli" or name.startswith("bo_ncgp.cli."):
                    bad.append(f"{f.relative_to(pkg)} imports {name}")
                if name == "experiments" or name.startswith("experiments."):
                    bad.append(f"{f.relative_to(pkg)} imports {name}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["lunar-lander", "--batch-size", "0"],
        ["lunar-lander", "--threads", "0"],
        ["lunar-lander", "--evaluations", "-5"],
        ["lunar-lander", "--first-seed", "-1"],
        ["lunar-lander", "--seeds", "zero"],
        ["lunar-lander", "--success-fraction", "1.5"],
        ["lunar-lander", "--num-inducing", "0"],
        ["hotspots", "--threads", "0"],
        ["hotspots", "--seeds", "-2"],
        ["hotspots", "--first-seed", "-1"],
    ],
)
def test_bad_numbers_are_usage_errors_of_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage:") and f"error: argument {argv[1]}" in err[-1]
    assert "Traceback" not in "\n".join(err)


def _saved_lunar_campaign(out):
    """A lunar-lander campaign of the ``random`` strategy saved before its first batch, as
    ``bo-ncgp lunar-lander`` with :data:`LUNAR` would save it."""
    from bo_ncgp.campaigns import Campaign
    from bo_ncgp.campaigns.strategies.registry import build_strategy
    from bo_ncgp.problems.registry import make_problem

    problem = make_problem("lunar-lander", episodes=1, heldout_episodes=1, success_fraction=1.0)
    camp = Campaign(
        problem,
        build_strategy("lunar-lander", "random"),
        budget=6,
        batch_size=2,
        num_initial=2,
        seed=0,
        out_dir=out / "random" / "seed_0",
    )
    camp.state = camp._fresh_state()
    camp._save()
    return camp.state_path


LUNAR = ["--strategy", "random", "--episodes", "1", "--heldout-episodes", "1", "--seeds", "1"]
LUNAR += ["--no-progress"]
LUNAR += ["--evaluations", "6", "--initial", "2", "--batch-size", "2"]


def test_refused_campaign_folders_are_reported_in_one_line(tmp_path, capsys):
    from bo_ncgp.campaigns.storage import FolderLock

    state = _saved_lunar_campaign(tmp_path)
    base = ["lunar-lander", "--out", str(tmp_path), *LUNAR]
    assert cli.main([*base, "--evaluations", "8"]) == 2  # another budget, no --extend
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("bo-ncgp lunar-lander: ") and str(state) in err and "--extend" in err
    with FolderLock(state.parent):  # another process runs this seed
        assert cli.main(base) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "in use by another campaign process" in err and str(state.parent) in err
    state.write_text(state.read_text()[:100])  # truncated
    assert cli.main(base) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert str(state) in err and "truncated" in err


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--dask-scheduler", "tcp://127.0.0.1:1", "--dask-timeout", "0.5"], "could not connect"),
        (["--dask-scheduler", "tls://127.0.0.1:1", "--dask-security", "/no/tls.yaml"], "not found"),
    ],
)
def test_lunar_lander_reports_dask_failures_in_one_line(tmp_path, capsys, extra, words):
    argv = ["lunar-lander", "--quick", "--seeds", "1", "--no-progress", "--out", str(tmp_path)]
    assert cli.main(argv + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bo-ncgp lunar-lander: ") and words in err[0]
    assert not list(tmp_path.rglob("state.json"))  # no seed ran


def test_version_comes_from_the_distribution_metadata(capsys):
    from importlib.metadata import version

    import bo_ncgp

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"bo-ncgp {version('bo-ncgp')}\n"
    assert bo_ncgp.__version__ == version("bo-ncgp")


@pytest.mark.parametrize(
    "argv, level",
    [
        (["plot", "/nonexistent"], "INFO"),
        (["-v", "plot", "/nonexistent"], "DEBUG"),
        (["plot", "/nonexistent", "--verbose"], "DEBUG"),
        (["--quiet", "plot", "/nonexistent"], "WARNING"),
        (["plot", "/nonexistent", "-q"], "WARNING"),
    ],
)
def test_verbose_and_quiet_set_the_level_of_the_library_logs(argv, level, capsys, monkeypatch):
    import logging

    import bo_ncgp.campaigns.plotting as plotting

    seen = []

    def collect(paths):  # runs inside the command, where its logging is configured
        seen.append(logging.getLevelName(logging.getLogger("bo_ncgp").level))
        logging.getLogger("bo_ncgp.campaigns").debug("a debug record")
        raise FileNotFoundError("no campaign")

    monkeypatch.setattr(plotting, "collect", collect)
    assert cli.main(argv) == 2
    assert seen == [level]
    err = capsys.readouterr().err
    assert ("DEBUG bo_ncgp.campaigns: a debug record" in err) == (level == "DEBUG")
    assert logging.getLogger("bo_ncgp").level == logging.NOTSET  # restored afterwards


def test_a_missing_extra_is_reported_by_name_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # `import gymnasium` fails
    argv = ["lunar-lander", "--quick", "--seeds", "1", "--no-progress", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err == (
        "bo-ncgp lunar-lander: the lunar lander needs gymnasium: pip install 'bo-ncgp[envs]'"
    )
    assert not list(tmp_path.rglob("state.json"))  # no campaign ran


def test_require_names_the_extra_and_chains_the_import_error(monkeypatch):
    from bo_ncgp._extras import require
    from bo_ncgp.exceptions import InputDataError, MissingExtraError

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'bo-ncgp\[distributed\]'") as exc:
        require("distributed", "json", "distributed", needed_by="a dask cluster")
    assert exc.value.extra == "distributed" and isinstance(exc.value.__cause__, ImportError)
    with pytest.raises(InputDataError, match="unknown extra 'gpu'"):
        require("gpu", "json", needed_by="x")


def test_keops_is_imported_only_when_its_backend_is_a_candidate(monkeypatch):
    import gpytorch
    import torch

    from bo_ncgp.linalg import _keops
    from bo_ncgp.linalg.backend import choose_backend

    asked = []
    monkeypatch.setattr(_keops, "keops_available", lambda device=None: asked.append(1) or False)
    k = gpytorch.kernels.RBFKernel()
    assert choose_backend("auto", k, (50, 50), torch.float64, "cpu") == "dense"
    assert choose_backend("chunked", k, (50, 50), torch.float64, "cpu") == "chunked"
    assert not asked  # pykeops is not imported for a dense or chunked product
    assert choose_backend("keops", k, (50, 50), torch.float64, "cpu") == "chunked"
    assert asked


def test_commands_print_no_keops_banner():
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("PYKEOPS_VERBOSE", "KEOPS_VERBOSE")}
    res = subprocess.run(
        [sys.executable, "-m", "bo_ncgp.cli", "lunar-lander", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0 and res.stdout.startswith("usage: bo-ncgp lunar-lander")
    assert "KeOps" not in res.stdout + res.stderr and not res.stderr


def _branin_campaigns(root, names=("a", "b"), seeds=(0, 1)):
    from bo_ncgp.campaigns import Campaign, RandomSearch
    from bo_ncgp.problems.synthetic import TestFunction

    for name in names:
        for seed in seeds:
            Campaign(
                TestFunction("branin"),
                RandomSearch(),
                budget=6,
                batch_size=2,
                num_initial=2,
                seed=seed,
                out_dir=root / name / f"seed_{seed}",
            ).run(progress=False)


def test_compare_defaults_to_best_on_optimisation_runs_and_validates_metrics(tmp_path, capsys):
    _branin_campaigns(tmp_path)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert cli.main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "best@6: A - B = " in out and "n=2" in out and "nan" not in out
    assert cli.main(["compare", a, b, "--metrics", "accuracy,mse", "--at", "150,199"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "hold no metric accuracy, mse; available: best" in err


def _pool_state(root, seed, accuracy):
    import json

    its = [{"num_evaluations": n, "metrics": {"accuracy": accuracy, "mse": 0.1}} for n in (2, 3)]
    evs = [{"point": p, "value": 1.0, "success": None, "error": None} for p in (4, 7, 9)]
    st = {"seed": seed, "strategy": {"name": "entropy"}, "problem": {"name": "pool"},
          "iterations": its, "evaluations": evs}  # fmt: skip
    (root / f"seed_{seed}").mkdir(parents=True)
    (root / f"seed_{seed}" / "state.json").write_text(json.dumps(st))


def test_plot_and_compare_default_to_the_metrics_of_active_learning_runs(tmp_path, capsys):
    for seed in (0, 1):
        _pool_state(tmp_path / "a", seed, 0.8)
        _pool_state(tmp_path / "b", seed, 0.7)
    assert cli.main(["plot", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "accuracy.png").is_file()
    assert not (tmp_path / "a" / "best.png").exists()
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "accuracy@3: A - B = +0.1" in out and "mse@3" in out
    assert cli.main(["plot", str(tmp_path / "a"), "--metric", "best"]) == 2
    assert "available: accuracy, mse" in capsys.readouterr().err


class _Stop(Exception):
    pass


@pytest.mark.parametrize(
    "extra, seeds, budget",
    [
        ([], range(0, 2), 15),
        (["--seeds", "4"], range(0, 4), 15),
        (["--evaluations", "9"], range(0, 2), 9),
    ],
)
def test_lunar_lander_quick_honours_explicit_options(extra, seeds, budget, monkeypatch, tmp_path):
    import bo_ncgp.campaigns.runner as runner

    seen = {}

    def run_seeds(problem_factory, strategy_factory, seeds, out, **kwargs):
        seen.update(seeds=seeds, out=out, budget=kwargs["budget"])
        raise _Stop

    monkeypatch.setattr(runner, "run_seeds", run_seeds)
    with pytest.raises(_Stop):
        cli.main(["lunar-lander", "--quick", "--out", str(tmp_path), *extra])
    assert seen["seeds"] == seeds and seen["budget"] == budget
    assert seen["out"] == tmp_path / "fantasy-batch"  # the toolkit's strategy by default


@pytest.mark.parametrize(
    "extra, initial, steps",
    [([], 20, 4), (["--steps", "7"], 20, 7), (["--initial", "30"], 30, 4)],
)
def test_hotspots_quick_honours_explicit_options(extra, initial, steps, capsys):
    from bo_ncgp.cli.hotspots import run

    args = cli.command_parser("hotspots").parse_args(
        ["--quick", "--data-root", "/nonexistent", *extra]
    )
    assert run(args) == 2  # no data: stops after the presets are applied
    assert (args.initial, args.steps, args.seeds) == (initial, steps, 2)
    assert "data file not found" in capsys.readouterr().err


def test_a_requested_keops_backend_without_pykeops_names_the_extra(monkeypatch, caplog):
    import logging

    import gpytorch
    import torch

    from bo_ncgp.linalg import _keops, backend

    monkeypatch.setitem(sys.modules, "pykeops", None)
    _keops._import_keops.cache_clear()
    backend._log_once.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="bo_ncgp.linalg.backend"):
            k = gpytorch.kernels.RBFKernel()
            for _ in range(2):
                assert backend.choose_backend("keops", k, (9, 9), torch.float64, "cpu") == "chunked"
    finally:
        _keops._import_keops.cache_clear()
    (record,) = caplog.records  # once per process
    assert "needs pykeops: pip install 'bo-ncgp[keops]'" in record.getMessage()
