"""SK3xx: a user skill ships evaluations: evaluations.md scenarios and/or evals/evals.json."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..model import Finding, Heading, Loc, MarkdownDoc, Project, Skill
from .common import finding, names_known, resolve, skill_names
from .registry import rule

MIN_SCENARIOS = 3
MIN_EVALS = 2
SCENARIO_RE = re.compile(r"\bscenario\b", re.IGNORECASE)
# "Query:", "**Query:**", "- Query:" ...; emphasis and list markers are ignored.
FIELD_RES = {
    "Query:": re.compile(r"^\s*(?:>\s*)?(?:[-*+]\s+|\d+[.)]\s+)?query\s*:", re.IGNORECASE | re.MULTILINE),
    "Expected behavior:": re.compile(
        r"^\s*(?:>\s*)?(?:[-*+]\s+|\d+[.)]\s+)?expected behaviou?r\s*:", re.IGNORECASE | re.MULTILINE
    ),
}
FAILURE_RE = re.compile(
    r"^\s*(?:>\s*)?(?:[-*+]\s+|\d+[.)]\s+)?(?:known failure modes|pass\s*/\s*fail(?: criteria)?|pass criteria|fail criteria)\s*:",
    re.IGNORECASE | re.MULTILINE,
)


def _evaluations_doc(skill: Skill) -> MarkdownDoc | None:
    for path, doc in skill.files.items():
        if path == skill.join("evaluations.md"):
            return doc
    return None


def _linked_from_skill_md(skill: Skill, path: str) -> bool:
    doc = skill.skill_md
    for link in doc.links:
        target = link.target.split("#", 1)[0].strip()
        if target and resolve(doc.path, target) == path:
            return True
    return False


def _scenarios(doc: MarkdownDoc) -> list[tuple[Heading, str]]:
    """(heading, plain section text) for each Scenario heading, up to the next heading at its level or above."""
    lines = doc.text.split("\n")
    headings = sorted(doc.headings, key=lambda h: h.line)
    out = []
    for i, head in enumerate(headings):
        if not SCENARIO_RE.search(head.text):
            continue
        end = len(lines) + 1
        for later in headings[i + 1 :]:
            if later.level <= head.level:
                end = later.line
                break
        body = "\n".join(lines[head.line : end - 1])
        out.append((head, body.replace("*", "").replace("_", " ").replace("`", "")))
    return out


@rule(
    "SK301",
    "evaluations-present",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): user skills have evaluations.md or evals/evals.json",
)
def evaluations_present(project: Project) -> Iterator[Finding]:
    """A user skill has evaluations: an evaluations.md linked from SKILL.md or an evals/evals.json."""
    for skill in project.skills:
        if skill.audience != "user" or not skill.skill_md.readable:
            continue
        doc = _evaluations_doc(skill)
        if doc is None and skill.evals_json is None:
            yield finding(
                evaluations_present,
                "a user skill needs evaluations.md (linked from SKILL.md) or evals/evals.json",
                skill.skill_md.path,
                skill.skill_md.body_start,
            )


@rule(
    "SK302",
    "evaluations-linked",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): evaluations.md is linked from SKILL.md",
)
def evaluations_linked(project: Project) -> Iterator[Finding]:
    """`evaluations.md` is linked from SKILL.md."""
    for skill in project.skills:
        doc = _evaluations_doc(skill)
        if doc is not None and skill.skill_md.readable and not _linked_from_skill_md(skill, doc.path):
            yield finding(
                evaluations_linked,
                "SKILL.md does not link evaluations.md",
                skill.skill_md.path,
                skill.skill_md.body_start,
                truth=Loc(doc.path, 1, 1),
            )


@rule(
    "SK303",
    "scenario-count",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): at least three Scenario headings",
)
def scenario_count(project: Project) -> Iterator[Finding]:
    """`evaluations.md` has at least three headings containing the word "Scenario"."""
    for skill in project.skills:
        doc = _evaluations_doc(skill)
        if doc is not None and doc.readable:
            n = len(_scenarios(doc))
            if n < MIN_SCENARIOS:
                yield finding(
                    scenario_count,
                    f'{n} "Scenario" heading(s); at least {MIN_SCENARIOS} are needed',
                    doc.path,
                    doc.body_start,
                )


@rule(
    "SK304",
    "scenario-fields",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): each scenario has Query, Expected behavior, and Known failure modes or pass/fail criteria",
)
def scenario_fields(project: Project) -> Iterator[Finding]:
    """Each scenario has `Query:`, `Expected behavior:`, and `Known failure modes:` or pass/fail criteria.

    A scenario runs up to the next heading at its level. Pass/fail criteria are `Pass criteria:`, `Fail
    criteria:` or `Pass/fail criteria:`. Emphasis and list markers around the labels are fine.
    """
    for skill in project.skills:
        doc = _evaluations_doc(skill)
        if doc is None or not doc.readable:
            continue
        for head, body in _scenarios(doc):
            for label, regex in FIELD_RES.items():
                if not regex.search(body):
                    yield finding(scenario_fields, f"scenario {head.text!r} has no `{label}`", doc.path, head.line)
            if not FAILURE_RE.search(body):
                yield finding(
                    scenario_fields,
                    f"scenario {head.text!r} has no `Known failure modes:` or pass/fail criteria",
                    doc.path,
                    head.line,
                )


def _line_of(text: str, needle: str, start: int = 0) -> int:
    at = text.find(needle, start)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _entry_lines(text: str, key: str, n: int) -> list[int]:
    """Best-effort line of each entry of the evals list (the line of its opening brace)."""
    at = text.find(f'"{key}"') if key else 0
    at = text.find("[", max(at, 0))
    lines: list[int] = []
    line = text.count("\n", 0, max(at, 0)) + 1  # counted once, then carried along: linear in the text
    depth, in_str, esc = 0, False, False
    for i in range(max(at, 0), len(text)):
        ch = text[i]
        if ch == "\n":
            line += 1
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            if depth == 1:
                lines.append(line)
                if len(lines) == n:  # only the first n entries are asked for
                    break
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                break
    return (lines + [1] * n)[:n]


def _evals_entries(project: Project, skill: Skill) -> tuple[list[Any] | None, str, str]:
    """(entries, json text, how the list was found) for a skill's parsed evals.json."""
    data = skill.evals
    text = skill.evals_text
    if isinstance(data, dict):
        for key in ("evals", "evaluations", "cases"):
            if isinstance(data.get(key), list):
                return data[key], text, key
        return None, text, ""
    if isinstance(data, list):
        return data, text, ""
    return None, text, ""


@rule(
    "SK310",
    "evals-json-schema",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): evals.json entries have id, prompt, expected_skill, assertions",
)
def evals_json_schema(project: Project) -> Iterator[Finding]:
    """`evals/evals.json` is a list (or an object with an `evals` list) of at least two entries with id, prompt, expected_skill and assertions.

    `id` is a string or an integer, unique; `prompt` a non-empty string; `expected_skill` a string, or
    null for a negative case; `assertions` a list of strings. A file that does not parse is IN040.
    """
    for skill in project.skills:
        if skill.evals_json is None or skill.evals is None:
            continue  # absent, or unparsable (the core reports IN040)
        path = skill.evals_json
        entries, text, key = _evals_entries(project, skill)
        if entries is None:
            yield finding(
                evals_json_schema, 'evals.json must be a list of entries (or an object with an "evals" list)', path, 1
            )
            continue
        if len(entries) < MIN_EVALS:
            yield finding(
                evals_json_schema,
                f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}; at least {MIN_EVALS} are needed",
                path,
                1,
            )
        lines = _entry_lines(text, key, len(entries))
        ids: dict[Any, int] = {}
        for i, entry in enumerate(entries):
            line = lines[i]
            if not isinstance(entry, dict):
                yield finding(evals_json_schema, f"entry {i} is not an object", path, line)
                continue
            for key, ok, want in (
                (
                    "id",
                    lambda v: isinstance(v, (str, int)) and not isinstance(v, bool) and str(v).strip(),
                    "a string or integer",
                ),
                ("prompt", lambda v: isinstance(v, str) and v.strip(), "a non-empty string"),
                ("expected_skill", lambda v: v is None or isinstance(v, str), "a skill name or null"),
                (
                    "assertions",
                    lambda v: isinstance(v, list) and all(isinstance(a, str) and a.strip() for a in v),
                    "a list of strings",
                ),
            ):
                if key not in entry:
                    yield finding(evals_json_schema, f'entry {i} has no "{key}"', path, line)
                elif not ok(entry[key]):
                    yield finding(evals_json_schema, f'entry {i}: "{key}" must be {want}', path, line)
            ident = entry.get("id")
            if isinstance(ident, (str, int)):
                if ident in ids:
                    yield finding(
                        evals_json_schema, f"entry {i} repeats id {ident!r} (first at line {ids[ident]})", path, line
                    )
                else:
                    ids[ident] = line


@rule(
    "SK311",
    "evals-expected-skill",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): expected_skill names a skill (null for a negative case)",
)
def evals_expected_skill(project: Project) -> Iterator[Finding]:
    """An evals.json `expected_skill` names a skill in this repository (or is null), and a top-level `skill_name` is the skill's own.

    A string `expected_skill` is the `name` of a skill in this repository; a top-level `skill_name`
    (when the file is an object) is the name of the skill holding it.
    """
    if not names_known(project):
        return
    names = skill_names(project)
    for skill in project.skills:
        if skill.evals_json is None or skill.evals is None:
            continue
        entries, text, _ = _evals_entries(project, skill)
        declared = skill.evals.get("skill_name") if isinstance(skill.evals, dict) else None
        if isinstance(declared, str) and skill.name and declared != skill.name:
            yield finding(
                evals_expected_skill,
                f"skill_name {declared!r} is not this skill's name {skill.name!r}",
                skill.evals_json,
                _line_of(text, '"skill_name"'),
                truth=Loc(skill.skill_md.path, skill.skill_md.frontmatter_lines.get("name", 1), 1),
            )
        for entry in entries or []:
            if isinstance(entry, dict) and isinstance(entry.get("expected_skill"), str):
                name = entry["expected_skill"]
                if name not in names:
                    line = _line_of(text, f'"{name}"')
                    yield finding(
                        evals_expected_skill,
                        f"expected_skill {name!r} is not the name of any skill here",
                        skill.evals_json,
                        line,
                    )
