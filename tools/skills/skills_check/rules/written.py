"""The command lines written in skills and docs, and the tools they run: each written command once, where it
stands (a code block, inline code, a YAML list of arguments), and its invocations, shared by the places that
write the same command. The DR3xx rules (flags.py) judge them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from ..model import Code, MarkdownDoc, Project, RstDoc, Skill
from .commands import Invocation, invocations, usable
from .common import all_skill_docs, cached, code_items_of, negative_lines_of, rst_docs
from .shell import Word, place, relative_command_lines

NOT_SHELL = frozenset(
    {
        "python",
        "py",
        "python3",
        "pycon",
        "yaml",
        "yml",
        "json",
        "jsonc",
        "toml",
        "ini",
        "cfg",
        "rst",
        "md",
        "markdown",
        "diff",
        "c",
        "cpp",
        "cuda",
        "xml",
        "html",
        "javascript",
        "js",
    }
)
YAML = frozenset({"yaml", "yml"})
YAML_ITEM_RE = re.compile(r"^\s*-\s+(?=[^\s\[{\"'#])")  # a plain list item (a Kubernetes ``args:`` entry)
PLACEHOLDER_VALUE_RE = re.compile(r"^(?:<[^<>]+>|\$\{?\w+\}?|[A-Z][A-Z0-9_]*|\.\.\.|…|\{[^{}]*\}|\[[^\[\]]*\])$")
NUMBER_RE = re.compile(r"^-\d+(?:\.\d+)?$")
# words on a line that tie a bare `--flag` to a tool whose options the checker knows
TOOL_TIE_RE = re.compile(
    r"launcher|trainer|train_multigpu|train\.py|mgpu-lab train|torchrun|torch\.distributed\.run"
    r"|\bskrl\b",
    re.IGNORECASE,
)


class _Lines:
    """A document's lines, split when a written command's columns are first asked for (for a finding)."""

    def __init__(self, doc: MarkdownDoc | RstDoc) -> None:
        self.doc = doc

    @cached_property
    def all(self) -> list[str]:
        return self.doc.text.split("\n")


@dataclass
class Written:
    """A command line or bare flag span found in a document.

    ``rel`` holds its words as :func:`shell.relative_command_lines` gives them (shared by every place the same
    text is written): positions relative to the code's text. ``words`` and :meth:`at` give file positions, worked
    out (with the code's column per line) only where a rule asks for them.
    """

    doc: MarkdownDoc | RstDoc
    skill: Skill | None
    rel: tuple[Word, ...]
    inline: bool
    key: tuple[str, bool | None, int]  # (the tokenised text, prompts_only, which simple command): one per text
    code: Code
    lines: _Lines  # the document's lines (for the code's columns)

    @cached_property
    def cols(self) -> list[int]:
        return _content_cols(self.doc, self.code, self.lines.all)

    def at(self, word: Word) -> tuple[int, int]:
        """The file (line, column) of one of ``rel``'s words (or of a word an invocation made from them)."""
        return place(word, self.code.line, self.cols)

    @cached_property
    def words(self) -> list[Word]:
        """The words with their file positions (what :func:`shell.command_lines` gives for this code)."""
        return [Word(w.text, *self.at(w), op=w.op) for w in self.rel]


def _content_cols(doc: MarkdownDoc | RstDoc, code: Code, lines: list[str]) -> list[int]:
    """Per physical line of ``code``, the 1-based file column where its text starts (``lines``: the doc's)."""
    out = []
    for i, part in enumerate(code.text.split("\n")):
        n = code.line - 1 + i
        src = lines[n] if 0 <= n < len(lines) else ""
        start = code.col - 1 if code.kind == "inline" and i == 0 else 0
        probe = part.strip()[:40]
        idx = src.find(probe, start) if probe else -1
        if idx >= 0:
            idx -= len(part) - len(part.lstrip())
        out.append(idx + 1 if idx >= 0 else (code.col if i == 0 else 1))
    return out


def _documents(project: Project) -> Iterator[tuple[MarkdownDoc | RstDoc, Skill | None]]:
    for skill, doc in all_skill_docs(project):
        yield doc, skill
    for rst in rst_docs(project):
        yield rst, None


def _reads_every_command(project: Project) -> bool:
    """Whether the bare-flag rule runs (it reads the flags of every command written, not only the known tools')."""
    return project.torchrun is not None and usable(project.launcher) and usable(project.trainer)


def _may_run_tool(project: Project) -> tuple[re.Pattern[str], tuple[str, ...]] | None:
    """A pattern (with the words it is made of) that every code text that can run a known tool matches (a program word ``invocations`` knows:
    Python, torchrun, Isaac Lab's script, a configured tool's first word), or None where every command is read.

    Splitting a text into shell words is most of what this rule set costs on a large collection, and most
    code (output, other programs' commands) runs none of them: such text is not split."""
    if _reads_every_command(project):
        return None
    names = {"python", "py", "torchrun", "isaaclab"}
    for tool in project.tools.values():
        for words in (tool.words, *tool.also):
            if words:
                names.add(words[0].rsplit("/", 1)[-1])
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    # the words as plain text first (a substring test is much quicker than the pattern on most code)
    return re.compile(rf"(?<![\w.-])(?:{alternatives})"), tuple(sorted(names))


def written_commands(project: Project) -> list[Written]:
    """Every simple command in code blocks and inline code of the skills and RST docs (where only known tools'
    commands are read: those of the code texts that may run one, see ``_may_run_tool``)."""

    def make() -> list[Written]:
        out: list[Written] = []
        may_run = _may_run_tool(project)
        for doc, skill in _documents(project):
            negative = negative_lines_of(project, doc)
            lines = _Lines(doc)
            for code in code_items_of(project, doc):
                if code.line in negative:
                    continue  # a known failure mode: wrong on purpose
                if code.kind == "inline":
                    text, prompts_only, inline = code.text.rstrip("\n").replace("\n", " "), False, True
                else:
                    lang = (code.lang or "").lower() if code.kind == "block" else ""
                    if lang in NOT_SHELL and lang not in YAML:
                        continue
                    text, prompts_only, inline = code.text.rstrip("\n"), None, False
                    if lang in YAML:
                        text = _yaml_items(text)
                if may_run is not None and not (any(w in text for w in may_run[1]) and may_run[0].search(text)):
                    continue
                for k, ws in enumerate(relative_command_lines(text, prompts_only)):
                    out.append(Written(doc, skill, ws, inline, (text, prompts_only, k), code, lines))
        return out

    return cached(project, "written-commands", make)


def _yaml_items(text: str) -> str:
    """A YAML block's plain list items as command lines (marker blanked, columns kept); other lines empty."""
    out = []
    for line in text.split("\n"):
        m = YAML_ITEM_RE.match(line)
        out.append(" " * m.end() + line[m.end() :] if m else "")
    return "\n".join(out)


def all_invocations(project: Project) -> list[tuple[Written, Invocation]]:
    """Each known tool a written command runs. The invocation's words are ``w.rel``'s (place them with ``w.at``):
    one command text in one folder is looked up once, however often it is written."""
    return invocation_table(project)[0]


def invocation_table(project: Project) -> tuple[list[tuple[Written, Invocation]], list[Invocation]]:
    """``all_invocations``, and each distinct invocation once."""

    def make() -> tuple[list[tuple[Written, Invocation]], list[Invocation]]:
        memo: dict[tuple[tuple[str, bool | None, int], tuple[str, ...]], list[Invocation]] = {}
        out: list[tuple[Written, Invocation]] = []
        for w in written_commands(project):
            key = (w.key, (w.skill.dir,) if w.skill is not None else ())
            found = memo.get(key)
            if found is None:
                found = memo[key] = list(invocations(project, list(w.rel), key[1]))
            for inv in found:
                out.append((w, inv))
        return out, [inv for found in memo.values() for inv in found]

    return cached(project, "invocations", make)
