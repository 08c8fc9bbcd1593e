"""Sphinx configuration of statekeep's docs site (built by scripts/docs, warnings as errors).

Pages are Markdown (MyST); the reference pages are generated from the code when the site is built:
the CLI from its argparse parsers (sphinx-argparse), the REST API from the FastAPI app's OpenAPI spec and
the configuration tables from the code's own constants (``_ext/statekeep_reference.py``), the Python API
from docstrings (autodoc, which reads the docstrings' reST roles as they are written)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "statekeep"
author = "the statekeep authors"
copyright = "the statekeep authors; Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "statekeep_reference",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "screenshots/README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "statekeep"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
# PySpark is not in the docs extra (a 450 MB install for one page): autodoc imports the Spark-only modules
# (statekeep.spark and the plan under it) over a stand-in for it. Their signatures and docstrings are
# statekeep's own, so the page reads the same as one built with PySpark installed (tests/test_install.py
# builds the site in a fresh copy with the docs extra alone).
autodoc_mock_imports = ["pyspark"]
# the docstrings name types across modules that are not all in the reference; an unresolved name is
# shown as text, not a warning (nitpicky stays off)
nitpicky = False
