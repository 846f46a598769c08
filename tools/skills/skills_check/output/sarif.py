"""Findings -> SARIF 2.1.0 (``check --format sarif``), the format code-scanning and review tools read.

One run: the tool (name, ``version`` and ``semanticVersion``: the running checker's, ``informationUri``)
with the rules that ran (id, name, descriptions, help, ``helpUri``: the rule's section of RULES.md at the
running version, default level, profile as a tag), and one result per finding with its rule, level,
location, ``partialFingerprints`` (the baseline's fingerprint: code, file, message and the text of the
line, not its number, so a finding that moves keeps its identity and code scanning tracks it as the same
alert), the truth a drift finding points at (a related location), and its fix (whole-line replacements).
Paths stay repository-relative under the ``%SRCROOT%`` base; columns count code points, as the checker's
do. Knows only findings and rule texts.

Links: ``[project.urls] Repository`` of the checker's distribution (``tools/skills/pyproject.toml``, or
the installed metadata) + ``/blob/skills-check-v<version>/tools/skills/RULES.md#<section>``: the release
tag of the running version. Without a repository URL the log has no ``helpUri``/``informationUri``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..model import Finding, Fix, Loc

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
VERSION = "2.1.0"
TOOL = "skills-check"
BASE = "%SRCROOT%"
FINGERPRINT = "skillsCheck/v1"  # our own key: primaryLocationLineHash is GitHub's, computed by its upload
DISTRIBUTION = Path(__file__).resolve().parents[2] / "pyproject.toml"  # tools/skills/ in a checkout
TAG = "skills-check-v{version}"  # the release tag of a version, in the repository the URLs name
RULES_PATH = "tools/skills/RULES.md"


@cache
def tool_meta() -> tuple[str, str | None]:
    """(version, repository URL) of the running checker: the checkout's ``tools/skills/pyproject.toml`` when
    the package runs from a checkout, else the installed distribution's metadata; ("0+unknown", None) when
    neither says."""
    try:
        project = tomllib.loads(DISTRIBUTION.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == TOOL:
            urls = project.get("urls", {})
            return str(project.get("version", "0+unknown")), urls.get("Repository")
    except (OSError, tomllib.TOMLDecodeError):
        pass
    try:
        meta = metadata.metadata(TOOL)
    except metadata.PackageNotFoundError:
        return "0+unknown", None
    repository = None
    for entry in meta.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository":
            repository = url.strip()
    return str(meta["Version"] or "0+unknown"), repository


def rules_url(anchor: str = "") -> str | None:
    """RULES.md at the running version's tag (with ``#anchor``), or None without a repository URL."""
    version, repository = tool_meta()
    if not repository:
        return None
    url = f"{repository.rstrip('/')}/blob/{TAG.format(version=version)}/{RULES_PATH}"
    return f"{url}#{anchor}" if anchor else url


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


def _rule(info: Any, anchors: Mapping[str, str]) -> dict[str, Any]:
    explanation = (info.explanation or info.summary or info.code).strip()
    paragraphs = explanation.split("\n\n")
    own = [p for p in paragraphs[: next((i for i, p in enumerate(paragraphs) if p.startswith("Profile:")), None)]]
    out = {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary or info.name},
        "fullDescription": {"text": " ".join(" ".join(own).split())},
        "help": {"text": explanation, "markdown": explanation},
        "defaultConfiguration": {"level": "warning" if info.severity == "warning" else "error"},
        "properties": {"tags": [info.profile]},
    }
    url = rules_url(anchors.get(info.code, ""))
    if url:
        out["helpUri"] = url
    return out


def _result(f: Finding, index: dict[str, int], fingerprint: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ruleId": f.code,
        "level": "warning" if f.severity == "warning" else "error",
        "message": {"text": " ".join(f.message.split())},
        "locations": [_location(f.loc)],
    }
    if fingerprint:
        out["partialFingerprints"] = {FINGERPRINT: fingerprint}
    if f.code in index:
        out["ruleIndex"] = index[f.code]
    if f.truth is not None:
        out["relatedLocations"] = [_location(f.truth, "the source of truth this text must agree with", 1)]
    if f.fix is not None and f.fix.edits:
        out["fixes"] = [_fix(f.fix)]
    return out


def fingerprints(findings: list[Finding], fingerprint_of: Any) -> list[str]:
    """Each finding's fingerprint (``fingerprint_of(finding)``, the baseline's), with ``:N`` for the Nth of
    identical ones, so two equal findings in one file are two alerts and stay so when lines move."""
    seen: dict[str, int] = {}
    out = []
    for f in findings:
        fp = fingerprint_of(f)
        seen[fp] = seen.get(fp, 0) + 1
        out.append(f"{fp}:{seen[fp]}")
    return out


def format_sarif(
    findings: list[Finding],
    notes: Iterable[str],
    rules: Iterable[Any],
    fingerprints: list[str] | None = None,
    anchors: Mapping[str, str] | None = None,
) -> str:
    """The SARIF log of one check: ``rules`` are the rule infos that ran (``rules.registry.Rule``);
    ``fingerprints`` one per finding (see ``fingerprints``); ``anchors`` each code's section of RULES.md."""
    described = sorted({r.code: r for r in rules}.values(), key=lambda r: r.code)
    index = {r.code: i for i, r in enumerate(described)}
    version, _ = tool_meta()
    driver: dict[str, Any] = {
        "name": TOOL,
        "version": version,
        "semanticVersion": version,
        "rules": [_rule(r, anchors or {}) for r in described],
    }
    home = rules_url()
    if home:
        driver["informationUri"] = home.rsplit("/", 1)[0] + "/README.md"
    prints = fingerprints if fingerprints is not None and len(fingerprints) == len(findings) else [None] * len(findings)
    run = {
        "tool": {"driver": driver},
        "columnKind": "unicodeCodePoints",
        "invocations": [
            {
                "executionSuccessful": True,
                "toolExecutionNotifications": [{"level": "note", "message": {"text": note}} for note in notes],
            }
        ],
        "results": [_result(f, index, fp) for f, fp in zip(findings, prints)],
    }
    return json.dumps({"$schema": SCHEMA, "version": VERSION, "runs": [run]}, indent=2, ensure_ascii=False) + "\n"
