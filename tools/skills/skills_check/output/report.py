"""Findings -> text, JSON, GitHub workflow annotations or SARIF (sarif.py). Knows only ``Finding`` (and a few
counts; SARIF also the rules' texts)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model import Finding

FORMATS = ("text", "json", "github", "sarif")


@dataclass
class Summary:
    skills: int = 0
    rst: int = 0
    notes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    # the rule sets (profiles): each {"name", "ran", "why"}, so "nothing checked" never reads as "clean"
    rule_sets: list[dict[str, object]] = field(default_factory=list)


def rule_sets_line(summary: Summary) -> str:
    """One line: the rule sets that ran and why, what drift found to compare, and those that did not run."""

    def grouped(sets: list[dict[str, object]]) -> str:
        by_why: dict[str, list[str]] = {}
        for s in sets:
            by_why.setdefault(str(s["why"]), []).append(str(s["name"]))
        return "; ".join(f"{', '.join(names)} ({why})" for why, names in by_why.items())

    ran = [s for s in summary.rule_sets if s["ran"]]
    off = [s for s in summary.rule_sets if not s["ran"]]
    line = f"rule sets run: {grouped(ran) or 'none'}"
    line += "".join(f"; {s['name']} found {s['found']}" for s in ran if s.get("found"))
    return line + (f"; not run: {grouped(off)}" if off else "")


def _counts(findings: list[Finding]) -> tuple[int, int]:
    """(errors, warnings): a cap line counts the findings it stands for, not itself."""
    errors = sum(f.hidden or 1 for f in findings if f.severity != "warning")
    return errors, sum(f.hidden or 1 for f in findings) - errors


def summary_line(findings: list[Finding], summary: Summary) -> str:
    errors, warnings = _counts(findings)
    scope = f"{summary.skills} skill(s), {summary.rst} RST file(s)"
    if not findings:
        return f"clean: no findings in {scope}"
    files = len({f.loc.path for f in findings})
    fixable = sum(1 for f in findings if f.fix is not None)
    safe = sum(1 for f in findings if f.fix is not None and f.fix.safe)
    hint = f"; {fixable} fixable with --fix ({safe} safe unattended)" if fixable else ""
    return f"{errors} error(s), {warnings} warning(s) in {files} file(s); checked {scope}{hint}"


def _message(f: Finding) -> str:
    msg = " ".join(f.message.split())
    if f.severity == "warning":
        msg = f"warning: {msg}"
    if f.truth is not None and f.truth.path not in msg:
        msg = f"{msg} (truth: {f.truth})"
    return msg


def format_text(findings: list[Finding], summary: Summary) -> str:
    lines = [f"{f.loc}: {f.code} {_message(f)}" for f in findings]
    lines += [f"fixed: {fix}" for fix in summary.fixes]
    if summary.rule_sets:
        lines.append(rule_sets_line(summary))
    lines.append(summary_line(findings, summary))
    return "\n".join(lines) + "\n"


def format_json(findings: list[Finding], summary: Summary) -> str:
    errors, warnings = _counts(findings)
    data = {
        "findings": [
            {
                "code": f.code,
                "severity": f.severity,
                "message": f.message,
                "path": f.loc.path,
                "line": f.loc.line,
                "col": f.loc.col,
                "truth": None if f.truth is None else {"path": f.truth.path, "line": f.truth.line, "col": f.truth.col},
                "fix": None
                if f.fix is None
                else {
                    "description": f.fix.description,
                    "safe": f.fix.safe,
                    "edits": [
                        {"path": e.path, "start": e.start, "end": e.end, "lines": list(e.lines)} for e in f.fix.edits
                    ],
                },
            }
            for f in findings
        ],
        "summary": {
            "errors": errors,
            "warnings": warnings,
            "skills": summary.skills,
            "rst_files": summary.rst,
            "text": summary_line(findings, summary),
            "rule_sets": summary.rule_sets,
        },
        "notes": summary.notes,
        "fixes": summary.fixes,
    }
    return json.dumps(data, indent=2) + "\n"


def escape_data(text: str) -> str:
    """Escape a workflow-command message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (file, title)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(findings: list[Finding], summary: Summary) -> str:
    lines = []
    for f in findings:
        kind = "warning" if f.severity == "warning" else "error"
        msg = f.message if f.truth is None or f.truth.path in f.message else f"{f.message} (truth: {f.truth})"
        lines.append(
            f"::{kind} file={escape_property(f.loc.path)},line={f.loc.line},col={f.loc.col},"
            f"title={escape_property(f.code)}::{escape_data(msg)}"
        )
    lines += [f"fixed: {fix}" for fix in summary.fixes]
    lines.append(summary_line(findings, summary))
    return "\n".join(lines) + "\n"


def render(
    fmt: str,
    findings: list[Finding],
    summary: Summary,
    rules: Iterable[Any] = (),
    fingerprints: list[str] | None = None,
    anchors: dict[str, str] | None = None,
) -> str:
    """The report in ``fmt``; SARIF also describes ``rules`` (the rule infos that ran), each finding's
    fingerprint and each rule's section of RULES.md (``anchors``)."""
    if fmt == "sarif":
        from .sarif import format_sarif

        return format_sarif(findings, summary.notes, rules, fingerprints, anchors)
    return {"text": format_text, "json": format_json, "github": format_github}[fmt](findings, summary)


def exit_code(findings: list[Finding], strict: bool = False) -> int:
    """1 when any error (or, with ``strict``, any warning) remains; warnings alone exit 0."""
    errors, warnings = _counts(findings)
    return 1 if errors or (strict and warnings) else 0
