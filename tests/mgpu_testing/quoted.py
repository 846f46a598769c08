"""Quoted outputs in the skills and docs, paired with the commands that print them.

A document marks a quote of what a command prints (a refusal, a verdict, a warning) with a marker naming the
command, right before the quote:

- markdown: an HTML comment, on its own line or inline before the quote (a list item, a sentence):
  ``<!-- output-of: isaaclab train --rl_library rl_games --task Toy-Cartpole-v0 --checkpoint <rsl_rl:Toy-Cartpole-v0> -->``
- RST: a comment on its own line, or as the first thing of a list item: ``.. output-of: COMMAND``

The marker quotes the *first code* after it (an inline literal or a code block, as the checker's parsers read
them). The command is what a user types (``isaaclab train``, ``isaaclab train_multigpu``, ``python
.../nccl_probe.py``), with placeholders in angle brackets for files the test makes (:data:`PLACEHOLDERS`).
What the command prints (stdout and stderr) must contain the quote: each line of the quote matches within one
line of the output, in order, where ``...`` in the quote stands for any text, runs of whitespace count as one
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
}
#: the word a quote uses for the path a placeholder made
PATH_WORD = "PATH"

_MD_MARKER = re.compile(r"<!--\s*output-of:\s*(.+?)\s*-->")
_RST_MARKER = re.compile(r"^(\s*(?:[-*+]\s+)?)\.\.\s+output-of:\s*(.+?)\s*$")
_PLACEHOLDER = re.compile(r"<([^<>\s]+)>")


@dataclass(frozen=True)
class Quote:
    """A marked quote: where it is, the command that prints it, the text quoted."""

    path: str  # repository-relative
    line: int  # the marker's line
    command: str
    text: str
    kind: str  # "block" | "inline"

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def markers(path: str, text: str) -> list[tuple[int, int, str]]:
    """(line, column, command) of every marker in a document (1-based)."""
    found: list[tuple[int, int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if path.endswith(".rst"):
            m = _RST_MARKER.match(line)
            if m:
                found.append((number, len(m.group(1)) + 1, m.group(2)))
        else:
            found.extend((number, m.start() + 1, m.group(1)) for m in _MD_MARKER.finditer(line))
    return found


def pair(path: str, marks: list[tuple[int, int, str]], code: list) -> tuple[list[Quote], list[str]]:
    """Each marker with the first code (``code``: the parsers' items with line, col, text, kind) after it;
    problems for markers with no code after them, or with another marker first."""
    quotes: list[Quote] = []
    problems: list[str] = []
    ordered = sorted(code, key=lambda c: (c.line, c.col))
    for i, (line, col, command) in enumerate(marks):
        after = [c for c in ordered if (c.line, c.col) > (line, col)]
        nxt = marks[i + 1] if i + 1 < len(marks) else None
        if not after or (nxt is not None and (nxt[0], nxt[1]) < (after[0].line, after[0].col)):
            problems.append(f"{path}:{line}: output-of marker quotes nothing (no code before the next marker)")
            continue
        quotes.append(Quote(path, line, command, after[0].text, after[0].kind))
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
    """None when the quote matches within a line of ``output`` (a block: each of its lines, in order); else the
    first part that does not. An inline quote is one line however the document wraps it."""
    lines = [" ".join(line.split()) for line in output.splitlines()]
    at = 0
    wanted = [q for q in quote_text.splitlines() if q.strip()] if block else [quote_text]
    for q in wanted:
        pattern = _pattern(q)
        for i in range(at, len(lines)):
            if pattern.search(lines[i]):
                at = i + 1
                break
        else:
            return q
    return None


def placeholders(command: str) -> list[str]:
    """The placeholder names in a marker's command (without brackets), in order."""
    return _PLACEHOLDER.findall(command)
