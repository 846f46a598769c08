"""Helpers shared by the rules: findings, paths, anchors, settings and flags found in text."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

from ..model import Code, Finding, Fix, Loc, MarkdownDoc, Project, RstDoc, Skill, TextEdit, paths_under
from .registry import RuleFunc, of


def finding(
    rule: RuleFunc,
    message: str,
    path: str,
    line: int = 1,
    col: int = 1,
    truth: Loc | None = None,
    fix: Fix | None = None,
) -> Finding:
    """A finding of the rule ``rule`` (its function), with its code and default severity (and a fix, when the
    rule has one)."""
    entry = of(rule)
    return Finding(
        code=entry.code,
        message=message,
        loc=Loc(path, max(1, line), max(1, col)),
        severity=entry.severity,
        truth=truth,
        fix=fix,
    )


def edit_between(path: str, old: list[str], new: list[str], description: str, safe: bool = False) -> Fix | None:
    """One TextEdit turning the lines ``old`` of ``path`` into ``new`` (the smallest differing span)."""
    if old == new:
        return None
    a = 0
    while a < min(len(old), len(new)) and old[a] == new[a]:
        a += 1
    b = 0
    while b < min(len(old), len(new)) - a and old[-1 - b] == new[-1 - b]:
        b += 1
    return Fix(description, (TextEdit(path, a + 1, len(old) - b, tuple(new[a : len(new) - b])),), safe)


def cached(project: Project, key: str, make: Callable[[], Any]) -> Any:
    """``make()`` computed once per project (rules share derived views of the model)."""
    store = project.__dict__.setdefault("_rules_cache", {})
    if key not in store:
        store[key] = make()
    return store[key]


def per_doc(project: Project, key: str, doc: object, make: Callable[[], Any]) -> Any:
    """``make()`` computed once per project and document, or skill (several rules read the same view of one)."""
    store: dict[int, tuple[object, Any]] = cached(project, key, dict)
    hit = store.get(id(doc))
    if hit is not None and hit[0] is doc:
        return hit[1]
    value = make()
    store[id(doc)] = (doc, value)  # the document is kept with its value: its id cannot be reused meanwhile
    return value


def files_under(project: Project, prefix: str) -> list[str]:
    """The files of the tree whose path starts with ``prefix``, sorted (a range of the sorted index, found by
    bisection: rules ask this once per skill)."""
    ordered: list[str] = cached(project, "sorted-files", lambda: sorted(project.files))
    return paths_under(ordered, prefix)


# --- documents -------------------------------------------------------------------------------


def skill_docs(skill: Skill) -> Iterator[MarkdownDoc]:
    """SKILL.md and the other readable markdown files of one skill."""
    if skill.skill_md.readable:
        yield skill.skill_md
    for doc in skill.files.values():
        if doc.readable:
            yield doc


def all_skill_docs(project: Project) -> Iterator[tuple[Skill, MarkdownDoc]]:
    for skill in project.skills:
        for doc in skill_docs(skill):
            yield skill, doc


def rst_docs(project: Project) -> Iterator[RstDoc]:
    """The RST pages, then the files they show with literalinclude (their code located in those files)."""
    for doc in [*project.rst.values(), *project.included.values()]:
        if doc.readable:
            yield doc


# This repository's conventions (loader.CONVENTIONS), which a tree adopts in [tool.skills-check]
# ``adopt = [...]`` (or, for skill-metadata, by writing the keys in any skill): options-table (DR200),
# nccl-list (DR100), skill-metadata (SK107-SK109). Rules that encode them report only where adopted.
METADATA_KEYS = ("audience", "status", "owners")


def adopted(project: Project, convention: str) -> bool:
    """Whether the configuration adopts ``convention`` (skill-metadata: or any skill writes one of its keys)."""
    if convention in (project.config.get("adopt") or ()):
        return True
    if convention == "skill-metadata":
        return any(
            isinstance(s.skill_md.frontmatter, dict) and any(k in s.skill_md.frontmatter for k in METADATA_KEYS)
            for s in project.skills
        )
    return False


def docs_dir(project: Project) -> str:
    return str(project.config.get("docs", "docs")).strip("/") or "docs"


def multi_gpu_path(project: Project) -> str:
    """Where the multi-GPU page is expected (``multi_gpu_doc`` in [tool.skills-check] overrides)."""
    return str(project.config.get("multi_gpu_doc") or f"{docs_dir(project)}/source/features/multi_gpu.rst")


def multi_gpu_doc(project: Project) -> RstDoc | None:
    """The RST page that holds the launcher options table and the NCCL workaround list."""
    doc = project.rst.get(multi_gpu_path(project))
    if doc is None:
        for path, candidate in sorted(project.rst.items()):
            if path.endswith("/multi_gpu.rst") or path == "multi_gpu.rst":
                doc = candidate
                break
    return doc if doc is not None and doc.readable else None


def skill_names(project: Project) -> set[str]:
    return {s.name for s in project.skills if s.name}


def names_known(project: Project) -> bool:
    """Whether every skill's frontmatter was read: otherwise a name check would call a real name unknown
    (the unreadable frontmatter is reported once, by the core)."""
    return all(s.skill_md.readable and not s.skill_md.frontmatter_error for s in project.skills)


# --- paths -----------------------------------------------------------------------------------

URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


# The skill's own folder, as skill text may write it: Claude's `{baseDir}` and Claude Code's `${CLAUDE_SKILL_DIR}`.
SKILL_DIR_RE = re.compile(r"^(?:\{baseDir\}|\$\{CLAUDE_SKILL_DIR\}|\$CLAUDE_SKILL_DIR)(?:/|$)")
# Paths written as patterns for the reader to fill in, not as real paths: `<name>`, `{slug}`, `$VAR`,
# `path/to/...`, `...`, globs, `your-file`.
PLACEHOLDER_RE = re.compile(r"<[^<>]*>|\{[^{}]*\}|\$|(?:^|/)path/to(?:/|$)|\.\.\.|[*?]|(?:^|/)your[-_]", re.IGNORECASE)


def skill_dir_relative(target: str) -> str | None:
    """``target`` without its `{baseDir}/` prefix (relative to the skill folder), or None without one."""
    if not target.startswith(("{", "$")):
        return None  # every spelling of the prefix starts so (most spans do not: no pattern run for them)
    m = SKILL_DIR_RE.match(target)
    return target[m.end() :] if m else None


def is_placeholder(target: str) -> bool:
    """Whether a written path is a pattern to fill in (``<name>.md``, ``path/to/file``) rather than a path."""
    return bool(PLACEHOLDER_RE.search(target))


def is_external(target: str) -> bool:
    return bool(URL_RE.match(target)) or target.startswith("//")


def resolve(from_path: str, target: str) -> str:
    """``target`` (as written in ``from_path``) as a normalized repository-relative path."""
    target = unquote(target)
    if target.startswith("/"):
        return posixpath.normpath(target.lstrip("/"))
    return posixpath.normpath(posixpath.join(posixpath.dirname(from_path), target))


def _in_tree(project: Project, relpath: str, index: set[str]) -> bool:
    """Whether ``relpath`` is in the loader's index of the tree (through in-root folder links too)."""
    relpath = posixpath.normpath(relpath)
    if relpath in ("", ".") or relpath.startswith(("../", "/")) or relpath == "..":
        return relpath in ("", ".") and index is project.paths
    if relpath in index:
        return True
    for link, target in project.dir_links.items():  # a path through a link such as .agents/skills/<name>
        if relpath.startswith(link + "/"):
            return _in_tree(project, target + relpath[len(link) :], index) if target != link else False
    return False


def exists(project: Project, relpath: str) -> bool:
    """Whether ``relpath`` names a file or directory inside the checked tree (from the loader's index)."""
    return _in_tree(project, relpath, project.paths)


def is_file(project: Project, relpath: str) -> bool:
    """Whether ``relpath`` names a regular file inside the checked tree (from the loader's index)."""
    return _in_tree(project, relpath, project.files)


def line_col_of(text: str, needle: str, line_hint: int, span: int = 40) -> tuple[int, int]:
    """Line and column of ``needle`` at or after ``line_hint`` (within ``span`` lines); else the hint."""
    lines = text.split("\n")
    start = max(0, line_hint - 1)
    for i in range(start, min(len(lines), start + span)):
        col = lines[i].find(needle)
        if col >= 0:
            return i + 1, col + 1
    return line_hint, 1


# --- anchors ---------------------------------------------------------------------------------


def anchors_of(doc: MarkdownDoc | RstDoc) -> set[str]:
    """Fragments that resolve in ``doc``: heading anchors, and for RST also labels and their ids."""
    found = {h.anchor.lower() for h in doc.headings if h.anchor}
    if isinstance(doc, RstDoc):
        found.update(label.lower() for label in doc.labels)
        found.update(doc.ids)  # docutils' own ids (its make_id), never a copy of its rule
    return found


def find_doc(project: Project, path: str) -> MarkdownDoc | RstDoc | None:
    """The parsed document at ``path`` when the model holds it."""
    if path in project.rst:
        return project.rst[path]
    found = cached(project, "skill-docs-by-path", lambda: _skill_docs_by_path(project)).get(path)
    if found is not None:
        return found
    return project.linked.get(path)  # README.md, CONTRIBUTING.md ...: parsed by the loader


def _skill_docs_by_path(project: Project) -> dict[str, MarkdownDoc]:
    """Each skill document by its path (the first skill's, were two to hold one path), for ``find_doc``."""
    out: dict[str, MarkdownDoc] = {}
    for skill in project.skills:
        out.setdefault(skill.skill_md.path, skill.skill_md)
        for relpath, doc in skill.files.items():
            out.setdefault(relpath, doc)
    return out


# --- NCCL/CUDA settings ----------------------------------------------------------------------

# VAR=value; a value may hold commas (NCCL_DEBUG_SUBSYS=INIT,P2P) but a comma that starts the next
# VAR=value, or a comma followed by a space, ends it. Placeholder values (<iface>, $X) do not match.
SETTING_RE = re.compile(
    r"(?<![A-Za-z0-9_$])((?:NCCL|CUDA)_[A-Z0-9_]+)=((?:[A-Za-z0-9_.:/+-]+)(?:,(?![A-Z][A-Z0-9_]*=)[A-Za-z0-9_.:/+-]+)*)"
)

# Diagnostic and location knobs: they change what NCCL/CUDA report, which devices a process sees or
# where the toolkit lives, never how ranks communicate, so they are not workarounds and need not be
# in the list.
DIAGNOSTIC_VARS = frozenset(
    {
        "NCCL_DEBUG",  # log level (INFO shows the chosen transport)
        "NCCL_DEBUG_SUBSYS",  # which subsystems log (INIT,P2P,NET)
        "NCCL_DEBUG_FILE",  # where the log goes
        "CUDA_VISIBLE_DEVICES",  # device selection, not a communication setting
        "CUDA_LAUNCH_BLOCKING",  # synchronous kernel launches, for tracebacks
        "CUDA_HOME",
        "CUDA_PATH",  # where the CUDA toolkit is installed
    }
)


def settings_in(text: str) -> Iterator[tuple[str, str, int]]:
    """(VAR, value, offset) for every NCCL_*/CUDA_* setting written in ``text``."""
    for m in SETTING_RE.finditer(text):
        value = m.group(2).rstrip(".:")
        if value:
            yield m.group(1), value, m.start()


def offset_to_line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def code_items_of(project: Project, doc: MarkdownDoc | RstDoc) -> list[Code]:
    """``code_items(doc)``, computed once per document (the flag and the path rules read every span)."""
    found: list[Code] = per_doc(project, "code-items", doc, lambda: code_items(doc))
    return found


def code_items(doc: MarkdownDoc | RstDoc) -> list[Code]:
    """Inline code and code blocks of ``doc``, table cells' code included, each once."""
    seen: set[tuple[int, int, str, str]] = set()
    out: list[Code] = []
    cell_code = [c for t in doc.tables for row in [t.header, *t.rows] for cell in row for c in cell.code]
    for code in [*doc.code, *cell_code]:
        key = (code.line, code.col, code.kind, code.text)
        if key not in seen:
            seen.add(key)
            out.append(code)
    return out


# --- negative examples -----------------------------------------------------------------------

_NEGATIVE_LABEL_RE = re.compile(
    r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?[*_]*(?:known failure modes?|failure modes?|fail(?:ure)? criteria|anti-?patterns?)"
    r"[*_]*\s*:",
    re.IGNORECASE,
)
_SECTION_LABEL_RE = re.compile(
    r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?[*_]*(?:query|expected behaviou?r|pass criteria|pass/fail criteria|notes?)"
    r"[*_]*\s*:",
    re.IGNORECASE,
)


# the same label anywhere in a text (a line that matches _NEGATIVE_LABEL_RE is found by it, and it finds nothing
# where no line matches: its ``\s*`` may start on a blank line above, never on a line of other text)
_ANY_NEGATIVE_LABEL_RE = re.compile(_NEGATIVE_LABEL_RE.pattern, re.IGNORECASE | re.MULTILINE)


def negative_lines_of(project: Project, doc: MarkdownDoc | RstDoc) -> set[int]:
    """``negative_lines(doc)``, computed once per document."""
    return cached(project, f"negative:{doc.path}", lambda: negative_lines(doc))


def negative_lines(doc: MarkdownDoc | RstDoc) -> set[int]:
    """Lines that describe wrong behavior on purpose ("Known failure modes:" up to the next label or heading).

    Evaluations list the invented flags, paths and settings an agent must not produce; rules that
    judge written commands, paths and settings skip these lines.
    """
    if not isinstance(doc, MarkdownDoc):
        return set()
    lowered = doc.text.lower()
    if "fail" not in lowered and "anti" not in lowered:
        return set()  # no line can open a failure-mode list (every label says "fail..." or "anti...")
    if not _ANY_NEGATIVE_LABEL_RE.search(doc.text):
        return set()  # one search of the text: no line is such a label (most that say "fail" have none)
    out: set[int] = set()
    negative = False
    for i, line in enumerate(doc.text.split("\n"), start=1):
        if line.lstrip().startswith("#") or _SECTION_LABEL_RE.match(line):
            negative = False
        if _NEGATIVE_LABEL_RE.match(line):
            negative = True
        if negative:
            out.add(i)
    return out


def folder_named(bare: str, folder: str) -> bool:
    """``folder`` is named by itself (`scripts/`, `scripts`, ./scripts), not only as the start of a longer path
    (`scripts/run.py` names that file, not every file beside it), in ``bare``: the text with every "./" removed."""
    if folder not in bare:  # the regular expression only where the name occurs at all
        return False
    pattern = rf"(?<![\w.-]){re.escape(folder)}(?:/(?![\w.*<{{$-])|(?![\w/-]|\.\w))"
    return re.search(pattern, bare) is not None


#: a glob star or a placeholder in a written path
PATTERN_PART = re.compile(r"\*|\{[^{}/]*\}|<[^<>/]*>")


def _pattern(text: str) -> re.Pattern[str]:
    """A written path pattern as a regular expression: a star or a placeholder stands for one path part."""
    text = text.removeprefix("./")
    out, last = [], 0
    for m in PATTERN_PART.finditer(text):
        out += [re.escape(text[last : m.start()]), "[^/]*" if m[0] == "*" else "[^/]+"]
        last = m.end()
    return re.compile("".join(out) + re.escape(text[last:]))


def written_patterns(docs: list[MarkdownDoc]) -> list[re.Pattern[str]]:
    """The path patterns written in code spans of ``docs`` (a path with a star or a placeholder), as expressions
    a skill-relative path fits."""
    spans = {c.text.strip() for doc in docs for c in doc.code if c.kind == "inline"}
    return [_pattern(t) for t in sorted(spans) if "/" in t and PATTERN_PART.search(t) and " " not in t]


# Files a skill carries that need no mention: its licence and notes for people browsing the repository.
UNLISTED_OK = re.compile(r"^(?:LICEN[CS]E|COPYING|NOTICE|README|CHANGELOG)(?:\.\w+)?$", re.IGNORECASE)
