"""SK1xx: a SKILL.md frontmatter holds the keys and values agents and the Isaac Lab validator expect."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import Any

from ..model import Finding, Project, Skill
from .common import adopted, finding
from .registry import RuleFunc, rule

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
RESERVED = ("claude", "anthropic")
AUDIENCES = ("user", "developer")
STATUSES = ("experimental", "stable", "deprecated")
KNOWN_KEYS = frozenset(
    {
        # Agent Skills spec
        "name",
        "description",
        "license",
        "compatibility",
        "metadata",
        "allowed-tools",
        # Isaac Lab's own keys
        "audience",
        "status",
        "owners",
    }
)
# Claude Code's own keys (code.claude.com/docs/en/skills, frontmatter reference): Claude Code reads them,
# other agents ignore them.
CLAUDE_CODE_KEYS = frozenset(
    {
        "argument-hint",
        "arguments",
        "disable-model-invocation",
        "user-invocable",
        "model",
        "effort",
        "context",
        "agent",
        "hooks",
        "paths",
        "shell",
        "when_to_use",
    }
)
# First or second person anywhere: "I", "me", "my", "you", "your" ... as whole words ("I" only capital).
FIRST_PERSON_RE = re.compile(
    r"(?<![\w'/-])(I|I'm|I've|I'll|I'd|(?i:me|my|you|your|yours|yourself|you're|you'll|you've|you'd))"
    r"(?![\w'/-])"  # "I/O", "A/B", "I-beam": not a pronoun
)


def alias_points_to(project: Project, name: str, skill: Skill) -> bool:
    """Whether the discovery alias ``.agents/skills/<name>`` is a link to ``skill``'s folder."""
    target = project.aliases.get(name)
    if not target:
        return False
    return posixpath.normpath(posixpath.join(".agents/skills", target.replace("\\", "/").strip())) == skill.dir


def _metadata_skills(project: Project) -> Iterator[tuple[Skill, dict[str, Any]]]:
    """Skills whose audience/status/owners are judged: only where the tree or config adopts them."""
    if adopted(project, "skill-metadata"):
        yield from _skills_with_frontmatter(project)


def _skills_with_frontmatter(project: Project) -> Iterator[tuple[Skill, dict[str, Any]]]:
    for skill in project.skills:
        fm = skill.skill_md.frontmatter
        if skill.skill_md.readable and isinstance(fm, dict) and not skill.skill_md.frontmatter_error:
            yield skill, fm


def _key_line(skill: Skill, key: str) -> int:
    doc = skill.skill_md
    return doc.frontmatter_lines.get(key) or (1 if doc.frontmatter is None else 2)


def _at(rule: RuleFunc, skill: Skill, key: str, message: str) -> Finding:
    return finding(rule, message, skill.skill_md.path, _key_line(skill, key))


@rule(
    "SK100",
    "frontmatter-missing",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): SKILL.md is YAML frontmatter followed by markdown",
)
def frontmatter_missing(project: Project) -> Iterator[Finding]:
    """SKILL.md starts with a YAML frontmatter block (between `---` lines)."""
    for skill in project.skills:
        doc = skill.skill_md
        if doc.readable and doc.frontmatter is None and not doc.frontmatter_error:
            yield finding(
                frontmatter_missing, "SKILL.md has no YAML frontmatter block (--- lines at the top)", doc.path, 1
            )


@rule(
    "SK101",
    "name-missing",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): frontmatter field `name` (required)",
)
def name_missing(project: Project) -> Iterator[Finding]:
    """The frontmatter has a `name` that is a string."""
    for skill, fm in _skills_with_frontmatter(project):
        if "name" not in fm:
            yield _at(name_missing, skill, "name", "frontmatter has no `name`")
        elif not isinstance(fm["name"], str):
            yield _at(name_missing, skill, "name", f"`name` must be a string, not {type(fm['name']).__name__}")


@rule(
    "SK102",
    "name-format",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): `name` is 1-64 characters, lowercase letters, digits and hyphens, no leading, trailing or doubled hyphen",
)
def name_format(project: Project) -> Iterator[Finding]:
    """`name` is 1-64 characters: lowercase letters, digits and single inner hyphens."""
    for skill, fm in _skills_with_frontmatter(project):
        name = fm.get("name")
        if not isinstance(name, str):
            continue
        if not 1 <= len(name) <= 64:
            yield _at(name_format, skill, "name", f"`name` is {len(name)} characters; it must be 1-64")
        elif not NAME_RE.match(name):
            yield _at(
                name_format,
                skill,
                "name",
                f"`name` {name!r} must be lowercase letters, digits and single hyphens, "
                "not starting or ending with a hyphen",
            )


@rule(
    "SK103",
    "name-reserved",
    profile="claude",
    cites='Claude skills overview (docs.claude.com, agent skills: frontmatter field requirements): `name` may not contain the reserved words "anthropic" or "claude"',
)
def name_reserved(project: Project) -> Iterator[Finding]:
    """`name` does not contain the reserved words `claude` or `anthropic`."""
    for skill, fm in _skills_with_frontmatter(project):
        name = fm.get("name")
        if isinstance(name, str):
            for word in RESERVED:
                if word in name.lower():
                    yield _at(name_reserved, skill, "name", f"`name` {name!r} contains the reserved word {word!r}")


@rule(
    "SK104",
    "description-length",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): frontmatter field `description` (required, 1-1024 characters)",
)
def description_length(project: Project) -> Iterator[Finding]:
    """The frontmatter has a `description` string of 1-1024 characters."""
    for skill, fm in _skills_with_frontmatter(project):
        desc = fm.get("description")
        if "description" not in fm:
            yield _at(description_length, skill, "description", "frontmatter has no `description`")
        elif not isinstance(desc, str):
            yield _at(description_length, skill, "description", "`description` must be a string")
        elif not 1 <= len(desc.strip()) <= 1024:
            yield _at(
                description_length,
                skill,
                "description",
                f"`description` is {len(desc.strip())} characters; it must be 1-1024",
            )


@rule(
    "SK105",
    "description-use-when",
    profile="isaaclab",
    cites='Isaac Lab\'s skill validator (tools/skills validator in isaac-sim/IsaacLab): the description says when to use the skill ("Use when")',
)
def description_use_when(project: Project) -> Iterator[Finding]:
    """`description` says when to use the skill with the words "Use when".

    `description` contains "Use when" (case-insensitive): it says what triggers the skill.
    """
    for skill, fm in _skills_with_frontmatter(project):
        desc = fm.get("description")
        if isinstance(desc, str) and desc.strip() and "use when" not in desc.lower():
            yield _at(
                description_use_when,
                skill,
                "description",
                '`description` must contain "Use when" (what triggers the skill)',
            )


# a quotation in a description: the user's words, in double, single or typographic quotes (an apostrophe
# inside a word, as in "user's", opens none)
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|‘[^’]*’|(?<![\w])'[^']*'(?![\w])")


@rule(
    "SK106",
    "description-third-person",
    profile="claude",
    cites="Claude skill authoring best practices (docs.claude.com, agent skills best practices): write descriptions in the third person",
)
def description_third_person(project: Project) -> Iterator[Finding]:
    """`description` is written in the third person: no "I", "me", "my", "you" or "your" anywhere in it.

    Not only at a sentence's start: anywhere. The description is put into the system prompt, where a
    first- or second-person voice confuses who is speaking; "Use when the user ..." says the same in the
    third person. Words a user says, quoted (`Use when asked to "review my UI"`), are the user's, not the
    description's.
    """
    for skill, fm in _skills_with_frontmatter(project):
        desc = fm.get("description")
        if isinstance(desc, str):
            m = FIRST_PERSON_RE.search(_QUOTED.sub(" ", desc.strip()))
            if m:
                yield _at(
                    description_third_person,
                    skill,
                    "description",
                    f"`description` must be in the third person; it says {m.group(1)!r} "
                    '(write "the user" or name the task)',
                )


@rule(
    "SK107",
    "audience",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): `audience` is user or developer and matches the folder",
)
def audience(project: Project) -> Iterator[Finding]:
    """`audience` is `user` or `developer` and equals the folder under skills/ that holds the skill.

    Like SK108 and SK109, it reports only where the tree adopts this metadata: `adopt =
    ["skill-metadata"]` in [tool.skills-check], or any skill writing `audience`, `status` or `owners`.
    """
    for skill, fm in _metadata_skills(project):
        value = fm.get("audience")
        if "audience" not in fm:
            yield _at(audience, skill, "audience", f"frontmatter has no `audience` (expected {skill.audience!r})")
        elif value not in AUDIENCES:
            yield _at(audience, skill, "audience", f"`audience` is {value!r}; it must be one of {', '.join(AUDIENCES)}")
        elif value != skill.audience:
            yield _at(
                audience,
                skill,
                "audience",
                f"`audience` is {value!r} but the skill lives under skills/{skill.audience}/",
            )


@rule(
    "SK108",
    "status",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): `status` is experimental, stable or deprecated",
)
def status(project: Project) -> Iterator[Finding]:
    """`status` is `experimental`, `stable` or `deprecated`."""
    for skill, fm in _metadata_skills(project):
        if "status" not in fm:
            yield _at(status, skill, "status", "frontmatter has no `status`")
        elif fm["status"] not in STATUSES:
            yield _at(status, skill, "status", f"`status` is {fm['status']!r}; it must be one of {', '.join(STATUSES)}")


@rule(
    "SK109",
    "owners",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): `owners` is a non-empty list",
)
def owners(project: Project) -> Iterator[Finding]:
    """`owners` is a non-empty list of non-empty strings."""
    for skill, fm in _metadata_skills(project):
        value = fm.get("owners")
        if "owners" not in fm:
            yield _at(owners, skill, "owners", "frontmatter has no `owners`")
        elif not isinstance(value, list) or not value:
            yield _at(owners, skill, "owners", "`owners` must be a non-empty list")
        elif not all(isinstance(v, str) and v.strip() for v in value):
            yield _at(owners, skill, "owners", "every entry of `owners` must be a non-empty string")


@rule(
    "SK110",
    "license",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): user skills carry `license`",
)
def license_(project: Project) -> Iterator[Finding]:
    """A user skill has a `license` string."""
    for skill, fm in _skills_with_frontmatter(project):
        if skill.audience != "user":
            continue
        value = fm.get("license")
        if not isinstance(value, str) or not value.strip():
            yield _at(license_, skill, "license", "a user skill needs a `license` string")


@rule(
    "SK118",
    "metadata-map",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): optional field `metadata`, a map from "
    "string keys to string values",
)
def metadata_map(project: Project) -> Iterator[Finding]:
    """`metadata`, when present, maps string keys to string values."""
    for skill, fm in _skills_with_frontmatter(project):
        value = fm.get("metadata")
        if value is not None and not isinstance(value, dict):
            yield _at(metadata_map, skill, "metadata", "`metadata` must be a mapping of string keys to string values")
            continue
        for key, item in (value or {}).items():
            if not isinstance(item, str):
                yield _at(metadata_map, skill, f"metadata.{key}", f"`metadata.{key}` must be a string")


@rule(
    "SK111",
    "metadata",
    profile="isaaclab",
    cites="Isaac Lab's skill validator (tools/skills validator in isaac-sim/IsaacLab): user skills carry `metadata.author`",
)
def metadata(project: Project) -> Iterator[Finding]:
    """A user skill has `metadata.author` (the map itself is SK118's)."""
    for skill, fm in _skills_with_frontmatter(project):
        value = fm.get("metadata")
        if value is not None and not isinstance(value, dict):
            continue
        if skill.audience == "user":
            author = (value or {}).get("author")
            if not isinstance(author, str) or not author.strip():
                yield _at(metadata, skill, "metadata" if value else "name", "a user skill needs `metadata.author`")


@rule(
    "SK112",
    "unknown-key",
    severity="warning",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): the frontmatter fields are name, description, license, compatibility, metadata, allowed-tools",
)
def unknown_key(project: Project) -> Iterator[Finding]:
    """Frontmatter keys outside the spec, Claude Code's keys and Isaac Lab's keys are warnings.

    A key outside the Agent Skills spec (`name`, `description`, `license`, `compatibility`, `metadata`,
    `allowed-tools`), Claude Code's own keys (`argument-hint`, `disable-model-invocation`,
    `user-invocable`, `model`, `context`, `agent`, `hooks`, `paths` ...) and Isaac Lab's keys
    (`audience`, `status`, `owners`) is read by no agent: Claude Code and other agents ignore it and
    claude.ai uploads reject it. A custom field belongs under `metadata`.
    """
    for skill, fm in _skills_with_frontmatter(project):
        for key in fm:
            if key not in KNOWN_KEYS and key not in CLAUDE_CODE_KEYS:
                yield _at(
                    unknown_key,
                    skill,
                    str(key),
                    f"unknown frontmatter key `{key}`: no agent reads it (not a "
                    "key of the Agent Skills spec or of Claude Code; claude.ai uploads reject it); put "
                    "custom fields under `metadata`",
                )


@rule(
    "SK113",
    "compatibility",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): optional field `compatibility` (1-500 characters)",
)
def compatibility(project: Project) -> Iterator[Finding]:
    """`compatibility`, when present, is a string of 1-500 characters."""
    for skill, fm in _skills_with_frontmatter(project):
        if "compatibility" in fm:
            value = fm["compatibility"]
            if not isinstance(value, str) or not 1 <= len(value) <= 500:
                yield _at(compatibility, skill, "compatibility", "`compatibility` must be a string of 1-500 characters")


@rule(
    "SK114",
    "name-unique",
    profile="spec",
    cites="Agent Skills specification (agentskills.io/specification): `name` identifies the skill (two skills with one name shadow each other)",
)
def name_unique(project: Project) -> Iterator[Finding]:
    """Every skill has its own `name`.

    No two skills share a `name`.
    """
    by_name: dict[str, list[Skill]] = {}
    for skill, fm in _skills_with_frontmatter(project):
        if isinstance(fm.get("name"), str):
            by_name.setdefault(fm["name"], []).append(skill)
    for name, group in by_name.items():
        if len(group) < 2:
            continue
        linked = [s for s in group if alias_points_to(project, name, s)]
        original = linked[0] if linked else group[0]
        why = f" (.agents/skills/{name} links to it)" if linked else ""
        for skill in group:
            if skill is not original:
                yield _at(
                    name_unique,
                    skill,
                    "name",
                    f"`name` {name!r} is also the name of {original.skill_md.path}{why}: "
                    "this folder looks like a copy; rename or remove it",
                )


XML_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9_.:-]*(?:\s[^<>]*)?/?>")


@rule(
    "SK115",
    "description-xml",
    profile="claude",
    cites="Claude skills overview (docs.claude.com, agent skills: frontmatter field requirements): `description` may not contain XML tags",
)
def description_xml(project: Project) -> Iterator[Finding]:
    """`description` holds no XML tags such as `<example>`: claude.ai, the Claude API and Codex reject them."""
    for skill, fm in _skills_with_frontmatter(project):
        desc = fm.get("description")
        if isinstance(desc, str):
            m = XML_TAG_RE.search(desc)
            if m:
                yield _at(
                    description_xml,
                    skill,
                    "description",
                    f"`description` holds the XML tag {m.group(0)!r}; "
                    "skill loaders reject tags there (write it as plain text)",
                )
