"""RULES.md, generated from the rule registry (``cli.py rules --write``); a test fails when it is stale.

Edit the rules' docstrings, profiles and citations, never RULES.md by hand.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES_MD = HERE.parent / "RULES.md"  # tools/skills/RULES.md in a checkout

INTRO = """\
# Checker rules

<!-- Generated from the rule registry by `python tools/skills/cli.py rules --write`; a test fails when this
file is stale. Edit the rules' docstrings (tools/skills/skills_check/rules/*.py), not this file. -->

`uv run --no-project python tools/skills/cli.py check` runs the rules below; `cli.py explain CODE`
prints one rule's text. Codes are stable: a retired code is never reused. Select or skip rules with
`--select`/`--ignore` (a prefix such as `DR1` means every DR1xx code), or whole profiles with
`--profile` or `[tool.skills-check] profiles = [...]`. Without either, the generic profiles run (`spec`,
`claude`, `links`: what any skill repository is held to); `isaaclab`, `drift` and `routing` encode this
repository's house conventions and run only where a tree lists them (this repository lists all six).
A MUST of the Agent Skills specification is an error; advice (a length, a contents list, a budget) is a
warning. Each rule names its profile and the source it enforces.

Skills are found by discovery (tools/skills/skills_check/discover.py): every folder holding `SKILL.md` under the root,
in any layout, skipping `.git`, virtual environments, `node_modules`, build output and what `.gitignore`
ignores; `[tool.skills-check] skills` may name the folders or globs instead. A check that finds no skill
prints one line and exits 3.

Every finding is `path:line:col: CODE message`. A drift finding (DRxxx) points at the drifted text
and names where the truth lives, in the message and in the JSON `truth` field (in SARIF, `--format
sarif`, a related location). `--fix` applies the fixes that findings carry (the rules marked "fix"
below) and checks again.

After the rules, suppressions (below, SU0xx) and per-file ignores hide what a team has judged; then a
baseline (`--baseline FILE`, written by `--write-baseline FILE`) hides the findings a tree had when it
adopted the checker, matched by code, file, message and the text of the line (not its number).

Settings live in `[tool.skills-check]` of the checked tree's `pyproject.toml`: `skills`, `docs`,
`launcher`, `trainer`, `multi_gpu_doc` (paths), `profiles`, `adopt`, `tools`, `per-file-ignores`,
`routing_threshold`. They are strict, as ruff's are: an unknown key (`per_file_ignores`, `profile`), an
unknown profile or convention, a value of the wrong type, or a near miss of the section's name
(`[tool.skill-check]`, `[tool.skills_check]`) stops the check with one line, `pyproject.toml:LINE: ...`,
naming the key and the nearest valid name (exit 2; in the editor, a diagnostic on `pyproject.toml`).

`--format sarif` is SARIF 2.1.0 for code scanning: each result carries `partialFingerprints`
(`skillsCheck/v1`: the baseline's fingerprint, with `:N` for the Nth equal finding of a file), so a
finding that moves keeps its alert; the tool carries its `version` and `semanticVersion`; each rule its
help and a `helpUri` to its section of this file at the running version, formed from the checker's
`[project.urls] Repository` (tools/skills/pyproject.toml) as
`<Repository>/blob/skills-check-v<version>/tools/skills/RULES.md#<section>` (no `helpUri` while the
distribution names no repository).
"""


def _suppressions_md() -> str:
    """The suppressions section's text; its example codes are the rules' own."""
    from .adoption.suppress import GLOB_UNMATCHED, NO_CODE, UNUSED
    from .rules.evaluations import scenario_fields
    from .rules.flags import unknown_flag
    from .rules.frontmatter import description_use_when
    from .rules.links import link_anchor, link_target
    from .rules.registry import of

    link, anchor, flag = of(link_target).code, of(link_anchor).code, of(unknown_flag).code
    use_when_, scenario = of(description_use_when).code, of(scenario_fields).code
    su_first, su_last, glob, unused = NO_CODE.code, GLOB_UNMATCHED.code, GLOB_UNMATCHED.code, UNUSED.code
    return f"""\
Hide one judged finding where it stands, in a comment of the file's own syntax; name the codes and say why
after ` -- `. A comment inside a code fence or a literal block is code, not a suppression.

| file | comment | applies to |
| --- | --- | --- |
| markdown | `<!-- skills-check: disable-next-line {link},{anchor} -- why -->` | the next non-blank line |
| markdown | `<!-- skills-check: disable {link} -- why -->` ... `<!-- skills-check: enable {link} -->` | the lines between (to the end of the file without `enable`; a bare `enable` ends every block) |
| markdown | `<!-- skills-check: disable-file {link} -- why -->` | the whole file |
| RST | `.. skills-check: disable-next-line {flag} -- why` (also `disable`, `enable`, `disable-file`) | the next non-blank line (an RST comment ends at a blank line) |
| YAML frontmatter | a whole line `# skills-check: disable-next-line {use_when_} -- why` | the next non-blank line |
| JSON (`evals.json`), or a whole folder | `[tool.skills-check.per-file-ignores]` in pyproject.toml: `"skills/*/evals/evals.json" = ["{scenario}"]` | every file the glob matches (codes or prefixes, as ruff's `per-file-ignores`) |

Globs: `*` and `?` stay within a folder, `**` crosses folders, a glob without `/` matches the file name
anywhere; a glob that matches no file or folder and hides no finding is a warning ({glob}). Per-file ignores
hide the suppressions' own findings ({su_first}-{su_last}) as they hide any other. The summary says how many findings
each way hid.

Adopting on a tree with many findings: `check --write-baseline FILE` records them in a file, or `check
--add-suppressions` writes a suppression with the reason `TODO: say why this is accepted` for each finding,
in the file's own syntax: `disable-next-line` above the finding's line (markdown keeps the line's
indentation; RST adds a blank line; frontmatter above a top-level key), `disable` ... `enable` around a
code block, a markdown table or an RST top-level block (a paragraph, a directive with its body) when the
finding is inside one, `disable-file` for a finding on the whole file (its length, a missing contents list,
a file nothing names) or at line 1 (after the opening `---` where there is one); JSON and every other
file (scripts, folders, a file that could not be parsed) get a `per-file-ignores` entry in `pyproject.toml`
(the table is added when missing; a tree without `pyproject.toml` gets one holding only the table). The
writes are staged as
`--fix`'s are, under its lock, inside the checked root only; the check then runs again. It refuses `--fix`
and the baseline flags. An unused suppression ({unused}) carries a fix: `--fix` (not `--only-safe`: it drops
a reason a person wrote) removes the unused codes, or the whole comment and the `enable` ending its block.
`--fix` never writes a suppression.
"""


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    from . import rules

    rules.load()  # every rule, the house profiles' too
    from .problems import INPUT_CODES
    from .rules.registry import PROFILES, RULES

    out = [INTRO, "## Profiles\n", "| profile | rules | what |", "| --- | --- | --- |"]
    for name, what in PROFILES.items():
        count = sum(1 for r in RULES if r.profile == name)
        out.append(f"| `{name}` | {count} | {_one_line(what)} |")
    out += [
        "",
        "## IN0xx: input problems (the checker core; always on)\n",
        "A file the checker cannot read or parse safely becomes one finding with a location; the rules then skip it.\n",
        "| code | problem | explanation |",
        "| --- | --- | --- |",
    ]
    for core in INPUT_CODES:
        out.append(f"| {core.code} | {core.summary} | {_one_line(core.text)} |")
    from .adoption.suppress import SUPPRESSION_CODES

    out += [
        "",
        "## SU0xx: suppressions (the checker core; always on)\n",
        _suppressions_md(),
        "| code | problem | explanation |",
        "| --- | --- | --- |",
    ]
    for core in SUPPRESSION_CODES:
        out.append(f"| {core.code} | {core.summary} | {_one_line(core.text)} |")
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
            marks = [m for m in (("warning" if r.severity == "warning" else ""), ("fix" if r.fixable else "")) if m]
            if marks:
                rule_text = f"({', '.join(marks)}) {rule_text}"
            out.append(f"| {r.code} | {r.name} | `{r.profile}` | {rule_text} | {_one_line(r.cites)} |")
    return "\n".join(out) + "\n"


_CODE = re.compile(r"^[A-Z]{2}\d{3}$")


def anchors(text: str | None = None) -> dict[str, str]:
    """Each rule code -> the anchor of the RULES.md section whose table holds it (GitHub's heading anchors,
    as the markdown parser makes them): what SARIF's ``helpUri`` links to."""
    from .parsers.markdown import parse_markdown

    doc = parse_markdown("RULES.md", render() if text is None else text)
    out: dict[str, str] = {}
    for table in doc.tables:
        above = [h for h in doc.headings if h.line < table.line]
        if not above:
            continue
        for row in table.rows:
            code = row[0].text.strip() if row else ""
            if _CODE.match(code):
                out.setdefault(code, above[-1].anchor)
    return out


def write() -> bool:
    """Rewrite RULES.md when it differs; True when it changed."""
    text = render()
    if RULES_MD.exists() and RULES_MD.read_text(encoding="utf-8") == text:
        return False
    tmp = RULES_MD.with_name(".RULES.md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(RULES_MD)
    return True
