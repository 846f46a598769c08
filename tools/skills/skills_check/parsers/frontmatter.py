"""A skill's YAML frontmatter, read as data: PyYAML's safe loader (C-accelerated where installed), anchors and
aliases refused before anything is built, every key located at its line and column, duplicate keys and the
node count bounded; a frontmatter that cannot be read is one problem, and the frontmatter rules stay quiet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model import MarkdownDoc
from ..problems import (
    DUPLICATE_KEY,
    NOT_A_MAPPING,
    YAML_ALIASES,
    YAML_ERROR,
    CoreCode,
    problem,
)
from .quick import plain_mapping

if TYPE_CHECKING:
    import yaml


def _safe_loader() -> Any:
    """libyaml's parser when PyYAML has it, else the pure-Python one."""
    import yaml  # PyYAML: imported for the first frontmatter parsers.quick cannot read (see the module's doc)

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


MAX_YAML_NODES = 10_000  # frontmatter nodes walked; a skill's frontmatter has a few dozen


def _frontmatter_failed(doc: MarkdownDoc, kind: CoreCode, line: int, col: int, message: str) -> None:
    """Report a frontmatter that cannot be read once; the frontmatter rules then stay quiet."""
    doc.problems.append(problem(kind, doc.path, line, col, message))
    doc.frontmatter = {}
    doc.frontmatter_error = True


def _yaml_error(doc: MarkdownDoc, exc: yaml.YAMLError, first_line: int) -> None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = first_line + (mark.line if mark else 0)
    col = (mark.column + 1) if mark else 1
    reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    _frontmatter_failed(doc, YAML_ERROR, line, col, f"frontmatter YAML does not parse: {reason}")


def _refuses_anchors(doc: MarkdownDoc, content: str, first_line: int, loader_class: Any) -> bool:
    """IN013 (and True) when the YAML uses an anchor or alias; read from the parser's events, before any
    node is built."""
    import yaml  # PyYAML: for frontmatter parsers.quick leaves to it (see the module's doc)

    for event in yaml.parse(content, Loader=loader_class):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            mark = event.start_mark
            _frontmatter_failed(
                doc,
                YAML_ALIASES,
                first_line + mark.line,
                mark.column + 1,
                "frontmatter uses a YAML anchor or alias (&name / *name); skill frontmatter "
                "is plain key: value pairs, so it is not read",
            )
            return True
    return False


def _walk_keys(doc: MarkdownDoc, node: Any, first_line: int) -> list[tuple[str, int, int, int]] | None:
    """Record the line of every key (dotted for nested maps) in ``doc.frontmatter_lines``; the repeated keys
    (key, line, column, first line), or None when the map is too large or too deep to read."""
    import yaml  # PyYAML: for frontmatter parsers.quick leaves to it (see the module's doc)

    walked = 0
    duplicates: list[tuple[str, int, int, int]] = []

    def walk(n: Any, prefix: str, depth: int) -> bool:
        nonlocal walked
        walked += 1
        if walked > MAX_YAML_NODES or depth > 50:
            return False
        if isinstance(n, yaml.SequenceNode):
            return all(walk(v, prefix, depth + 1) for v in n.value)
        if not isinstance(n, yaml.MappingNode):
            return True
        seen: dict[str, int] = {}
        for knode, vnode in n.value:
            if isinstance(knode, yaml.ScalarNode):
                key = f"{prefix}{knode.value}"
                line = first_line + knode.start_mark.line
                if key in seen:
                    duplicates.append((key, line, knode.start_mark.column + 1, seen[key]))
                else:
                    seen[key] = line
                doc.frontmatter_lines.setdefault(key, line)
                if not walk(vnode, key + ".", depth + 1):
                    return False
        return True

    return duplicates if walk(node, "", 0) else None


def read_frontmatter(doc: MarkdownDoc, content: str, first_line: int, loader_class: Any = None) -> None:
    """Parse frontmatter YAML (content starts at ``first_line``) into doc.frontmatter and its lines: plain
    ``key: value`` lines whose values YAML reads as strings without PyYAML (``parsers.quick``), the rest with
    it (``loader_class``: the default is libyaml's loader where PyYAML has it)."""
    plain = plain_mapping(content) if loader_class is None else None
    if plain is not None:
        data, where = plain
        for key, n in where.items():
            doc.frontmatter_lines.setdefault(key, first_line + n)
        doc.frontmatter = data
        return
    _yaml_frontmatter(doc, content, first_line, loader_class or _safe_loader())


def _yaml_frontmatter(doc: MarkdownDoc, content: str, first_line: int, loader_class: Any) -> None:
    """Frontmatter YAML read by PyYAML.

    Safe and bounded: PyYAML's SafeLoader (no Python objects; its libyaml-backed CSafeLoader where PyYAML
    was built with it: the same events, nodes and marks, parsed in C; YAML that does not parse is read
    again by the pure-Python loader, whose error messages and marks the findings use), anchors and
    aliases refused before anything is built (no alias bombs, no self-referencing maps), duplicate keys
    reported.
    """
    import yaml  # PyYAML: for frontmatter parsers.quick leaves to it (see the module's doc)

    try:
        if _refuses_anchors(doc, content, first_line, loader_class):
            return
        loader = loader_class(content)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        if loader_class is not yaml.SafeLoader:
            return _yaml_frontmatter(doc, content, first_line, yaml.SafeLoader)
        _yaml_error(doc, exc, first_line)
        return
    except (RecursionError, MemoryError, ValueError) as exc:
        _frontmatter_failed(doc, YAML_ERROR, first_line, 1, f"frontmatter YAML does not parse: {type(exc).__name__}")
        return
    if node is None:
        doc.frontmatter = {}
        return
    if not isinstance(node, yaml.MappingNode):
        kind = {yaml.SequenceNode: "list", yaml.ScalarNode: "scalar"}.get(type(node), "value")
        _frontmatter_failed(doc, NOT_A_MAPPING, first_line, 1, f"frontmatter is a {kind}, expected key: value pairs")
        return
    duplicates = _walk_keys(doc, node, first_line)
    if duplicates is None:
        _frontmatter_failed(
            doc,
            YAML_ERROR,
            first_line,
            1,
            f"frontmatter is too large or too deep (limit {MAX_YAML_NODES} nodes, depth 50)",
        )
        return
    for key, line, col, first in duplicates:
        doc.problems.append(
            problem(
                DUPLICATE_KEY,
                doc.path,
                line,
                col,
                f"duplicate frontmatter key `{key}` (first at line {first}); YAML keeps the "
                "last value, the reference validator rejects the file",
            )
        )
    try:
        loader = loader_class(content)
        try:
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        _yaml_error(doc, exc, first_line)
        return
    except Exception as exc:  # a constructor may fail on odd input (e.g. huge ints, bad dates)
        _frontmatter_failed(doc, YAML_ERROR, first_line, 1, f"frontmatter YAML does not parse: {exc}")
        return
    doc.frontmatter = data if isinstance(data, dict) else {}
