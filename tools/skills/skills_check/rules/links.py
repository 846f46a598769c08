"""SK203-SK204: links and #anchors resolve in the checked tree.

A Markdown link's target file and its GitHub heading anchor; an RST ``:doc:``/``:ref:`` target and its docutils
section id or label.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ..model import Finding, Loc, MarkdownDoc, Project, RstDoc
from .common import (
    all_skill_docs,
    anchors_of,
    cached,
    docs_dir,
    exists,
    find_doc,
    finding,
    is_external,
    is_file,
    is_placeholder,
    per_doc,
    resolve,
    rst_docs,
    skill_dir_relative,
)
from .registry import rule
from .repo_paths import (
    REPO_PATH_RE,
    repo_path_codes,
)


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


def _doc_target(project: Project, doc: MarkdownDoc | RstDoc, target: str) -> str:
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


def link_targets(project: Project, doc: MarkdownDoc | RstDoc) -> list[tuple[int, int, str, str, str]]:
    """(line, col, as written, file path, fragment) for every local link in ``doc`` (once per document: SK203,
    SK204 and SK205 read them)."""
    found: list[tuple[int, int, str, str, str]] = per_doc(
        project, "link-targets", doc, lambda: list(_each_link_target(project, doc))
    )
    return found


def _each_link_target(project: Project, doc: MarkdownDoc | RstDoc) -> Iterator[tuple[int, int, str, str, str]]:
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
        inner = skill_dir_relative(path_part)
        if inner is not None:  # `{baseDir}/x`: x in the skill's folder
            folder = _skill_dir_of(project, doc.path)
            path = posixpath.normpath(posixpath.join(folder, inner)) if folder is not None else None
        elif is_placeholder(path_part):
            continue
        else:
            path = resolve(doc.path, path_part) if path_part else doc.path
        if path is not None:
            yield link.line, link.col, target, path, fragment


def _skill_dir_of(project: Project, path: str) -> str | None:
    """The folder of the skill holding the document at ``path`` (None outside every skill)."""
    by_doc = cached(project, "skill-dir-of", lambda: {d.path: s.dir for s, d in all_skill_docs(project)})
    return by_doc.get(path)


@rule(
    "SK203",
    "link-target",
    profile="links",
    cites="CommonMark links and Sphinx :doc: targets resolve in the checked tree",
)
def link_target(project: Project) -> Iterator[Finding]:
    """Every relative link (markdown links, Sphinx :doc:) points at a file or folder that exists.

    Every relative link in the skills' markdown, and every Sphinx `:doc:` target in the docs, exists.
    External URLs are not fetched.
    """
    for doc in _checked_docs(project):
        for line, col, written, path, _ in link_targets(project, doc):
            if not exists(project, path):
                yield finding(
                    link_target, f"link target {written!r} does not exist (resolved to {path})", doc.path, line, col
                )


@rule("SK204", "link-anchor", profile="links", cites="GitHub heading anchors and docutils section ids/labels resolve")
def link_anchor(project: Project) -> Iterator[Finding]:
    """Every `#anchor` in a link names a real heading (GitHub anchors; RST section ids or labels) and every :ref: label exists.

    A `#fragment` (of a link, or of a backticked repository path) names a real heading of the target:
    GitHub anchors for markdown (with `-1` suffixes for repeats), section ids or explicit labels for
    `.rst`. Every `:ref:` label exists in the docs.
    """
    labels = _labels(project)
    for doc in _checked_docs(project):
        for line, col, written, path, fragment in link_targets(project, doc):
            if not fragment or not exists(project, path):
                continue
            target = find_doc(project, path)
            if target is None or not getattr(target, "readable", True):
                continue  # a file the model does not hold: its anchors are unknown
            if fragment.lower() not in anchors_of(target):
                yield finding(
                    link_anchor,
                    f"anchor #{fragment} in {written!r} names no heading in {path}",
                    doc.path,
                    line,
                    col,
                    truth=Loc(path, 1, 1),
                )
        for link in doc.links:
            if getattr(link, "kind", "md") == "ref" and link.target.strip().lower() not in labels:
                yield finding(
                    link_anchor,
                    f":ref: target {link.target!r} is not a label in the docs",
                    doc.path,
                    link.line,
                    link.col,
                )
    for doc, skill, line, col, text in repo_path_codes(project):
        path, _, fragment = text.partition("#")
        if not fragment or not REPO_PATH_RE.match(text):
            continue
        path = posixpath.normpath(path.removeprefix("./"))
        if not exists(project, path) and skill is not None:
            path = skill.join(path)
        target = find_doc(project, path) if exists(project, path) else None
        if target is not None and getattr(target, "readable", True) and fragment.lower() not in anchors_of(target):
            yield finding(
                link_anchor,
                f"anchor #{fragment} in `{text}` names no heading in {path}",
                doc.path,
                line,
                col,
                truth=Loc(path, 1, 1),
            )
