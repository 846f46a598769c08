"""The checker's rules: one small function per stable code, registered in ``RULES``.

Codes: SK1xx frontmatter, SK2xx structure/links/paths, SK3xx evaluations, SK4xx routing, DR1xx NCCL list,
DR2xx launcher options table, DR3xx flags in command lines, DR4xx discovery aliases. A rule reads
the model (``model.Project``) and yields ``model.Finding``s; the core's runner calls them, and
``cli.py explain CODE`` prints a rule's docstring. tools/skills/RULES.md lists every code.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from .registry import RULES, Rule, get, rule

__all__ = ["RULES", "Rule", "get", "load", "rule"]

# The modules of the generic profiles (spec, claude, links, drift): loaded for every check.
GENERIC_MODULES = ("frontmatter", "portable", "bundled", "structure", "links", "repo_paths", "nccl", "options", "flags")
# The house profiles' own modules: loaded only when their profile runs.
HOUSE_MODULES = {"isaaclab": ("aliases", "evaluations"), "routing": ("routing",)}


def load(profiles: Iterable[str] | None = None) -> list[Rule]:
    """Import the rule modules ``profiles`` need (every module when None) and return the registered rules,
    by code (importing a module registers its rules)."""
    wanted = None if profiles is None else set(profiles)
    names = list(GENERIC_MODULES)
    for profile, modules in HOUSE_MODULES.items():
        if wanted is None or profile in wanted:
            names += modules
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    RULES.sort(key=lambda r: r.code)
    return list(RULES)
