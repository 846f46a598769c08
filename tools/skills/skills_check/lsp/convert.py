"""The checker's model in the Language Server Protocol's terms: findings -> diagnostics, fixes -> text
edits, rules -> hover text. Pure functions over the model and ``lsprotocol`` types; the server
(``lsp.py``) owns the session. Lines are 0-based here, 1-based in the model; columns are converted
between code points (the model) and the client's position encoding (UTF-16 unless negotiated) by
pygls' ``PositionCodec``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import PositionCodec

from ..model import Finding, Fix, Loc
from ..rules.registry import Rule

SOURCE = "skills-check"
_QUOTES = "`'\""
_TRAILING = "`'\",.;:)]}|"
CODE_RE = re.compile(r"[A-Z]{2}\d{3}")

Lines = Sequence[str]  # a file's lines as the checker read them (newlines normalized, without "\n")


def rel_path(root: Path, uri: str) -> str | None:
    """The repository-relative POSIX path of a ``file:`` URI inside ``root`` (resolved), else None.

    Only the path's text is compared (its folder resolved, so a root reached through a link still
    matches); nothing is read. Whether the file may be read is the loader's business (``inputs.inside``).
    """
    fs = to_fs_path(uri) if uri.startswith("file:") else None
    if not fs:
        return None
    path = Path(os.path.abspath(fs))
    for candidate in (path, Path(os.path.realpath(path.parent)) / path.name):
        try:
            rel = candidate.relative_to(root).as_posix()
        except ValueError:
            continue
        return rel if rel != "." else None
    return None


def uri_of(root: Path, rel: str) -> str:
    return from_fs_path(str(root / rel)) or (root / rel).as_uri()


def split_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def token_span(line: str, col: int) -> tuple[int, int]:
    """The code-point span (0-based, end exclusive) a finding at 1-based ``col`` of ``line`` marks: it starts
    at ``col`` and covers the word there (a quoted or backticked span whole), or, at a blank, the rest of
    the line's text."""
    start = min(max(col - 1, 0), len(line))
    end = start
    while end < len(line) and not line[end].isspace():
        end += 1
    if end > start and line[start] not in _QUOTES:
        while end > start + 1 and line[end - 1] in _TRAILING:
            end -= 1
    if end == start:  # at a blank or past the end: the rest of the line's text
        end = max(start, len(line.rstrip()))
    return start, end


def _range(lines: Lines, line: int, start: int, end: int, codec: PositionCodec) -> types.Range:
    return codec.range_to_client_units(lines, types.Range(types.Position(line, start), types.Position(line, end)))


def loc_range(loc: Loc, lines: Lines | None, codec: PositionCodec) -> types.Range:
    """The range a location marks in its file (its token; the position alone when the text is unknown)."""
    line = loc.line - 1
    if lines is None or line >= len(lines):
        pos = types.Position(line, max(loc.col - 1, 0))
        return types.Range(pos, pos)
    start, end = token_span(lines[line], loc.col)
    return _range(lines, line, start, end, codec)


SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning}


def diagnostic(
    root: Path, finding: Finding, lines_of: Callable[[str], Lines | None], codec: PositionCodec
) -> types.Diagnostic:
    """A finding as a diagnostic: its range, code, severity and message; where the truth lives in
    another place, a related location there."""
    related = None
    truth = finding.truth
    if truth is not None and (truth.path, truth.line) != (finding.loc.path, finding.loc.line):
        related = [
            types.DiagnosticRelatedInformation(
                location=types.Location(
                    uri=uri_of(root, truth.path), range=loc_range(truth, lines_of(truth.path), codec)
                ),
                message=f"source of truth: {truth}",
            )
        ]
    return types.Diagnostic(
        range=loc_range(finding.loc, lines_of(finding.loc.path), codec),
        message=finding.message,
        severity=SEVERITY.get(finding.severity, types.DiagnosticSeverity.Error),
        code=finding.code,
        source=SOURCE,
        related_information=related,
    )


def text_edits(
    fix: Fix, lines_of: Callable[[str], Lines | None], codec: PositionCodec, newline: Callable[[str], str]
) -> dict[str, list[types.TextEdit]]:
    """A fix's line edits (the ones ``check --fix`` applies) as LSP text edits, by repository path.

    A model edit replaces lines ``start``..``end`` (1-based, inclusive; ``end = start - 1`` inserts): here
    the range from the start of line ``start`` to the start of the line after ``end``. When that line is
    past the text (the edit reaches its end, which has no newline after it), the range runs from the end
    of the line before ``start`` to the end of the text, and each new line comes after a newline. Either
    way the result is the text ``check --fix`` writes. A path whose text cannot be read gets no edits.
    """
    out: dict[str, list[types.TextEdit]] = {}
    for e in fix.edits:
        lines = lines_of(e.path)
        if lines is None:
            continue
        nl = newline(e.path)
        first = e.start - 1
        after = max(e.end, e.start - 1)  # the line after the replaced ones (0-based)
        if after < len(lines):
            rng = types.Range(types.Position(first, 0), types.Position(after, 0))
            new = "".join(f"{line}{nl}" for line in e.lines)
        else:
            end = types.Position(len(lines) - 1, len(lines[-1]))
            if first > 0:
                start = types.Position(first - 1, len(lines[first - 1]))
                new = "".join(f"{nl}{line}" for line in e.lines)
            else:
                start = types.Position(0, 0)
                new = nl.join(e.lines)
            rng = codec.range_to_client_units(lines, types.Range(start, end))
        out.setdefault(e.path, []).append(types.TextEdit(range=rng, new_text=new))
    return out


def explain(rule: Rule) -> str:
    """What ``cli.py explain CODE`` prints, as hover markdown."""
    return f"**{rule.code}** ({rule.name}, {rule.severity})\n\n{rule.explanation.strip()}"


def key_rules(rules: Iterable[Rule], key: str) -> list[Rule]:
    """The rules that name frontmatter ``key`` (dotted for nested keys) in their one-line summary."""
    parts = key.split(".")
    names = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]  # metadata.author, then metadata
    for name in names:
        hits = [r for r in rules if r.func is not None and f"`{name}`" in r.summary]
        if hits:
            return hits
    return []


def key_hover(key: str, rules: list[Rule]) -> str:
    if not rules:
        return f"Frontmatter `{key}`: no rule reads this key on its own."
    lines = [f"Frontmatter `{key}` is checked by:", ""]
    lines += [f"- **{r.code}** ({r.name}, {r.profile}): {r.summary}" for r in rules]
    return "\n".join(lines)


def frontmatter_key_at(lines: Lines, key_lines: dict[str, int], line: int, char: int) -> str | None:
    """The dotted frontmatter key whose name is under 0-based (``line``, ``char``), else None."""
    for key, at in key_lines.items():
        if at - 1 != line or line >= len(lines):
            continue
        text = lines[line]
        name = key.rsplit(".", 1)[-1]
        start = text.find(name)
        if start >= 0 and start <= char <= start + len(name):
            return key
    return None


def word_at(line: str, char: int) -> str:
    """The run of letters and digits around code point ``char``."""
    start = end = min(max(char, 0), len(line))
    while start > 0 and line[start - 1].isalnum():
        start -= 1
    while end < len(line) and line[end].isalnum():
        end += 1
    return line[start:end]


def contains(rng: types.Range, pos: types.Position) -> bool:
    after_start = (pos.line, pos.character) >= (rng.start.line, rng.start.character)
    before_end = (pos.line, pos.character) <= (rng.end.line, rng.end.character)
    return after_start and before_end


def overlaps(a: types.Range, b: types.Range) -> bool:
    return not (
        (a.end.line, a.end.character) < (b.start.line, b.start.character)
        or (b.end.line, b.end.character) < (a.start.line, a.start.character)
    )
