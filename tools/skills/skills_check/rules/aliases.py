"""DR4xx: native discovery aliases: `.agents/skills/<name>` per skill, `.claude/skills` -> `.agents/skills`."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ..model import Finding, Loc, Project
from .common import finding, names_known
from .frontmatter import alias_points_to
from .registry import rule

CLAUDE_TARGET = "../.agents/skills"


def _expected(skill_dir: str) -> str:
    """The relative link target from `.agents/skills/<name>` to the skill folder."""
    return posixpath.relpath(skill_dir, ".agents/skills")


def _norm(target: str) -> str:
    return posixpath.normpath(target.replace("\\", "/").strip()) if target else target


@rule(
    "DR401",
    "alias-missing",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): a relative symlink .agents/skills/<name> per skill",
)
def alias_missing(project: Project) -> Iterator[Finding]:
    """Every skill has a relative link `.agents/skills/<name>` -> `../../skills/<audience>/<slug>`.

    Every skill has `.agents/skills/<name>` (Codex discovery).
    """
    for skill in project.skills:
        name = skill.name
        if name and name not in project.aliases:
            line = skill.skill_md.frontmatter_lines.get("name", 1)
            yield finding(
                alias_missing,
                f"no discovery alias .agents/skills/{name} -> {_expected(skill.dir)} (Codex finds skills there)",
                skill.skill_md.path,
                line,
            )


@rule(
    "DR402",
    "alias-target",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): a relative symlink .agents/skills/<name> per skill",
)
def alias_target(project: Project) -> Iterator[Finding]:
    """`.agents/skills/<name>` is a relative link to `../../skills/<audience>/<slug>` of the skill with that name.

    A Windows checkout's one-line file holding the target counts.
    """
    by_name: dict[str, list] = {}
    for s in project.skills:
        if s.name:
            by_name.setdefault(s.name, []).append(s)
    for name, target in sorted(project.aliases.items()):
        group = by_name.get(name)
        if not group:
            continue
        if target and any(alias_points_to(project, name, s) for s in group):
            continue  # it links to a skill of that name; a second folder with the name is SK114's (the copy)
        skill = group[0]
        want = _expected(skill.dir)
        if target == "":
            yield finding(
                alias_target,
                f"is a real folder, not a link to {want}",
                f".agents/skills/{name}",
                1,
                truth=Loc(skill.skill_md.path, 1, 1),
            )
        elif _norm(target) != _norm(want):
            yield finding(
                alias_target,
                f"links to {target}, expected {want} (a relative link)",
                f".agents/skills/{name}",
                1,
                truth=Loc(skill.skill_md.path, skill.skill_md.frontmatter_lines.get("name", 1), 1),
            )


@rule(
    "DR403",
    "alias-stale",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): a relative symlink .agents/skills/<name> per skill",
)
def alias_stale(project: Project) -> Iterator[Finding]:
    """Every entry in `.agents/skills/` is named after a skill's frontmatter `name`."""
    if not names_known(project):
        return
    names = {s.name for s in project.skills if s.name}
    for name, target in sorted(project.aliases.items()):
        if name not in names:
            yield finding(
                alias_stale,
                f"no skill is named {name!r} (link target {target or 'a folder'}); rename or remove the alias",
                f".agents/skills/{name}",
                1,
            )


@rule(
    "DR404",
    "claude-skills",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): .claude/skills links to .agents/skills",
)
def claude_skills(project: Project) -> Iterator[Finding]:
    """`.claude/skills` is a relative link to `../.agents/skills`.

    It is how Claude Code discovers the skills.
    """
    if not project.skills:
        return
    target = project.claude_skills
    if target is None:
        yield finding(
            claude_skills,
            f"missing: .claude/skills should link to {CLAUDE_TARGET} (Claude Code finds skills there)",
            ".claude/skills",
            1,
        )
    elif target == "":
        yield finding(claude_skills, f"is a real folder; make it a link to {CLAUDE_TARGET}", ".claude/skills", 1)
    elif _norm(target) != _norm(CLAUDE_TARGET):
        yield finding(claude_skills, f"links to {target}, expected {CLAUDE_TARGET}", ".claude/skills", 1)
