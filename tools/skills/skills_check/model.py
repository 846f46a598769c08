"""The checker's model: what the parsers produce and the rules read.

Parsers (markdown, rst, argparse) know file formats and build these objects; rules know only these
objects; the reporter knows only ``Finding``. Paths are repository-relative POSIX strings; lines and
columns are 1-based.
"""

from __future__ import annotations

import bisect
import itertools
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SetupError(Exception):
    """The check cannot start (missing root, unreadable pyproject.toml, bad config): one line, exit 2."""


class ConfigError(SetupError):
    """``[tool.skills-check]`` in ``pyproject.toml`` is wrong: an unknown key or profile, a wrong type, a
    mistyped section. One line naming the key and, where there is one, the nearest valid name; ``check``
    prints it and exits 2, the language server shows it as a diagnostic at ``path``:``line``."""

    def __init__(self, message: str, *, line: int = 1, key: str | None = None, path: str = "pyproject.toml") -> None:
        self.path, self.line, self.key, self.message = path, line, key, message
        super().__init__(f"{path}:{line}: {message}")


@dataclass(frozen=True, order=True)
class Loc:
    """A place in a file: repository-relative path, 1-based line and column."""

    path: str
    line: int = 1
    col: int = 1

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True)
class TextEdit:
    """Replace lines ``start``..``end`` (1-based, inclusive) of ``path`` with ``lines``; ``end = start - 1``
    inserts before ``start``."""

    path: str
    start: int
    end: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Fix:
    """What applying a finding's edits does, and the edits (all in one file or several). ``safe``: the
    edits only copy a source of truth and drop nothing a person wrote, so a bot may apply them unattended
    (``check --fix --only-safe``); otherwise a person reviews them (a placeholder to fill, a row removed)."""

    description: str
    edits: tuple[TextEdit, ...]
    safe: bool = False


@dataclass
class Finding:
    """One problem a rule or the loader reports, where it is, and (for drift) where the truth lives."""

    code: str  # stable rule code, e.g. "SK101"
    message: str  # one line; for drift, names where the truth lives
    loc: Loc
    severity: str = "error"  # "error" | "warning"
    truth: Loc | None = None  # where the source of truth lives (drift rules)
    fix: Fix | None = None  # text edits that resolve it (``check --fix`` applies them)
    hidden: int = 0  # a cap line's count of the findings it stands for (not shown; counted by the summary)


@dataclass
class Heading:
    """A markdown or RST heading: its level, plain text, anchor and line."""

    level: int
    text: str  # plain text of the heading
    anchor: str  # GitHub-style (markdown) or docutils id (rst)
    line: int


@dataclass
class Link:
    """A link or image target as written, with its text and place."""

    target: str  # as written (may carry a #fragment)
    text: str
    line: int
    col: int = 1
    kind: str = "md"  # "md" (markdown link/image), "ref"/"doc" (Sphinx roles, toctree: "doc"), "url" (rst hyperlink)


@dataclass
class Code:
    """Inline code (``kind="inline"``) or a code/literal block (``kind="block"``)."""

    text: str
    line: int  # for blocks: the line of the first content line
    col: int = 1
    kind: str = "inline"
    lang: str | None = None


@dataclass
class Include:
    """A ``literalinclude`` directive as written: the parser records it, the loader reads the file."""

    target: str  # the directive's argument (relative to the page; ``/x`` from the Sphinx source folder)
    line: int  # the directive's line in the page
    col: int = 1
    options: dict[str, str] = field(default_factory=dict)  # :language:, :lines:, :start-after: ... as text


@dataclass
class Comment:
    """A comment as its file's syntax defines it: an HTML comment in markdown (never inside code), a ``#``
    line of YAML frontmatter, an RST comment. ``text`` is without the markers; lines are 1-based, inclusive."""

    text: str
    line: int
    end_line: int
    col: int = 1


@dataclass
class Cell:
    """One table cell: its text, place and the code spans in it."""

    text: str
    line: int
    col: int = 1
    code: list[Code] = field(default_factory=list)  # inline code inside the cell


@dataclass
class Table:
    """A markdown or RST table: header cells, rows of cells, its line and the heading above it."""

    header: list[Cell]
    rows: list[list[Cell]]
    line: int
    title: str | None = None  # list-table title / nearest heading


@dataclass
class MarkdownDoc:
    """A parsed markdown file: frontmatter, headings, links, code, tables, comments and problems."""

    path: str
    text: str
    n_lines: int
    frontmatter: dict[str, Any] | None = None  # None: no frontmatter block
    frontmatter_lines: dict[str, int] = field(default_factory=dict)  # dotted key -> line
    frontmatter_error: bool = False  # it could not be read (one IN01x problem says why; frontmatter rules skip)
    body_start: int = 1  # first line after the frontmatter block
    headings: list[Heading] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    code: list[Code] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)  # HTML comments and frontmatter `#` lines
    problems: list[Finding] = field(default_factory=list)  # unreadable, bad YAML, ...
    readable: bool = True  # False: the file could not be read/decoded (a problem says why); rules skip it


@dataclass
class RstDoc:
    """A parsed RST page: labels, ids, headings, links, code, tables, includes and problems."""

    path: str
    text: str
    n_lines: int
    labels: dict[str, int] = field(default_factory=dict)  # explicit targets `.. _name:` -> line
    ids: set[str] = field(default_factory=set)  # the ids docutils gave sections and targets (HTML #fragments)
    headings: list[Heading] = field(default_factory=list)  # sections; anchor = docutils id
    links: list[Link] = field(default_factory=list)  # :ref:/:doc: targets and external refs
    code: list[Code] = field(default_factory=list)  # inline literals and literal/code blocks
    tables: list[Table] = field(default_factory=list)  # list-tables and plain tables
    includes: list[Include] = field(default_factory=list)  # literalinclude directives (resolved by the loader)
    comments: list[Comment] = field(default_factory=list)  # RST comments (``.. text``)
    problems: list[Finding] = field(default_factory=list)
    readable: bool = True  # False: the file could not be read/decoded (a problem says why); rules skip it


class _Missing:
    """The type of ``MISSING`` (the parse cache encodes it by name and keeps its identity)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()  # an argparse default that was not given


@dataclass
class Option:
    """One argparse option as the script declares it (read statically)."""

    flags: tuple[str, ...]  # option strings, first is the canonical one
    dest: str
    line: int
    col: int = 1
    default: Any = MISSING  # a Python literal, or the source text of a non-literal expression
    choices: tuple[Any, ...] | None = None
    action: str | None = None
    nargs: Any = None
    takes_value: bool = True  # False for store_true/store_false/count/help/version
    help: str | None = None  # the literal help text, when it is one

    @property
    def canonical(self) -> str:
        return self.flags[0]


@dataclass
class ArgSpec:
    """The options one argparse-based script accepts, read statically."""

    path: str
    options: list[Option] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    allow_abbrev: bool = True  # ArgumentParser(allow_abbrev=...) as written
    # None: every option was read. Else why not: the parser is handed to other code that may add
    # options (``add_app_launcher_args(parser)``), or an option's strings are not literals.
    incomplete: str | None = None

    def by_flag(self) -> dict[str, Option]:
        return {flag: opt for opt in self.options for flag in opt.flags}


@dataclass
class Tool:
    """A command the configuration names (``[tool.skills-check.tools]``) and the argparse that defines it."""

    words: tuple[str, ...]  # its command words, e.g. ("mgpu-lab", "train_multigpu")
    spec: ArgSpec
    forwards: str | None = None  # the tool (its command words) that gets the flags this one does not know
    also: tuple[tuple[str, ...], ...] = ()  # other spellings, e.g. ("python", "-m", "mgpu_lab.cli", "train")
    runs_other: tuple[str, ...] = ()  # its options that name another program, which then gets the unknown flags

    @property
    def name(self) -> str:
        return " ".join(self.words)


@dataclass
class Skill:
    """A skill folder: SKILL.md, its other markdown, evals, scripts' texts and convention files."""

    dir: str  # e.g. "skills/user/train-multi-gpu" ("" when the checked root is itself one skill)
    audience: str  # the folder holding the skill folder ("user" under skills/user/; "" for a root skill)
    skill_md: MarkdownDoc
    files: dict[str, MarkdownDoc] = field(default_factory=dict)  # other .md in the skill, by path
    evals_json: str | None = None  # path of evals/evals.json when present
    evals: Any = None  # its parsed JSON (None when absent or unparsable; a problem then says why)
    evals_text: str = ""  # its text (for locations)
    # files an agent reads by convention, not because the markdown names them, by skill-relative path -> text
    # (Codex's agents/openai.yaml)
    convention_files: dict[str, str] = field(default_factory=dict)
    script_texts: dict[str, str] = field(default_factory=dict)  # its scripts' text, by path (never run)
    entry_scripts: list[str] = field(default_factory=list)  # scripts/ files with a shebang or __main__ guard

    def join(self, relpath: str) -> str:
        """``relpath`` (written relative to the skill folder) as a repository-relative path; a skill may be
        the root itself (``dir == ""``)."""
        return posixpath.normpath(posixpath.join(self.dir, relpath))

    @property
    def name(self) -> str | None:
        fm = self.skill_md.frontmatter or {}
        value = fm.get("name")
        return value if isinstance(value, str) else None


@dataclass
class Project:
    """Everything the rules read about the checked tree."""

    root: Path
    config: dict[str, Any]
    skills: list[Skill] = field(default_factory=list)
    rst: dict[str, RstDoc] = field(default_factory=dict)  # by path
    launcher: ArgSpec | None = None
    trainer: ArgSpec | None = None
    torchrun: ArgSpec | None = None  # kept beside the checker (known_tools.json), never read from a .venv
    tools: dict[str, Tool] = field(default_factory=dict)  # configured command words -> tool (see loader)
    # command words -> why the tool is checked (found by the tree's layout); configured tools are not listed
    tool_sources: dict[str, str] = field(default_factory=dict)
    jax_launcher: ArgSpec | None = None  # skrl's JAX launcher (known_tools.json)
    aliases: dict[str, str] = field(default_factory=dict)  # .agents/skills/<name> -> link target
    # ("" when the entry is a real directory, not a link; a Windows checkout's one-line file gives its text)
    claude_skills: str | None = None  # target of the .claude/skills link ("" real dir, None absent)
    orphan_dirs: list[str] = field(default_factory=list)  # folders beside skill folders, with markdown, no SKILL.md
    # Every file and folder of the tree (repository-relative; links leaving the root, .git, .venv,
    # node_modules, _build and __pycache__ left out): what rules ask "does this path exist?".
    paths: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)  # the regular files among ``paths``
    dir_links: dict[str, str] = field(default_factory=dict)  # in-root folder links: link path -> target path
    scripts: dict[str, ArgSpec] = field(default_factory=dict)  # .py files a skill or doc names, by path
    linked: dict[str, Any] = field(default_factory=dict)  # other .md/.rst files the skills and docs link to
    # Files the RST pages show with ``literalinclude``, by path: an RstDoc holding the file's text and one
    # code block per shown run of lines, located in that file (rules read them like any RST page's code)
    included: dict[str, RstDoc] = field(default_factory=dict)
    # Claude Code subagent files (.claude/agents/*.md, plugins/<p>/agents/*.md), by path: their `tools:` lists
    agent_files: dict[str, MarkdownDoc] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # informational lines for the summary
    # lines about the launcher and trainer whose flags the drift rules judge: shown only when those rules run
    drift_notes: list[str] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)  # loader-level findings


def paths_under(ordered: list[str], prefix: str) -> list[str]:
    """The paths of ``ordered`` (sorted) that start with ``prefix``: one range, found by bisection."""
    out = []
    for path in itertools.islice(ordered, bisect.bisect_left(ordered, prefix), None):
        if not path.startswith(prefix):
            break
        out.append(path)
    return out
