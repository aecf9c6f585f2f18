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
