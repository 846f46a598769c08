"""Which lines of a file a Sphinx ``literalinclude`` shows, from its options (pure: text in, lines out).

Follows Sphinx's order: ``:start-at:``/``:start-after:``, then ``:end-at:``/``:end-before:``, then
``:lines:`` (counted in what is left), then ``:dedent:``. Each shown line keeps its line number in the
file, so code taken from it is located there. ``:prepend:``/``:append:`` text is not in the file and
is left out; options that only change how the block looks (``:linenos:``, ``:caption:`` ...) change
nothing here.
"""

from __future__ import annotations

import textwrap

Lines = list[tuple[int, str]]  # (1-based line number in the included file, text)


class IncludeError(ValueError):
    """The options select nothing Sphinx would show (Sphinx fails the build on these too)."""


def _start(lines: Lines, options: dict[str, str]) -> Lines:
    if "start-at" in options and "start-after" in options:
        raise IncludeError("both :start-at: and :start-after: given")
    for key, keep in (("start-at", 0), ("start-after", 1)):
        if key in options:
            needle = options[key]
            for i, (_, text) in enumerate(lines):
                if needle in text:
                    return lines[i + keep :]
            raise IncludeError(f":{key}: text {needle!r} is not in the file")
    return lines


def _end(lines: Lines, options: dict[str, str]) -> Lines:
    if "end-at" in options and "end-before" in options:
        raise IncludeError("both :end-at: and :end-before: given")
    for key, keep in (("end-at", 1), ("end-before", 0)):
        if key in options:
            needle = options[key]
            for i, (_, text) in enumerate(lines):
                if needle in text:
                    return lines[: i + keep]
            raise IncludeError(f":{key}: text {needle!r} is not in the shown lines")
    return lines


def _line_numbers(spec: str, total: int) -> list[int]:
    """``1,3,5-10,20-`` -> 0-based indexes into ``total`` lines (Sphinx's line spec)."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (p.strip() for p in part.split("-", 1))
                first, last = int(lo) if lo else 1, int(hi) if hi else total
                if first > last:
                    raise ValueError
                out.extend(range(first - 1, last))
            else:
                out.append(int(part) - 1)
        except ValueError:
            raise IncludeError(f":lines: {spec!r} is not a line list like 1,3,5-10,20-") from None
    if not out or min(out) < 0 or max(out) >= total:
        raise IncludeError(f":lines: {spec!r} is outside the {total} shown line(s)")
    return out


def _dedent(lines: Lines, value: str) -> Lines:
    if not value.strip():
        texts = textwrap.dedent("\n".join(t for _, t in lines)).split("\n")
        return [(n, t) for (n, _), t in zip(lines, texts)]
    try:
        cols = int(value)
    except ValueError:
        raise IncludeError(f":dedent: {value!r} is not a number") from None
    return [(n, t[min(cols, len(t) - len(t.lstrip())) :]) for n, t in lines]


def shown_lines(text: str, options: dict[str, str]) -> Lines:
    """The lines of ``text`` a literalinclude with ``options`` shows; ``IncludeError`` when none."""
    lines = list(enumerate(text.split("\n"), start=1))
    if text.endswith("\n"):
        lines.pop()
    lines = _end(_start(lines, options), options)
    if "lines" in options:
        lines = [lines[i] for i in _line_numbers(options["lines"], len(lines))]
    if "dedent" in options:
        lines = _dedent(lines, options["dedent"])
    return lines


def runs(lines: Lines) -> list[tuple[int, str]]:
    """Shown lines as runs of consecutive file lines: (first line number, text)."""
    out: list[tuple[int, list[str]]] = []
    for n, t in lines:
        if out and out[-1][0] + len(out[-1][1]) == n:
            out[-1][1].append(t)
        else:
            out.append((n, [t]))
    return [(first, "\n".join(texts)) for first, texts in out]
