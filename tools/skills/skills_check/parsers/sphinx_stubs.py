"""Stand-ins for Sphinx's directives and roles, so plain docutils parses a Sphinx page (as rstcheck-core's docutils
adapter does): container directives (tab-set, dropdown, ...) parse their content, code blocks keep their language,
``toctree`` and ``literalinclude`` are recorded as nodes of their own, cross-reference roles keep their
targets. The registries are process-global; ``register`` fills them once."""

from __future__ import annotations

import re
from typing import Any

import docutils.frontend
import docutils.utils
from docutils import nodes
from docutils.parsers.rst import Directive, directives, roles


class _AnyOptions(dict):
    """An option_spec that accepts every option (value kept as text)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return directives.unchanged

    def get(self, key: str, default: Any = None) -> Any:
        return directives.unchanged

    def __bool__(self) -> bool:  # docutils reads options only when the spec is truthy
        return True


class toctree_stub(nodes.General, nodes.Element):
    """Holds a toctree's entries as (target, line)."""


class _Nested(Directive):
    """Stand-in for container-like Sphinx directives: the argument is kept as a paragraph, the body parsed."""

    optional_arguments = 1
    final_argument_whitespace = True
    option_spec = _AnyOptions()
    has_content = True

    def run(self) -> list[nodes.Node]:
        node = nodes.container()
        node.source, node.line = self.state_machine.get_source_and_line(self.lineno)
        if self.arguments:
            inl, msgs = self.state.inline_text(self.arguments[0], self.lineno)
            para = nodes.paragraph(self.arguments[0], "", *inl)
            para.source, para.line = node.source, node.line
            node += para
            node += msgs
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


class _LiteralArg(_Nested):
    """Stand-in for object descriptions (``.. envvar:: NAME``): the argument becomes inline code."""

    def run(self) -> list[nodes.Node]:
        node = nodes.container()
        node.source, node.line = self.state_machine.get_source_and_line(self.lineno)
        if self.arguments:
            lit = nodes.literal(self.arguments[0], self.arguments[0])
            lit.line = node.line
            node += nodes.paragraph("", "", lit)
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


class include_stub(nodes.General, nodes.Element):
    """A ``literalinclude`` as written: its argument, options and line (the loader reads the file)."""


class _LiteralInclude(Directive):
    """Stand-in for Sphinx ``literalinclude``: recorded, never read here (the loader reads the file
    with its guards and turns the shown lines into code blocks located in that file)."""

    required_arguments = 1
    final_argument_whitespace = True
    option_spec = _AnyOptions()
    has_content = False

    def run(self) -> list[nodes.Node]:
        node = include_stub()
        node.source, node.line = self.state_machine.get_source_and_line(self.lineno)
        node["target"] = self.arguments[0].strip()
        node["options"] = {str(k): "" if v is None else str(v) for k, v in self.options.items()}
        return [node]


class _Ignored(Directive):
    """Stand-in for directives with nothing to check (autodoc, highlight, ...)."""

    optional_arguments = 10
    final_argument_whitespace = True
    option_spec = _AnyOptions()
    has_content = True

    def run(self) -> list[nodes.Node]:
        return []


class _CodeBlock(Directive):
    """Stand-in for Sphinx ``code-block``/``sourcecode``/``code``: a literal block with its language."""

    optional_arguments = 1
    final_argument_whitespace = False
    option_spec = _AnyOptions()
    has_content = True

    def run(self) -> list[nodes.Node]:
        text = "\n".join(self.content)
        node = nodes.literal_block(text, text)
        if self.arguments:
            node["language"] = self.arguments[0]
        node.source, node.line = self.state_machine.get_source_and_line(self.lineno)
        if self.content:
            try:
                node.line = self.content.info(0)[1] + 1
            except Exception:
                pass
        node["first_line"] = node.line
        return [node]


class _TocTree(Directive):
    """Stand-in for ``toctree``: entries become links to documents."""

    optional_arguments = 0
    option_spec = _AnyOptions()
    has_content = True

    def run(self) -> list[nodes.Node]:
        node = toctree_stub()
        node.source, node.line = self.state_machine.get_source_and_line(self.lineno)
        entries = []
        for i, raw in enumerate(self.content):
            entry = raw.strip()
            if not entry:
                continue
            m = re.match(r"^(.*?)\s*<([^<>]+)>$", entry)
            target = m.group(2) if m else entry
            try:
                line = self.content.info(i)[1] + 1
            except Exception:
                line = node.line or 1
            entries.append((target, line))
        node["entries"] = entries
        return [node]


_NESTED = (
    "tab-set",
    "tab-item",
    "tab-set-code",
    "dropdown",
    "card",
    "grid",
    "grid-item",
    "grid-item-card",
    "tabs",
    "tab",
    "group-tab",
    "only",
    "ifconfig",
    "glossary",
    "hlist",
    "seealso",
    "versionadded",
    "versionchanged",
    "deprecated",
    "versionremoved",
    "todo",
    "centered",
    "div",
    "article-info",
    "button-link",
    "button-ref",
    "card-carousel",
    "margin",
    "sidebar-note",
)
_LITERAL_ARG = (
    "envvar",
    "option",
    "program",
    "describe",
    "object",
    "confval",
    "cmdoption",
    "py:function",
    "py:class",
    "py:method",
    "py:attribute",
    "py:data",
    "py:module",
    "function",
    "class",
    "method",
    "attribute",
    "data",
    "module",
    "py:exception",
    "exception",
)
_IGNORED = (
    "highlight",
    "automodule",
    "autoclass",
    "autofunction",
    "automethod",
    "autoattribute",
    "autodata",
    "autoexception",
    "autosummary",
    "currentmodule",
    "py:currentmodule",
    "index",
    "sectionauthor",
    "codeauthor",
    "moduleauthor",
    "tabularcolumns",
    "productionlist",
    "argparse",
    "click",
    "graphviz",
    "mermaid",
    "plot",
    "include-markdown",
    "mdinclude",
    "jupyter-execute",
    "ipython",
    "bibliography",
    "galleryitem",
    "nbgallery",
    "default-role",
    "default-domain",
)
_CODE = ("code-block", "sourcecode", "code", "code-tab")

_XREF_ROLES = {
    "ref": "ref",
    "doc": "doc",
    "numref": "ref",
    "any": "ref",
    "download": "doc",
    "term": "ref",
    "std:ref": "ref",
    "std:doc": "doc",
    "keyword": "ref",
    "octicon": None,
    "fa": None,
}
_LITERAL_ROLES = (
    "envvar",
    "option",
    "command",
    "program",
    "file",
    "samp",
    "kbd",
    "code",
    "makevar",
    "mimetype",
    "newsgroup",
    "regexp",
    "guilabel",
    "menuselection",
    "abbr",
    "dfn",
    "manpage",
    "py:func",
    "py:class",
    "py:meth",
    "py:mod",
    "py:attr",
    "py:data",
    "py:exc",
    "py:obj",
    "py:const",
    "func",
    "class",
    "meth",
    "mod",
    "attr",
    "data",
    "exc",
    "obj",
    "const",
    "external",
    "issue",
    "pr",
    "user",
    "commit",
    "pypi",
    "confval",
    "std:envvar",
    "std:option",
    "cmd",
    "c:func",
    "cpp:func",
    "c:type",
    "cpp:class",
)
_TITLE_TARGET = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.DOTALL)


def _xref_role(kind: str | None):
    def role(name, rawtext, text, lineno, inliner, options=None, content=None):
        text = docutils.utils.unescape(text)
        m = _TITLE_TARGET.match(text)
        title, target = (m.group(1), m.group(2)) if m else (text, text)
        node = nodes.inline(rawtext, title.lstrip("~!"))
        if kind is not None:
            node["xref_kind"] = kind
            node["xref_target"] = target.strip().lstrip("~!")
            node["xref_line"] = lineno
            node["xref_raw"] = rawtext
        return [node], []

    return role


def _literal_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    text = docutils.utils.unescape(text)
    m = _TITLE_TARGET.match(text)
    shown = m.group(1) if (m and name not in ("samp", "code", "kbd")) else text
    node = nodes.literal(rawtext, shown.lstrip("~!"))
    node["role"] = name
    return [node], []


def register() -> None:
    """Register the Sphinx stand-ins with docutils' process-global registries.

    Called before every document (a few dict stores), so each file is parsed with exactly these
    stand-ins whatever else ran in the process; the checker keeps no state of its own here.
    """
    for name in _NESTED:
        directives.register_directive(name, _Nested)
    for name in _LITERAL_ARG:
        directives.register_directive(name, _LiteralArg)
    for name in _IGNORED:
        directives.register_directive(name, _Ignored)
    for name in _CODE:
        directives.register_directive(name, _CodeBlock)
    directives.register_directive("toctree", _TocTree)
    directives.register_directive("literalinclude", _LiteralInclude)
    for name, kind in _XREF_ROLES.items():
        roles.register_local_role(name, _xref_role(kind))
    for name in _LITERAL_ROLES:
        roles.register_local_role(name, _literal_role)
