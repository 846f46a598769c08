"""Quoted outputs in the skills and docs, paired with the commands that print them.

A document marks a quote of what a command prints (a refusal, a verdict, a warning) with a marker naming the
command, right before the quote:

- markdown: an HTML comment, on its own line or inline before the quote (a list item, a sentence):
  ``<!-- output-of: mgpu-lab train --rl_library rl_games --task Toy-Cartpole-v0 --checkpoint <rsl_rl:Toy-Cartpole-v0> -->``
- RST: a comment on its own line, or as the first thing of a list item: ``.. output-of: COMMAND``

``output-of (exit N):`` also states the command's exit status (2 for a refusal).

The marker quotes the *first code* after it (an inline literal or a code block, as the checker's parsers read
them). The command is what a user types (``mgpu-lab train``, ``mgpu-lab train_multigpu``, ``python
.../nccl_probe.py``), with placeholders in angle brackets for files the test makes (:data:`PLACEHOLDERS`).
What the command prints (stdout and stderr) must contain the quote: each line of the quote matches within one
line of the output, where ``...`` in the quote stands for any text, runs of whitespace count as one
space (RST wraps inline literals), and ``PATH`` stands for the file a placeholder made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mgpu_testing import REPO

#: placeholder -> what it means, for the test that makes it (``<LIBRARY:TASK>`` is a checkpoint trained here)
PLACEHOLDERS = {
    "<LIBRARY:TASK>": "the newest checkpoint of a one-iteration CPU run of LIBRARY (rsl_rl, rl_games, skrl) on TASK",
    "<crafted>": "a torch file whose unpickling would open a file (io.open): what a malicious checkpoint does",
    "<skrl-jax-pickle>": "a pickle in skrl's own JAX checkpoint format (agent_500.pickle)",
    "<empty-dir>": "an empty folder (a --log_root where no run ever logged)",
    "<hang-run>": "the run folder of a rehearsed hang: two gloo ranks, --rehearse_fault hang:1:2 (mgpu_testing.flight)",
}
#: the word a quote uses for the path a placeholder made
PATH_WORD = "PATH"

_EXIT = r"output-of(?:\s+\(exit\s+(\d+)\))?:"
_MD_MARKER = re.compile(r"<!--\s*" + _EXIT + r"\s*(.+?)\s*-->")
_RST_MARKER = re.compile(r"^(\s*(?:[-*+]\s+)?)\.\.\s+" + _EXIT + r"\s*(.+?)\s*$")
_PLACEHOLDER = re.compile(r"<([^<>\s]+)>")


@dataclass(frozen=True)
class Quote:
    """A marked quote: where it is, the command that prints it, the text quoted."""

    path: str  # repository-relative
    line: int  # the marker's line
    command: str
    text: str
    kind: str  # "block" | "inline"
    exit: int | None = None  # the exit status the marker states, if it states one

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


Marker = tuple[int, int, str, "int | None"]  # line, column, command, exit status


def markers(path: str, text: str) -> list[Marker]:
    """(line, column, command, exit status or None) of every marker in a document (1-based)."""
    if not path.endswith(".rst"):
        return _markdown_markers(text)
    found: list[Marker] = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = _RST_MARKER.match(line)
        if m:
            found.append((number, len(m.group(1)) + 1, m.group(3), _status(m.group(2))))
    return found


def _markdown_markers(text: str) -> list[Marker]:
    """Markers in markdown's real HTML comments (markdown-it-py's html tokens), never in code that shows one."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.front_matter import front_matter_plugin

    lines = text.splitlines()
    found: list[Marker] = []

    def add(number: int, html: str) -> None:
        for m in _MD_MARKER.finditer(html):
            col = lines[number - 1].find(m.group(0)) + 1 if number <= len(lines) else 1
            found.append((number, max(col, 1), m.group(2), _status(m.group(1))))

    for tok in MarkdownIt("commonmark").enable("table").use(front_matter_plugin).parse(text):
        if tok.type == "html_block" and tok.map:
            for offset, html in enumerate(tok.content.splitlines()):
                add(tok.map[0] + 1 + offset, html)
        elif tok.type == "inline" and tok.map:
            number = tok.map[0] + 1
            for child in tok.children or []:
                if child.type in ("softbreak", "hardbreak"):
                    number += 1
                elif child.type == "html_inline":
                    add(number, child.content)
    return found


def _status(text: str | None) -> int | None:
    return None if text is None else int(text)


def pair(path: str, marks: list[Marker], code: list) -> tuple[list[Quote], list[str]]:
    """Each marker with the first code (``code``: the parsers' items with line, col, text, kind) after it;
    problems for markers with no code after them, or with another marker first."""
    quotes: list[Quote] = []
    problems: list[str] = []
    ordered = sorted(code, key=lambda c: (c.line, c.col))
    for i, (line, col, command, status) in enumerate(marks):
        after = [c for c in ordered if (c.line, c.col) > (line, col)]
        nxt = marks[i + 1] if i + 1 < len(marks) else None
        if not after or (nxt is not None and (nxt[0], nxt[1]) < (after[0].line, after[0].col)):
            problems.append(f"{path}:{line}: output-of marker quotes nothing (no code before the next marker)")
            continue
        quotes.append(Quote(path, line, command, after[0].text, after[0].kind, status))
    return quotes, problems


def collect(files: list[Path], read_code) -> tuple[list[Quote], list[str]]:
    """Every marked quote in ``files``; ``read_code(path)`` gives a file's code items (the checker's parsers)."""
    quotes: list[Quote] = []
    problems: list[str] = []
    for file in files:
        rel = file.relative_to(REPO).as_posix()
        marks = markers(rel, file.read_text(encoding="utf-8"))
        if marks:
            found, bad = pair(rel, marks, read_code(file))
            quotes += found
            problems += bad
    return quotes, problems


def _pattern(quoted_line: str) -> re.Pattern[str]:
    parts = [re.escape(" ".join(p.split())) for p in quoted_line.strip().split("...")]
    return re.compile(".*?".join(parts))


def mismatch(quote_text: str, output: str, *, block: bool) -> str | None:
    """None when the quote matches within a line of ``output`` (a block: each of its lines, each within its own
    line); else the first part that does not. An inline quote is one line however the document wraps it. The
    order of a block's lines is not compared: stdout and stderr reach a test through separate pipes."""
    lines = [" ".join(line.split()) for line in output.splitlines()]
    wanted = [q for q in quote_text.splitlines() if q.strip()] if block else [quote_text]
    for q in wanted:
        pattern = _pattern(q)
        if not any(pattern.search(line) for line in lines):
            return q
    return None


def placeholders(command: str) -> list[str]:
    """The placeholder names in a marker's command (without brackets), in order."""
    return _PLACEHOLDER.findall(command)
