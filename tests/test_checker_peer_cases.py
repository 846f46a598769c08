"""Defects peers catch, each on a small tree of its own (firing), and false alarms an earlier version raised
that need a finding beside them to show (the quiet ones are tests/fixtures/checker/quiet/)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from mgpu_testing.checker import assert_finding, check
from skills_check import cli


def _skill(root: Path, body: str, name: str = "probe-gpus", files: dict[str, str] | None = None) -> Path:
    folder = root / "skills" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Probes the GPUs of a node. Use when ranks disagree on devices.\n---\n\n"
        f"# Probe\n\n{body}",
        encoding="utf-8",
    )
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    return root


def test_arguments_in_a_fence_without_a_language_or_in_another_language(tmp_path: Path) -> None:
    body = "```\nprobe $1\n```\n\n```python\nprint('$ARGUMENTS')\n```\n\n```bash\necho ${1}\n```\n"
    rc, findings = check(_skill(tmp_path, body), "--no-cache")
    got = sorted((f["code"], f["line"]) for f in findings)
    assert got == [("SK214", 9), ("SK214", 13)] and rc == 0  # `${1}` is how to keep a shell $1: not reported


def test_a_user_home_path_in_a_skill_and_in_its_scripts(tmp_path: Path) -> None:
    body = "Logs go to `/home/ana/runs/` (or `/home/<user>/runs/` on your machine).\n\nRun `scripts/copy.py`.\n"
    root = _skill(
        tmp_path, body, files={"scripts/copy.py": 'DEST = "C:\\\\Users\\\\ana\\\\runs"\nSRC = "C:\\Users\\ana\\runs"\n'}
    )
    _, findings = check(root, "--no-cache")
    assert_finding(findings, "SK216", "skills/probe-gpus/SKILL.md", 8)
    assert_finding(findings, "SK216", "skills/probe-gpus/scripts/copy.py", 1)  # escaped as Python writes it
    assert_finding(findings, "SK216", "skills/probe-gpus/scripts/copy.py", 2)
    assert [f["code"] for f in findings].count("SK216") == 3  # the placeholder is not one


def test_unknown_tools_in_a_subagent_file(tmp_path: Path) -> None:
    root = _skill(tmp_path, "Ask the reviewer subagent.\n")
    (root / ".claude" / "agents").mkdir(parents=True)
    (root / ".claude" / "agents" / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: Reviews logs.\ntools: Read, Grep, Terminal\n---\n\nReview.\n",
        encoding="utf-8",
    )
    (root / "plugins" / "fix-kit" / "agents").mkdir(parents=True)
    (root / "plugins" / "fix-kit" / "agents" / "fixer.md").write_text(
        "---\nname: fixer\ndescription: Fixes logs.\ntools: [Edit, Bash, mcp__github__create_issue]\n---\n\nFix.\n",
        encoding="utf-8",
    )
    _, findings = check(root, "--no-cache")
    hits = [(f["path"], f["line"], f["message"]) for f in findings if f["code"] == "SK217"]
    assert hits == [(".claude/agents/reviewer.md", 4, "`tools` entry 'Terminal' is not a Claude Code tool")]


def test_a_file_beside_a_named_one_is_not_named_by_it(tmp_path: Path) -> None:
    """`scripts/probe.py` names that file, not every file in scripts/: the one beside it is unreferenced."""
    root = _skill(tmp_path, "Run `scripts/probe.py`.\n", files={"scripts/probe.py": "", "scripts/old_probe.py": ""})
    _, findings = check(root, "--no-cache")
    hits = [f["path"] for f in findings if f["code"] == "SK213"]
    assert hits == ["skills/probe-gpus/scripts/old_probe.py"]


def test_a_missing_link_target_is_a_broken_link_not_a_second_level_reference(tmp_path: Path) -> None:
    root = _skill(tmp_path, "See [the guide](guide.md).\n", files={"guide.md": "# Guide\n\nSee [gone](gone.md).\n"})
    _, findings = check(root, "--no-cache")
    assert [f["code"] for f in findings] == ["SK203"]


def test_a_wsl_path_into_a_windows_home_in_a_skill_and_its_script(tmp_path: Path) -> None:
    body = "Copy the export from `/mnt/c/Users/maria/Downloads/export.csv`.\n\nRun `scripts/fetch.sh`.\n"
    root = _skill(tmp_path, body, files={"scripts/fetch.sh": "#!/bin/sh\ncp /mnt/d/users/maria/x.csv .\n"})
    _, findings = check(root, "--no-cache")
    hits = sorted((f["path"], f["line"], f["message"]) for f in findings if f["code"] == "SK216")
    assert [(p, line) for p, line, _ in hits] == [
        ("skills/probe-gpus/SKILL.md", 8),
        ("skills/probe-gpus/scripts/fetch.sh", 2),
    ]
    assert all("/mnt/c/Users/<user>/" in m and "$HOME" not in m for _, _, m in hits)  # advice for a WSL path


def test_an_unnamed_folder_is_one_finding_that_lists_its_files(tmp_path: Path) -> None:
    files = {f"vendor/parser/part{i}.py": f"PART = {i}\n" for i in range(6)}
    files["scripts/run.py"] = "print('run')\n"
    files["stray.txt"] = "left over\n"
    root = _skill(tmp_path, "Run `scripts/run.py`.\n", files=files)
    _, findings = check(root, "--no-cache")
    hits = sorted((f["path"], f["message"]) for f in findings if f["code"] == "SK213")
    assert [p for p, _ in hits] == ["skills/probe-gpus/stray.txt", "skills/probe-gpus/vendor/parser/part0.py"]
    assert "vendor/ is in the skill (6 files: part0.py, part1.py, part2.py, part3.py and 2 more)" in hits[1][1]


def test_documents_a_skill_names_one_by_one_but_leaves_out(tmp_path: Path) -> None:
    files = {f"references/{n}.md": f"# {n}\n" for n in ("setup", "tuning", "limits", "history")}
    body = "The [setup](references/setup.md) and [tuning](references/tuning.md) notes; the rest sit in `references/`.\n"
    _, findings = check(_skill(tmp_path, body, files=files), "--no-cache")
    hits = [(f["path"], f["message"]) for f in findings if f["code"] == "SK213"]
    assert len(hits) == 1 and hits[0][0] == "skills/probe-gpus/references/history.md"
    assert "references/ one by one but not these (2 files: history.md, limits.md)" in hits[0][1]


def test_a_mirror_whose_skill_md_links_to_a_skill_is_checked_once(tmp_path: Path) -> None:
    root = _skill(tmp_path, "Read [the notes](notes/setup.md) and mind `/home/ana/runs/`.\n")
    (root / "skills" / "probe-gpus" / "notes").mkdir()
    (root / "skills" / "probe-gpus" / "notes" / "setup.md").write_text("# Setup\n", encoding="utf-8")
    mirror = root / ".gemini" / "skills" / "probe-gpus"
    mirror.mkdir(parents=True)
    (mirror / "SKILL.md").symlink_to("../../../skills/probe-gpus/SKILL.md")
    other = root / "skills" / "notes-only"
    other.mkdir()
    (other / "SKILL.md").symlink_to("../probe-gpus/notes/setup.md")  # a link to other markdown: a skill of its own
    _, findings = check(root, "--no-cache")
    assert [(f["code"], f["path"]) for f in findings if f["code"] == "SK216"] == [
        ("SK216", "skills/probe-gpus/SKILL.md")
    ]
    assert not [f for f in findings if f["path"].startswith(".gemini/") or f["code"] in ("SK114", "SK211")]
    assert any(f["path"] == "skills/notes-only/SKILL.md" for f in findings)  # no frontmatter: checked as a skill


def test_paths_from_the_plugin_root_and_in_the_user_s_project_are_not_missing(tmp_path: Path) -> None:
    plugin = tmp_path / "plugins" / "garden-kit"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (plugin / ".claude-plugin" / "plugin.json").write_text('{"name": "garden-kit"}\n', encoding="utf-8")
    (plugin / "agents").mkdir()
    (plugin / "agents" / "planter.md").write_text("---\nname: planter\ndescription: Plants.\n---\n\nPlant.\n")
    skill = plugin / "skills" / "plan-bed"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: plan-bed\ndescription: Plans a garden bed. Use when a user asks what to plant where.\n---\n\n"
        "# Plan a bed\n\nHand the planting to `agents/planter.md`. Read the user's `.claude/garden-context.md` "
        "first when their project keeps one.\n",
        encoding="utf-8",
    )
    (tmp_path / ".claude").mkdir()  # the tree has its own .claude/ folder: the skill's path is still the user's
    (tmp_path / ".claude" / "settings.json").write_text("{}\n", encoding="utf-8")
    _, findings = check(tmp_path, "--no-cache")
    assert [f for f in findings if f["code"] == "SK206"] == []
    (skill / "SKILL.md").write_text(
        (skill / "SKILL.md").read_text(encoding="utf-8") + "\nThen `agents/harvester.md` picks.\n", encoding="utf-8"
    )
    _, findings = check(tmp_path, "--no-cache")
    assert [(f["code"], f["line"]) for f in findings if f["code"] == "SK206"] == [("SK206", 10)]  # still missing


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(list(argv))
        except SystemExit as exc:  # --help
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def test_messages_on_a_foreign_tree_speak_of_that_tree(tmp_path: Path) -> None:
    script = (
        "import argparse\n\np = argparse.ArgumentParser()\np.add_argument('--style', choices=['apa'])\np.parse_args()\n"
    )
    root = _skill(tmp_path, "Run `python scripts/cite.py --colour red`.\n", files={"scripts/cite.py": script})
    rc, out, err = _run("check", "--root", str(root), "--no-cache", "--select", "DR301")
    assert rc == 1 and "--colour is not an option of skills/probe-gpus/scripts/cite.py" in out
    assert "(its options: --help, --style; truth: skills/probe-gpus/scripts/cite.py)" in out
    assert "launcher" not in err and "trainer" not in err and "reinforcement_learning" not in out + err
    explained = _run("explain", "DR301")[1]
    assert "mgpu-lab" not in explained.split("DR3xx:")[0] and "DESIGN.md" not in explained
    helped = _run("check", "--help")[1]
    assert "spec,claude,links,drift" in " ".join(helped.split()) and "house layout" in helped
