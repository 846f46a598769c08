"""The checker's rules: one small function per stable code, registered in ``RULES``.

Codes: SK1xx frontmatter, SK2xx structure/links/paths, SK3xx evaluations, SK4xx routing, DR1xx NCCL list,
DR2xx launcher options table, DR3xx flags in command lines, DR4xx discovery aliases. A rule reads
the model (``model.Project``) and yields ``model.Finding``s; the core's runner calls them, and
``cli.py explain CODE`` prints a rule's docstring. tools/skills/RULES.md lists every code.
"""

from __future__ import annotations

from . import aliases, evaluations, flags, frontmatter, nccl, options, portable, routing, structure  # noqa: F401  (registers)
from .registry import RULES, Rule, get, rule

__all__ = ["RULES", "Rule", "get", "rule"]

RULES.sort(key=lambda r: r.code)
