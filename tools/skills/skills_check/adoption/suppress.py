"""Suppressions: the stage between the rules and the report (parse -> model -> rules -> suppress -> report).

Two ways to hide a finding a team has judged and accepted:

- inline, in a comment the file's own syntax has (the parsers record comments in the model; this module
  reads only the ones that start with ``skills-check:``):

  - markdown: ``<!-- skills-check: disable-next-line SK101,SK105 -- reason -->``; a comment inside a
    code fence or an indented code block is code, not a comment;
  - RST: ``.. skills-check: disable-next-line DR301 -- reason``;
  - YAML frontmatter: a whole line ``# skills-check: disable-next-line SK103 -- reason``;

  with the actions ``disable-next-line CODES`` (the next non-blank line after the comment),
  ``disable CODES`` ... ``enable [CODES]`` (the lines between; to the end of the file when never
  enabled) and ``disable-file CODES`` (the whole file). JSON has no comments: per-file ignores cover it.
- per file, in ``pyproject.toml``: ``[tool.skills-check.per-file-ignores]`` maps globs to codes (or code
  prefixes), as ruff's ``per-file-ignores`` does.

A suppression names its codes (a bare one is SU001), names codes that exist (SU003), and silences
something (SU002: an unused one is reported, so suppressions cannot outlive the findings they hid).
SU002 is judged only for codes that ran (a ``--select`` that leaves a code out leaves its suppressions
alone), and carries a fix removing the unused codes (or the comment, and the ``enable`` ending its block).
A per-file-ignores glob matching no path and hiding nothing is SU004. Per-file ignores hide SU001-SU004 too.
``check --fix`` never writes a suppression; ``check --add-suppressions`` does (add.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import Comment, ConfigError, Finding, Fix, Project, TextEdit
from ..problems import CoreCode, problem

PREFIX = "skills-check:"
ACTIONS = ("disable-next-line", "disable", "enable", "disable-file")
CONFIG_KEY = "per-file-ignores"

# The suppression stage's own findings (core, always known), each named where it is raised.
NO_CODE = CoreCode(
    "SU001",
    "suppression names no code",
    "An inline suppression (`skills-check: disable-next-line`, `disable` or `disable-file`) names no "
    "rule code. A bare suppression would hide every finding, today's and tomorrow's, so it hides "
    "nothing: name the codes, e.g. `<!-- skills-check: disable-next-line CODE -- why -->` with the rule's code.",
)
UNUSED = CoreCode(
    "SU002",
    "unused suppression",
    "An inline suppression names a code that has no finding where it applies (as ruff's unused-noqa, "
    "RUF100). The finding it once hid was fixed or moved: remove the code from the comment, or the "
    "comment; `check --fix` does (the finding carries that fix). Judged only for codes that ran "
    "(`--select`, `--ignore` and profiles leave the others alone).",
)
MALFORMED = CoreCode(
    "SU003",
    "malformed suppression",
    "A comment starting with `skills-check:` is not a suppression the checker understands: an action "
    "other than disable-next-line, disable, enable or disable-file, or a code no rule has "
    "(`cli.py explain` lists them).",
)
GLOB_UNMATCHED = CoreCode(
    "SU004",
    "per-file-ignores glob matches nothing",
    "(warning) A glob of `[tool.skills-check.per-file-ignores]` matches no file or folder of the checked "
    "tree: a typo (`doc/*.rst` for `docs/*.rst`) or a file since removed. It hides nothing; fix the glob "
    "or remove the entry.",
)
SUPPRESSION_CODES: tuple[CoreCode, ...] = (
    NO_CODE,
    UNUSED,
    MALFORMED,
    GLOB_UNMATCHED,
)

_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class Directive:
    """One parsed ``skills-check:`` comment: where it is, what it does, which codes."""

    path: str
    line: int
    end_line: int
    col: int
    action: str
    codes: tuple[str, ...]


@dataclass
class Hidden:
    """How many findings each mechanism hid (the summary says so)."""

    inline: int = 0
    per_file: int = 0

    def note(self) -> str | None:
        parts = [
            f"{n} by {what}"
            for n, what in ((self.inline, "inline suppressions"), (self.per_file, "per-file-ignores"))
            if n
        ]
        return f"{self.inline + self.per_file} finding(s) hidden: {', '.join(parts)}" if parts else None


@dataclass
class _Scope:
    directive: Directive
    code: str
    first: int
    last: int  # inclusive
    used: bool = False
    closer: Directive | None = None  # the `enable` that ends a `disable` block


@dataclass
class _File:
    scopes: list[_Scope] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the document's text, by line


def documents(project: Project) -> Iterator[Any]:
    """Every parsed markdown and RST document of the project (skills, docs, linked pages)."""
    for skill in project.skills:
        yield skill.skill_md
        yield from skill.files.values()
    yield from project.rst.values()
    yield from project.linked.values()


def parse(path: str, comment: Comment, known: set[str]) -> tuple[Directive | None, list[Finding]]:
    """The directive a comment holds (None when it is not one of ours or is malformed), and its problems."""
    text = " ".join(comment.text.split())
    if not text.startswith(PREFIX):
        return None, []
    body, _, _reason = text[len(PREFIX) :].partition(" -- ")
    words = [w for w in _SPLIT.split(body.strip()) if w]
    at = (path, comment.line, comment.col)
    if not words or words[0] not in ACTIONS:
        got = words[0] if words else "nothing"
        return None, [
            problem(MALFORMED, *at, f"`{PREFIX}` comment with action {got!r}; use one of {', '.join(ACTIONS)}")
        ]
    action, codes = words[0], [w.upper() for w in words[1:]]
    if codes and codes[-1] == "--":
        codes.pop()
    out: list[Finding] = []
    unknown = [c for c in codes if c not in known]
    if unknown:
        out.append(
            problem(
                MALFORMED, *at, f"suppression names unknown code(s) {', '.join(unknown)} (`cli.py explain` lists them)"
            )
        )
    kept = tuple(c for c in codes if c in known)
    if not codes and action != "enable":
        out.append(
            problem(
                NO_CODE,
                *at,
                f"`{action}` names no code: a suppression names the codes it hides, "
                f"e.g. `{PREFIX} {action} CODE -- why`",
            )
        )
    return Directive(path, comment.line, comment.end_line, comment.col, action, kept), out


def _next_line(lines: list[str], after: int) -> int:
    """The 1-based number of the first non-blank line after line ``after`` (past the end when none)."""
    n = after
    while n < len(lines) and not lines[n].strip():
        n += 1
    return n + 1


def scopes_of(doc: Any, known: set[str]) -> _File:
    """The line ranges each code is suppressed over in one document, and its malformed suppressions."""
    out = _File()
    lines = doc.text.split("\n")
    end = max(len(lines), 1)
    open_blocks: dict[str, Directive] = {}
    starts: dict[str, int] = {}
    out.lines = lines
    for comment in sorted(doc.comments, key=lambda c: (c.line, c.col)):
        directive, problems = parse(doc.path, comment, known)
        out.problems += problems
        if directive is None:
            continue
        if directive.action == "disable-next-line":
            target = _next_line(lines, directive.end_line)
            out.scopes += [_Scope(directive, c, target, target) for c in directive.codes]
        elif directive.action == "disable-file":
            out.scopes += [_Scope(directive, c, 1, end) for c in directive.codes]
        elif directive.action == "disable":
            for c in directive.codes:
                if c not in open_blocks:
                    open_blocks[c], starts[c] = directive, directive.line
        else:  # enable: the named codes, or every open block
            for c in list(directive.codes or open_blocks):
                if c in open_blocks:
                    out.scopes.append(_Scope(open_blocks.pop(c), c, starts.pop(c), directive.line, closer=directive))
    out.scopes += [_Scope(d, c, starts[c], end) for c, d in open_blocks.items()]
    return out


def glob_match(pattern: str, path: str) -> bool:
    """``path`` (repository-relative, POSIX) matches ``pattern``: ``*`` and ``?`` within one path segment,
    ``**`` across segments; a pattern without ``/`` matches the file's name in any folder."""
    pattern = pattern.strip().removeprefix("./")
    if "/" not in pattern:
        path = path.rsplit("/", 1)[-1]
    regex = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            regex.append(".*")
            i += 2
        else:
            regex.append({"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i])))
            i += 1
    return re.fullmatch("".join(regex), path) is not None


def per_file_ignores(config: dict[str, Any], known: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The configured (glob, codes) pairs, validated: a table of globs to lists of codes or code prefixes.
    Raises ConfigError (``model.ConfigError``: one line, with the line of the glob when it can be found)."""
    table = config.get(CONFIG_KEY)
    if table is None:
        return []
    line = config.get("_lines", {}).get(CONFIG_KEY, 1)
    where = f"[tool.skills-check.{CONFIG_KEY}]"
    if not isinstance(table, dict):
        raise ConfigError(f'{where} must be a table: "glob" = ["CODE", ...]', line=line, key=CONFIG_KEY)
    known = [k.upper() for k in known]
    out = []
    for glob, codes in table.items():
        line = config.get("_glob_lines", {}).get(glob, line)
        if not isinstance(codes, list) or not all(isinstance(c, str) and c.strip() for c in codes) or not codes:
            raise ConfigError(f"{where} {glob!r} must be a non-empty list of codes", line=line, key=CONFIG_KEY)
        bad = [c for c in codes if not any(k.startswith(c.strip().upper()) for k in known)]
        if bad:
            import difflib  # only for a code that is not known: a check without such a typo never loads it

            near = [n for n in (difflib.get_close_matches(bad[0].strip().upper(), known, n=1),) if n]
            hint = f"; did you mean {near[0][0]}?" if near else ""
            raise ConfigError(
                f"{where} {glob!r} names unknown code(s) {', '.join(bad)}{hint} (`cli.py explain` lists them)",
                line=line,
                key=CONFIG_KEY,
            )
        out.append((glob, tuple(c.strip().upper() for c in codes)))
    return out


def unmatched_globs(
    project: Project, ignores: Sequence[tuple[str, tuple[str, ...]]], hid: Iterable[str] = ()
) -> list[Finding]:
    """SU004 (a warning) for each per-file-ignores glob that matches no file or folder of the tree and hid no
    finding (``hid``: the globs that did; a finding may be about a path that is missing): a typo in a glob
    hides nothing and says nothing otherwise."""
    hid = set(hid)
    paths = project.paths | project.files | {d.path for d in documents(project)}
    lines = project.config.get("_glob_lines", {})
    line = project.config.get("_lines", {}).get(CONFIG_KEY, 1)
    return [
        problem(
            GLOB_UNMATCHED,
            "pyproject.toml",
            lines.get(glob, line),
            1,
            f"[tool.skills-check.{CONFIG_KEY}] {glob!r} matches no file or folder of the tree; it hides nothing",
            severity="warning",
        )
        for glob, _codes in ignores
        if glob not in hid and not any(glob_match(glob, p) for p in paths)
    ]


def _ignored_per_file(f: Finding, ignores: list[tuple[str, tuple[str, ...]]]) -> bool:
    return any(f.code.upper().startswith(codes) and glob_match(glob, f.loc.path) for glob, codes in ignores)


def apply(
    project: Project,
    findings: list[Finding],
    active: set[str],
    known: set[str],
    ignores: Sequence[tuple[str, tuple[str, ...]]] = (),
) -> tuple[list[Finding], Hidden]:
    """The findings left after per-file ignores and inline suppressions, plus the suppressions' own findings
    (SU001-SU004) among ``active`` codes; ``known`` is every code a suppression may name. Per-file ignores
    hide the suppression stage's own findings as they hide any other."""
    hidden = Hidden()
    ignores = list(ignores)
    kept = [f for f in findings if not _ignored_per_file(f, ignores)]
    hidden.per_file = len(findings) - len(kept)
    hid = {
        g for f in findings for g, codes in ignores if f.code.upper().startswith(codes) and glob_match(g, f.loc.path)
    }
    files = {doc.path: scopes_of(doc, known) for doc in documents(project) if getattr(doc, "comments", None)}
    out: list[Finding] = []
    for f in kept:
        hit = [s for s in files.get(f.loc.path, _File()).scopes if s.code == f.code and s.first <= f.loc.line <= s.last]
        for s in hit:
            s.used = True
        if hit:
            hidden.inline += 1
        else:
            out.append(f)
    own: list[Finding] = []
    for path, parsed in files.items():
        own += [p for p in parsed.problems if p.code in active]
        if UNUSED.code in active:
            own += _unused(path, parsed, active)
    if GLOB_UNMATCHED.code in active:
        own += unmatched_globs(project, ignores, hid)
    visible = [f for f in own if not _ignored_per_file(f, ignores)]
    hidden.per_file += len(own) - len(visible)
    out += visible
    out.sort(key=lambda f: (f.loc.path, f.loc.line, f.loc.col, f.code, f.message))
    return out, hidden


def _unused(path: str, parsed: _File, active: set[str]) -> list[Finding]:
    """SU002 for each code of a suppression that hid nothing, with a fix removing the code from the comment
    (the whole comment, and the `enable` that ends its block, when none of its codes is used)."""
    unused = [s for s in parsed.scopes if not s.used and s.code in active]
    out = []
    for s in unused:
        f = problem(
            UNUSED,
            path,
            s.directive.line,
            s.directive.col,
            f"unused suppression: no {s.code} finding where this `{s.directive.action}` applies; remove {s.code} from it",
        )
        f.fix = _removal(path, parsed, s.directive, {u.code for u in unused if u.directive == s.directive})
        out.append(f)
    return out


def _whole_lines(lines: list[str], d: Directive) -> bool:
    """The comment fills its lines (nothing else is written on them), so removing the lines removes only it."""
    if not 0 < d.line <= d.end_line <= len(lines):
        return False
    first, last = lines[d.line - 1].strip(), lines[d.end_line - 1].strip()
    return first.startswith(("<!--", "..", "#")) and (not first.startswith("<!--") or last.endswith("-->"))


def _delete(lines: list[str], path: str, d: Directive) -> TextEdit:
    """Delete the comment's lines, and the blank line after it when a blank line (or the file's start) is
    before it too: what ``--add-suppressions`` inserted goes away without a trace."""
    end = d.end_line
    before_blank = d.line == 1 or not lines[d.line - 2].strip()
    if before_blank and end < len(lines) - 1 and not lines[end].strip():
        end += 1
    return TextEdit(path, d.line, end, ())


def _removal(path: str, parsed: _File, d: Directive, unused: set[str]) -> Fix | None:
    """The fix of an unused suppression: drop the unused codes from a one-line comment, or drop the comment
    (and the `enable` of its block, when that names no other code) when it names no used code."""
    lines = parsed.lines
    if not _whole_lines(lines, d):
        return None
    left = [c for c in d.codes if c not in unused]
    if left:
        if d.line != d.end_line:
            return None
        new = _with_codes(lines[d.line - 1], d.action, left)
        if new is None:
            return None
        edits = (TextEdit(path, d.line, d.line, (new,)),)
        return Fix(f"remove {', '.join(sorted(unused))} from the unused suppression", edits)
    edits_: list[TextEdit] = [_delete(lines, path, d)]
    closers = {s.closer for s in parsed.scopes if s.directive == d and s.closer is not None}
    for closer in closers:
        ends_others = any(s.closer == closer and s.directive != d for s in parsed.scopes)
        if not ends_others and set(closer.codes) <= set(d.codes) and _whole_lines(lines, closer):
            edits_.append(_delete(lines, path, closer))
    return Fix("remove the unused suppression", tuple(edits_))


def _with_codes(line: str, action: str, codes: list[str]) -> str | None:
    """``line`` (a one-line suppression) naming ``codes`` instead of the codes it names."""
    m = re.search(rf"({re.escape(PREFIX)}\s*{re.escape(action)}\s+)([A-Za-z0-9_,\s]*?)(\s+--\s|\s*-->|\s*$)", line)
    if m is None:
        return None
    return line[: m.start(2)] + ",".join(codes) + line[m.end(2) :]
