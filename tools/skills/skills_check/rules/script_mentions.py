"""The scripts a skill names as "Run `scripts/...`" in its markdown, found once per skill.

SK208 (structure.py) checks that each exists, SK209 that each entry script is named; SK206 (repo_paths.py)
leaves them to those.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..model import MarkdownDoc, Project, Skill
from .common import (
    per_doc,
    skill_docs,
)

RUN_SCRIPT_RE = re.compile(r"\bRun\s+`([^`\n]+)`", re.IGNORECASE)


def script_mentions(project: Project, skill: Skill) -> list[tuple[MarkdownDoc, int, int, str]]:
    """(doc, line, col, path) for every "Run `...scripts/...`" in the skill's markdown (once per skill)."""
    found: list[tuple[MarkdownDoc, int, int, str]] = per_doc(
        project, "script-mentions", skill, lambda: list(_each_script_mention(skill))
    )
    return found


def _each_script_mention(skill: Skill) -> Iterator[tuple[MarkdownDoc, int, int, str]]:
    for doc in skill_docs(skill):
        text = doc.text
        if "scripts/" not in text:
            continue  # no token can name a script
        line, counted = 1, 0  # the line at offset ``counted`` (matches come in order: count each stretch once)
        for m in _run_matches(text):
            for token in m.group(1).split():
                token = token.strip("'\"")
                if token.startswith("scripts/") or "/scripts/" in token:
                    start = m.start(1)
                    line += text.count("\n", counted, start)
                    counted = start
                    col = start - (text.rfind("\n", 0, start) + 1) + 1
                    yield doc, line, col, token
                    break


def _run_matches(text: str) -> Iterator[re.Match[str]]:
    """``RUN_SCRIPT_RE.finditer(text)``, the pattern tried only where "run" is written (in any case): a scan by
    ``str.find`` instead of the pattern at every offset."""
    lower = text.lower()
    if len(lower) != len(text):  # a character whose lower case is longer: offsets differ, scan as written
        yield from RUN_SCRIPT_RE.finditer(text)
        return
    end = 0
    pos = lower.find("run")
    while pos >= 0:
        if pos >= end:  # matches do not overlap, as finditer's
            m = RUN_SCRIPT_RE.match(text, pos)  # (its \b sees the text before ``pos``)
            if m is not None:
                yield m
                end = m.end()
        pos = lower.find("run", pos + 1)


def script_path(skill: Skill, token: str) -> str:
    return skill.join(token) if token.startswith("scripts/") else posixpath.normpath(token)
