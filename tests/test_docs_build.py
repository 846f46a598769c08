"""The Sphinx site builds with warnings treated as errors (the session's one full build, shared)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mgpu_testing import REPO
from mgpu_testing.docs import build_sphinx

pytestmark = pytest.mark.e2e


def test_sphinx_build_has_no_warnings(sphinx_html: Path) -> None:
    assert (sphinx_html / "source" / "features" / "multi_gpu.html").is_file()
    assert (sphinx_html / "source" / "refs" / "troubleshooting.html").is_file()
    html = (sphinx_html / "source" / "refs" / "troubleshooting.html").read_text(encoding="utf-8")
    assert "multi_gpu.html#multi-gpu-nccl" in html, "troubleshooting.rst does not link the NCCL section"


def test_the_docs_configuration_keeps_warnings_fatal(tmp_path: Path) -> None:
    """The build really is strict: with the docs' own conf.py, one page holding a dangling :ref: fails it.

    A one-page site (not a second full build): what could make the build lenient is the configuration
    (``suppress_warnings``, an extension), and that is the docs' own."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy2(REPO / "docs" / "conf.py", docs / "conf.py")
    shutil.copytree(REPO / "docs" / "_static", docs / "_static")  # the configuration's own static files
    (docs / "index.rst").write_text("Index\n=====\n\nSee :ref:`no-such-label`.\n", encoding="utf-8")
    proc = build_sphinx(docs, tmp_path / "html", tmp_path / "doctrees", timeout=120)
    assert proc.returncode != 0
    assert "no-such-label" in proc.stderr
    # the same one-page site without the dangling reference builds: the failure above is the warning's
    (docs / "index.rst").write_text("Index\n=====\n\nNo references.\n", encoding="utf-8")
    assert build_sphinx(docs, tmp_path / "html2", tmp_path / "doctrees2", timeout=120).returncode == 0
