"""Sphinx configuration of the bo_ncgp documentation site (``make docs``).

The tutorials (``tutorials/NN_*.py``, jupytext percent format) are converted to notebooks in
``docs/tutorials/`` when the build starts and executed by myst-nb (cached in
``docs/_build/.jupyter_cache``: a tutorial runs again only when its source changed). A cell that
fails, or writes to stderr (a warning), is a build warning, and ``make docs`` turns warnings into
errors. ``BO_NCGP_DOCS_EXECUTE`` picks myst-nb's execution mode: ``cache`` (default), ``force``
(run every tutorial again, e.g. after ``BO_NCGP_TUTORIAL_QUICK`` changed, which the cache does not
see) or ``off``.
"""

from __future__ import annotations

import os
import pkgutil
import re
from pathlib import Path

# pykeops prints a CUDA banner to stdout when gpytorch imports it; the executed tutorials
# inherit this environment, so their pages do not show it
os.environ.setdefault("KEOPS_VERBOSE", "0")

import jupytext

import bo_ncgp

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

project = "bo_ncgp"
author = "the bo_ncgp authors"
copyright = "the bo_ncgp authors"
release = version = bo_ncgp.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_nb",
]
exclude_patterns = ["_build", "tutorials/output", "**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# ------------------------------------------------------------------ API reference
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True

# ------------------------------------------------------------------ markdown and notebooks
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = os.environ.get("BO_NCGP_DOCS_EXECUTE", "cache")
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_output_stderr = "warn"
nb_merge_streams = True
nb_kernel_rgx_aliases = {".*": "python3"}


def _hotspot_data_missing() -> bool:
    from bo_ncgp.data.hotspots import load_hotspots

    try:
        load_hotspots("civ")
    except FileNotFoundError:
        return True
    return False


# a tutorial whose data set is not there ($BO_NCGP_DATA) is shown without its outputs
nb_execution_excludepatterns = ["tutorials/03_*"] if _hotspot_data_missing() else []

# ------------------------------------------------------------------ theme
html_theme = "furo"
html_title = f"bo_ncgp {release}"
html_static_path: list[str] = []


def _tutorial_notebooks() -> None:
    """Write ``docs/tutorials/NN_*.ipynb`` from ``tutorials/NN_*.py`` (only when changed)."""
    out = DOCS / "tutorials"
    out.mkdir(exist_ok=True)
    sources = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
    for src in sources:
        text = jupytext.writes(jupytext.read(src), fmt="ipynb")
        dst = out / f"{src.stem}.ipynb"
        if not dst.exists() or dst.read_text() != text:
            dst.write_text(text)
    for stale in set(out.glob("*.ipynb")) - {out / f"{s.stem}.ipynb" for s in sources}:
        stale.unlink()


def _api_pages() -> None:
    """Write ``docs/api/generated/<module>.rst`` for every public module of ``bo_ncgp``.

    A module is public when no part of its dotted name starts with ``_``. A package's page
    holds its docstring and a table of contents of its modules; names a package re-exports are
    documented once, in the module that defines them.
    """
    out = DOCS / "api" / "generated"
    out.mkdir(parents=True, exist_ok=True)
    names = [
        m.name
        for m in pkgutil.walk_packages(bo_ncgp.__path__, "bo_ncgp.")
        if not any(part.startswith("_") for part in m.name.split("."))
    ]
    packages = {m.name for m in pkgutil.walk_packages(bo_ncgp.__path__, "bo_ncgp.") if m.ispkg}
    pages = {}
    for name in names:
        children = [n for n in names if n.rpartition(".")[0] == name]
        lines = [name, "=" * len(name), "", f".. automodule:: {name}", ""]
        if name in packages and children:
            lines += [".. toctree::", "   :maxdepth: 1", ""]
            lines += [f"   {child}" for child in children] + [""]
        pages[f"{name}.rst"] = "\n".join(lines)
    for stale in set(out.glob("*.rst")) - {out / p for p in pages}:
        stale.unlink()
    for page, text in pages.items():
        if not (out / page).exists() or (out / page).read_text() != text:
            (out / page).write_text(text)


_RESULTS_LINK = re.compile(r"\]\((?:\.\./)?(?:experiments/(\w+)|(benchmarks))/RESULTS\.md\)")


def _results_links(app, relative_path, parent_docname, content: list[str]) -> None:
    """Point links between the included results pages at their pages on this site."""
    content[0] = _RESULTS_LINK.sub(lambda m: f"](/results/{m[1] or m[2]}.md)", content[0])


def setup(app) -> None:
    app.connect("include-read", _results_links)


_tutorial_notebooks()
_api_pages()
