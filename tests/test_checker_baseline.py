"""The baseline: a tree with findings adopts the checker, then fails only on new findings."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from mgpu_testing.checker import SKILL, TROUBLE, edit, make_tree
from skills_check import cli
from skills_check.adoption.baseline import message_key


def run(root: Path, *extra: str) -> tuple[int, list[dict], list[str], str]:
    """(exit status, findings, notes, stderr) of a JSON check run in-process with the root as working folder."""
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["check", "--format", "json", "--no-cache", *extra])
    finally:
        os.chdir(cwd)
    data = json.loads(out.getvalue()) if out.getvalue() else {"findings": [], "notes": []}
    return rc, data["findings"], data["notes"], err.getvalue()


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A tree with three findings in two files."""
    root = make_tree(tmp_path / "repo")
    edit(root, TROUBLE, ":ref:`multi-gpu-nccl`", ":ref:`multi-gpu-nccls`")
    with open(root / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\nSee [gone](missing.md) and [also](missing2.md).\n")
    return root


def test_baseline_makes_the_next_check_clean_and_one_new_defect_is_the_only_finding(tree: Path) -> None:
    rc, findings, _, _ = run(tree)
    assert rc == 1 and len(findings) == 3
    rc, findings, notes, _ = run(tree, "--write-baseline", "baseline.json")
    assert rc == 0 and findings == [] and "wrote 3 finding(s) to baseline.json" in notes
    assert len(json.loads((tree / "baseline.json").read_text())["findings"]) == 3
    rc, findings, notes, _ = run(tree, "--baseline", "baseline.json")
    assert rc == 0 and findings == []
    assert "baseline baseline.json: 3 finding(s) matched, 0 entr(ies) gone" in notes
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\nSee [new](new.md).\n")
    rc, findings, _, _ = run(tree, "--baseline", "baseline.json")
    assert rc == 1
    assert [(f["code"], f["path"]) for f in findings] == [("SK203", SKILL)] and "new.md" in findings[0]["message"]


def test_findings_keep_matching_when_their_lines_move(tree: Path) -> None:
    run(tree, "--write-baseline", "baseline.json")
    edit(tree, TROUBLE, "Troubleshooting\n", "Troubleshooting\n\nA new paragraph above.\n\nAnd another.\n")
    edit(tree, SKILL, "# Demo skill\n", "# Demo skill\n\nIntro text.\n\nMore intro text.\n")
    rc, findings, notes, _ = run(tree, "--baseline", "baseline.json")
    assert rc == 0 and findings == [], findings
    assert "3 finding(s) matched, 0 entr(ies) gone" in " ".join(notes)


def test_a_changed_line_is_a_new_finding(tree: Path) -> None:
    run(tree, "--write-baseline", "baseline.json")
    edit(tree, SKILL, "See [gone](missing.md)", "Read [gone](missing.md)")
    rc, findings, notes, _ = run(tree, "--baseline", "baseline.json")
    assert rc == 1 and {f["message"].split("'")[1] for f in findings} == {"missing.md", "missing2.md"}
    assert "1 finding(s) matched, 2 entr(ies) gone" in " ".join(notes)


def test_fixed_findings_are_counted_gone_and_shrinking_never_adds_new_ones(tree: Path) -> None:
    run(tree, "--write-baseline", "baseline.json")
    edit(tree, TROUBLE, ":ref:`multi-gpu-nccls`", ":ref:`multi-gpu-nccl`")
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\nSee [new](new.md).\n")
    rc, findings, notes, _ = run(tree, "--baseline", "baseline.json")
    assert rc == 1 and len(findings) == 1
    assert "2 finding(s) matched, 1 entr(ies) gone (fixed: shrink it with" in " ".join(notes)
    rc, findings, notes, _ = run(tree, "--baseline", "baseline.json", "--write-baseline", "baseline.json")
    assert rc == 1 and len(findings) == 1  # the new finding is still reported, not recorded
    entries = json.loads((tree / "baseline.json").read_text())["findings"]
    assert sorted(e["message"].split("'")[1] for e in entries) == ["missing.md", "missing2.md"]


def test_the_baseline_file_holds_no_line_numbers_and_is_sorted(tree: Path) -> None:
    run(tree, "--write-baseline", "baseline.json")
    entries = json.loads((tree / "baseline.json").read_text())["findings"]
    assert all(set(e) == {"code", "path", "message", "fingerprint"} for e in entries)
    assert entries == sorted(entries, key=lambda e: (e["path"], e["code"], e["message"], e["fingerprint"]))


@pytest.mark.parametrize("content", ["not json", "{}", '{"tool": "skills-check", "version": 1, "findings": [1]}'])
def test_a_bad_baseline_is_refused_in_one_line(tree: Path, content: str) -> None:
    (tree / "baseline.json").write_text(content)
    rc, findings, _, err = run(tree, "--baseline", "baseline.json")
    assert rc == 2 and findings == [] and err.startswith("error: baseline.json") and err.count("\n") == 1


def test_a_baseline_outside_the_root_is_refused_and_nothing_is_written(tree: Path) -> None:
    rc, _, _, err = run(tree, "--write-baseline", "../outside.json")
    assert rc == 2 and "outside the checked root" in err
    assert not (tree.parent / "outside.json").exists()


def test_write_baseline_with_fix_is_refused(tree: Path) -> None:
    rc, _, _, err = run(tree, "--fix", "--write-baseline", "baseline.json")
    assert rc == 2 and not (tree / "baseline.json").exists() and err.count("\n") == 1


def test_message_key_leaves_out_line_numbers_only() -> None:
    moved = message_key("differs from multi_gpu.rst:50 (line 9)")
    assert message_key("differs from multi_gpu.rst:45:3 (line 12)") == moved
    assert message_key("NCCL_P2P_LEVEL=5") != message_key("NCCL_P2P_LEVEL=4")
