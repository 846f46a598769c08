"""Findings -> SARIF 2.1.0 (``check --format sarif``), the format code-scanning and review tools read.

One run: the tool with the rules that ran (id, name, descriptions, help, default level, profile as a
tag), and one result per finding with its rule, level, location, the truth a drift finding points at
(a related location), and its fix (whole-line replacements). Paths stay repository-relative under the
``%SRCROOT%`` base; columns count code points, as the checker's do. Knows only findings and rule texts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from ..model import Finding, Fix, Loc

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
VERSION = "2.1.0"
TOOL = "skills-check"
BASE = "%SRCROOT%"


def _artifact(path: str) -> dict[str, Any]:
    return {"uri": quote(path), "uriBaseId": BASE}


def _location(loc: Loc, message: str | None = None, ident: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": _artifact(loc.path),
            "region": {"startLine": loc.line, "startColumn": loc.col},
        }
    }
    if ident is not None:
        out["id"] = ident
    if message:
        out["message"] = {"text": message}
    return out


def _fix(fix: Fix) -> dict[str, Any]:
    """Whole lines ``start..end`` replaced: the region runs from column 1 of ``start`` to column 1 of the line
    after ``end`` (empty when the edit only inserts), and the new lines each end with a newline."""
    by_path: dict[str, list[dict[str, Any]]] = {}
    for e in fix.edits:
        by_path.setdefault(e.path, []).append(
            {
                "deletedRegion": {"startLine": e.start, "startColumn": 1, "endLine": e.end + 1, "endColumn": 1},
                "insertedContent": {"text": "".join(line + "\n" for line in e.lines)},
            }
        )
    return {
        "description": {"text": fix.description + ("" if not fix.safe else " (safe to apply unattended)")},
        "artifactChanges": [{"artifactLocation": _artifact(p), "replacements": r} for p, r in by_path.items()],
    }


def _rule(info: Any) -> dict[str, Any]:
    explanation = (info.explanation or info.summary or info.code).strip()
    paragraphs = explanation.split("\n\n")
    own = [p for p in paragraphs[: next((i for i, p in enumerate(paragraphs) if p.startswith("Profile:")), None)]]
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary or info.name},
        "fullDescription": {"text": " ".join(" ".join(own).split())},
        "help": {"text": explanation, "markdown": explanation},
        "defaultConfiguration": {"level": "warning" if info.severity == "warning" else "error"},
        "properties": {"tags": [info.profile]},
    }


def _result(f: Finding, index: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ruleId": f.code,
        "level": "warning" if f.severity == "warning" else "error",
        "message": {"text": " ".join(f.message.split())},
        "locations": [_location(f.loc)],
    }
    if f.code in index:
        out["ruleIndex"] = index[f.code]
    if f.truth is not None:
        out["relatedLocations"] = [_location(f.truth, "the source of truth this text must agree with", 1)]
    if f.fix is not None and f.fix.edits:
        out["fixes"] = [_fix(f.fix)]
    return out


def format_sarif(findings: list[Finding], notes: Iterable[str], rules: Iterable[Any], version: str = "") -> str:
    """The SARIF log of one check: ``rules`` are the rule infos that ran (``rules.registry.Rule``)."""
    described = sorted({r.code: r for r in rules}.values(), key=lambda r: r.code)
    index = {r.code: i for i, r in enumerate(described)}
    driver: dict[str, Any] = {"name": TOOL, "rules": [_rule(r) for r in described]}
    if version:
        driver["version"] = version
    run = {
        "tool": {"driver": driver},
        "columnKind": "unicodeCodePoints",
        "invocations": [
            {
                "executionSuccessful": True,
                "toolExecutionNotifications": [{"level": "note", "message": {"text": note}} for note in notes],
            }
        ],
        "results": [_result(f, index) for f in findings],
    }
    return json.dumps({"$schema": SCHEMA, "version": VERSION, "runs": [run]}, indent=2, ensure_ascii=False) + "\n"
