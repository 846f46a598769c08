"""Every rule in ruff's shape: a fixture folder per code under tests/fixtures/checker/rules/<CODE>/
and the diagnostics it must produce (``expected.txt``: path, line, column, code, message; nothing else).

A fixture folder overlays the clean base tree (tests/fixtures/checker/base): ``tree/`` holds files
that replace or join the base's, ``delete.txt`` lists base paths to remove and ``links.txt`` symlinks
to make (``path -> target``). The check runs with ``--select CODE``. To add a rule, add its function
and one folder; ``SKILLS_CHECK_UPDATE_SNAPSHOTS=1`` writes a new ``expected.txt`` (review it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from mgpu_testing.checker import RULE_FIXTURES, TOOLS, check, make_tree
from skills_check import rules, rules_md
from skills_check.adoption.suppress import SUPPRESSION_CODES
from skills_check.problems import INPUT_CODES

rules.load()  # every rule module: the house profiles' load only when their profile runs
CASES = sorted(p.name for p in RULE_FIXTURES.iterdir() if p.is_dir())


def build(case: Path, dest: Path) -> Path:
    tree = make_tree(dest)
    for rel in (case / "delete.txt").read_text().split() if (case / "delete.txt").exists() else []:
        os.unlink(tree / rel)
    if (case / "tree").is_dir():
        shutil.copytree(case / "tree", tree, dirs_exist_ok=True)
    if (case / "links.txt").exists():
        for line in (case / "links.txt").read_text().splitlines():
            path, target = (part.strip() for part in line.split("->"))
            if (tree / path).is_symlink():
                os.unlink(tree / path)
            os.symlink(target, tree / path)
    return tree


def diagnostics(tree: Path, code: str) -> tuple[int, list[str]]:
    rc, findings = check(tree, "--select", code)
    return rc, [f"{f['path']}:{f['line']}:{f['col']}: {f['code']} {f['message']}" for f in findings]


@pytest.mark.parametrize("code", CASES)
def test_rule_snapshot(tmp_path: Path, code: str) -> None:
    case = RULE_FIXTURES / code
    rc, got = diagnostics(build(case, tmp_path / "repo"), code)
    expected_file = case / "expected.txt"
    if os.environ.get("SKILLS_CHECK_UPDATE_SNAPSHOTS"):
        expected_file.write_text("".join(line + "\n" for line in got), encoding="utf-8")
    expected = expected_file.read_text(encoding="utf-8").splitlines()
    assert got == expected
    assert got, "a failing fixture must fail"
    entry = rules.get(code)
    severity_warning = code == "IN008" or (entry is not None and entry.severity == "warning")
    assert rc == (0 if severity_warning else 1)  # warnings alone exit 0


def test_base_tree_is_clean(tmp_path: Path) -> None:
    assert check(make_tree(tmp_path / "repo")) == (0, [])


def test_every_rule_has_a_fixture_folder() -> None:
    registered = {r.code for r in rules.RULES}
    assert registered <= set(CASES), sorted(registered - set(CASES))
    assert set(CASES) <= registered | {c.code for c in INPUT_CODES + SUPPRESSION_CODES}


def test_rules_md_is_generated_from_the_registry() -> None:
    """RULES.md is the registry's own text: regenerate it with `cli.py rules --write`."""
    assert (TOOLS / "RULES.md").read_text(encoding="utf-8") == rules_md.render()
    for r in rules.RULES:
        assert r.summary.endswith(".") and r.cites and r.profile in rules.registry.PROFILES, r.code


def test_foreign_layout_is_judged_only_where_it_can_be(tmp_path: Path) -> None:
    """Upstream Isaac Lab's shape (tests/fixtures/checker/foreign/README.md): a dispatching train.py, a
    per-library script whose parser a helper extends, no launcher, other programs' flags in inline code.
    Nothing is reported; the summary notes what could not be read."""
    import contextlib
    import io
    import json

    from skills_check import cli

    tree = tmp_path / "repo"
    shutil.copytree(RULE_FIXTURES.parent / "foreign", tree)
    (tree / ".agents/skills").mkdir(parents=True)
    os.symlink("../../skills/developer/train-rl", tree / ".agents/skills/isaaclab-train-rl")
    (tree / ".claude").mkdir()
    os.symlink("../.agents/skills", tree / ".claude/skills")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["check", "--root", str(tree), "--format", "json"])
    report = json.loads(out.getvalue())
    assert (rc, report["findings"]) == (0, [])  # the defaults, drift included: nothing it cannot judge is reported
    drift = next(s for s in report["summary"]["rule_sets"] if s["name"] == "drift")
    assert drift["ran"] and drift["found"] == "no command parser"  # and the summary says drift had nothing to judge
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["check", "--root", str(tree), "--format", "json", "--profile", "spec,links,drift"])
    report = json.loads(out.getvalue())
    assert (rc, report["findings"]) == (0, [])
    notes = " ".join(report["notes"])
    assert "trainer's options cannot all be read" in notes and "no launcher at" in notes
    # the same flags are judged where the tools' options are known: the base tree's launcher and trainer
    base = make_tree(tmp_path / "base")
    with open(base / "skills/user/demo/SKILL.md", "a", encoding="utf-8") as fh:
        fh.write("\nThe launcher takes `--headless`.\n")
    _, findings = check(base)
    assert [f["code"] for f in findings] == ["DR304"]


def test_foreign_command_table_catches_invented_flags_and_no_conventions(tmp_path: Path) -> None:
    """A layout whose launcher is a subcommand module (tests/fixtures/checker/foreign_cli/README.md), checked
    through its own [tool.skills-check] tools table: its invented flags and its stale path are caught; the
    conventions it never adopted (options table, audience/status/owners) are not asked of it."""
    tree = tmp_path / "repo"
    shutil.copytree(RULE_FIXTURES.parent / "foreign_cli", tree)
    rc, findings = check(tree)
    got = sorted((f["path"], f["line"], f["code"], f["message"].split(" (")[0]) for f in findings)
    assert got == [
        (
            "docs/source/features/multi_gpu.rst",
            8,
            "DR301",
            "--gpus_per_node is not an option of isaaclab train-multigpu",
        ),
        (
            "skills/user/train-many/SKILL.md",
            11,
            "DR301",
            "--num_gpu is not an option of isaaclab train-multigpu; did you mean --num_gpus?",
        ),
        (
            "skills/user/train-many/SKILL.md",
            15,
            "SK206",
            "`source/isaaclab/isaaclab/cli/launch.py` names a path that does not exist",
        ),
    ], findings
    assert rc == 1
    # the same tree adopting the conventions is asked for them
    with open(tree / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write(
            'adopt = ["options-table", "skill-metadata"]\nlauncher = "source/isaaclab/isaaclab/cli/train_multigpu.py"\n'
            'trainer = "source/isaaclab/isaaclab/cli/train_multigpu.py"\n'
        )
    codes = {f["code"] for f in check(tree, "--profile", "spec,drift,isaaclab")[1]}
    assert {"DR200", "SK107", "SK108", "SK109"} <= codes


def test_readme_renders_its_sections() -> None:
    """The README's fences all close (IN015 would say where one swallows the sections after it)."""
    from skills_check.parsers.markdown import parse_markdown

    text = (TOOLS.parents[1] / "README.md").read_text(encoding="utf-8")
    doc = parse_markdown("README.md", text)
    assert [p for p in doc.problems if p.code == "IN015"] == []
    assert {"Set-up", "Try it", "Layout"} <= {h.text for h in doc.headings}


@pytest.mark.e2e
def test_github_actions_snippet_works_in_another_repository(tmp_path: Path) -> None:
    """The README's job for other repositories: this checker fetched into .skills-check/ of a foreign tree
    with no environment, run as a script from that tree's root, annotates its findings."""
    from mgpu_testing import PYTHON, run

    tree = tmp_path / "repo"
    shutil.copytree(RULE_FIXTURES.parent / "foreign_cli", tree)
    shutil.copytree(TOOLS, tree / ".skills-check/tools/skills", ignore=shutil.ignore_patterns("__pycache__"))
    proc = run([PYTHON, ".skills-check/tools/skills/cli.py", "check", "--format", "github"], timeout=120, cwd=tree)
    annotations = [line for line in proc.stdout.splitlines() if line.startswith("::error file=")]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(annotations) == 3 and "Traceback" not in proc.stderr
    assert any("file=skills/user/train-many/SKILL.md,line=11" in a and "--num_gpu" in a for a in annotations)


def test_a_copied_skill_folder_is_blamed_not_the_right_link(tmp_path: Path) -> None:
    """A skill folder copied under a new slug keeps its name: SK114 blames the copy (the folder the
    discovery alias does not link to) and DR402 leaves the correct .agents link alone."""
    tree = make_tree(tmp_path / "repo")
    shutil.copytree(tree / "skills/user/demo", tree / "skills/user/zz-demo-copy")
    rc, findings = check(tree, "--select", "SK114,DR402")
    assert [(f["code"], f["path"]) for f in findings] == [("SK114", "skills/user/zz-demo-copy/SKILL.md")], findings
    assert "links to it" in findings[0]["message"] and rc == 1


FIXABLE = sorted(r.code for r in rules.RULES if r.fixable)


def _tree_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("code", FIXABLE)
def test_fix_snapshot(tmp_path: Path, code: str) -> None:
    """Every fixable rule's fixture, fixed with `--fix --select CODE`: the rewritten files are a snapshot
    (``fixed/`` beside ``expected.txt``) and ``fixes.txt`` says what each fix does and whether it is safe
    to apply unattended. The fixed tree is clean for that code."""
    import contextlib
    import io

    from skills_check import cli

    case = RULE_FIXTURES / code
    tree = build(case, tmp_path / "repo")
    rc, findings = check(tree, "--select", code)
    assert rc == (0 if rules.get(code).severity == "warning" else 1)  # warnings alone exit 0
    assert findings and all(f["fix"] for f in findings), f"{code}: every finding carries a fix"
    fixes = sorted({f"{'safe' if f['fix']['safe'] else 'review'}: {f['fix']['description']}" for f in findings})
    before = _tree_files(tree)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["check", "--root", str(tree), "--fix", "--no-cache", "--select", code]) == 0
    changed = {p: data for p, data in _tree_files(tree).items() if before.get(p) != data}
    snap = case / "fixed"
    if os.environ.get("SKILLS_CHECK_UPDATE_SNAPSHOTS"):
        shutil.rmtree(snap, ignore_errors=True)
        for rel, data in changed.items():
            (snap / rel).parent.mkdir(parents=True, exist_ok=True)
            (snap / rel).write_bytes(data)
        (case / "fixes.txt").write_text("".join(line + "\n" for line in fixes), encoding="utf-8")
    assert changed and changed == _tree_files(snap)
    assert fixes == (case / "fixes.txt").read_text(encoding="utf-8").splitlines()
    assert check(tree, "--select", code) == (0, [])


def test_only_safe_fixes_leave_the_ones_to_review(tmp_path: Path) -> None:
    """`--fix --only-safe` applies the safe fixes (a default from argparse) and leaves those that need a
    person (a row whose description is a placeholder)."""
    import contextlib
    import io

    from skills_check import cli

    tree = make_tree(tmp_path / "repo")
    mgpu = "docs/source/features/multi_gpu.rst"
    text = (tree / mgpu).read_text(encoding="utf-8")
    row = next(r for r in text.split("   * - ")[1:] if "``--log_dir``" in r)
    (tree / mgpu).write_text(
        text.replace("   * - " + row, "", 1).replace(
            "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``"
        ),
        encoding="utf-8",
    )
    _, findings = check(tree)
    assert {(f["code"], f["fix"]["safe"]) for f in findings} == {("DR201", False), ("DR204", True)}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["check", "--root", str(tree), "--fix", "--only-safe", "--no-cache"])
    assert [f["code"] for f in check(tree)[1]] == ["DR201"]
