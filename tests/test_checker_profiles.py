"""Rule profiles: chosen by --profile or [tool.skills-check] profiles; input problems are always on."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from mgpu_testing.checker import SKILL, check, edit, make_tree
from skills_check import cli


def test_profiles_choose_the_rule_sets(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "repo")
    edit(tree, SKILL, "Use when a user", "Handy if a user")  # SK105: Isaac Lab policy, not the spec
    edit(tree, SKILL, "name: isaaclab-demo", "name: claude-demo")  # SK103: Claude's reserved words (and SK116:
    # the skill's folder and its discovery link are named otherwise)
    edit(tree, SKILL, "status: experimental", "status: experimental\nstatus: stable")  # IN014: core
    codes = lambda *extra: sorted({f["code"] for f in check(tree, *extra)[1]})
    assert {"SK103", "SK105", "IN014"} <= set(codes())
    assert codes("--profile", "spec") == ["IN014", "SK116"]
    assert codes("--profile", "claude") == ["IN014", "SK103"]
    assert "SK105" in codes("--profile", "spec,isaaclab") and "SK103" not in codes("--profile", "spec,isaaclab")
    text = (tree / "pyproject.toml").read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.startswith("profiles ="))
    edit(tree, "pyproject.toml", line, 'profiles = ["claude"]')
    assert codes() == ["IN014", "SK103"]
    assert "SK105" in codes("--profile", "isaaclab")  # the flag wins over the config
    edit(tree, "pyproject.toml", 'profiles = ["claude"]', "")
    assert codes() == ["IN014", "SK103", "SK116"]  # no profiles configured: the generic ones (spec, claude, links)
    assert codes("--select", "SK105") == ["SK105"]  # a code named by hand runs whatever its profile


def test_unknown_profile_is_a_usage_error(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "repo")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(["check", "--root", str(tree), "--profile", "spec,bogus"])
    assert rc == 2 and err.getvalue().count("\n") == 1 and "bogus" in err.getvalue()
