"""SK2xx: sections, length, links and anchors, repository paths, scripts and cross-skill names."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..model import Finding, Loc, MarkdownDoc, Project, RstDoc, Skill
from .common import (
    PATTERN_PART,
    UNLISTED_OK,
    all_skill_docs,
    anchors_of,
    cached,
    code_items_of,
    docs_dir,
    exists,
    find_doc,
    finding,
    folder_named,
    is_external,
    is_file,
    is_placeholder,
    names_known,
    negative_lines_of,
    per_doc,
    resolve,
    rst_docs,
    skill_dir_relative,
    skill_docs,
    skill_names,
    written_patterns,
)
from .registry import rule

REQUIRED_SECTIONS = ("When To Use", "Workflow", "Validation", "Maintenance", "References")
MAX_BODY_LINES = 500
CONTENTS_AFTER = 100  # reference files longer than this need a contents list near the top
CONTENTS_WITHIN = 40  # "near the top": within this many lines of the body start
PATH_PREFIXES = ("docs", "scripts", "skills", "tools")
REPO_PATH_RE = re.compile(r"^(?:\./)?[A-Za-z0-9_.][A-Za-z0-9_.@+-]*/[A-Za-z0-9_./@+-]*(?:#[A-Za-z0-9_.-]+)?$")
RUN_SCRIPT_RE = re.compile(r"\bRun\s+`([^`\n]+)`", re.IGNORECASE)
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


# In ASCII text a run of letters is [A-Za-z]+ and one of digits [0-9]+: chunks of at most 6 (3) of them, taken
# greedily, are one per started 6 (3) characters of each run, so counting chunks gives the same estimate
# without a Python step per word. (Other text keeps the loop: a Unicode \w that is neither a \d nor alphabetic,
# such as "²", is counted by its first character there.)
_LETTER_CHUNKS_RE = re.compile(r"[A-Za-z]{1,6}")
_DIGIT_CHUNKS_RE = re.compile(r"[0-9]{1,3}")


def estimate_tokens(text: str) -> int:
    """An offline estimate of the tokens ``text`` costs in a model's context (see the patterns above)."""
    n = len(_ONES_RE.findall(text))
    if text.isascii():
        return n + len(_LETTER_CHUNKS_RE.findall(text)) + len(_DIGIT_CHUNKS_RE.findall(text))
    for word in _RUNS_RE.findall(text):
        first = word[0]
        n += -(-len(word) // 3) if first.isdigit() else -(-len(word) // 6) if first.isalpha() else 1
    return n


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


def _checked_docs(project: Project) -> Iterator[MarkdownDoc | RstDoc]:
    seen: set[str] = set()
    for _, doc in all_skill_docs(project):
        if doc.path not in seen:
            seen.add(doc.path)
            yield doc
    extra = getattr(project, "markdown", None)
    if isinstance(extra, dict):
        for path, doc in sorted(extra.items()):
            if path not in seen and getattr(doc, "readable", True):
                seen.add(path)
                yield doc
    yield from rst_docs(project)


def _labels(project: Project) -> dict[str, tuple[str, int]]:
    def make() -> dict[str, tuple[str, int]]:
        out: dict[str, tuple[str, int]] = {}
        for doc in rst_docs(project):
            for label, line in doc.labels.items():
                out.setdefault(label.lower(), (doc.path, line))
        return out

    return cached(project, "rst-labels", make)


def _doc_target(project: Project, doc: MarkdownDoc | RstDoc, target: str) -> str:
    """The file a Sphinx :doc: target names (relative to the page, or to the source dir with a /)."""
    target = target.strip()
    if target.startswith("/"):
        base = docs_dir(project)
        for candidate in (f"{base}/source{target}", f"{base}{target}"):
            if is_file(project, candidate + ".rst") or is_file(project, candidate):
                return candidate + (".rst" if is_file(project, candidate + ".rst") else "")
        return f"{base}{target}.rst"
    path = resolve(doc.path, target)
    return path if path.endswith(".rst") else path + ".rst"


def _link_targets(project: Project, doc: MarkdownDoc | RstDoc) -> list[tuple[int, int, str, str, str]]:
    """(line, col, as written, file path, fragment) for every local link in ``doc`` (once per document: SK203,
    SK204 and SK205 read them)."""
    found: list[tuple[int, int, str, str, str]] = per_doc(
        project, "link-targets", doc, lambda: list(_each_link_target(project, doc))
    )
    return found


def _each_link_target(project: Project, doc: MarkdownDoc | RstDoc) -> Iterator[tuple[int, int, str, str, str]]:
    for link in doc.links:
        target = link.target.strip()
        kind = getattr(link, "kind", "md")
        if not target or kind in ("url", "ref"):
            continue
        if kind == "doc":
            if target != "self" and not any(ch in target for ch in "*?["):  # toctree self and :glob: patterns
                yield link.line, link.col, target, _doc_target(project, doc, target), ""
            continue
        if is_external(target) or target.startswith("<"):
            continue
        path_part, _, fragment = target.partition("#")
        inner = skill_dir_relative(path_part)
        if inner is not None:  # `{baseDir}/x`: x in the skill's folder
            folder = _skill_dir_of(project, doc.path)
            path = posixpath.normpath(posixpath.join(folder, inner)) if folder is not None else None
        elif is_placeholder(path_part):
            continue
        else:
            path = resolve(doc.path, path_part) if path_part else doc.path
        if path is not None:
            yield link.line, link.col, target, path, fragment


def _skill_dir_of(project: Project, path: str) -> str | None:
    """The folder of the skill holding the document at ``path`` (None outside every skill)."""
    by_doc = cached(project, "skill-dir-of", lambda: {d.path: s.dir for s, d in all_skill_docs(project)})
    return by_doc.get(path)


@rule(
    "SK203",
    "link-target",
    profile="links",
    cites="CommonMark links and Sphinx :doc: targets resolve in the checked tree",
)
def link_target(project: Project) -> Iterator[Finding]:
    """Every relative link (markdown links, Sphinx :doc:) points at a file or folder that exists.

    Every relative link in the skills' markdown, and every Sphinx `:doc:` target in the docs, exists.
    External URLs are not fetched.
    """
    for doc in _checked_docs(project):
        for line, col, written, path, _ in _link_targets(project, doc):
            if not exists(project, path):
                yield finding(
                    link_target, f"link target {written!r} does not exist (resolved to {path})", doc.path, line, col
                )


@rule("SK204", "link-anchor", profile="links", cites="GitHub heading anchors and docutils section ids/labels resolve")
def link_anchor(project: Project) -> Iterator[Finding]:
    """Every `#anchor` in a link names a real heading (GitHub anchors; RST section ids or labels) and every :ref: label exists.

    A `#fragment` (of a link, or of a backticked repository path) names a real heading of the target:
    GitHub anchors for markdown (with `-1` suffixes for repeats), section ids or explicit labels for
    `.rst`. Every `:ref:` label exists in the docs.
    """
    labels = _labels(project)
    for doc in _checked_docs(project):
        for line, col, written, path, fragment in _link_targets(project, doc):
            if not fragment or not exists(project, path):
                continue
            target = find_doc(project, path)
            if target is None or not getattr(target, "readable", True):
                continue  # a file the model does not hold: its anchors are unknown
            if fragment.lower() not in anchors_of(target):
                yield finding(
                    link_anchor,
                    f"anchor #{fragment} in {written!r} names no heading in {path}",
                    doc.path,
                    line,
                    col,
                    truth=Loc(path, 1, 1),
                )
        for link in doc.links:
            if getattr(link, "kind", "md") == "ref" and link.target.strip().lower() not in labels:
                yield finding(
                    link_anchor,
                    f":ref: target {link.target!r} is not a label in the docs",
                    doc.path,
                    link.line,
                    link.col,
                )
    for doc, skill, line, col, text in _repo_path_codes(project):
        path, _, fragment = text.partition("#")
        if not fragment or not REPO_PATH_RE.match(text):
            continue
        path = posixpath.normpath(path.removeprefix("./"))
        if not exists(project, path) and skill is not None:
            path = skill.join(path)
        target = find_doc(project, path) if exists(project, path) else None
        if target is not None and getattr(target, "readable", True) and fragment.lower() not in anchors_of(target):
            yield finding(
                link_anchor,
                f"anchor #{fragment} in `{text}` names no heading in {path}",
                doc.path,
                line,
                col,
                truth=Loc(path, 1, 1),
            )


def _linked_files(project: Project, doc: MarkdownDoc) -> set[str]:
    return {path for _, _, _, path, _ in _link_targets(project, doc)}


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
        named = _NamedBySkill(skill.skill_md)
        for doc in skill.files.values():
            if not doc.readable:
                continue
            for line, col, written, path, _ in _link_targets(project, doc):
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


class _NamedBySkill:
    """Whether SKILL.md names a skill file itself: by its path, by its file name or stem in code
    (`faq-database.md`, `async-defer-await`), by a pattern in code that it fits (`shared/managed-agents-*.md`,
    `{lang}/README.md`, `<topic>/notes.md`), or by naming its folder as a whole (`reference/`)."""

    def __init__(self, doc: MarkdownDoc) -> None:
        self.text = doc.text
        self.bare = doc.text.replace("./", "")
        spans = [c.text.strip() for c in doc.code if c.kind == "inline"]
        self.names = {posixpath.basename(t) for t in spans if t.endswith(".md") and not PATTERN_PART.search(t)}
        self.names |= {f"{t}.md" for t in spans if t and not any(c in t for c in " /.")}  # a file's stem
        self.patterns = written_patterns([doc])

    def __call__(self, inner: str) -> bool:
        folder = posixpath.dirname(inner)
        return (
            inner in self.text
            or posixpath.basename(inner) in self.names
            or any(p.fullmatch(inner) for p in self.patterns)
            or (bool(folder) and folder_named(self.bare, folder))
        )


def is_repo_path(project: Project, path: str, skill: Skill | None) -> bool:
    """Whether a path-like span belongs to this tree: its first component is at the root or in the skill."""
    first = path.split("/", 1)[0]
    if first in (".", "..") or not first:
        return False
    return exists(project, first) or (skill is not None and exists(project, skill.join(first)))


_PathCode = tuple[MarkdownDoc | RstDoc, Skill | None, int, int, str]


def _repo_path_codes(project: Project) -> list[_PathCode]:
    """(doc, skill, line, col, text) for every inline code span that may name a path (once per project: SK204,
    SK206 and SK210 read them)."""
    found: list[_PathCode] = cached(project, "repo-path-codes", lambda: list(_each_path_code(project)))
    return found


def _each_path_code(project: Project) -> Iterator[_PathCode]:
    for skill, doc in all_skill_docs(project):
        negative = negative_lines_of(project, doc)
        for code in code_items_of(project, doc):
            if code.kind == "inline" and code.line not in negative:
                text = code.text.strip()
                inner = skill_dir_relative(text)  # `{baseDir}/scripts/x.py`: judged in the skill folder
                yield doc, skill, code.line, code.col, inner if inner is not None else text
    for rst in rst_docs(project):
        for code in code_items_of(project, rst):
            if code.kind == "inline":
                yield rst, None, code.line, code.col, code.text.strip()


# Words before a path that make it an example, a pattern or a file still to be made, not one that exists.
NOT_A_CLAIM_RE = re.compile(
    r"(?i)(?<!\w)(e\.g\.|for example|for instance|such as|example|hypothetical|placeholder|create[sd]?|"
    r"creating|will (?:be )?(?:write|writes|written|create|created|generate|generated|appear|exist)|"
    r"generate[sd]?|writes?|saved? (?:to|as|in)|output (?:to|in)|new file|would|"
    r"(?:do not|don't|never) (?:reference|use|name|cite|link|write)|good|bad|add|copy\b.*\bto)(?!\w)|[✓✗✔✘]"
)


def _not_a_claim(doc: MarkdownDoc | RstDoc, line: int, col: int) -> bool:
    """The words before the span on its line (its sentence) make the path an example or a file to be made."""
    lines = doc.text.split("\n")
    if not 0 < line <= len(lines):
        return False
    before = lines[line - 1][: max(col - 1, 0)].replace("*", "")  # "Do **not** use": the words, not the emphasis
    sentence = re.split(r"(?<!e\.g)(?<!i\.e)[.!?]\s", before)[-1]
    return bool(NOT_A_CLAIM_RE.search(sentence))


@rule(
    "SK206",
    "repo-path",
    profile="links",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): backticked repository paths exist",
)
def repo_path(project: Project) -> Iterator[Finding]:
    """A backticked path whose first folder exists at the root (or in the skill) exists.

    An inline code span that looks like a path (`a/b...`) and whose first component is a top-level
    entry of the checked tree (`docs/`, `source/`, any folder) or, in a skill, an entry of the skill
    folder (`scripts/...`), exists there; a `#anchor` on it is checked by SK204. Spans whose first
    component is nowhere in the tree (`cuda/12.1`, `owner/repo`) are not taken for paths, and spans with
    placeholders or globs (`<dir>`, `*`) are not paths. In a skill, a path that exists relative to the plugin
    holding it (a `.claude-plugin/` folder above) exists, and one under an agent's or CI's settings folder
    (`.claude/`, `.agents/`, `.github/` ...) names the user's project, not this tree. A missing file is
    reported where its folder exists (beside its siblings: a broken reference); a folder (`evidence/`), or a
    file in folders that do not exist, describes a layout still to be made.
    """
    run_named = {
        (doc.path, line, token) for skill in project.skills for doc, line, _, token in _script_mentions(project, skill)
    }
    for doc, skill, line, col, text in _repo_path_codes(project):
        if not REPO_PATH_RE.match(text):
            continue
        if (doc.path, line, text) in run_named:
            continue  # "Run `scripts/...`": SK208 reports a missing script
        path, _, _ = text.partition("#")
        path = posixpath.normpath(path.removeprefix("./"))
        plugin = _plugin_root(project, skill)
        first = path.split("/", 1)[0]
        in_plugin = plugin is not None and first not in ("", ".", "..") and exists(project, f"{plugin}/{first}")
        if is_placeholder(path) or not (in_plugin or is_repo_path(project, path, skill)):
            continue
        if exists(project, path) or (plugin is not None and exists(project, f"{plugin}/{path}")):
            continue
        if skill is not None and (exists(project, skill.join(path)) or first in USER_PROJECT_FOLDERS):
            continue
        if text.split("#", 1)[0].endswith("/") or not _parent_exists(project, skill, plugin, path):
            continue  # a folder, or a file in folders that do not exist yet: a layout described, not a reference
        if _not_a_claim(doc, line, col):  # read only for a path that would be reported
            continue
        yield finding(repo_path, f"`{text}` names a path that does not exist", doc.path, line, col)


# Folders of the project a skill works in (agents' and CI's settings): a skill that names `.claude/x.md` tells
# the agent to read the user's file there, not one of the tree that holds the skill.
USER_PROJECT_FOLDERS = frozenset({".claude", ".agents", ".codex", ".cursor", ".gemini", ".github", ".vscode"})


def _parent_exists(project: Project, skill: Skill | None, plugin: str | None, path: str) -> bool:
    """Whether the folder holding ``path`` exists where the path may be read from (the root, the skill, the
    plugin holding the skill)."""
    parent = posixpath.dirname(path)
    if not parent or exists(project, parent):
        return True
    return (skill is not None and exists(project, skill.join(parent))) or (
        plugin is not None and exists(project, f"{plugin}/{parent}")
    )


def _plugin_root(project: Project, skill: Skill | None) -> str | None:
    """The plugin that holds the skill (the nearest folder above it with a ``.claude-plugin/`` manifest folder),
    or None: a plugin's skills name its agents and commands from there."""
    folder = posixpath.dirname(skill.dir) if skill is not None else ""
    while folder:
        if exists(project, f"{folder}/.claude-plugin"):
            return folder
        folder = posixpath.dirname(folder)
    return None


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
        named = _NamedBySkill(skill.skill_md)
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


def _script_mentions(project: Project, skill: Skill) -> list[tuple[MarkdownDoc, int, int, str]]:
    """(doc, line, col, path) for every "Run `...scripts/...`" in the skill's markdown (once per skill)."""
    found: list[tuple[MarkdownDoc, int, int, str]] = per_doc(
        project, "script-mentions", skill, lambda: list(_each_script_mention(skill))
    )
    return found


def _each_script_mention(skill: Skill) -> Iterator[tuple[MarkdownDoc, int, int, str]]:
    for doc in skill_docs(skill):
        text = doc.text
        if "scripts/" not in text:
            continue  # no token can name a script
        line, counted = 1, 0  # the line at offset ``counted`` (matches come in order: count each stretch once)
        for m in _run_matches(text):
            for token in m.group(1).split():
                token = token.strip("'\"")
                if token.startswith("scripts/") or "/scripts/" in token:
                    start = m.start(1)
                    line += text.count("\n", counted, start)
                    counted = start
                    col = start - (text.rfind("\n", 0, start) + 1) + 1
                    yield doc, line, col, token
                    break


def _run_matches(text: str) -> Iterator[re.Match[str]]:
    """``RUN_SCRIPT_RE.finditer(text)``, the pattern tried only where "run" is written (in any case): a scan by
    ``str.find`` instead of the pattern at every offset."""
    lower = text.lower()
    if len(lower) != len(text):  # a character whose lower case is longer: offsets differ, scan as written
        yield from RUN_SCRIPT_RE.finditer(text)
        return
    end = 0
    pos = lower.find("run")
    while pos >= 0:
        if pos >= end:  # matches do not overlap, as finditer's
            m = RUN_SCRIPT_RE.match(text, pos)  # (its \b sees the text before ``pos``)
            if m is not None:
                yield m
                end = m.end()
        pos = lower.find("run", pos + 1)


def _script_path(skill: Skill, token: str) -> str:
    return skill.join(token) if token.startswith("scripts/") else posixpath.normpath(token)


@rule(
    "SK208",
    "run-script-exists",
    profile="isaaclab",
    cites='Isaac Lab\'s skill validator (tools/skills validator in isaac-sim/IsaacLab): scripts are named as "Run `scripts/...`" and exist',
)
def run_script_exists(project: Project) -> Iterator[Finding]:
    """A script named with "Run `scripts/...`" exists in the skill (or at the repository path written)."""
    for skill in project.skills:
        for doc, line, col, token in _script_mentions(project, skill):
            if not is_file(project, _script_path(skill, token)):
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
        named = {_script_path(skill, token) for _, _, _, token in _script_mentions(project, skill)}
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
    for doc, _, line, col, text in _repo_path_codes(project):
        if SKILL_NAME_RE.match(text) and text not in names:
            yield finding(
                skill_name_ref,
                f"`{text}` is not the name of any skill here ({', '.join(sorted(names)) or 'none'})",
                doc.path,
                line,
                col,
            )
