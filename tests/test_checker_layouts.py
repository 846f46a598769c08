"""Discovery on the layouts public skill collections use, and generic rules on trees that never adopted this
repository's conventions (tests/fixtures/checker/layouts/, written for these tests).

Each layout's skills are all found, and only they: support folders belong to their skill, version control,
virtual environments, node_modules, build output and what .gitignore ignores are skipped, a skill reached
through an alias link is checked once. Checked without configuration, the trees are clean: no house rule
(sections, aliases, "Use when", budgets, evaluations, drift) reports on them. The false-alarm regression set
(tests/fixtures/checker/quiet/) stays quiet.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path

import pytest
from mgpu_testing import REPO
from mgpu_testing.checker import check, edit
from skills_check import cli
from skills_check.loader import load_project
from skills_check.rules.registry import GENERIC, HOUSE

FIXTURES = REPO / "tests" / "fixtures" / "checker"
LAYOUTS = FIXTURES / "layouts"

EXPECTED = {
    "flat": ["skills/csv-cleaner", "skills/image-resize", "skills/release-notes"],
    "grouped": [
        "skills/.curated/meeting-minutes",
        "skills/.curated/travel-budget",
        "skills/.experimental/haiku-check",
        "skills/documents/pdf-merge",
        "skills/documents/slide-outline",
        "skills/engineering/commit-message",
    ],
    "plugins": [
        "plugins/data-kit/skills/sql-explain",
        "plugins/writing-kit/skills/headline-ideas",
        "plugins/writing-kit/skills/tone-check",
    ],
    "dotdirs": [".agents/skills/lint-triage", ".claude/skills/changelog-entry", ".claude/skills/todo-sweep"],
    "single": [""],
}


def copy(name: str, dest: Path) -> Path:
    tree = dest / name  # a root skill is named after its folder: keep the fixture's name
    shutil.copytree(LAYOUTS / name, tree, symlinks=True)
    return tree


def skill_dirs(tree: Path) -> list[str]:
    return sorted(s.dir for s in load_project(tree).skills)


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_every_skill_of_a_layout_is_found_and_it_is_clean_without_configuration(layout: str, tmp_path: Path) -> None:
    tree = copy(layout, tmp_path)
    assert skill_dirs(tree) == EXPECTED[layout]
    assert check(tree, "--no-cache") == (0, [])


def test_an_alias_link_does_not_check_a_skill_twice(tmp_path: Path) -> None:
    tree = copy("dotdirs", tmp_path)
    os.symlink("../../.claude/skills/changelog-entry", tree / ".agents/skills/changelog-entry")
    os.symlink("../.claude/skills", tree / "claude-skills")  # a link to a whole folder of skills
    assert skill_dirs(tree) == EXPECTED["dotdirs"]
    assert check(tree, "--no-cache") == (0, [])


def test_a_tree_with_no_skill_says_so_in_one_line_and_exits_3(tmp_path: Path) -> None:
    tree = copy("empty", tmp_path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["check", "--root", str(tree), "--no-cache"])
    assert rc == 3 and out.getvalue() == ""
    assert err.getvalue().count("\n") == 1 and "no skill found" in err.getvalue()
    # a configured skills folder that holds none: the same line, naming it
    (tree / "pyproject.toml").write_text('[tool.skills-check]\nskills = "skills"\n', encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert cli.main(["check", "--root", str(tree), "--no-cache"]) == 3
    assert "no skill found in skills ([tool.skills-check] skills)" in err.getvalue()


def test_gitignore_rules_are_git_s_own(tmp_path: Path) -> None:
    """Negation and nested .gitignore files behave as in git (pathspec's matcher, not a hand-written one)."""
    tree = copy("flat", tmp_path)
    (tree / ".gitignore").write_text("skills/*\n!skills/csv-cleaner/\n", encoding="utf-8")
    assert skill_dirs(tree) == ["generated/skills/made", "skills/csv-cleaner"]  # build/ is build output
    (tree / ".gitignore").write_text("generated/\n", encoding="utf-8")
    (tree / "skills/.gitignore").write_text("image-*\n", encoding="utf-8")
    assert skill_dirs(tree) == ["skills/csv-cleaner", "skills/release-notes"]


def test_configuration_names_skill_folders_and_globs(tmp_path: Path) -> None:
    tree = copy("grouped", tmp_path)
    config = tree / "pyproject.toml"
    config.write_text('[tool.skills-check]\nskills = ["skills/documents", "skills/.curated/*"]\n', encoding="utf-8")
    assert skill_dirs(tree) == [
        "skills/.curated/meeting-minutes",
        "skills/.curated/travel-budget",
        "skills/documents/pdf-merge",
        "skills/documents/slide-outline",
    ]
    config.write_text('[tool.skills-check]\nskills = ["skills/engineering", "skills/nowhere"]\n', encoding="utf-8")
    rc, findings = check(tree, "--no-cache")
    assert rc == 1 and [(f["code"], f["path"], f["line"]) for f in findings] == [("IN001", "pyproject.toml", 2)]
    assert "'skills/nowhere' not found" in findings[0]["message"]
    config.write_text("[tool.skills-check]\nskills = 3\n", encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["check", "--root", str(tree), "--no-cache"]) == 2


def test_everything_under_a_skill_belongs_to_it(tmp_path: Path) -> None:
    """A skill's support folders are never "a folder without SKILL.md", and a SKILL.md inside a skill (an
    example it ships) is not a second skill; a folder beside skills with markdown and no SKILL.md is."""
    tree = copy("flat", tmp_path)
    example = tree / "skills/release-notes/assets/example/SKILL.md"
    example.parent.mkdir(parents=True)
    example.write_text("---\nname: example\ndescription: An example shipped with a skill.\n---\n", encoding="utf-8")
    edit(
        tree,
        "skills/release-notes/SKILL.md",
        "section by section.",
        "section by section; `assets/example/` shows a finished one.",
    )
    assert skill_dirs(tree) == EXPECTED["flat"]
    assert check(tree, "--no-cache") == (0, [])
    (tree / "skills/draft-skill").mkdir()
    (tree / "skills/draft-skill/skill.md").write_text("# Lower-case file name\n", encoding="utf-8")
    rc, findings = check(tree, "--no-cache")
    assert (rc, [(f["code"], f["path"], f["severity"]) for f in findings]) == (
        0,
        [("SK211", "skills/draft-skill", "warning")],
    )


def test_skills_at_the_root_leave_other_top_level_folders_alone(tmp_path: Path) -> None:
    """Skills kept as top-level folders (`<root>/<name>/SKILL.md`): `docs/` beside them is not a skill."""
    tree = tmp_path / "top"
    shutil.copytree(LAYOUTS / "flat" / "skills", tree)
    shutil.copytree(LAYOUTS / "empty" / "docs", tree / "docs")
    assert skill_dirs(tree) == ["csv-cleaner", "image-resize", "release-notes"]
    assert check(tree, "--no-cache") == (0, [])


def test_house_rules_run_only_where_adopted(tmp_path: Path) -> None:
    """A foreign tree breaking this repository's conventions (no "Use when", no required sections, no
    discovery aliases, no evaluations) is clean without configuration, and is held to them once it adopts
    the house profiles; this repository adopts every profile."""
    tree = copy("flat", tmp_path)
    edit(tree, "skills/image-resize/SKILL.md", " Use when pictures are too large for a page.", "")
    assert check(tree, "--no-cache") == (0, [])
    (tree / "pyproject.toml").write_text(
        f"[tool.skills-check]\nprofiles = {list(GENERIC + HOUSE)!r}\n".replace("'", '"'), encoding="utf-8"
    )
    codes = {f["code"] for f in check(tree, "--no-cache")[1]}
    assert {"SK105", "SK201", "DR401"} <= codes
    import tomllib

    adopted = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["skills-check"]
    assert set(adopted["profiles"]) == set(GENERIC + HOUSE)


def test_false_alarm_regression_set_stays_quiet(tmp_path: Path) -> None:
    """tests/fixtures/checker/quiet/: each skill holds text an earlier version misread (README.md there)."""
    tree = tmp_path / "quiet"
    shutil.copytree(FIXTURES / "quiet", tree)
    assert len(skill_dirs(tree)) == 14
    assert check(tree, "--no-cache") == (0, [])
    assert check(tree, "--no-cache", "--profile", ",".join(GENERIC)) == (0, [])


def _skill(tmp_path: Path, frontmatter: str, body: str = "# Demo\n") -> Path:
    tree = tmp_path / "demo"
    tree.mkdir()
    (tree / "SKILL.md").write_text(f"---\nname: demo\n{frontmatter}---\n\n{body}", encoding="utf-8")
    return tree


def test_second_person_anywhere_in_a_description(tmp_path: Path) -> None:
    tree = _skill(tmp_path, "description: Formats tables. Use it when your data has ragged columns.\n")
    rc, findings = check(tree, "--no-cache")
    assert rc == 1 and [(f["code"], f["line"]) for f in findings] == [("SK106", 3)]
    assert "'your'" in findings[0]["message"]
    edit(tree, "SKILL.md", "when your data", "when the user's data")
    assert check(tree, "--no-cache") == (0, [])


def test_allowed_tools_that_do_not_exist(tmp_path: Path) -> None:
    tree = _skill(
        tmp_path,
        "description: Reads logs. Use when a job failed.\n"
        "allowed-tools:\n  - Read\n  - Bash(tail:*)\n  - Teleport\n  - mcp__logs\n  - Grep(\n",
    )
    rc, findings = check(tree, "--no-cache")
    assert rc == 0  # warnings
    assert [(f["code"], f["line"], f["fix"]) for f in findings] == [("SK117", 4, None), ("SK117", 4, None)]
    assert "'Grep(' is not a tool name" in findings[0]["message"]
    assert "'Teleport' is not a Claude Code tool" in findings[1]["message"]


def test_misreadings_fixed_still_catch_the_real_defects(tmp_path: Path) -> None:
    """The readings that stopped the false alarms still find what is wrong: a `{baseDir}` link to a file the
    skill lacks (resolved in the skill folder), a fence in a block quote that never closes, and a link
    from a reference file to another file of the skill that SKILL.md does not link."""
    tree = tmp_path / "quiet"
    shutil.copytree(FIXTURES / "quiet", tree)
    edit(tree, "skills/base-dir/SKILL.md", "{baseDir}/assets/form.md", "{baseDir}/assets/forms.md")
    edit(tree, "skills/quoted-fences/SKILL.md", "> ls -la\n> ```\n", "> ls -la\n")
    (tree / "skills/in-page-anchors/extra.md").write_text("# Extra\n\nMore rules.\n", encoding="utf-8")
    edit(
        tree,
        "skills/in-page-anchors/guide.md",
        "Back to the [summary](#summary).",
        "Back to the [summary](#summary); see [extra](extra.md).",
    )
    rc, findings = check(tree, "--no-cache")
    got = [(f["code"], f["path"]) for f in findings]
    assert rc == 1 and got == [
        ("SK203", "skills/base-dir/SKILL.md"),
        ("SK213", "skills/base-dir/assets/form.md"),  # nothing names it now: `assets/forms.md` names another file
        ("SK205", "skills/in-page-anchors/guide.md"),
        ("IN015", "skills/quoted-fences/SKILL.md"),
    ], findings
    assert "resolved to skills/base-dir/assets/forms.md" in findings[0]["message"]


def test_a_configured_skill_folder_outside_the_root_is_refused_as_outside(tmp_path: Path) -> None:
    """Issue 40: a configured skills folder that leaves the root is refused as that, in one line (exit 2), not
    reported as "no skill found"; the folder beside the root is never read."""
    import contextlib
    import io

    from skills_check import cli

    tree = copy("grouped", tmp_path / "tree")
    (tmp_path / "elsewhere" / "skills" / "demo").mkdir(parents=True)
    (tmp_path / "elsewhere" / "skills" / "demo" / "SKILL.md").write_text("---\nname: demo\n---\n", encoding="utf-8")
    for given in ("../elsewhere/skills", str(tmp_path / "elsewhere" / "skills")):
        (tree / "pyproject.toml").write_text(f'[tool.skills-check]\nskills = "{given}"\n', encoding="utf-8")
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = cli.main(["check", "--root", str(tree), "--no-cache"])
        lines = err.getvalue().strip().splitlines()
        assert rc == 2 and len(lines) == 1, (rc, err.getvalue())
        assert "[tool.skills-check] skills" in lines[0] and "is outside the checked root" in lines[0], lines
        assert "no skill found" not in lines[0] and "Traceback" not in err.getvalue()
