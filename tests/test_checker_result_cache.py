"""The result cache (tools/skills/skills_check/caches/results.py): a warm check replays its last report only while
nothing it read changed. Trees are settled by dating their files back (never by sleeping)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mgpu_testing.checker import SKILL, check, edit, make_tree
from skills_check.caches.results import ResultCache

ARGS = {
    "format": "json",
    "select": "",
    "ignore": "",
    "profile": None,
    "strict": False,
    "skills": None,
    "docs": None,
    "launcher": None,
    "trainer": None,
}


def settle(root: Path) -> None:
    """Date every file and folder of the tree an hour back, as if it had not changed for a while."""
    past = os.stat(root).st_mtime - 3600
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (past, past), follow_symlinks=False)
    os.utime(root, (past, past))


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "repo")
    edit(root, SKILL, "Use when a user", "Handy if a user")  # one finding (SK105), so replays carry something
    settle(root)
    return root


def hit(root: Path) -> dict | None:
    return ResultCache(root, ARGS).lookup()


def test_a_settled_tree_replays_the_same_report(tree: Path) -> None:
    first = check(tree)
    assert hit(tree) is not None
    assert check(tree) == first and first[0] == 1 and [f["code"] for f in first[1]] == ["SK105"]


def test_an_edit_a_new_file_or_a_config_change_is_seen(tree: Path) -> None:
    check(tree)
    edit(tree, SKILL, "Handy if a user", "Use when a user")
    assert hit(tree) is None and check(tree) == (0, [])
    settle(tree)
    check(tree)
    assert hit(tree) is not None
    (tree / "skills/user/demo/extra.md").write_text("# Extra\n\n[gone](nope.md)\n", encoding="utf-8")
    assert hit(tree) is None and "SK203" in {f["code"] for f in check(tree)[1]}
    os.unlink(tree / "skills/user/demo/extra.md")
    settle(tree)
    check(tree)
    with open(tree / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write('profiles = ["spec"]\n')
    assert hit(tree) is None


def test_a_report_is_not_kept_while_the_tree_is_changing(tree: Path) -> None:
    (tree / "skills/user/demo/new.md").write_text("# New\n", encoding="utf-8")  # changed just now
    check(tree)
    assert hit(tree) is None


def test_other_arguments_and_no_cache_do_not_replay(tree: Path) -> None:
    check(tree)
    assert ResultCache(tree, dict(ARGS, select="SK1")).lookup() is None
    assert ResultCache(tree, ARGS, enabled=False).lookup() is None
    assert check(tree, "--no-cache") == check(tree)
