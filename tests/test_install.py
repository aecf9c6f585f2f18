"""The documented commands exist: every ``bo-ncgp NAME --option`` quoted in the README and on
the results pages names a command of the package or of ``pyproject.toml``'s entry points, with
options its parser knows; CI checks the non-editable install after the tests.

The install itself (``pip install .`` into a fresh venv, then the installed ``bo-ncgp``) is
``make check-install``, which ``.ci/run`` runs after ``make test``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import tomllib
from pathlib import Path

import pytest

from bo_ncgp.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "RESULTS.md",
    *sorted((ROOT / "experiments").glob("*/RESULTS.md")),
]
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _entry_points() -> dict[str, str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["project"]["entry-points"]["bo_ncgp.commands"]


def _quoted_commands() -> list[tuple[str, str]]:
    """(page, command line) for every ``bo-ncgp ...`` in inline code or an indented block."""
    found = []
    for page in PAGES:
        text = page.read_text().replace("\\\n", " ")  # join continued shell lines
        spans = re.findall(r"`(bo-ncgp [^`]+)`", text)
        spans += re.findall(r"^(?:    )?(bo-ncgp [^\n]*)", text, flags=re.MULTILINE)
        found += [(page.name, " ".join(s.split())) for s in spans]
    return found


def _help(name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        if name in COMMANDS:
            main([name, "--help"])
        else:
            module, func = _entry_points()[name].split(":")
            getattr(importlib.import_module(module), func)(["--help"])
    return out.getvalue()


def test_every_quoted_command_and_option_exists():
    quoted = _quoted_commands()
    assert len(quoted) > 20
    helps: dict[str, str] = {}
    for page, line in quoted:
        name = line.split()[1]
        if not re.fullmatch(r"[a-z0-9-]+", name) or name.startswith("-"):
            continue  # `bo-ncgp --help`, `bo-ncgp NAME --help`
        assert name in COMMANDS or name in _entry_points(), f"{page}: unknown command {line}"
        if name not in helps:
            helps[name] = _help(name)
        for option in OPTION.findall(line):
            assert option in helps[name], f"{page}: {option} unknown to bo-ncgp {name}: {line}"


def test_ci_runs_the_install_check_after_the_tests():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make test") < ci.index("make check-install")
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ncheck-install:")[1].split("\n\n")[0]
    for step in (
        "-m venv",
        'pip" wheel -v --no-deps -w "$$tmp/dist" "$$tmp/src"',
        "bo_ncgp/py.typed",
        ".dist-info/licenses/LICENSE",
        'install --quiet -c constraints.txt "$$whl[envs]"',
        'bo-ncgp" --version',
        'bo-ncgp" --help',
        'bo-ncgp" demo',
        'bo-ncgp" compare',
        "--quick",
        "uninstall --quiet -y gymnasium",
    ):
        assert step in recipe, step


def test_package_metadata_license_typing_and_changelog():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "bo_ncgp" / "py.typed").is_file()
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["bo_ncgp"]
    requires = meta["build-system"]["requires"]  # SPDX license strings need setuptools >= 77
    assert any(re.fullmatch(r"setuptools>=(7[7-9]|[89]\d)(\.\d+)*", r) for r in requires), requires
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(
        rf"^## {re.escape(project['version'])} - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M
    )
