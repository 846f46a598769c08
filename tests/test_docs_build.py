"""The Sphinx site builds with warnings treated as errors."""

from __future__ import annotations

import sys
from pathlib import Path

from mgpu_testing import REPO, run


def test_sphinx_build_has_no_warnings(tmp_path: Path) -> None:
    out = tmp_path / "html"
    proc = run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                "-d", str(tmp_path / "doctrees"), str(REPO / "docs"), str(out)], timeout=300)
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stderr[-4000:]}"
    assert (out / "source" / "features" / "multi_gpu.html").is_file()
    assert (out / "source" / "refs" / "troubleshooting.html").is_file()
    html = (out / "source" / "refs" / "troubleshooting.html").read_text(encoding="utf-8")
    assert "multi_gpu.html#multi-gpu-nccl" in html, "troubleshooting.rst does not link the NCCL section"


def test_sphinx_build_fails_on_a_warning(tmp_path: Path) -> None:
    """The build really is strict: a dangling :ref: in a copy of the docs fails it."""
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs, ignore=shutil.ignore_patterns("_build"))
    page = docs / "source" / "refs" / "troubleshooting.rst"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee :ref:`no-such-label`.\n", encoding="utf-8")
    proc = run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                str(docs), str(tmp_path / "html")], timeout=300)
    assert proc.returncode != 0
    assert "no-such-label" in proc.stderr
