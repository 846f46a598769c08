"""The rule registry: stable codes, one small function per rule, its docstring as its explanation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from model import Finding, Project

RuleFunc = Callable[[Project], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    code: str  # stable, e.g. "SK101"
    name: str  # short kebab-case name, e.g. "name-format"
    func: RuleFunc
    severity: str = "error"  # the default severity of its findings

    @property
    def summary(self) -> str:
        """The first line of the rule's docstring (used by ``--explain`` and RULES.md)."""
        doc = (self.func.__doc__ or "").strip()
        return doc.splitlines()[0].strip() if doc else ""

    @property
    def explanation(self) -> str:
        """The rule's docstring, then its module's (what the rule family checks, and its scope)."""
        import inspect
        import sys

        module = sys.modules.get(self.func.__module__)
        parts = [inspect.cleandoc(self.func.__doc__ or ""), inspect.cleandoc(getattr(module, "__doc__", "") or "")]
        return "\n\n".join(p for p in parts if p)


RULES: list[Rule] = []
_BY_CODE: dict[str, Rule] = {}


def rule(code: str, name: str, severity: str = "error") -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` as the rule ``code``; codes are unique and never reused."""

    def register(func: RuleFunc) -> RuleFunc:
        if code in _BY_CODE:
            raise ValueError(f"duplicate rule code {code}")
        entry = Rule(code, name, func, severity)
        RULES.append(entry)
        _BY_CODE[code] = entry
        return func

    return register


def get(code: str) -> Rule | None:
    """The rule registered under ``code`` (exact, upper-cased), or None."""
    return _BY_CODE.get(code.strip().upper())


