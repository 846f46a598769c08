"""Command lines written in docs: logical lines (``\\`` continuations, ``$`` prompts), words with positions.

Words are split the way ``shlex.split(posix=True)`` splits them (quotes, escapes, ``#`` comments), and
each word keeps the line and column where it starts, so findings point at the exact text. Shell
operators (``&&``, ``|``, ``;``, redirections) end a simple command. ``<placeholder>`` is a word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

OPERATORS = ("&&", "||", ";;", "|&", "&>", ">>", ">&", "<<", "|", "&", ";", "(", ")", "<", ">")
SEPARATORS = frozenset({"&&", "||", ";;", "|&", "|", "&", ";", "(", ")"})
PLACEHOLDER_RE = re.compile(r"<[A-Za-z_][^<>\s]*>")
PROMPT_RE = re.compile(r"^\s*(?:\(\S+\)\s*)?[$%]\s+")


@dataclass(frozen=True)
class Word:
    text: str  # the word after quote removal
    line: int
    col: int
    op: bool = False  # a shell operator, not a word


def logical_lines(text: str, first_line: int, cols: list[int] | None = None) -> list[list[tuple[str, int, int]]]:
    """Physical lines joined at trailing backslashes; each logical line is [(segment, line, col0)].

    ``cols`` gives, per physical line, the 1-based column where the text starts in the file.
    """
    out: list[list[tuple[str, int, int]]] = []
    current: list[tuple[str, int, int]] = []
    physical = text.split("\n")
    for i, raw in enumerate(physical):
        col0 = cols[i] if cols and i < len(cols) else 1
        stripped = raw.rstrip()
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            current.append((stripped[:-1] + " ", first_line + i, col0))
            continue
        current.append((raw, first_line + i, col0))
        out.append(current)
        current = []
    if current:
        out.append(current)
    return out


_SPECIAL = frozenset("'\"\\$<>|&;()#")
_PLAIN_WORD_RE = re.compile(r"\S+")


_Char = tuple[str, int, int]  # (character, line, column) in the file


def _chars(segments: list[tuple[str, int, int]]) -> list[_Char]:
    """Every character of the logical line with its position; each segment ends in a space."""
    chars: list[_Char] = []
    for text, line, col0 in segments:
        for j, ch in enumerate(text):
            chars.append((ch, line, col0 + j))
        chars.append((" ", line, col0 + len(text)))
    return chars


def _placeholder_at(chars: list[_Char], i: int) -> str | None:
    """The ``<placeholder>`` starting at ``chars[i]``, if one does."""
    m = PLACEHOLDER_RE.match("".join(c for c, _, _ in chars[i : i + 80]))
    return m.group(0) if m else None


def _operator_at(chars: list[_Char], i: int) -> str | None:
    """The shell operator starting at ``chars[i]`` (a ``<`` that opens a placeholder is none)."""
    rest = "".join(c for c, _, _ in chars[i : i + 3])
    op = next((o for o in OPERATORS if rest.startswith(o)), None)
    if op == "<" and _placeholder_at(chars, i):
        return None
    return op


def _quoted(chars: list[_Char], i: int) -> tuple[str, int]:
    """The text inside the quote opening at ``chars[i]`` and the index after its close.

    ``'...'`` is literal; in ``"..."`` a backslash escapes ``"``, ``\\``, ``$``, a backquote and a newline.
    """
    quote, n = chars[i][0], len(chars)
    out: list[str] = []
    j = i + 1
    while j < n and chars[j][0] != quote:
        if quote == '"' and chars[j][0] == "\\" and j + 1 < n and chars[j + 1][0] in '"\\$`\n':
            j += 1
        out.append(chars[j][0])
        j += 1
    return "".join(out), j + 1


def _closing_paren(chars: list[_Char], i: int) -> int:
    """The index of the ``)`` that closes the ``(`` at ``chars[i]`` (the end when none does)."""
    depth, j, n = 0, i, len(chars)
    while j < n:
        if chars[j][0] == "(":
            depth += 1
        elif chars[j][0] == ")":
            depth -= 1
            if depth == 0:
                break
        j += 1
    return j


def _word_at(chars: list[_Char], i: int) -> tuple[str, bool, int]:
    """The word starting at ``chars[i]``: its text after quote removal, whether it had quotes, the index after it."""
    n = len(chars)
    buf: list[str] = []
    quoted = False  # '' and "" are words too
    while i < n:
        ch = chars[i][0]
        if ch.isspace():
            break
        if ch in "'\"":
            quoted = True
            text, i = _quoted(chars, i)
            buf.extend(text)
            continue
        if ch == "\\" and i + 1 < n:
            buf.append(chars[i + 1][0])
            i += 2
            continue
        if ch == "$" and i + 1 < n and chars[i + 1][0] == "(":
            j = _closing_paren(chars, i + 1)
            buf.extend(c for c, _, _ in chars[i : j + 1])
            i = j + 1
            continue
        if ch == "<":
            placeholder = _placeholder_at(chars, i)
            if placeholder:
                buf.extend(placeholder)
                i += len(placeholder)
                continue
        if ch in "|&;()<>":
            if ch in "<>" and buf and "".join(buf).isdigit():
                buf = []  # "2>": the fd number belongs to the redirection
            break  # an operator ends the word; the caller reads it
        buf.append(ch)
        i += 1
    return "".join(buf), quoted, i


def words(segments: list[tuple[str, int, int]]) -> list[Word]:
    """Split one logical line into words and operators, with their file positions."""
    if not any(ch in _SPECIAL for text, _, _ in segments for ch in text):
        # no quotes, escapes, operators or comments: words are the runs of non-space characters
        return [
            Word(m.group(0), line, col0 + m.start())
            for text, line, col0 in segments
            for m in _PLAIN_WORD_RE.finditer(text)
        ]
    chars = _chars(segments)
    out: list[Word] = []
    i, n = 0, len(chars)
    while i < n:
        ch, line, col = chars[i]
        if ch.isspace():
            i += 1
            continue
        if ch == "#":
            break  # a comment runs to the end of the logical line
        op = _operator_at(chars, i)
        if op:
            out.append(Word(op, line, col, op=True))
            i += len(op)
            continue
        text, quoted, i = _word_at(chars, i)
        if text or quoted:
            out.append(Word(text, line, col))
    return out


def simple_commands(ws: list[Word]) -> list[list[Word]]:
    """Split at ``&&``, ``|``, ``;`` ...; redirections and their targets are dropped."""
    commands: list[list[Word]] = []
    current: list[Word] = []
    skip_next = False
    for w in ws:
        if skip_next:
            skip_next = False
            if not w.op:
                continue
        if w.op:
            if w.text in SEPARATORS:
                if current:
                    commands.append(current)
                current = []
            else:
                skip_next = True  # a redirection: the next word is its target
            continue
        current.append(w)
    if current:
        commands.append(current)
    return commands


def command_lines(
    text: str, first_line: int, cols: list[int] | None = None, *, prompts_only: bool | None = None
) -> list[list[Word]]:
    """Every simple command in a code block or inline code span.

    When some line starts with a ``$``/``%`` prompt, only prompted lines are commands (the rest
    is output), unless ``prompts_only`` says otherwise.
    """
    lines = text.split("\n")
    if prompts_only is None:
        prompts_only = any(PROMPT_RE.match(line) for line in lines)
    kept: list[str] = []
    adjusted = list(cols) if cols else [1] * len(lines)
    prev_continues = False
    for i, line in enumerate(lines):
        m = PROMPT_RE.match(line)
        if m:
            kept.append(" " * m.end() + line[m.end() :])
        elif prompts_only and not prev_continues:
            kept.append("")
        else:
            kept.append(line)
        stripped = kept[-1].rstrip()
        prev_continues = (len(stripped) - len(stripped.rstrip("\\"))) % 2 == 1
    out: list[list[Word]] = []
    for segments in logical_lines("\n".join(kept), first_line, adjusted):
        out.extend(simple_commands(words(segments)))
    return out


@lru_cache(maxsize=4096)
def relative_command_lines(text: str, prompts_only: bool | None = None) -> tuple[tuple[Word, ...], ...]:
    """``command_lines(text, 0, prompts_only=...)``, tokenised once per distinct text: each word's ``line`` is the
    index of its physical line in ``text`` and its ``col`` is 1 + its offset in that line.

    Docs repeat command lines (one script run in every skill): :func:`place` turns a word into the file position
    :func:`command_lines` would give it, for any ``first_line`` and ``cols``.
    """
    return tuple(tuple(ws) for ws in command_lines(text, 0, None, prompts_only=prompts_only))


def place(word: Word, first_line: int, cols: list[int] | None) -> tuple[int, int]:
    """The file (line, column) of a word of :func:`relative_command_lines` in text starting at ``first_line`` whose
    physical lines start at the 1-based file columns ``cols`` (as :func:`command_lines` takes them)."""
    i = word.line
    col0 = cols[i] if cols and i < len(cols) else 1
    return first_line + i, col0 + word.col - 1
