"""SK4xx: routing. Every evals.json case of every skill is scored against every skill's `name` and
`description` by the lexical model in routing.py (BM25; a stand-in for an agent's choice, see there for
what it catches and what it cannot), and the ranking must agree with the case.

A case's *expected* skill is its `expected_skill`; a case in skill A's evals.json whose expected skill
is not A (another skill, or null) is a *should-not* case for A. Findings sit at the case's line in
evals.json and name the winning skill and both scores. The threshold for should-not cases is
``routing.THRESHOLD`` (3.0), or ``routing_threshold`` in [tool.skills-check].
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..model import Finding, Loc, Project, Skill
from .common import cached, finding
from .evaluations import _entry_lines, _evals_entries
from .registry import rule


@dataclass
class Case:
    owner: Skill  # the skill whose evals.json holds the case
    ident: str
    prompt: str
    expected: str | None
    line: int
    ranking: list  # list[routing.Scored], best first


def index_of(project: Project):
    """The BM25 index over the tree's skills (name -> description), built once per check."""
    from ..routing import Index

    def make():
        skills: dict[str, Any] = {}
        for s in project.skills:
            desc = (s.skill_md.frontmatter or {}).get("description") if s.skill_md.readable else None
            if s.name and isinstance(desc, str):
                skills.setdefault(s.name, desc)
        return Index(skills)

    return cached(project, "routing-index", make)


def threshold(project: Project) -> float:
    from ..routing import THRESHOLD

    value = project.config.get("routing_threshold", THRESHOLD)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else THRESHOLD


def cases(project: Project) -> list[Case]:
    """Every well-formed evals.json case, ranked."""

    def make() -> list[Case]:
        index = index_of(project)
        if len(index.docs) < 2:
            return []  # one skill wins everything: nothing to compare
        out: list[Case] = []
        for skill in project.skills:
            entries, text, key = _evals_entries(project, skill)
            if not entries or skill.name is None:
                continue
            lines = _entry_lines(text, key, len(entries))
            for entry, line in zip(entries, lines):
                if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str):
                    continue
                expected = entry.get("expected_skill")
                if expected is not None and not isinstance(expected, str):
                    continue
                out.append(
                    Case(skill, str(entry.get("id", "")), entry["prompt"], expected, line, index.rank(entry["prompt"]))
                )
        return out

    return cached(project, "routing-cases", make)


def _score(case: Case, name: str | None) -> float:
    return next((s.score for s in case.ranking if s.name == name), 0.0)


def _lost(project: Project) -> list[Case]:
    """Cases whose expected skill (one of this tree) does not rank first."""
    names = set(index_of(project).docs)
    return [c for c in cases(project) if c.expected in names and c.ranking[0].name != c.expected]


def _terms(case: Case, name: str | None) -> str:
    scored = next(s for s in case.ranking if s.name == name)
    return ", ".join(t for t, _ in scored.deciding(4)) or "none"


@rule(
    "SK401",
    "routing-trigger-lost",
    profile="routing",
    cites="this repository's design (DESIGN.md, Checker: routing): a should-trigger case routes to its skill",
)
def trigger_lost(project: Project) -> Iterator[Finding]:
    """A case's expected skill ranks first for its prompt among the tree's skills (lexical model).

    The prompt of every evals.json case whose `expected_skill` is a skill of this tree is scored against
    every skill's name and description; the expected skill must rank first. A finding names the winner,
    both scores and the terms that decided it: a description that lost its trigger words, or a sibling
    whose description claims the prompt.
    """
    for c in _lost(project):
        win = c.ranking[0]
        yield finding(
            trigger_lost,
            f"case {c.ident!r} should route to {c.expected} but {win.name} ranks first "
            f"({win.score:.2f} vs {_score(c, c.expected):.2f}; {win.name} matched {_terms(c, win.name)}; "
            f"{c.expected} matched {_terms(c, c.expected)})",
            c.owner.evals_json or c.owner.skill_md.path,
            c.line,
            truth=Loc(c.owner.skill_md.path, c.owner.skill_md.frontmatter_lines.get("description", 1), 1),
        )


@rule(
    "SK402",
    "routing-should-not",
    profile="routing",
    cites="this repository's design (DESIGN.md, Checker: routing): a should-not case does not route to its skill",
)
def should_not(project: Project) -> Iterator[Finding]:
    """A should-not case (in a skill's evals.json, expecting another skill or none) does not pick that skill.

    A case in skill A's evals.json whose `expected_skill` is another skill or null must not rank A first
    with a score at or above the routing threshold (3.0; `routing_threshold` in [tool.skills-check]):
    A's description claims a prompt it says it does not handle.
    """
    limit = threshold(project)
    for c in cases(project):
        own = c.owner.name
        win = c.ranking[0]
        if c.expected == own or win.name != own or win.score < limit:
            continue
        other = c.expected or "no skill"
        runner_up = c.ranking[1] if len(c.ranking) > 1 else None
        theirs = (
            f"{_score(c, c.expected):.2f}"
            if c.expected
            else (f"{runner_up.score:.2f} for {runner_up.name}" if runner_up else "none")
        )
        yield finding(
            should_not,
            f"case {c.ident!r} should not route to {own} (expected: {other}) but it ranks first "
            f"({win.score:.2f} >= threshold {limit:g}; next: {theirs}; matched {_terms(c, own)})",
            c.owner.evals_json or c.owner.skill_md.path,
            c.line,
            truth=Loc(c.owner.skill_md.path, c.owner.skill_md.frontmatter_lines.get("description", 1), 1),
        )


@rule(
    "SK403",
    "routing-collision",
    profile="routing",
    cites="this repository's design (DESIGN.md, Checker: routing): two skills do not win each other's cases",
)
def collision(project: Project) -> Iterator[Finding]:
    """Two skills do not win each other's cases (their descriptions collide).

    When skill A wins a case expected for B and B wins a case expected for A, the two descriptions
    claim the same prompts: one finding at A's description names both and the cases.
    """
    won: dict[tuple[str, str], list[str]] = {}
    for c in _lost(project):
        assert c.expected is not None  # a lost case has an expected skill of this tree
        won.setdefault((c.ranking[0].name, c.expected), []).append(c.ident)
    by_name = {s.name: s for s in project.skills if s.name}
    for (a, b), ids in sorted(won.items()):
        if a < b and (b, a) in won and a in by_name:
            skill = by_name[a]
            yield finding(
                collision,
                f"{a} and {b} win each other's cases ({a} wins {', '.join(ids)}; {b} wins "
                f"{', '.join(won[(b, a)])}): their descriptions claim the same prompts",
                skill.skill_md.path,
                skill.skill_md.frontmatter_lines.get("description", 1),
                truth=Loc(by_name[b].skill_md.path, by_name[b].skill_md.frontmatter_lines.get("description", 1), 1)
                if b in by_name
                else None,
            )
