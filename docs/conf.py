"""Sphinx configuration for the mgpu-lab docs: Isaac Lab's look (the book theme), a copy button on every code
block, and long commands that wrap instead of scrolling sideways (``_static/wrap.css``). Builds offline."""

from __future__ import annotations

project = "mgpu-lab"
author = "mgpu-lab maintainers"
copyright = "2026, mgpu-lab maintainers"

root_doc = "index"
extensions: list[str] = ["sphinx_copybutton"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
highlight_language = "bash"

html_theme = "sphinx_book_theme"
html_title = "mgpu-lab"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
}
html_static_path = ["_static"]
html_css_files = ["wrap.css"]

# sphinx-copybutton: copy what a user types, never a prompt or the output shown after it
copybutton_exclude = ".linenos, .gp, .go"
