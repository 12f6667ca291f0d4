"""Sphinx configuration of the documentation site: Markdown pages (MyST) in the Furo theme.

Build it strictly, as tests/docs does (a warning, such as a broken link between pages, fails the build):
    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

project = "nmt-serve"
copyright = "nmt-serve contributors, MIT License"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links to a page's sections: configuration.md#compiling
myst_enable_extensions = ["colon_fence"]
html_theme = "furo"
html_title = "nmt-serve"
