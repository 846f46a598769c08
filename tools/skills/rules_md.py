"""RULES.md, generated from the rule registry (``cli.py rules --write``); a test fails when it is stale.

Edit the rules' docstrings, profiles and citations, never RULES.md by hand.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES_MD = HERE / "RULES.md"

INTRO = """\
# Checker rules

<!-- Generated from the rule registry by `python tools/skills/cli.py rules --write`; a test fails when this
file is stale. Edit the rules' docstrings (tools/skills/rules/*.py), not this file. -->

`uv run --no-project python tools/skills/cli.py check` runs the rules below; `cli.py explain CODE`
prints one rule's text. Codes are stable: a retired code is never reused. Select or skip rules with
`--select`/`--ignore` (a prefix such as `DR1` means every DR1xx code), or whole profiles with
`--profile` or `[tool.skills-check] profiles = [...]`. Without either, the generic profiles run (`spec`,
`claude`, `links`: what any skill repository is held to); `isaaclab`, `drift` and `routing` encode this
repository's house conventions and run only where a tree lists them (this repository lists all six).
A MUST of the Agent Skills specification is an error; advice (a length, a contents list, a budget) is a
warning. Each rule names its profile and the source it enforces.

Skills are found by discovery (tools/skills/discover.py): every folder holding `SKILL.md` under the root,
in any layout, skipping `.git`, virtual environments, `node_modules`, build output and what `.gitignore`
ignores; `[tool.skills-check] skills` may name the folders or globs instead. A check that finds no skill
prints one line and exits 3.

Every finding is `path:line:col: CODE message`. A drift finding (DRxxx) points at the drifted text
and names where the truth lives, in the message and in the JSON `truth` field. `--fix` applies the
fixes that findings carry (the rules marked "fix" below) and checks again.
"""


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    import rules  # noqa: F401  (registers every rule)
    from inputs import INPUT_CODES
    from rules.registry import PROFILES, RULES

    out = [INTRO, "## Profiles\n", "| profile | rules | what |", "| --- | --- | --- |"]
    for name, what in PROFILES.items():
        count = sum(1 for r in RULES if r.profile == name)
        out.append(f"| `{name}` | {count} | {_one_line(what)} |")
    out += ["", "## IN0xx: input problems (the checker core; always on)\n",
            "A file the checker cannot read or parse safely becomes one finding with a location; the rules "
            "then skip it.\n", "| code | problem | explanation |", "| --- | --- | --- |"]
    for code, (summary, text) in INPUT_CODES.items():
        out.append(f"| {code} | {summary} | {_one_line(text)} |")
    modules: dict[str, list] = {}
    for r in sorted(RULES, key=lambda r: r.code):
        modules.setdefault(r.func.__module__, []).append(r)
    for module_name, rules_ in sorted(modules.items(), key=lambda kv: kv[1][0].code):
        doc = inspect.cleandoc(sys.modules[module_name].__doc__ or module_name)
        title, _, rest = doc.partition("\n")
        out += ["", f"## {title.strip()}", ""]
        if rest.strip():
            out += [rest.strip(), ""]
        out += ["| code | name | profile | rule | enforces |", "| --- | --- | --- | --- | --- |"]
        for r in rules_:
            text = inspect.cleandoc(r.func.__doc__ or "")
            summary, _, detail = text.partition("\n")
            rule_text = _one_line(summary + (" " + detail if detail.strip() else ""))
            marks = [m for m in (("warning" if r.severity == "warning" else ""),
                                 ("fix" if r.fixable else "")) if m]
            if marks:
                rule_text = f"({', '.join(marks)}) {rule_text}"
            out.append(f"| {r.code} | {r.name} | `{r.profile}` | {rule_text} | {_one_line(r.cites)} |")
    return "\n".join(out) + "\n"


def write() -> bool:
    """Rewrite RULES.md when it differs; True when it changed."""
    text = render()
    if RULES_MD.exists() and RULES_MD.read_text(encoding="utf-8") == text:
        return False
    tmp = RULES_MD.with_name(".RULES.md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(RULES_MD)
    return True
