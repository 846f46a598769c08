"""Reading input files safely, and the codes for input problems (unreadable, binary, too large, ...).

Every problem here becomes a ``Finding`` with a location; nothing raises. These codes belong to the
checker core (the rules package owns every other code).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from model import Finding, Loc

MAX_BYTES = 5 * 1024 * 1024  # files larger than this are reported, not parsed

# code -> (one-line summary, longer explanation); printed by ``--explain``.
INPUT_CODES: dict[str, tuple[str, str]] = {
    "IN001": ("file missing or unreadable",
              "A file the checker needs (a configured launcher/trainer, a skill file) does not exist or "
              "cannot be opened. Fix the path in pyproject.toml [tool.skills-check] or restore the file."),
    "IN002": ("binary file",
              "A file expected to be text holds NUL bytes. It is not parsed."),
    "IN003": ("not UTF-8",
              "A text file is not valid UTF-8; the location is the first bad byte. Re-save it as UTF-8."),
    "IN004": ("file too large",
              f"A text file is larger than {MAX_BYTES // (1024 * 1024)} MB and is not parsed."),
    "IN005": ("symlink loop or dangling link",
              "A path inside the checked tree is a symbolic link that loops or points nowhere."),
    "IN010": ("frontmatter YAML does not parse",
              "The YAML between the --- lines does not parse; the location is where the YAML parser "
              "stopped."),
    "IN011": ("frontmatter block not closed",
              "The file starts with --- but has no closing --- line, so markdown parsers read the "
              "frontmatter as body text."),
    "IN012": ("frontmatter is not a mapping",
              "The frontmatter parses as YAML but is not a key: value mapping."),
    "IN020": ("RST markup problem",
              "docutils reported a problem (error level: an error; warning level: a warning) while "
              "parsing the RST file. Sphinx-only directives and roles are understood by stand-ins."),
    "IN030": ("Python source does not parse",
              "A launcher/trainer/tool script read for its argparse options has a syntax error. The "
              "checker reads it with ast; it never imports or runs it."),
    "IN031": ("no argparse options found",
              "A script read for its argparse options has no add_argument calls the checker can read "
              "(flags must be string literals)."),
    "IN040": ("evals.json does not parse",
              "evals/evals.json is not valid JSON; the location is where the JSON parser stopped."),
    "IN090": ("checker rule failed",
              "A rule raised an exception. This is a bug in the checker, not in the checked files; the "
              "other rules still ran."),
}


def problem(code: str, path: str, line: int, col: int, message: str, severity: str = "error") -> Finding:
    """A finding for an input problem."""
    return Finding(code=code, message=message, loc=Loc(path, max(1, line), max(1, col)), severity=severity)


def rel(root: Path, path: Path) -> str:
    """``path`` relative to ``root`` as a POSIX string (the path itself when outside root)."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def link_problem(path: Path) -> str | None:
    """A message when ``path`` is a symlink that loops or dangles, else None."""
    try:
        if not path.is_symlink():
            return None
    except OSError:
        return None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        return f"dangling symlink -> {os.readlink(path)}"
    return None


def read_text(root: Path, relpath: str, *, max_bytes: int = MAX_BYTES) -> tuple[str | None, list[Finding]]:
    """Read ``root/relpath`` as UTF-8 text with newlines normalized; on failure (None, [finding])."""
    path = root / relpath
    loop = link_problem(path)
    if loop:
        return None, [problem("IN005", relpath, 1, 1, f"{loop}; not read")]
    try:
        size = os.stat(path).st_size
        if size > max_bytes:
            mb = size / (1024 * 1024)
            return None, [problem("IN004", relpath, 1, 1,
                                  f"file is {mb:.1f} MB (limit {max_bytes / (1024 * 1024):.0f} MB); not parsed")]
        data = path.read_bytes()
    except IsADirectoryError:
        return None, [problem("IN001", relpath, 1, 1, "is a directory, expected a file")]
    except FileNotFoundError:
        return None, [problem("IN001", relpath, 1, 1, "file not found")]
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, [problem("IN005", relpath, 1, 1, "symlink loop; not read")]
        return None, [problem("IN001", relpath, 1, 1, f"cannot read: {exc.strerror or exc}")]
    nul = data.find(b"\0", 0, 8192)
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        return None, [problem("IN002", relpath, line, 1, "binary file (NUL bytes); not parsed")]
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return None, [problem("IN003", relpath, line, col,
                              f"not valid UTF-8 (byte 0x{data[exc.start]:02x}); not parsed")]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, []
