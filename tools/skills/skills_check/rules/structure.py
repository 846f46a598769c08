"""SK2xx: sections, length, budgets, reference depth and contents, scripts and cross-skill names.

Links and anchors are links.py's, repository paths repo_paths.py's, bundled files bundled.py's.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..model import Finding, Loc, MarkdownDoc, Project
from .common import (
    UNLISTED_OK,
    finding,
    is_file,
    names_known,
    skill_names,
)
from .links import (
    link_targets,
)
from .registry import rule
from .repo_paths import (
    NamedBySkill,
    repo_path_codes,
)
from .script_mentions import script_mentions, script_path

REQUIRED_SECTIONS = ("When To Use", "Workflow", "Validation", "Maintenance", "References")
MAX_BODY_LINES = 500
CONTENTS_AFTER = 100  # reference files longer than this need a contents list near the top
CONTENTS_WITHIN = 40  # "near the top": within this many lines of the body start
PATH_PREFIXES = ("docs", "scripts", "skills", "tools")
SKILL_NAME_RE = re.compile(r"^isaaclab-[a-z0-9]+(?:-[a-z0-9]+)*$")


def _norm(text: str) -> str:
    return " ".join(text.replace("`", "").split()).lower()


@rule(
    "SK201",
    "required-sections",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): sections When To Use, Workflow, Validation, Maintenance, References",
)
def required_sections(project: Project) -> Iterator[Finding]:
    """SKILL.md has the sections When To Use, Workflow, Validation, Maintenance and References.

    Headings of any level count, matched without regard to case.
    """
    for skill in project.skills:
        doc = skill.skill_md
        if not doc.readable:
            continue
        present = {_norm(h.text) for h in doc.headings}
        for section in REQUIRED_SECTIONS:
            if section.lower() not in present:
                yield finding(required_sections, f'SKILL.md has no "{section}" section', doc.path, doc.body_start)


@rule(
    "SK202",
    "body-length",
    severity="warning",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): keep SKILL.md under 500 lines; move detail to referenced files",
    whole_file=True,
)
def body_length(project: Project) -> Iterator[Finding]:
    """The SKILL.md body (after the frontmatter) is under 500 lines; details go to reference files."""
    for skill in project.skills:
        doc = skill.skill_md
        if not doc.readable:
            continue
        body = doc.n_lines - doc.body_start + 1
        if body >= MAX_BODY_LINES:
            yield finding(
                body_length,
                f"SKILL.md body is {body} lines; keep it under {MAX_BODY_LINES} and move details to reference files",
                doc.path,
                doc.body_start + MAX_BODY_LINES - 1,
            )


@rule(
    "SK211",
    "skill-md-missing",
    severity="warning",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): a skill is a folder holding SKILL.md",
)
def skill_md_missing(project: Project) -> Iterator[Finding]:
    """A folder beside skill folders that holds markdown also holds a SKILL.md (otherwise no agent sees it).

    A folder next to skill folders (the same parent), not inside a skill, with markdown files but no
    SKILL.md and no skill below it, looks like a skill whose SKILL.md is missing or misspelled. Everything
    inside a skill (`scripts/`, `references/`, `assets/` ...) belongs to that skill and is never reported.
    """
    for folder in project.orphan_dirs:
        yield finding(
            skill_md_missing,
            "folder beside the skill folders has markdown but no SKILL.md, so no agent loads "
            "it as a skill; add one or move the folder out",
            folder,
            1,
        )


# The token estimate works offline (no tokenizer vocabulary is downloaded): a run of letters counts one
# token per 6 characters, a run of digits one per 3, and every other visible character one. On this
# repository's skills that is 10-25% above the common "4 characters per token" rule of thumb for English:
# it errs high, on purpose, for markup and commands (punctuation-heavy text costs BPE tokenizers more).
# The words are those of r"[^\W\d_]+|\d+|[^\w\s]|_", its two kinds scanned apart (the classes are disjoint, so
# the runs are the same, and findall is quicker than one match object per word): runs of letters or of
# digits, and the characters that count one each.
_RUNS_RE = re.compile(r"[^\W\d_]+|\d+")
_ONES_RE = re.compile(r"[^\w\s]|_")
MAX_BODY_TOKENS = 5000  # Agent Skills guidance: keep SKILL.md instructions under about 5,000 tokens
MAX_SECTION_TOKENS = 2000  # one section past this belongs in a reference file


# A text is counted as bytes where every character's class maps onto an ASCII one (``_as_ascii``): there a run of
# letters is [A-Za-z]+ and one of digits [0-9]+, and chunks of at most 6 (3) of them, taken greedily, are one per
# started 6 (3) characters of each run, so counting chunks gives the estimate without a Python step per word (a
# bytes pattern scans about twice as fast as a Unicode one); what counts one is what deleting the others leaves, and
# the runs of digits (few) are counted one by one. The loop over words stays the definition (``_by_words``)
# and counts what cannot be mapped: a Unicode \w that is neither a \d nor alphabetic, such as "²" (its run is
# counted by its first character).
_LETTER_CHUNKS_RE = re.compile(rb"[A-Za-z]{1,6}")
_DIGITS = b"0123456789"
_WORD_OR_SPACE = _DIGITS + bytes(range(65, 91)) + bytes(range(97, 123)) + b" \t\n\r\x0b\x0c"  # \w and \s but "_"
_ONLY_DIGITS = bytes(c if c in _DIGITS else 32 for c in range(256))  # bytes.translate: every other byte a space
_NOT_ASCII_RE = re.compile(r"[^\x00-\x7f]")
_SEPARATOR_RE = re.compile(r"[\x1c-\x1f]")  # ASCII characters that are \s to a str pattern, not to a bytes one
_SEPARATORS = {c: " " for c in range(0x1C, 0x20)}
_KIND_RE = re.compile(r"(?P<one>[^\w\s])|(?P<digit>\d)|(?P<space>\s)|(?P<word>\w)")
_STAND_IN = {"one": ".", "digit": "0", "space": " "}


def _as_ascii(text: str) -> bytes | None:
    """``text`` with each character replaced by an ASCII one of the same class for the estimate (a letter, a
    digit, a space, one that counts one), as bytes; None where a character has no such stand-in."""
    if text.isascii():
        return (text.translate(_SEPARATORS) if _SEPARATOR_RE.search(text) else text).encode("ascii")
    table: dict[int, str] = {}
    for ch in set(_NOT_ASCII_RE.findall(text)):
        found = _KIND_RE.match(ch)
        kind = found.lastgroup if found is not None else None
        if kind in _STAND_IN:
            table[ord(ch)] = _STAND_IN[kind]
        elif kind == "word" and ch.isalpha():
            table[ord(ch)] = "a"
        else:
            return None
    if _SEPARATOR_RE.search(text) is None and all(v == "." for v in table.values()):
        return text.encode("ascii", "replace")  # each character outside ASCII becomes "?", which counts one
    return text.translate({**table, **_SEPARATORS}).encode("ascii")


def _by_words(text: str) -> int:
    """The estimate, word by word (see the patterns above)."""
    n = len(_ONES_RE.findall(text))
    for word in _RUNS_RE.findall(text):
        first = word[0]
        n += -(-len(word) // 3) if first.isdigit() else -(-len(word) // 6) if first.isalpha() else 1
    return n


def estimate_tokens(text: str) -> int:
    """An offline estimate of the tokens ``text`` costs in a model's context (see the patterns above)."""
    data = _as_ascii(text)
    if data is None:
        return _by_words(text)
    ones = len(data.translate(None, _WORD_OR_SPACE))  # what is left once every \w but "_" and every \s is gone
    digits = sum((len(run) + 2) // 3 for run in data.translate(_ONLY_DIGITS).split())
    return ones + len(_LETTER_CHUNKS_RE.findall(data)) + digits


@rule(
    "SK212",
    "token-budget",
    severity="warning",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): progressive disclosure, instructions under about 5,000 tokens",
    whole_file=True,
)
def token_budget(project: Project) -> Iterator[Finding]:
    """The SKILL.md body costs at most about 5,000 tokens (estimated offline)."""
    for skill in project.skills:
        doc = skill.skill_md
        if not doc.readable:
            continue
        lines = doc.text.split("\n")
        body = "\n".join(lines[doc.body_start - 1 :])
        total = estimate_tokens(body)
        if total > MAX_BODY_TOKENS:
            yield finding(
                token_budget,
                f"SKILL.md body is about {total} tokens (estimated offline); keep it under "
                f"{MAX_BODY_TOKENS}: agents load all of it when the skill triggers",
                doc.path,
                doc.body_start,
            )


@rule(
    "SK215",
    "section-token-budget",
    severity="warning",
    profile="isaaclab",
    cites="this repository's authoring rules (skills/README.md): one section of SKILL.md costs at most about 2,000 tokens",
)
def section_token_budget(project: Project) -> Iterator[Finding]:
    """Each `##` section of SKILL.md costs at most about 2,000 tokens (estimated offline, as SK212)."""
    for skill in project.skills:
        doc = skill.skill_md
        if not doc.readable:
            continue
        lines = doc.text.split("\n")
        starts = [h for h in doc.headings if h.level <= 2 and h.line >= doc.body_start]
        for i, h in enumerate(starts):
            end = starts[i + 1].line - 1 if i + 1 < len(starts) else len(lines)
            n = estimate_tokens("\n".join(lines[h.line - 1 : end]))
            if n > MAX_SECTION_TOKENS:
                yield finding(
                    section_token_budget,
                    f'section "{h.text}" is about {n} tokens (estimated offline); keep a section '
                    f"under {MAX_SECTION_TOKENS} and move details to a reference file",
                    doc.path,
                    h.line,
                )


def _linked_files(project: Project, doc: MarkdownDoc) -> set[str]:
    return {path for _, _, _, path, _ in link_targets(project, doc)}


@rule(
    "SK205",
    "reference-depth",
    severity="warning",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): file references stay one level deep from SKILL.md",
)
def reference_depth(project: Project) -> Iterator[Finding]:
    """Reference files are one level deep: a skill file links only to files SKILL.md links to directly.

    References are one level deep: a skill file other than SKILL.md links only to skill files that
    SKILL.md links directly or names itself (by path, by file name or stem in code, by a path pattern in
    code such as `shared/*-guide.md` or `{lang}/README.md` that the file fits, or by naming its folder).
    """
    for skill in project.skills:
        if not skill.skill_md.readable:
            continue
        direct = _linked_files(project, skill.skill_md) | {skill.skill_md.path}
        prefix = skill.dir + "/" if skill.dir else ""
        named = NamedBySkill(skill.skill_md)
        for doc in skill.files.values():
            if not doc.readable:
                continue
            for line, col, written, path, _ in link_targets(project, doc):
                if path == doc.path:
                    continue  # an in-page #anchor: the same file, not a reference
                if path not in project.files or named(path[len(prefix) :]):
                    continue  # a missing target is SK203's; a file SKILL.md names itself is one level deep
                if path.startswith(prefix) and path.endswith(".md") and path not in direct:
                    yield finding(
                        reference_depth,
                        f"{written!r} is a second-level reference: link it from SKILL.md or fold it into this file",
                        doc.path,
                        line,
                        col,
                    )


def _heading_near_top(doc: MarkdownDoc) -> bool:
    limit = doc.body_start + CONTENTS_WITHIN
    if any("contents" in h.text.lower() and h.line <= limit for h in doc.headings):
        return True
    local = [link for link in doc.links if link.target.startswith("#") and link.line <= limit]
    return len(local) >= 2


@rule(
    "SK207",
    "reference-contents",
    severity="warning",
    profile="claude",
    cites="Claude skill authoring best practices (docs.claude.com, agent skills best practices): reference files over 100 lines start with a table of contents",
    whole_file=True,
)
def reference_contents(project: Project) -> Iterator[Finding]:
    """A skill reference file longer than 100 lines opens with a contents list (a Contents heading or in-page links).

    A skill file other than SKILL.md that is longer than 100 lines has a contents list within 40 lines
    of its top: a heading containing "Contents", or at least two links to its own `#sections`. A README,
    changelog or licence that SKILL.md does not route to is for people browsing the repository: exempt.
    """
    for skill in project.skills:
        named = NamedBySkill(skill.skill_md)
        prefix = f"{skill.dir}/" if skill.dir else ""
        for doc in skill.files.values():
            if UNLISTED_OK.match(posixpath.basename(doc.path)) and not named(doc.path[len(prefix) :]):
                continue  # a README or changelog SKILL.md does not route to: for people, not agents
            if doc.readable and doc.n_lines > CONTENTS_AFTER and not _heading_near_top(doc):
                yield finding(
                    reference_contents,
                    f"{doc.n_lines} lines and no contents list near the top "
                    f'(a "Contents" heading or links to its sections within {CONTENTS_WITHIN} lines)',
                    doc.path,
                    doc.body_start,
                )


@rule(
    "SK208",
    "run-script-exists",
    profile="isaaclab",
    cites='Isaac Lab\'s skill validator (tools/skills validator in isaac-sim/IsaacLab): scripts are named as "Run `scripts/...`" and exist',
)
def run_script_exists(project: Project) -> Iterator[Finding]:
    """A script named with "Run `scripts/...`" exists in the skill (or at the repository path written)."""
    for skill in project.skills:
        for doc, line, col, token in script_mentions(project, skill):
            if not is_file(project, script_path(skill, token)):
                yield finding(
                    run_script_exists, f'"Run `{token}`" names a script that does not exist', doc.path, line, col
                )


@rule(
    "SK209",
    "script-documented",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): every script in a skill's scripts/ folder is documented",
)
def script_documented(project: Project) -> Iterator[Finding]:
    """Every entry script in a skill's scripts/ folder is named in the skill as "Run `scripts/...`".

    An entry script is a file with a shebang or a `__main__` guard; names starting with `_` or `.` are
    helpers.
    """
    for skill in project.skills:
        named = {script_path(skill, token) for _, _, _, token in script_mentions(project, skill)}
        for script in skill.entry_scripts:
            if script not in named:
                rel = posixpath.relpath(script, skill.dir or ".")
                yield finding(
                    script_documented,
                    f'{rel} is never named as "Run `{rel}`" in the skill\'s markdown '
                    "(agents run scripts they are told to run)",
                    skill.skill_md.path,
                    skill.skill_md.body_start,
                    truth=Loc(script, 1, 1),
                )


@rule(
    "SK210",
    "skill-name-ref",
    profile="isaaclab",
    cites="this repository's design (DESIGN.md, Sources of truth): cross-skill names are frontmatter names",
)
def skill_name_ref(project: Project) -> Iterator[Finding]:
    """A code span that is an `isaaclab-*` name is the frontmatter `name` of a skill in this repository."""
    if not names_known(project):
        return
    names = skill_names(project)
    for doc, _, line, col, text in repo_path_codes(project):
        if SKILL_NAME_RE.match(text) and text not in names:
            yield finding(
                skill_name_ref,
                f"`{text}` is not the name of any skill here ({', '.join(sorted(names)) or 'none'})",
                doc.path,
                line,
                col,
            )
