"""A baseline: today's findings, recorded so a tree can adopt the checker and fail only on new findings.

``check --write-baseline FILE`` records every finding the check reports; ``check --baseline FILE`` then
leaves out the findings it holds and says how many matched and how many of its entries are gone (fixed).
``--baseline FILE --write-baseline FILE`` shrinks it: only the entries that still match are kept, and a
new finding is never added that way.

A finding is recorded by a fingerprint of its code, its file, its message and the text of its line (not
the line's number), so editing above it or moving it keeps it matched; line and column numbers inside
the message (``multi_gpu.rst:45``) are left out of it for the same reason. Two identical findings in one
file are two entries: a third one is new. The file is sorted JSON without line numbers, so it diffs well
and shrinks as findings are fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..atomic_write import write_atomic
from ..inputs import read_text
from ..model import Finding, Project

TOOL = "skills-check"
VERSION = 1
MAX_BYTES = 32 * 1024 * 1024
_NUMBERS = re.compile(r"(?<=\w):\d+(?::\d+)?\b|\b(?:line|lines|col|column)s? \d+(?:-\d+)?", re.I)

LineOf = Callable[[str, int], str]


class BaselineError(ValueError):
    """The baseline file cannot be read or is not one of ours (one line; exit 2)."""


def message_key(message: str) -> str:
    """The message without line and column numbers and with its spaces normalized."""
    return " ".join(_NUMBERS.sub("#", message).split())


def fingerprint(f: Finding, line_of: LineOf) -> str:
    parts = (f.code, f.loc.path, message_key(f.message), " ".join(line_of(f.loc.path, f.loc.line).split()))
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def line_source(project: Project) -> LineOf:
    """The text of a line of a file as the check read it (parsed documents first, else the file, read under
    the loader's guards); "" for a folder, a missing file or a line past the end."""
    texts: dict[str, list[str] | None] = {}
    docs = [s.skill_md for s in project.skills] + [d for s in project.skills for d in s.files.values()]
    for doc in [*docs, *project.rst.values(), *project.linked.values()]:
        texts[doc.path] = doc.text.split("\n")

    def line_of(path: str, line: int) -> str:
        if path not in texts:
            text = read_text(project.root, path)[0] if path in project.files else None
            texts[path] = text.split("\n") if text is not None else None
        lines = texts[path]
        return lines[line - 1] if lines is not None and 0 < line <= len(lines) else ""

    return line_of


@dataclass
class Outcome:
    kept: list[Finding]  # the findings not in the baseline: what the check reports
    matched: list[Finding]  # the findings the baseline holds
    gone: int  # baseline entries no finding matched (fixed, or changed past recognition)

    def note(self, path: str) -> str:
        text = f"baseline {path}: {len(self.matched)} finding(s) matched, {self.gone} entr(ies) gone"
        if self.gone:
            text += f" (fixed: shrink it with --baseline {path} --write-baseline {path})"
        return text


def load(path: Path) -> Counter[str]:
    """The fingerprints a baseline file holds, with their counts."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise BaselineError(f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MB; not a baseline")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read the baseline ({exc.strerror or exc})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: not a baseline file (JSON does not parse: {exc})") from exc
    if not isinstance(data, dict) or data.get("tool") != TOOL or data.get("version") != VERSION:
        raise BaselineError(f"{path}: not a {TOOL} baseline of version {VERSION} (write one with --write-baseline)")
    entries = data.get("findings")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("fingerprint"), str) for e in entries
    ):
        raise BaselineError(f"{path}: not a {TOOL} baseline (a `findings` list of entries with a fingerprint)")
    return Counter(e["fingerprint"] for e in entries)


def split(findings: list[Finding], baseline: Counter[str], line_of: LineOf) -> Outcome:
    """Findings the baseline holds (each entry matches one finding) and the rest."""
    left = Counter(baseline)
    kept, matched = [], []
    for f in findings:
        fp = fingerprint(f, line_of)
        if left[fp] > 0:
            left[fp] -= 1
            matched.append(f)
        else:
            kept.append(f)
    return Outcome(kept, matched, sum(left.values()))


def render(findings: list[Finding], line_of: LineOf) -> str:
    entries = sorted(
        (
            {
                "code": f.code,
                "path": f.loc.path,
                "message": " ".join(f.message.split()),
                "fingerprint": fingerprint(f, line_of),
            }
            for f in findings
        ),
        key=lambda e: (e["path"], e["code"], e["message"], e["fingerprint"]),
    )
    return json.dumps({"tool": TOOL, "version": VERSION, "findings": entries}, indent=1, ensure_ascii=False) + "\n"


def write(path: Path, findings: list[Finding], line_of: LineOf) -> None:
    """Write the baseline atomically; a new file gets the usual permission bits (it is meant to be committed)."""
    existed = path.exists()
    write_atomic(path, render(findings, line_of).encode("utf-8"))
    if not existed:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(path, 0o666 & ~mask)


def inside_root(root: Path, given: str, flag: str) -> Path:
    """The baseline path as given (relative to the working folder), refused when it leaves the checked root:
    the checker reads and writes nothing outside it."""
    path = Path(given)
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        raise BaselineError(f"{flag} {given}: outside the checked root {root}; keep the baseline in the tree") from None
    if path.is_dir():
        raise BaselineError(f"{flag} {given}: is a folder; give a file such as .skills-check-baseline.json")
    return path


def stage(
    project: Project, findings: list[Finding], read: Path | None, write_to: Path | None, recorded: Counter[str] | None
) -> tuple[list[Finding], list[str]]:
    """The baseline stage (after the suppressions, before the report): the findings to report and notes.

    With ``read`` only: leave out what ``recorded`` holds. With ``write_to`` only: record every finding (the
    report is then clean). With both: keep only the entries that still match, and report the new findings."""
    line_of = line_source(project)
    notes = []
    kept, matched = findings, []
    if read is not None and recorded is not None:
        outcome = split(findings, recorded, line_of)
        kept, matched = outcome.kept, outcome.matched
        notes.append(outcome.note(str(read)))
    if write_to is not None:
        chosen = matched if read is not None else findings
        write(write_to, chosen, line_of)
        notes.append(f"wrote {len(chosen)} finding(s) to {write_to}" + (" (entries that still match)" if read else ""))
        kept = kept if read is not None else []
    return kept, notes
