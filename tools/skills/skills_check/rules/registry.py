"""The rule registry: stable codes, one small function per rule, its docstring as its explanation,
the profile it belongs to and the line of the spec or policy it enforces."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..model import Finding, Project

RuleFunc = Callable[[Project], Iterable[Finding]]

# Named rule sets. A repository picks some in [tool.skills-check] `profiles` or with --profile; without
# either, the generic ones (GENERIC) run: the spec, Claude's guidance, links, and drift, whose rules compare
# what the tree itself holds (an RST NCCL list-table with a skill's table of the same settings, a quoted
# command with the parser the tree defines for it) and so report only where both sides are found. The others
# (HOUSE) encode this repository's conventions and run only where a tree adopts them. Input problems (IN0xx)
# belong to the checker core and are always on.
PROFILES: dict[str, str] = {
    "spec": "(generic, on by default) the Agent Skills specification (agentskills.io): frontmatter fields, the "
    "name is the folder's, size, references",
    "claude": "(generic, on by default) Claude's documented skill guidance (claude.ai, the API, Claude Code): "
    "reserved words, no XML in descriptions, third-person descriptions, known allowed-tools, argument "
    "substitution in shell snippets, every bundled file referenced, contents in long references",
    "links": "(generic, on by default) links, #anchors and backticked repository paths in the skills and docs resolve in the checked tree",
    "drift": "(generic, on by default, where its inputs are) the tree against itself: an RST NCCL list-table against a "
    "skill's table of the same settings, every flag of a quoted command against the parser the tree defines for it "
    "(its tool map, Isaac Lab's CLI modules, this project's scripts), the launcher options table against argparse",
    "isaaclab": '(house, where adopted) Isaac Lab\'s skill policy: audience/status/owners, "Use when", required '
    "sections, per-section token budgets, evaluations, discovery aliases, script phrasing",
    "routing": "(house, where adopted) every evals.json case ranks its expected skill first among the tree's skills (a lexical "
    "stand-in for an agent's choice: BM25 over each skill's name and description)",
}

GENERIC = ("spec", "claude", "links", "drift")  # what runs on any tree without configuration
HOUSE = ("isaaclab", "routing")  # this repository's conventions: run where adopted


@dataclass(frozen=True)
class Rule:
    """One rule, defined once: its code, name, function, severity, profile, source and fixability. The core's
    input-problem and suppression codes (IN0xx) are rules without a function, in the ``core`` profile (always
    on), whose ``text`` is their summary line and explanation."""

    code: str  # stable, e.g. "SK101"
    name: str  # short kebab-case name, e.g. "name-format"
    func: RuleFunc | None
    severity: str = "error"  # the default severity of its findings
    profile: str = "isaaclab"  # one of PROFILES, or "core"
    cites: str = ""  # the spec or policy line it enforces
    fixable: bool = False  # its findings carry a Fix (each says whether it is safe unattended)
    text: str = ""  # a rule without a function: its summary, a blank line, its explanation
    whole_file: bool = False  # its findings are about a whole file (its length, whether it is named), not a line

    @property
    def summary(self) -> str:
        """The first line of the rule's docstring (used by ``--explain`` and RULES.md)."""
        doc = (self.func.__doc__ if self.func is not None else self.text) or ""
        doc = doc.strip()
        return doc.splitlines()[0].strip() if doc else ""

    @property
    def explanation(self) -> str:
        """The rule's docstring, then its module's (what the rule family checks, and its scope)."""
        if self.func is None:
            return self.text
        import inspect
        import sys

        module = sys.modules.get(self.func.__module__)
        parts = [
            inspect.cleandoc(self.func.__doc__ or ""),
            f"Profile: {self.profile}. Enforces: {self.cites}.",
            inspect.cleandoc(getattr(module, "__doc__", "") or ""),
        ]
        return "\n\n".join(p for p in parts if p)


RULES: list[Rule] = []
_BY_CODE: dict[str, Rule] = {}
_BY_FUNC: dict[RuleFunc, Rule] = {}


def rule(
    code: str,
    name: str,
    severity: str = "error",
    *,
    profile: str,
    cites: str,
    fixable: bool = False,
    whole_file: bool = False,
) -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` as the rule ``code``; codes are unique and never reused."""
    if profile not in PROFILES:
        raise ValueError(f"rule {code}: unknown profile {profile!r}")

    def register(func: RuleFunc) -> RuleFunc:
        if code in _BY_CODE:
            raise ValueError(f"duplicate rule code {code}")
        entry = Rule(code, name, func, severity, profile, cites, fixable, whole_file=whole_file)
        RULES.append(entry)
        _BY_CODE[code] = entry
        _BY_FUNC[func] = entry
        return func

    return register


def get(code: str) -> Rule | None:
    """The rule registered under ``code`` (exact, upper-cased), or None."""
    return _BY_CODE.get(code.strip().upper())


def of(func: RuleFunc) -> Rule:
    """The rule ``func`` was registered as: how a rule's code is named outside its ``@rule`` line."""
    return _BY_FUNC[func]
