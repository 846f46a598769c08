"""Sphinx configuration for the mgpu-lab docs (offline: no extensions, the bundled theme)."""

from __future__ import annotations

project = "mgpu-lab"
author = "mgpu-lab maintainers"
copyright = "2026, mgpu-lab maintainers"

root_doc = "index"
extensions: list[str] = []
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
highlight_language = "bash"

html_theme = "alabaster"
html_static_path: list[str] = []
