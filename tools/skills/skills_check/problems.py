"""The checker core's input problems: the size caps, the codes (unreadable, binary, too large, ...) and the
finding each makes. These codes belong to the checker core (the rules package owns every other code; the
suppression stage's are in adoption/suppress.py); inputs.py raises them while it reads.
"""

from __future__ import annotations

from typing import NamedTuple

from .model import Finding, Loc

# Size caps (bytes) per kind of file: each parser's worst case stays within seconds and a few hundred MB
# at its cap (markdown-it's link/emphasis scanning is superlinear on hostile input; docutils is not).
MAX_BYTES = 1024 * 1024  # RST, Python, JSON, anything else
MAX_MARKDOWN_BYTES = 256 * 1024  # markdown (a SKILL.md of 500 lines is about 40 KB)


class CoreCode(NamedTuple):
    """A code of the checker core, defined once (here, or the suppression stage's in adoption/suppress.py):
    an input problem or a suppression finding, always on. ``explain`` prints its summary and text."""

    code: str
    summary: str  # one line
    text: str  # the longer explanation


# The input problems, each named where it is raised (``problem(UNREADABLE, ...)``).
UNREADABLE = CoreCode(
    "IN001",
    "file missing or unreadable",
    "A file the checker needs (a configured launcher/trainer, a skill file) does not exist or "
    "cannot be opened. Fix the path in pyproject.toml [tool.skills-check] or restore the file.",
)
BINARY = CoreCode(
    "IN002",
    "binary file",
    "A file expected to be text holds NUL bytes. It is not parsed.",
)
NOT_UTF8 = CoreCode(
    "IN003",
    "not UTF-8",
    "A text file is not valid UTF-8; the location is the first bad byte. Re-save it as UTF-8.",
)
TOO_LARGE = CoreCode(
    "IN004",
    "file too large",
    f"A text file is larger than the checker parses ({MAX_MARKDOWN_BYTES // 1024} KB for markdown, "
    f"{MAX_BYTES // 1024} KB for other files) and is not parsed. The caps bound each parser's time "
    "and memory on hostile input.",
)
BAD_LINK = CoreCode(
    "IN005",
    "symlink loop or dangling link",
    "A path inside the checked tree is a symbolic link that loops or points nowhere.",
)
LEAVES_ROOT = CoreCode(
    "IN006",
    "path leaves the checked root",
    "A file or folder the checker would read (a skill, a page, a configured path) is a symbolic link "
    "to a place outside the checked root, or a `../` or absolute path. The checker never reads "
    "outside its root: the file is not opened.",
)
NOT_REGULAR = CoreCode(
    "IN007",
    "not a regular file",
    "A path the checker would read is a FIFO, a device, a socket or another special file. Only "
    "regular files are read (a FIFO would block the check; /dev/zero never ends).",
)
BYTE_ORDER_MARK = CoreCode(
    "IN008",
    "byte-order mark",
    "(warning) A text file starts with a UTF-8 byte-order mark. The checker strips it, but some skill "
    "loaders then do not see the `---` line and miss the frontmatter, and in a file without frontmatter "
    "tools that compare bytes or read the first line see it. Save the file without a BOM.",
)
YAML_ERROR = CoreCode(
    "IN010",
    "frontmatter YAML does not parse",
    "The YAML between the --- lines does not parse; the location is where the YAML parser stopped.",
)
FRONTMATTER_UNCLOSED = CoreCode(
    "IN011",
    "frontmatter block not closed",
    "The file starts with --- but has no closing --- line, so markdown parsers read the frontmatter as body text.",
)
NOT_A_MAPPING = CoreCode(
    "IN012",
    "frontmatter is not a mapping",
    "The frontmatter parses as YAML but is not a key: value mapping.",
)
YAML_ALIASES = CoreCode(
    "IN013",
    "frontmatter uses YAML anchors or aliases",
    "Skill frontmatter is plain key: value pairs. Anchors (&name) and aliases (*name) are refused before "
    "anything is built, so an alias bomb or a self-referencing map cannot exhaust memory.",
)
DUPLICATE_KEY = CoreCode(
    "IN014",
    "duplicate frontmatter key",
    "A key appears twice in one frontmatter mapping. PyYAML keeps the last value silently; the Isaac "
    "Lab reference validator and strict YAML loaders reject the file.",
)
FENCE_UNCLOSED = CoreCode(
    "IN015",
    "markdown code fence unclosed or malformed",
    "A fenced code block in markdown is never closed (the rest of the file becomes code), or a line inside "
    "it looks like its closing fence but has text after it (```` ``` more text ````): a closing fence takes "
    "no text, so the block runs on and swallows the sections after it. The location is the fence's line.",
)
MARKUP_PROBLEM = CoreCode(
    "IN020",
    "RST markup problem",
    "docutils reported a problem (error level: an error; warning level: a warning) while "
    "parsing the RST file. Sphinx-only directives and roles are understood by stand-ins.",
)
NESTED_TOO_DEEP = CoreCode(
    "IN021",
    "RST nested too deeply",
    "A line of an RST file is nested (indented, or list markers in a row) more than 128 columns deep. "
    "docutils keeps a copy of its state per level, so such a file could take gigabytes; it is not "
    "parsed.",
)
INCLUDE_FAILED = CoreCode(
    "IN022",
    "literalinclude cannot be shown",
    "A `literalinclude` option selects no lines of the file (a `:start-after:`/`:end-before:` text that "
    "is not there, a `:lines:` list outside the file); Sphinx fails on it too, and nothing of the file "
    "is checked. A page with more than 100 literalinclude directives, or whose included code passes "
    f"{MAX_BYTES // 1024} KB in all, gets one finding; the rest is not read or checked (a bound on the "
    f"check's work). A missing included file is {UNREADABLE.code}, one leaving the root {LEAVES_ROOT.code}, a "
    f"FIFO or device {NOT_REGULAR.code}, one past the size cap {TOO_LARGE.code}: each reported at the directive, "
    "the file never opened.",
)
PYTHON_SYNTAX = CoreCode(
    "IN030",
    "Python source does not parse",
    "A launcher/trainer/tool script read for its argparse options has a syntax error. The "
    "checker reads it with ast; it never imports or runs it. A script whose text never mentions argparse "
    "or its calls has no options to read and is not parsed.",
)
NO_OPTIONS = CoreCode(
    "IN031",
    "no argparse options found",
    "A script read for its argparse options has no add_argument calls the checker can read "
    "(flags must be string literals).",
)
EVALS_JSON_BROKEN = CoreCode(
    "IN040",
    "evals.json does not parse",
    "evals/evals.json is not valid JSON; the location is where the JSON parser stopped.",
)
TOO_MANY_EVALS = CoreCode(
    "IN041",
    "evals.json has too many entries",
    "evals/evals.json holds more than 1,000 entries; only the first 1,000 are checked (one finding says "
    "so), which bounds the check's time and output. An integer literal longer than 100 digits makes "
    f"the file unreadable ({EVALS_JSON_BROKEN.code}).",
)
RULE_FAILED = CoreCode(
    "IN090",
    "checker rule failed",
    "A rule raised an exception. This is a bug in the checker, not in the checked files; the other rules still ran.",
)
INPUT_CODES: tuple[CoreCode, ...] = (
    UNREADABLE,
    BINARY,
    NOT_UTF8,
    TOO_LARGE,
    BAD_LINK,
    LEAVES_ROOT,
    NOT_REGULAR,
    BYTE_ORDER_MARK,
    YAML_ERROR,
    FRONTMATTER_UNCLOSED,
    NOT_A_MAPPING,
    YAML_ALIASES,
    DUPLICATE_KEY,
    FENCE_UNCLOSED,
    MARKUP_PROBLEM,
    NESTED_TOO_DEEP,
    INCLUDE_FAILED,
    PYTHON_SYNTAX,
    NO_OPTIONS,
    EVALS_JSON_BROKEN,
    TOO_MANY_EVALS,
    RULE_FAILED,
)


def problem(kind: CoreCode, path: str, line: int, col: int, message: str, severity: str = "error") -> Finding:
    """A finding for a problem of the core (an input problem, a suppression finding)."""
    return Finding(code=kind.code, message=message, loc=Loc(path, max(1, line), max(1, col)), severity=severity)
