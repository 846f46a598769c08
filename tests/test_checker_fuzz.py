"""Fuzz the checker's parser entry points with malformed text: no exception may escape."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mgpu_testing import REPO

SKILLS_DIR = REPO / "tools" / "skills"

from skills_check.inputs import read_text
from skills_check.loader import load_project
from skills_check.output.report import Summary, render
from skills_check.parsers.argspec import parse_argparse
from skills_check.parsers.markdown import parse_markdown, split_row
from skills_check.parsers.rst import parse_rst
from skills_check.runner import load_rules, run_rules

FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

MD_PIECES = [
    "---\n",
    "name: x\n",
    "key: [1, {\n",
    ": :\n",
    "# H\n",
    "## H\n",
    "| a | b |\n",
    "|---|---|\n",
    "| `x\\|y` | [l](#a) |\n",
    "```bash\n",
    "```\n",
    "`code`",
    "[t](u#f)",
    "\t",
    "  - item\n",
    "<div>\n",
    "\\",
    "*",
    "\r\n",
    "\r",
    "\x00",
    "\u00e9",
    "\n",
    "!!python/object:os.system x\n",
    "&a\n",
    "*a\n",
]
RST_PIECES = [
    ".. _lbl:\n",
    "Title\n",
    "=====\n",
    "-----\n",
    ".. code-block:: bash\n",
    "   :caption: c\n",
    ".. list-table::\n",
    "   :header-rows: 1\n",
    "   * - a\n",
    "     - ``X=1``\n",
    ".. tab-set::\n",
    "   .. tab-item:: T\n",
    ":ref:`x <y>`",
    ":doc:`d`",
    "``lit``",
    "`u <http://x>`_",
    "::\n",
    "\n",
    "   ",
    ".. toctree::\n",
    ".. include:: /etc/passwd\n",
    ".. raw:: html\n",
    "|sub|",
    ".. |sub| replace:: x\n",
    "+--+--+\n",
    "| a|b |\n",
    "[#]_",
    ".. [#] note\n",
    "\t",
    "\\",
]
PY_PIECES = [
    "import argparse\n",
    "p = argparse.ArgumentParser(allow_abbrev=False)\n",
    "p.add_argument(",
    "'--x'",
    ", default=",
    "1",
    "[]",
    "x",
    ", choices=",
    "C",
    ")",
    "\n",
    "g = p.add_argument_group()\n",
    "g.add_argument('--y', action='store_true')\n",
    "def f(:\n",
    "C = (1, 2)\n",
    "*",
    "**",
    "'",
    "\\",
]


def mixed(pieces: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.one_of(st.sampled_from(pieces), st.text(max_size=8)), max_size=30).map("".join)


@FUZZ
@given(mixed(MD_PIECES))
@example("```bash\n\r0")  # a lone CR is a line break to markdown-it: the fence check once read past its lines
def test_markdown_parser_never_raises(text: str) -> None:
    doc = parse_markdown("f.md", text)
    for item in [*doc.headings, *doc.links, *doc.code]:
        assert item.line >= 1
    for line in text.split("\n"):
        split_row(line)


@FUZZ
@given(mixed(RST_PIECES))
def test_rst_parser_never_raises(text: str) -> None:
    doc = parse_rst("f.rst", text)
    for p in doc.problems:
        assert p.loc.line >= 1


@FUZZ
@given(mixed(PY_PIECES))
def test_argparse_reader_never_raises(text: str) -> None:
    spec = parse_argparse("f.py", text)
    for opt in spec.options:
        assert opt.flags


@FUZZ
@given(st.binary(max_size=200))
def test_reading_any_bytes_never_raises(tmp_path_factory, data: bytes) -> None:
    root = tmp_path_factory.mktemp("bytes")
    (root / "f.md").write_bytes(data)
    text, problems = read_text(root, "f.md")
    errors = [f for f in problems if f.severity == "error"]
    assert (text is None) == bool(errors)  # unreadable exactly when an error says why
    assert all(f.code == "IN008" for f in problems if f.severity == "warning")  # the only warning: a BOM
    if text is not None:
        parse_markdown("f.md", text)
        parse_rst("f.rst", text)
        parse_argparse("f.py", text)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(mixed(MD_PIECES), mixed(RST_PIECES), mixed(PY_PIECES))
def test_whole_check_on_malformed_tree_never_raises(tmp_path_factory, md: str, rst: str, py: str) -> None:
    root: Path = tmp_path_factory.mktemp("tree")
    skill = root / "skills" / "user" / "fz"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(md, encoding="utf-8", errors="surrogatepass")
    (skill / "reference.md").write_text(md[::-1], encoding="utf-8", errors="surrogatepass")
    (root / "docs" / "source" / "features").mkdir(parents=True)
    (root / "docs" / "source" / "features" / "multi_gpu.rst").write_text(rst, encoding="utf-8", errors="surrogatepass")
    (root / "scripts" / "reinforcement_learning").mkdir(parents=True)
    (root / "scripts" / "reinforcement_learning" / "train_multigpu.py").write_text(
        py, encoding="utf-8", errors="surrogatepass"
    )
    project = load_project(root)
    findings = run_rules(project, load_rules())
    crashed = [f for f in findings if f.code == "IN090"]
    assert not crashed, crashed[0].message
    for fmt in ("text", "json", "github"):
        render(fmt, findings, Summary())
