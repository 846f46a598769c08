"""What the drift rules found to compare, in words for the summary: the NCCL list and its mirrors, and the
commands whose parsers the tree defines (by its tool map, by Isaac Lab's layout, or this project's scripts)."""

from __future__ import annotations

from ..model import Project
from .commands import usable
from .nccl import mirror_tables, truth_list


def drift_inputs(project: Project) -> str:
    """One phrase: the NCCL tables compared and the commands whose flags are judged (or that none were)."""
    parts = []
    truth, mirrors = truth_list(project), mirror_tables(project)
    if truth is not None and mirrors:
        where = ", ".join(f"{doc.path}:{table.line}" for doc, table, _ in mirrors)
        parts.append(f"the NCCL list-table at {truth[0].path}:{truth[1].line} and its mirror at {where}")
    elif truth is not None:
        parts.append(f"the NCCL list-table at {truth[0].path}:{truth[1].line}, no skill table of its settings")
    elif mirrors:
        parts.append("a skill table of NCCL settings, no RST NCCL list-table")
    tools = []
    for key in ("launcher", "trainer"):
        spec = getattr(project, key)
        if spec is not None and usable(spec):
            tools.append(f"the {key} {spec.path}")
    for name, tool in project.tools.items():
        if usable(tool.spec):
            tools.append(f"{name} ({project.tool_sources.get(name, '[tool.skills-check] tools')})")
    parts.append(f"commands of {', '.join(tools)}" if tools else "no command parser")
    return "; ".join(parts)
