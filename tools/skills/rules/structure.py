"""SK2xx: sections, length, links and anchors, repository paths, scripts and cross-skill names."""

from __future__ import annotations

import os
import posixpath
import re
from typing import Iterator

from model import Finding, Loc, MarkdownDoc, Project, RstDoc, Skill

from .common import (
    all_skill_docs, anchors_of, cached, code_items, docs_dir, exists, find_doc, finding, is_external,
    is_file, names_known, negative_lines_of, resolve, rst_docs, skill_docs, skill_names,
)
from .registry import rule

REQUIRED_SECTIONS = ("When To Use", "Workflow", "Validation", "Maintenance", "References")
MAX_BODY_LINES = 500
CONTENTS_AFTER = 100  # reference files longer than this need a contents list near the top
CONTENTS_WITHIN = 40  # "near the top": within this many lines of the body start
PATH_PREFIXES = ("docs", "scripts", "skills", "tools")
REPO_PATH_RE = re.compile(r"^(?:\./)?(?:docs|scripts|skills|tools)/[A-Za-z0-9_./@+-]*(?:#[A-Za-z0-9_.-]+)?$")
RUN_SCRIPT_RE = re.compile(r"\bRun\s+`([^`\n]+)`", re.IGNORECASE)
SKILL_NAME_RE = re.compile(r"^isaaclab-[a-z0-9]+(?:-[a-z0-9]+)*$")


def _norm(text: str) -> str:
    return " ".join(text.replace("`", "").split()).lower()


@rule("SK201", "required-sections")
def required_sections(project: Project) -> Iterator[Finding]:
    """SKILL.md has the sections When To Use, Workflow, Validation, Maintenance and References."""
    for skill in project.skills:
        doc = skill.skill_md
        if not doc.readable:
            continue
        present = {_norm(h.text) for h in doc.headings}
        for section in REQUIRED_SECTIONS:
            if section.lower() not in present:
                yield finding("SK201", f"SKILL.md has no \"{section}\" section", doc.path, doc.body_start)


@rule("SK202", "body-length")
def body_length(project: Project) -> Iterator[Finding]:
    """The SKILL.md body (after the frontmatter) is under 500 lines; details go to reference files."""
    for skill in project.skills:
        doc = skill.skill_md
        if not doc.readable:
            continue
        body = doc.n_lines - doc.body_start + 1
        if body >= MAX_BODY_LINES:
            yield finding("SK202", f"SKILL.md body is {body} lines; keep it under {MAX_BODY_LINES} and move "
                          "details to reference files", doc.path, doc.body_start + MAX_BODY_LINES - 1)


def _checked_docs(project: Project) -> Iterator[MarkdownDoc | RstDoc]:
    seen: set[str] = set()
    for _, doc in all_skill_docs(project):
        if doc.path not in seen:
            seen.add(doc.path)
            yield doc
    extra = getattr(project, "markdown", None)
    if isinstance(extra, dict):
        for path, doc in sorted(extra.items()):
            if path not in seen and getattr(doc, "readable", True):
                seen.add(path)
                yield doc
    yield from rst_docs(project)


def _labels(project: Project) -> dict[str, tuple[str, int]]:
    def make() -> dict[str, tuple[str, int]]:
        out: dict[str, tuple[str, int]] = {}
        for doc in rst_docs(project):
            for label, line in doc.labels.items():
                out.setdefault(label.lower(), (doc.path, line))
        return out

    return cached(project, "rst-labels", make)


def _doc_target(project: Project, doc: RstDoc, target: str) -> str:
    """The file a Sphinx :doc: target names (relative to the page, or to the source dir with a /)."""
    target = target.strip()
    if target.startswith("/"):
        base = docs_dir(project)
        for candidate in (f"{base}/source{target}", f"{base}{target}"):
            if is_file(project, candidate + ".rst") or is_file(project, candidate):
                return candidate + (".rst" if is_file(project, candidate + ".rst") else "")
        return f"{base}{target}.rst"
    path = resolve(doc.path, target)
    return path if path.endswith(".rst") else path + ".rst"


def _link_targets(project: Project, doc: MarkdownDoc | RstDoc) -> Iterator[tuple[int, int, str, str, str]]:
    """(line, col, as written, file path, fragment) for every local link in ``doc``."""
    for link in doc.links:
        target = link.target.strip()
        kind = getattr(link, "kind", "md")
        if not target or kind in ("url", "ref"):
            continue
        if kind == "doc":
            if target != "self" and not any(ch in target for ch in "*?["):  # toctree self and :glob: patterns
                yield link.line, link.col, target, _doc_target(project, doc, target), ""
            continue
        if is_external(target) or target.startswith("<"):
            continue
        path_part, _, fragment = target.partition("#")
        path = resolve(doc.path, path_part) if path_part else doc.path
        yield link.line, link.col, target, path, fragment


@rule("SK203", "link-target")
def link_target(project: Project) -> Iterator[Finding]:
    """Every relative link (markdown links, Sphinx :doc:) points at a file or folder that exists."""
    for doc in _checked_docs(project):
        for line, col, written, path, _ in _link_targets(project, doc):
            if not exists(project, path):
                yield finding("SK203", f"link target {written!r} does not exist (resolved to {path})",
                              doc.path, line, col)


@rule("SK204", "link-anchor")
def link_anchor(project: Project) -> Iterator[Finding]:
    """Every `#anchor` in a link names a real heading (GitHub anchors; RST section ids or labels) and every :ref: label exists."""
    labels = _labels(project)
    for doc in _checked_docs(project):
        for line, col, written, path, fragment in _link_targets(project, doc):
            if not fragment or not exists(project, path):
                continue
            target = find_doc(project, path)
            if target is None or not getattr(target, "readable", True):
                continue  # a file the model does not hold: its anchors are unknown
            if fragment.lower() not in anchors_of(target):
                yield finding("SK204", f"anchor #{fragment} in {written!r} names no heading in {path}",
                              doc.path, line, col, truth=Loc(path, 1, 1))
        for link in doc.links:
            if getattr(link, "kind", "md") == "ref" and link.target.strip().lower() not in labels:
                yield finding("SK204", f":ref: target {link.target!r} is not a label in the docs",
                              doc.path, link.line, link.col)
    for doc, skill, line, col, text in _repo_path_codes(project):
        path, _, fragment = text.partition("#")
        if not fragment or not REPO_PATH_RE.match(text):
            continue
        path = posixpath.normpath(path.removeprefix("./"))
        if not exists(project, path) and skill is not None:
            path = posixpath.normpath(f"{skill.dir}/{path}")
        target = find_doc(project, path) if exists(project, path) else None
        if target is not None and getattr(target, "readable", True) and fragment.lower() not in anchors_of(target):
            yield finding("SK204", f"anchor #{fragment} in `{text}` names no heading in {path}", doc.path, line, col,
                          truth=Loc(path, 1, 1))


def _linked_files(project: Project, doc: MarkdownDoc) -> set[str]:
    return {path for _, _, _, path, _ in _link_targets(project, doc)}


@rule("SK205", "reference-depth")
def reference_depth(project: Project) -> Iterator[Finding]:
    """Reference files are one level deep: a skill file links only to files SKILL.md links to directly."""
    for skill in project.skills:
        if not skill.skill_md.readable:
            continue
        direct = _linked_files(project, skill.skill_md) | {skill.skill_md.path}
        prefix = skill.dir.rstrip("/") + "/"
        for doc in skill.files.values():
            if not doc.readable:
                continue
            for line, col, written, path, _ in _link_targets(project, doc):
                if path.startswith(prefix) and path.endswith(".md") and path not in direct:
                    yield finding("SK205", f"{written!r} is a second-level reference: link it from SKILL.md "
                                  "or fold it into this file", doc.path, line, col)


def _repo_path_codes(project: Project) -> Iterator[tuple[MarkdownDoc | RstDoc, Skill | None, int, int, str]]:
    for skill, doc in all_skill_docs(project):
        negative = negative_lines_of(project, doc)
        for code in code_items(doc):
            if code.kind == "inline" and code.line not in negative:
                yield doc, skill, code.line, code.col, code.text.strip()
    for doc in rst_docs(project):
        for code in code_items(doc):
            if code.kind == "inline":
                yield doc, None, code.line, code.col, code.text.strip()


@rule("SK206", "repo-path")
def repo_path(project: Project) -> Iterator[Finding]:
    """A backticked path under docs/, scripts/, skills/ or tools/ exists (in the repository or, for scripts/, in the skill)."""
    run_named = {(doc.path, line, token) for skill in project.skills for doc, line, _, token in _script_mentions(skill)}
    for doc, skill, line, col, text in _repo_path_codes(project):
        if not REPO_PATH_RE.match(text):
            continue
        if (doc.path, line, text) in run_named:
            continue  # "Run `scripts/...`": SK208 reports a missing script
        path, _, _ = text.partition("#")
        path = posixpath.normpath(path.removeprefix("./"))
        if exists(project, path):
            continue
        if skill is not None and exists(project, f"{skill.dir}/{path}"):
            continue
        yield finding("SK206", f"`{text}` names a path that does not exist", doc.path, line, col)


def _heading_near_top(doc: MarkdownDoc) -> bool:
    limit = doc.body_start + CONTENTS_WITHIN
    if any("contents" in h.text.lower() and h.line <= limit for h in doc.headings):
        return True
    local = [link for link in doc.links if link.target.startswith("#") and link.line <= limit]
    return len(local) >= 2


@rule("SK207", "reference-contents")
def reference_contents(project: Project) -> Iterator[Finding]:
    """A skill reference file longer than 100 lines opens with a contents list (a Contents heading or in-page links)."""
    for skill in project.skills:
        for doc in skill.files.values():
            if doc.readable and doc.n_lines > CONTENTS_AFTER and not _heading_near_top(doc):
                yield finding("SK207", f"{doc.n_lines} lines and no contents list near the top "
                              f"(a \"Contents\" heading or links to its sections within {CONTENTS_WITHIN} lines)",
                              doc.path, doc.body_start)


def _script_mentions(skill: Skill) -> Iterator[tuple[MarkdownDoc, int, int, str]]:
    """(doc, line, col, path) for every "Run `...scripts/...`" in the skill's markdown."""
    for doc in skill_docs(skill):
        for m in RUN_SCRIPT_RE.finditer(doc.text):
            for token in m.group(1).split():
                token = token.strip("'\"")
                if token.startswith("scripts/") or "/scripts/" in token:
                    line = doc.text.count("\n", 0, m.start(1)) + 1
                    col = m.start(1) - (doc.text.rfind("\n", 0, m.start(1)) + 1) + 1
                    yield doc, line, col, token
                    break


def _script_path(skill: Skill, token: str) -> str:
    return posixpath.normpath(f"{skill.dir}/{token}" if token.startswith("scripts/") else token)


@rule("SK208", "run-script-exists")
def run_script_exists(project: Project) -> Iterator[Finding]:
    """A script named with "Run `scripts/...`" exists in the skill (or at the repository path written)."""
    for skill in project.skills:
        for doc, line, col, token in _script_mentions(skill):
            if not is_file(project, _script_path(skill, token)):
                yield finding("SK208", f"\"Run `{token}`\" names a script that does not exist", doc.path, line, col)


def _entry_scripts(project: Project, skill: Skill) -> Iterator[str]:
    folder = project.root / skill.dir / "scripts"
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith((".", "_")) or not entry.is_file():
            continue
        try:
            with open(entry.path, "rb") as fh:
                head = fh.read(200_000)
        except OSError:
            continue
        if head.startswith(b"#!") or b"__main__" in head:
            yield f"{skill.dir}/scripts/{entry.name}"


@rule("SK209", "script-documented")
def script_documented(project: Project) -> Iterator[Finding]:
    """Every entry script in a skill's scripts/ folder is named in the skill as "Run `scripts/...`"."""
    for skill in project.skills:
        named = {_script_path(skill, token) for _, _, _, token in _script_mentions(skill)}
        for script in _entry_scripts(project, skill):
            if script not in named:
                rel = script[len(skill.dir) + 1:]
                yield finding("SK209", f"{rel} is never named as \"Run `{rel}`\" in the skill's markdown "
                              "(agents run scripts they are told to run)", skill.skill_md.path,
                              skill.skill_md.body_start, truth=Loc(script, 1, 1))


@rule("SK210", "skill-name-ref")
def skill_name_ref(project: Project) -> Iterator[Finding]:
    """A backticked `isaaclab-*` name is the frontmatter name of a skill in this repository."""
    if not names_known(project):
        return
    names = skill_names(project)
    for doc, _, line, col, text in _repo_path_codes(project):
        if SKILL_NAME_RE.match(text) and text not in names:
            yield finding("SK210", f"`{text}` is not the name of any skill here ({', '.join(sorted(names)) or 'none'})",
                          doc.path, line, col)
