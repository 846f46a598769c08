"""SK206: backticked repository paths exist in the checked tree.

A path may also be the skill's own, or one under the plugin holding it; a span whose text says it is not a claim
(an example, a path the user creates) is left alone.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..model import Finding, MarkdownDoc, Project, RstDoc, Skill
from .common import (
    PATTERN_PART,
    all_skill_docs,
    cached,
    code_items_of,
    exists,
    finding,
    folder_named,
    is_placeholder,
    negative_lines_of,
    rst_docs,
    skill_dir_relative,
    written_patterns,
)
from .registry import rule
from .script_mentions import script_mentions

REPO_PATH_RE = re.compile(r"^(?:\./)?[A-Za-z0-9_.][A-Za-z0-9_.@+-]*/[A-Za-z0-9_./@+-]*(?:#[A-Za-z0-9_.-]+)?$")


class NamedBySkill:
    """Whether SKILL.md names a skill file itself: by its path, by its file name or stem in code
    (`faq-database.md`, `async-defer-await`), by a pattern in code that it fits (`shared/managed-agents-*.md`,
    `{lang}/README.md`, `<topic>/notes.md`), or by naming its folder as a whole (`reference/`)."""

    def __init__(self, doc: MarkdownDoc) -> None:
        self.text = doc.text
        self.bare = doc.text.replace("./", "")
        spans = [c.text.strip() for c in doc.code if c.kind == "inline"]
        self.names = {posixpath.basename(t) for t in spans if t.endswith(".md") and not PATTERN_PART.search(t)}
        self.names |= {f"{t}.md" for t in spans if t and not any(c in t for c in " /.")}  # a file's stem
        self.patterns = written_patterns([doc])

    def __call__(self, inner: str) -> bool:
        folder = posixpath.dirname(inner)
        return (
            inner in self.text
            or posixpath.basename(inner) in self.names
            or any(p.fullmatch(inner) for p in self.patterns)
            or (bool(folder) and folder_named(self.bare, folder))
        )


def is_repo_path(project: Project, path: str, skill: Skill | None) -> bool:
    """Whether a path-like span belongs to this tree: its first component is at the root or in the skill."""
    first = path.split("/", 1)[0]
    if first in (".", "..") or not first:
        return False
    return exists(project, first) or (skill is not None and exists(project, skill.join(first)))


_PathCode = tuple[MarkdownDoc | RstDoc, Skill | None, int, int, str]


def repo_path_codes(project: Project) -> list[_PathCode]:
    """(doc, skill, line, col, text) for every inline code span that may name a path (once per project: SK204,
    SK206 and SK210 read them)."""
    found: list[_PathCode] = cached(project, "repo-path-codes", lambda: list(_each_path_code(project)))
    return found


def _each_path_code(project: Project) -> Iterator[_PathCode]:
    for skill, doc in all_skill_docs(project):
        negative = negative_lines_of(project, doc)
        for code in code_items_of(project, doc):
            if code.kind == "inline" and code.line not in negative:
                text = code.text.strip()
                inner = skill_dir_relative(text)  # `{baseDir}/scripts/x.py`: judged in the skill folder
                yield doc, skill, code.line, code.col, inner if inner is not None else text
    for rst in rst_docs(project):
        for code in code_items_of(project, rst):
            if code.kind == "inline":
                yield rst, None, code.line, code.col, code.text.strip()


# Words before a path that make it an example, a pattern or a file still to be made, not one that exists.
NOT_A_CLAIM_RE = re.compile(
    r"(?i)(?<!\w)(e\.g\.|for example|for instance|such as|example|hypothetical|placeholder|create[sd]?|"
    r"creating|will (?:be )?(?:write|writes|written|create|created|generate|generated|appear|exist)|"
    r"generate[sd]?|writes?|saved? (?:to|as|in)|output (?:to|in)|new file|would|"
    r"(?:do not|don't|never) (?:reference|use|name|cite|link|write)|good|bad|add|copy\b.*\bto)(?!\w)|[✓✗✔✘]"
)


def _not_a_claim(doc: MarkdownDoc | RstDoc, line: int, col: int) -> bool:
    """The words before the span on its line (its sentence) make the path an example or a file to be made."""
    lines = doc.text.split("\n")
    if not 0 < line <= len(lines):
        return False
    before = lines[line - 1][: max(col - 1, 0)].replace("*", "")  # "Do **not** use": the words, not the emphasis
    sentence = re.split(r"(?<!e\.g)(?<!i\.e)[.!?]\s", before)[-1]
    return bool(NOT_A_CLAIM_RE.search(sentence))


@rule(
    "SK206",
    "repo-path",
    profile="links",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): backticked repository paths exist",
)
def repo_path(project: Project) -> Iterator[Finding]:
    """A backticked path whose first folder exists at the root (or in the skill) exists.

    An inline code span that looks like a path (`a/b...`) and whose first component is a top-level
    entry of the checked tree (`docs/`, `source/`, any folder) or, in a skill, an entry of the skill
    folder (`scripts/...`), exists there; a `#anchor` on it is checked by SK204. Spans whose first
    component is nowhere in the tree (`cuda/12.1`, `owner/repo`) are not taken for paths, and spans with
    placeholders or globs (`<dir>`, `*`) are not paths. In a skill, a path that exists relative to the plugin
    holding it (a `.claude-plugin/` folder above) exists, and one under an agent's or CI's settings folder
    (`.claude/`, `.agents/`, `.github/` ...) names the user's project, not this tree. A missing file is
    reported where its folder exists (beside its siblings: a broken reference); a folder (`evidence/`), or a
    file in folders that do not exist, describes a layout still to be made.
    """
    run_named = {
        (doc.path, line, token) for skill in project.skills for doc, line, _, token in script_mentions(project, skill)
    }
    for doc, skill, line, col, text in repo_path_codes(project):
        if not REPO_PATH_RE.match(text):
            continue
        if (doc.path, line, text) in run_named:
            continue  # "Run `scripts/...`": SK208 reports a missing script
        path, _, _ = text.partition("#")
        path = posixpath.normpath(path.removeprefix("./"))
        plugin = _plugin_root(project, skill)
        first = path.split("/", 1)[0]
        in_plugin = plugin is not None and first not in ("", ".", "..") and exists(project, f"{plugin}/{first}")
        if is_placeholder(path) or not (in_plugin or is_repo_path(project, path, skill)):
            continue
        if exists(project, path) or (plugin is not None and exists(project, f"{plugin}/{path}")):
            continue
        if skill is not None and (exists(project, skill.join(path)) or first in USER_PROJECT_FOLDERS):
            continue
        if text.split("#", 1)[0].endswith("/") or not _parent_exists(project, skill, plugin, path):
            continue  # a folder, or a file in folders that do not exist yet: a layout described, not a reference
        if _not_a_claim(doc, line, col):  # read only for a path that would be reported
            continue
        yield finding(repo_path, f"`{text}` names a path that does not exist", doc.path, line, col)


# Folders of the project a skill works in (agents' and CI's settings): a skill that names `.claude/x.md` tells
# the agent to read the user's file there, not one of the tree that holds the skill.
USER_PROJECT_FOLDERS = frozenset({".claude", ".agents", ".codex", ".cursor", ".gemini", ".github", ".vscode"})


def _parent_exists(project: Project, skill: Skill | None, plugin: str | None, path: str) -> bool:
    """Whether the folder holding ``path`` exists where the path may be read from (the root, the skill, the
    plugin holding the skill)."""
    parent = posixpath.dirname(path)
    if not parent or exists(project, parent):
        return True
    return (skill is not None and exists(project, skill.join(parent))) or (
        plugin is not None and exists(project, f"{plugin}/{parent}")
    )


def _plugin_root(project: Project, skill: Skill | None) -> str | None:
    """The plugin that holds the skill (the nearest folder above it with a ``.claude-plugin/`` manifest folder),
    or None: a plugin's skills name its agents and commands from there."""
    folder = posixpath.dirname(skill.dir) if skill is not None else ""
    while folder:
        if exists(project, f"{folder}/.claude-plugin"):
            return folder
        folder = posixpath.dirname(folder)
    return None
