"""``check --add-suppressions`` and the fix of an unused suppression (issue 39 item 6), round trip through the
real CLI in-process: suppressions added for every finding leave the check clean; once the causes are gone,
``check --fix`` removes them and the files are what they were before anything was broken."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from mgpu_testing.checker import EVALS_JSON, MGPU, SKILL, TROUBLE, check, edit
from skills_check import cli, fix
from skills_check.adoption.add import REASON

BROKEN_SKILL = (
    "\nSee [gone](missing.md).\n\n```bash\nmgpu-lab train_multigpu --nope 1\n```\n\n"
    "| a | b |\n| --- | --- |\n| [x](nothere.md) | y |\n"
)
CHANGED = (SKILL, TROUBLE, MGPU, EVALS_JSON)


def main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _texts(root: Path) -> dict[str, str]:
    return {rel: (root / rel).read_text(encoding="utf-8") for rel in CHANGED}


def _break(root: Path) -> None:
    """Findings of every kind of place: a markdown paragraph, a code fence and a table, a frontmatter key, an
    RST paragraph and a list-table row, a JSON file."""
    with open(root / SKILL, "a", encoding="utf-8") as fh:
        fh.write(BROKEN_SKILL)
    edit(root, SKILL, "license: BSD-3-Clause\n", "license: BSD-3-Clause\ncolour: blue\n")
    edit(root, TROUBLE, ":ref:`multi-gpu-nccl`", ":ref:`multi-gpu-nccls`")
    edit(root, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")
    edit(root, EVALS_JSON, '"expected_skill": "isaaclab-demo"', '"expected_skill": "isaaclab-nope"')


def test_add_suppressions_then_check_is_clean_and_fix_removes_them_once_unused(tree: Path) -> None:
    clean = _texts(tree)
    _break(tree)
    broken = _texts(tree)
    rc, findings = check(tree, "--no-cache")
    assert rc == 1
    paths = {f["path"] for f in findings}
    assert {SKILL, TROUBLE, MGPU, EVALS_JSON} <= paths, paths

    rc, out, err = main("check", "--root", str(tree), "--no-cache", "--add-suppressions")
    assert rc == 0, out + err
    assert f"{len(findings)} finding(s) suppressed" in err and "clean" in out
    assert check(tree, "--no-cache") == (0, [])
    for rel in (SKILL, TROUBLE, MGPU):
        assert REASON in (tree / rel).read_text(encoding="utf-8"), rel
    assert (tree / EVALS_JSON).read_text(encoding="utf-8") == broken[EVALS_JSON]  # JSON holds no comment
    pyproject = (tree / "pyproject.toml").read_text(encoding="utf-8")
    assert f'"{EVALS_JSON}" = [' in pyproject and "[tool.skills-check.per-file-ignores]" in pyproject

    for rel in CHANGED:  # the causes go: the files as they were, with the suppressions in them
        text = (tree / rel).read_text(encoding="utf-8")
        if rel == SKILL:
            text = text.replace("See [gone](missing.md).", "See gone.").replace("--nope 1", "--nnodes 1")
            text = text.replace("[x](nothere.md)", "x").replace("colour: blue\n", "")
        elif rel == TROUBLE:
            text = text.replace("multi-gpu-nccls", "multi-gpu-nccl")
        elif rel == MGPU:
            text = text.replace("   * - ``--nnodes``\n     - ``2``", "   * - ``--nnodes``\n     - ``1``")
        else:
            text = clean[rel]
        (tree / rel).write_text(text, encoding="utf-8")
    rc, unused = check(tree, "--no-cache")
    assert rc == 1 and unused and {f["code"] for f in unused} == {"SU002"}
    assert all(f["fix"] for f in unused)

    rc, out, err = main("check", "--root", str(tree), "--no-cache", "--fix")
    assert rc == 0, out + err
    assert check(tree, "--no-cache") == (0, [])
    after = _texts(tree)
    assert after[TROUBLE] == clean[TROUBLE] and after[MGPU] == clean[MGPU]  # what was inserted is gone
    assert REASON not in after[SKILL]
    expected = clean[SKILL] + BROKEN_SKILL.replace("See [gone](missing.md).", "See gone.").replace(
        "--nope 1", "--nnodes 1"
    ).replace("[x](nothere.md)", "x")
    assert after[SKILL] == expected


def test_an_unused_code_is_removed_from_a_suppression_that_still_hides_another(tree: Path) -> None:
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\n<!-- skills-check: disable-next-line SK203,SK204 -- kept -->\nSee [gone](missing.md).\n")
    rc, findings = check(tree, "--no-cache")
    assert [f["code"] for f in findings] == ["SU002"]
    rc, out, err = main("check", "--root", str(tree), "--no-cache", "--fix")
    assert rc == 0, out + err
    assert "<!-- skills-check: disable-next-line SK203 -- kept -->\n" in (tree / SKILL).read_text(encoding="utf-8")


def test_a_comment_sharing_its_line_with_text_is_reported_but_not_rewritten(tree: Path) -> None:
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\nPlain <!-- skills-check: disable-next-line SK203 -- inline --> text.\n\nMore.\n")
    _, findings = check(tree, "--no-cache")
    assert [(f["code"], f["fix"]) for f in findings] == [("SU002", None)]


def test_add_suppressions_refuses_fix_and_baseline(tree: Path) -> None:
    for extra in (["--fix"], ["--baseline", str(tree / "b.json")], ["--write-baseline", str(tree / "b.json")]):
        rc, out, err = main("check", "--root", str(tree), "--add-suppressions", *extra)
        assert rc == 2 and out == "" and err.count("\n") == 1 and extra[0] in err


def test_add_suppressions_writes_inside_the_root_only_and_under_the_fix_lock(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tree.parent / "outside.md"
    outside.write_text("# not checked\n", encoding="utf-8")
    _break(tree)
    monkeypatch.setattr(fix, "LOCK_WAIT_S", 0.0)
    before = _texts(tree)
    with fix.fix_lock(tree):
        rc, _, err = main("check", "--root", str(tree), "--no-cache", "--add-suppressions")
    assert rc == 2 and "another --fix" in err and _texts(tree) == before  # nothing written while locked
    rc, _, _ = main("check", "--root", str(tree), "--no-cache", "--add-suppressions")
    assert rc == 0
    assert sorted(p.name for p in tree.parent.iterdir()) == ["outside.md", "repo"]
    assert outside.read_text(encoding="utf-8") == "# not checked\n"
    assert not [p for p in tree.rglob("*") if p.name.startswith(".") and p.name.endswith(".tmp")]


def test_nothing_to_suppress_says_so(tree: Path) -> None:
    rc, _, err = main("check", "--root", str(tree), "--no-cache", "--add-suppressions")
    assert rc == 0 and "--add-suppressions: nothing to suppress" in err


def test_json_findings_join_an_existing_per_file_ignores_table(tree: Path) -> None:
    with open(tree / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write('\n[tool.skills-check.per-file-ignores]\n"docs/**/*.rst" = ["SK20"]\n')
    edit(tree, EVALS_JSON, '"expected_skill": "isaaclab-demo"', '"expected_skill": "isaaclab-nope"')
    codes = sorted({f["code"] for f in check(tree, "--no-cache")[1] if f["path"] == EVALS_JSON})
    assert codes
    rc, out, err = main("check", "--root", str(tree), "--no-cache", "--add-suppressions")
    assert rc == 0, out + err
    lines = (tree / "pyproject.toml").read_text(encoding="utf-8").split("\n")
    at = lines.index("[tool.skills-check.per-file-ignores]")
    assert lines[at + 1] == f'"{EVALS_JSON}" = {json.dumps(codes)}  # {REASON}'
    assert '"docs/**/*.rst" = ["SK20"]' in lines and lines.count("[tool.skills-check.per-file-ignores]") == 1
    assert check(tree, "--no-cache") == (0, [])


def test_a_tree_without_pyproject_gets_one_for_what_cannot_hold_a_comment(tmp_path: Path) -> None:
    root = tmp_path / "lone"
    (root / "skills" / "a" / "evals").mkdir(parents=True)
    (root / "skills" / "a" / "SKILL.md").write_text(
        "---\nname: a\ndescription: Does a thing. Use when testing.\n---\n\n# A\n\nSee [gone](missing.md).\n",
        encoding="utf-8",
    )
    (root / "skills" / "a" / "evals" / "evals.json").write_text("[{", encoding="utf-8")
    rc, out, err = main("check", "--root", str(root), "--no-cache", "--add-suppressions")
    assert rc == 0 and "IN040" not in out and "SK203" not in out  # the evals.json finding too (issue 48)
    assert "pyproject.toml made at the root" in err
    made = (root / "pyproject.toml").read_text(encoding="utf-8")
    assert made.startswith("[tool.skills-check.per-file-ignores]\n")  # only the table, nothing else
    assert '"skills/a/evals/evals.json" = ["IN040"]' in made
    assert check(root, "--no-cache") == (0, [])


def test_findings_on_a_whole_file_get_a_file_level_suppression(tmp_path: Path) -> None:
    root = tmp_path / "long"
    (root / "skills" / "a" / "references").mkdir(parents=True)
    body = "".join(f"Step {i}: water the bed.\n\n" for i in range(300))  # a body over 500 lines (SK202)
    (root / "skills" / "a" / "SKILL.md").write_text(
        "---\nname: a\ndescription: Waters a bed. Use when a garden is dry.\n---\n\n# A\n\nRead "
        f"[the guide](references/guide.md).\n\n{body}",
        encoding="utf-8",
    )
    sections = "".join(f"## Part {i}\n\nText.\n\n" for i in range(60))  # a long file, no contents list (SK207)
    (root / "skills" / "a" / "references" / "guide.md").write_text(f"# Guide\n\n{sections}", encoding="utf-8")
    codes = {f["code"] for f in check(root, "--no-cache")[1]}
    assert {"SK202", "SK207"} <= codes
    rc, _, err = main("check", "--root", str(root), "--no-cache", "--add-suppressions")
    assert rc == 0, err
    guide = (root / "skills" / "a" / "references" / "guide.md").read_text(encoding="utf-8")
    assert guide.startswith("<!-- skills-check: disable-file SK207 -- ")
    assert "# skills-check: disable-file SK202 -- " in (root / "skills" / "a" / "SKILL.md").read_text(encoding="utf-8")
    assert check(root, "--no-cache") == (0, [])  # no SU002 under what was written
