"""Inline suppressions (markdown, RST, YAML frontmatter) and per-file ignores: the stage between the rules
and the report. Each case edits a copy of the base fixture and runs the real CLI in-process."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from mgpu_testing.checker import MGPU, SKILL, TROUBLE, append, assert_finding, check, edit, line_of
from skills_check import cli
from skills_check.adoption.suppress import glob_match

BROKEN = "See [gone](missing.md).\n"


def _codes(findings: list[dict], path: str) -> list[str]:
    return sorted(f["code"] for f in findings if f["path"] == path)


def test_markdown_suppression_hides_its_finding_and_its_unused_twin_is_reported(tree: Path) -> None:
    append(
        tree,
        SKILL,
        "\n<!-- skills-check: disable-next-line SK203 -- kept on purpose -->\n"
        + BROKEN
        + "\n<!-- skills-check: disable-next-line SK203 -- silences nothing -->\nPlain text.\n",
    )
    rc, findings = check(tree)
    assert rc == 1
    assert _codes(findings, SKILL) == ["SU002"]
    assert_finding(findings, "SU002", SKILL, line_of(tree, SKILL, "silences nothing"))


def test_without_the_suppression_the_finding_is_there(tree: Path) -> None:
    append(tree, SKILL, "\n" + BROKEN)
    _, findings = check(tree)
    assert_finding(findings, "SK203", SKILL, line_of(tree, SKILL, "missing.md"))


def test_a_comment_inside_a_code_fence_is_code_not_a_suppression(tree: Path) -> None:
    append(tree, SKILL, "\n```markdown\n<!-- skills-check: disable-next-line SK203 -- in a fence -->\n```\n" + BROKEN)
    _, findings = check(tree)
    assert _codes(findings, SKILL) == ["SK203"]  # not hidden, and the fenced text is no unused suppression


def test_a_bare_suppression_is_a_finding_and_hides_nothing(tree: Path) -> None:
    append(tree, SKILL, "\n<!-- skills-check: disable-next-line -->\n" + BROKEN)
    _, findings = check(tree)
    assert _codes(findings, SKILL) == ["SK203", "SU001"]
    assert_finding(findings, "SU001", SKILL, line_of(tree, SKILL, "skills-check: disable-next-line"))


def test_unknown_action_or_code_is_a_malformed_suppression(tree: Path) -> None:
    append(tree, SKILL, "\n<!-- skills-check: disable-nextline SK203 -->\n<!-- skills-check: disable-file SK999 -->\n")
    _, findings = check(tree)
    assert [f["line"] for f in findings if f["code"] == "SU003"] == [
        line_of(tree, SKILL, "disable-nextline"),
        line_of(tree, SKILL, "SK999"),
    ]


def test_disable_enable_block_and_disable_file(tree: Path) -> None:
    append(
        tree,
        SKILL,
        "\n<!-- skills-check: disable SK203 -- a block -->\n\n"
        + BROKEN
        + "\n<!-- skills-check: enable SK203 -->\n\nSee [after](after.md).\n",
    )
    _, findings = check(tree)
    assert [f["line"] for f in findings if f["code"] == "SK203"] == [line_of(tree, SKILL, "after.md")]
    append(tree, SKILL, "\n<!-- skills-check: disable-file SK203 -- the whole file -->\n")
    _, findings = check(tree)
    assert _codes(findings, SKILL) == []


def test_rst_suppression_applies_to_the_next_non_blank_line(tree: Path) -> None:
    edit(
        tree,
        TROUBLE,
        "A hang at world size 2",
        ".. skills-check: disable-next-line SK204 -- reason\n   that goes on\n\nA hang at world size 2",
    )
    edit(tree, TROUBLE, ":ref:`multi-gpu-nccl`", ":ref:`multi-gpu-nccls`")
    append(tree, TROUBLE, "\n.. skills-check: disable-next-line SK204 -- nothing to hide\n\nPlain text.\n")
    _, findings = check(tree)
    assert _codes(findings, TROUBLE) == ["SU002"]
    assert_finding(findings, "SU002", TROUBLE, line_of(tree, TROUBLE, "nothing to hide"))


def test_rst_literal_block_is_not_a_comment(tree: Path) -> None:
    edit(tree, TROUBLE, ":ref:`multi-gpu-nccl`", ":ref:`multi-gpu-nccls`")
    edit(
        tree,
        TROUBLE,
        "A hang at world size 2",
        "Example::\n\n   .. skills-check: disable-next-line SK204 -- shown\n\nA hang at world size 2",
    )
    _, findings = check(tree)
    assert _codes(findings, TROUBLE) == ["SK204"]


def test_frontmatter_yaml_comment_suppresses_a_key_finding(tree: Path) -> None:
    edit(tree, SKILL, "license: BSD-3-Clause\n", "license: BSD-3-Clause\ncolour: blue\n")
    _, before = check(tree)
    code = next(f["code"] for f in before if f["path"] == SKILL and f["line"] == line_of(tree, SKILL, "colour:"))
    edit(
        tree,
        SKILL,
        "colour: blue\n",
        f"# skills-check: disable-next-line {code} -- kept for an old loader\ncolour: blue\n",
    )
    _, after = check(tree)
    assert _codes(after, SKILL) == []


def test_a_suppressed_code_left_out_by_select_is_not_unused(tree: Path) -> None:
    append(tree, SKILL, "\n<!-- skills-check: disable-next-line SK203 -->\nPlain text.\n")
    assert _codes(check(tree)[1], SKILL) == ["SU002"]
    assert _codes(check(tree, "--select", "SK1,SU")[1], SKILL) == []


def test_fix_never_adds_a_suppression(tree: Path) -> None:
    """--fix repairs the fixable drift and leaves the rest reported: no finding goes away by a comment."""
    clean = (tree / MGPU).read_text(encoding="utf-8")
    edit(tree, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")  # fixable (DR204)
    append(tree, SKILL, "\n" + BROKEN)  # not fixable (SK203)
    assert {f["code"] for f in check(tree)[1]} == {"DR204", "SK203"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main(["check", "--root", str(tree), "--fix", "--no-cache"])
    assert rc == 1 and (tree / MGPU).read_text(encoding="utf-8") == clean  # fixed by the options table
    assert [f["code"] for f in check(tree, "--no-cache")[1]] == ["SK203"]  # still reported
    for path in tree.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert "skills-check:" not in path.read_text(encoding="utf-8", errors="replace"), path


def _pyproject_ignores(root: Path, table: str) -> None:
    with open(root / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write(f"\n[tool.skills-check.per-file-ignores]\n{table}\n")


def test_per_file_ignores_hide_codes_by_glob_and_say_how_many(tree: Path) -> None:
    append(tree, SKILL, "\n" + BROKEN)
    _pyproject_ignores(tree, '"skills/**/SKILL.md" = ["SK20"]')
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["check", "--root", str(tree), "--no-cache"])
    assert rc == 0, out.getvalue()
    assert "1 finding(s) hidden: 1 by per-file-ignores" in err.getvalue()


def test_per_file_ignores_with_an_unknown_code_is_refused(tree: Path) -> None:
    _pyproject_ignores(tree, '"*.md" = ["XX123"]')
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = cli.main(["check", "--root", str(tree), "--no-cache"])
    assert rc == 2
    assert "XX123" in err.getvalue() and err.getvalue().count("\n") == 1


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("SKILL.md", "skills/a/SKILL.md", True),
        ("skills/*/SKILL.md", "skills/a/SKILL.md", True),
        ("skills/*/SKILL.md", "skills/a/b/SKILL.md", False),
        ("skills/**/SKILL.md", "skills/a/b/SKILL.md", True),
        ("skills/**/SKILL.md", "skills/SKILL.md", True),
        ("docs/**", "docs/x/y.rst", True),
        ("*.rst", "skills/a/SKILL.md", False),
    ],
)
def test_glob_match(pattern: str, path: str, hit: bool) -> None:
    assert glob_match(pattern, path) is hit


def test_json_output_has_no_hidden_finding(tree: Path) -> None:
    append(tree, SKILL, "\n<!-- skills-check: disable-next-line SK203 -- kept -->\n" + BROKEN)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["check", "--root", str(tree), "--format", "json", "--no-cache"])
    data = json.loads(out.getvalue())
    assert data["findings"] == [] and "1 finding(s) hidden: 1 by inline suppressions" in data["notes"]


def test_parsers_record_comments_with_their_lines_and_never_code() -> None:
    from skills_check.parsers.markdown import parse_markdown
    from skills_check.parsers.rst import parse_rst

    md = parse_markdown(
        "a.md",
        "---\nname: x\n# c1\ndescription: |\n  # in a block scalar\n# c2\n---\n\n<!-- c3 -->\n"
        "text <!-- c4 --> more\n\n```\n<!-- fenced -->\n```\n\n    <!-- indented code -->\n\n"
        "<!--\nc5\n-->\n",
    )
    assert [(c.text, c.line, c.end_line) for c in md.comments] == [
        ("c1", 3, 3),
        ("c2", 6, 6),
        ("c3", 9, 9),
        ("c4", 10, 10),
        ("c5", 18, 20),
    ]
    rst = parse_rst(
        "a.rst",
        "Title\n=====\n\n.. r1\n   goes on\n\nText::\n\n   .. literal\n\n"
        ".. code-block:: rst\n\n   .. code\n\n.. r2\n   at the end",
    )
    assert [(c.text.split()[0], c.line, c.end_line) for c in rst.comments] == [("r1", 4, 5), ("r2", 15, 16)]
