"""Every ``>>>`` example in the package's docstrings runs and prints what it claims.

The examples are the first thing a user copies (``python -m pydoc bo_ncgp.models``), so they
are executed here with :mod:`doctest` (float64 default dtype, as in the rest of the suite).
"""

import doctest
import importlib
import pkgutil

import botorch  # noqa: F401  -- pykeops prints a CUDA notice on stdout at first import
import pytest

import bo_ncgp


def _modules() -> list[str]:
    names = (m.name for m in pkgutil.walk_packages(bo_ncgp.__path__, "bo_ncgp."))
    return sorted(n for n in names if not n.endswith(".__main__"))  # importing runs a command


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    if name == "bo_ncgp.ax":
        pytest.importorskip("ax", reason="the optional extra 'ax' is not installed")
    mod = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    for test in finder.find(mod, name, globs={**vars(mod)}):
        runner.run(test)
    res = runner.summarize(verbose=False)
    assert res.failed == 0, f"{res.failed} of {res.attempted} docstring examples failed in {name}"


def test_modules_are_found():
    assert len(_modules()) > 30
