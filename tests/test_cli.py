import pytest

from bo_ncgp import cli


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("demo", "lunar-lander", "plot", "hotspots", "compare"):
        assert name in out


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2


def test_experiment_script_passthrough(tmp_path, capsys):
    exp = tmp_path / "experiments"
    exp.mkdir()
    (exp / "toy_exp.py").write_text(
        'CLI_NAME = "toy-exp"\n\ndef main(argv=None):\n    print("ARGS", argv)\n    return 3\n'
    )
    (exp / "helper.py").write_text("X = 1\n")  # no CLI_NAME: not a command
    scripts = cli.experiment_scripts(exp)
    assert list(scripts) == ["toy-exp"]
    assert cli._run_script(scripts["toy-exp"], ["--quick", "x"]) == 3
    assert "ARGS ['--quick', 'x']" in capsys.readouterr().out


def test_core_demo_runs(capsys):
    assert cli.main(["core-demo", "--n", "300", "--rank", "20"]) == 0
    out = capsys.readouterr().out
    assert "PCG" in out and "iterations" in out
