"""Every option of every ``bo-ncgp`` command is documented: the package commands' parsers and
the experiment commands' parsers (captured when their ``main`` parses its arguments) give each
option a help text, show defaults through :class:`bo_ncgp.cli.common.HelpFormatter`, and name
no internal tracker numbers."""

from __future__ import annotations

import argparse
import importlib
import re
import tomllib
from pathlib import Path

import pytest

from bo_ncgp import cli
from bo_ncgp.cli.common import HelpFormatter

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
    "bo_ncgp.commands"
]


class _Parsed(Exception):
    """Raised in place of parsing: carries the parser an experiment's ``main`` built."""


def _experiment_parser(name: str, monkeypatch) -> argparse.ArgumentParser:
    def capture(self, *args, **kwargs):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    module, func = EXPERIMENTS[name].split(":")
    with pytest.raises(_Parsed) as parsed:
        getattr(importlib.import_module(module), func)(["--help"])
    return parsed.value.args[0]


def _parser(name: str, monkeypatch) -> argparse.ArgumentParser:
    if name in cli.COMMANDS:
        return cli.command_parser(name)
    return _experiment_parser(name, monkeypatch)


@pytest.mark.parametrize("name", sorted({*cli.COMMANDS, *EXPERIMENTS}))
def test_every_option_has_help_and_the_help_shows_defaults(name, monkeypatch):
    parser = _parser(name, monkeypatch)
    undocumented = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not (a.help and a.help.strip()) and a.help is not argparse.SUPPRESS
    ]
    assert not undocumented, f"bo-ncgp {name}: options without a help text: {undocumented}"
    assert issubclass(parser.formatter_class, HelpFormatter), parser.formatter_class
    text = parser.format_help()
    assert not re.search(r"\bissues?\s*#?\d+|#\d+", text, flags=re.IGNORECASE), text
    with_default = [
        a
        for a in parser._actions
        if a.option_strings and a.nargs != 0 and a.default not in (None, argparse.SUPPRESS)
    ]
    formatter = parser._get_formatter()
    for a in with_default:  # the default is stated beside every option that has one
        assert "default" in formatter._get_help_string(a), (name, a.dest)


def test_formatter_states_defaults_once():
    p = argparse.ArgumentParser(formatter_class=HelpFormatter)
    p.add_argument("--a", type=int, default=3, help="count")
    p.add_argument("--b", type=int, default=4, help="count (default 4)")
    p.add_argument("--c", default=None, help="optional")
    p.add_argument("--d", action="store_true", help="flag")
    p.add_argument("--no-e", dest="e", action="store_false", help="no e")
    text = " ".join(p.format_help().split())
    assert "count (default: 3)" in text and "count (default 4) (default" not in text
    assert "optional (default" not in text and "flag (default" not in text
    assert "no e (default" not in text


def test_lunar_lander_help_shows_its_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["lunar-lander", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "evaluations per seed (default: 90; --quick: 15)" in out
    assert "evaluations proposed per batch (default: 3)" in out
    assert "(default: fantasy-batch)" in out
