"""Run the registered rules over a ``Project`` and filter findings by code.

The rules package (``rules``) registers ``Rule`` objects (code, name, func, severity) in
``rules.registry.RULES``; a rule that raises becomes an ``IN090`` finding and the others still run. A rule
yields only findings of its own registered code: one coded otherwise is a rule bug, reported as ``IN090``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .adoption.suppress import SUPPRESSION_CODES
from .forked import from_both_ends
from .loader import all_problems
from .model import Finding, Project
from .problems import INPUT_CODES, RULE_FAILED, problem

if TYPE_CHECKING:
    from .rules.registry import Rule


class RulesError(Exception):
    """The rules package cannot be imported (exit 2)."""


def load_rules(profiles: list[str] | None = None) -> list[Rule]:
    """The rules of ``profiles`` (every rule when None; the house profiles' modules are imported only when
    named), plus the core's input-problem codes (rules without a function)."""
    try:
        from . import rules
        from .rules.registry import Rule

        out: list[Rule] = rules.load(profiles)
    except Exception as exc:  # a broken rules package must not look like a clean check
        raise RulesError(f"the rules package failed to load: {type(exc).__name__}: {exc}") from exc
    for core in INPUT_CODES + SUPPRESSION_CODES:
        out.append(
            Rule(
                core.code, core.summary.replace(" ", "-"), None, "error", "core", text=f"{core.summary}\n\n{core.text}"
            )
        )
    return out


class Codes(set):
    """Every rule code a suppression or setting may name: the loaded rules' codes, and the rest (the house
    modules not loaded for this check) loaded on the first lookup that misses, or on iteration."""

    def __init__(self, codes: Iterable[str]) -> None:
        super().__init__(codes)
        self._complete = False

    def _fill(self) -> None:
        if not self._complete:
            self._complete = True
            self.update(r.code for r in load_rules())

    def __contains__(self, code: object) -> bool:
        if super().__contains__(code):
            return True
        self._fill()
        return super().__contains__(code)

    def __iter__(self) -> Iterator[str]:
        self._fill()
        return super().__iter__()


def profile_names() -> list[str]:
    from .rules.registry import PROFILES

    return list(PROFILES)


def in_profiles(rules: list[Rule], profiles: list[str] | None) -> list[Rule]:
    """The rules of the chosen profiles (all when None); input problems always."""
    if profiles is None:
        return rules
    return [r for r in rules if r.profile == "core" or r.profile in profiles]


class ProfileError(ValueError):
    """The profiles asked for are malformed or unknown (one line; exit 2)."""


def chosen_profiles(given: list[str] | None, configured: object) -> list[str] | None:
    """The profiles to run: ``given`` (a flag) wins over ``configured`` (``[tool.skills-check] profiles``);
    neither: the generic profiles (``rules.registry.GENERIC``: the spec, Claude's guidance, links, drift), so a
    tree that never adopted this repository's conventions is not held to them. ProfileError for a
    malformed or unknown choice."""
    chosen = given
    if chosen is None and configured is not None:
        if not isinstance(configured, list) or not all(isinstance(x, str) for x in configured):
            raise ProfileError("pyproject.toml: [tool.skills-check] profiles must be a list of names")
        chosen = configured
    if chosen is None:
        from .rules.registry import GENERIC

        return list(GENERIC)
    unknown = [p for p in chosen if p not in profile_names()]
    if unknown or not chosen:
        raise ProfileError(
            f"unknown profile(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(profile_names())}"
        )
    return chosen


def matches(code: str, patterns: list[str]) -> bool:
    """``code`` equals or starts with one of ``patterns`` (case-insensitive)."""
    return any(code.upper().startswith(p.strip().upper()) for p in patterns if p.strip())


def unknown_patterns(patterns: list[str], known: list[Rule]) -> list[str]:
    """Patterns that select no known code."""
    codes = [r.code for r in known]
    return [p for p in patterns if p.strip() and not any(matches(c, [p]) for c in codes)]


def active_codes(rules: list[Rule], select: list[str] | None = None, ignore: list[str] | None = None) -> set[str]:
    """The codes a check with these rules, ``select`` and ``ignore`` reports (what suppressions are judged by)."""
    return {
        r.code
        for r in rules
        if not (select and not matches(r.code, select)) and not (ignore and matches(r.code, ignore))
    }


def run_rules(
    project: Project,
    rules: list[Rule],
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    jobs: int = 1,
) -> list[Finding]:
    """Parser findings plus every selected rule's findings, filtered, de-duplicated and sorted. ``jobs`` > 1 on a
    project of ``SHARED_RULES_CHARS`` or more: a forked process runs rules from the last one back meanwhile
    (``forked.py``); the findings are the same."""

    def wanted(code: str) -> bool:
        if select and not matches(code, select):
            return False
        return not (ignore and matches(code, ignore))

    findings: list[Finding] = [f for f in all_problems(project) if wanted(f.code)]
    chosen = [r for r in rules if r.func is not None and wanted(r.code)]
    processes = jobs if _text_size(project) >= SHARED_RULES_CHARS else 1
    for found in from_both_ends(chosen, lambda r: _run_rule(project, r), processes):
        findings += found
    return _unique(findings)


SHARED_RULES_CHARS = 200_000  # characters of documents from which a second process shares the rules


def _text_size(project: Project) -> int:
    """Characters of the skills' documents and the RST pages: what the rules' work grows with."""
    skills = sum(len(d.text) for s in project.skills for d in (s.skill_md, *s.files.values()))
    return skills + sum(len(d.text) for d in project.rst.values())


def _run_rule(project: Project, r: Rule) -> list[Finding]:
    """Rule ``r``'s findings; a rule that raises, or yields a finding of another code, is one IN090 finding."""
    found: list[Finding] = []
    try:
        for f in r.func(project) or ():  # type: ignore[misc]
            if f.code != r.code:  # a finding carries the code its rule was registered under, no other
                raise ValueError(f"it yielded a finding coded {f.code!r} ({f.message})")
            found.append(f)
    except Exception as exc:  # a rule bug must not stop the check
        import traceback  # only when a rule fails: a check that passes never loads it

        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        found.append(
            problem(
                RULE_FAILED,
                "tools/skills/skills_check/rules",
                1,
                1,
                f"rule {r.code} failed: {type(exc).__name__}: {exc}{where}",
            )
        )
    return found


def _unique(findings: list[Finding]) -> list[Finding]:
    """De-duplicated, sorted and capped per file."""
    seen: set[tuple] = set()
    unique: list[Finding] = []
    for f in findings:
        key = (f.loc.path, f.loc.line, f.loc.col, f.code, f.message)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    unique.sort(key=lambda f: (f.loc.path, f.loc.line, f.loc.col, f.code, f.message))
    return cap_per_file(unique)


MAX_PER_FILE = 50  # findings of one code in one file; past it, one finding says how many more


def cap_per_file(findings: list[Finding], limit: int = MAX_PER_FILE) -> list[Finding]:
    """At most ``limit`` findings per (file, code), then one finding counting the rest (sorted input)."""
    counts: dict[tuple[str, str], int] = {}
    dropped: dict[tuple[str, str], Finding] = {}
    out: list[Finding] = []
    for f in findings:
        key = (f.loc.path, f.code)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= limit:
            out.append(f)
        else:
            dropped.setdefault(key, f)
    for (path, code), first in dropped.items():
        n = counts[(path, code)] - limit
        out.append(
            Finding(
                code=code,
                message=f"{n} more {code} finding(s) from here on in this file not shown "
                f"(at most {limit} per file and code)",
                loc=first.loc,
                severity=first.severity,
                hidden=n,
            )
        )
    out.sort(key=lambda f: (f.loc.path, f.loc.line, f.loc.col, f.code, f.message))
    return out
