"""The result cache: a check whose inputs did not change replays its last report without importing a
parser or running a rule (what a pre-commit hook does on most commits).

Next to the parse cache (``cache.cache_dir()``), one JSON file per checked root holds, per set of
arguments (format, select, ignore, profile, strict, path overrides), the report and what it depended on:
- the checker itself: the size and mtime of every file of tools/skills, the Python version and where
  the parser libraries are installed (their mtime);
- the tree's shape: the mtime of every folder the loader indexed (a file or folder added, removed,
  renamed or replaced by a link changes its folder's mtime);
- the content digest of every file the check reads (pyproject.toml, the .gitignore files when skills
  are discovered, everything under each skill and the docs folder, the scripts whose argparse it reads, included and linked files, the discovery links).
A report is stored only when no folder or file changed while or just before the check ran (a change in
the same clock tick could otherwise go unseen, the way git treats "racily clean" files). A change
outside the checked tree (the target of a link leaving it) is not seen; ``--no-cache`` turns the cache
off. The file holds plain JSON text: replaying it prints text and returns an exit status, nothing more.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..atomic_write import write_atomic
from .parse import MAX_CACHE_BYTES, cache_dir, digest, parser_stamps

PACKAGE = Path(__file__).resolve().parents[1]  # skills_check
FORMAT = 1
KEEP = 8  # argument sets remembered per root
RACY_NS = 50_000_000  # a folder or file changed this close to the check's start is not trusted


def _checker_stamp() -> str:
    parts = [str(FORMAT), sys.version, sys.executable]
    for folder in (PACKAGE, *sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            entries = []
        for entry in entries:
            if entry.name.endswith((".py", ".json")):
                try:
                    st = entry.stat()
                    parts.append(f"{folder.name}/{entry.name}:{st.st_mtime_ns}:{st.st_size}")
                except OSError:
                    parts.append(f"{entry.name}:?")
    parts += parser_stamps()
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _read(path: str, cap: int = MAX_CACHE_BYTES) -> bytes | None:
    """A regular file's bytes up to ``cap`` (never a FIFO or device: opened without blocking), or None."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            if sum(len(c) for c in chunks) > cap:
                return None
    except OSError:
        return None
    finally:
        os.close(fd)


def _file_digest(path: str) -> str | None:
    data = _read(path)
    return None if data is None else digest(data.decode("utf-8", "surrogateescape"))


class ResultCache:
    def __init__(self, root: Path, args: dict[str, Any], enabled: bool = True) -> None:
        self.root = os.path.realpath(root)
        self.enabled = enabled
        self.argkey = json.dumps(args, sort_keys=True)
        self.started = time.time_ns()
        self.file = cache_dir() / f"{hashlib.sha256(str(self.root).encode()).hexdigest()[:24]}.results.json"
        self.stamp = _checker_stamp() if enabled else ""

    def _load(self) -> dict[str, Any]:
        raw = _read(str(self.file))
        try:
            data = json.loads(raw) if raw is not None else None
        except ValueError:
            return {}
        return data if isinstance(data, dict) and isinstance(data.get("entries"), dict) else {}

    def lookup(self) -> dict[str, Any] | None:
        """The stored report (stdout, stderr, rc) when nothing it depended on changed, else None."""
        if not self.enabled:
            return None
        try:
            entry = self._load().get("entries", {}).get(self.argkey)
            if not _valid(entry) or entry.get("checker") != self.stamp:
                return None
            for rel, mtime in entry["dirs"].items():
                if os.stat(os.path.join(self.root, rel), follow_symlinks=False).st_mtime_ns != mtime:
                    return None
            for rel, dig in entry["files"].items():
                if _file_digest(os.path.join(self.root, rel)) != dig:
                    return None
            return entry
        except (OSError, KeyError, AttributeError, TypeError, ValueError):
            return None

    def store(self, project: Any, stdout: str, stderr: str, rc: int) -> None:
        """Remember the report of a check of ``project`` (skipped when an input changed during it)."""
        if not self.enabled:
            return
        try:
            dirs: dict[str, int] = {}
            for rel in ["", *sorted(p for p in project.paths if p not in project.files)]:
                mtime = os.stat(os.path.join(self.root, rel), follow_symlinks=False).st_mtime_ns
                if mtime >= self.started - RACY_NS:
                    return
                dirs[rel] = mtime
            files: dict[str, str] = {}
            for rel in sorted(read_files(project)):
                full = os.path.join(self.root, rel)
                if os.stat(full).st_mtime_ns >= self.started - RACY_NS:
                    return
                dig = _file_digest(full)
                if dig is None:
                    return
                files[rel] = dig
            data = self._load()
            entries = data.get("entries", {}) if data.get("root") == self.root else {}
            entries.pop(self.argkey, None)
            entries[self.argkey] = {
                "checker": self.stamp,
                "dirs": dirs,
                "files": files,
                "stdout": stdout,
                "stderr": stderr,
                "rc": rc,
            }
            while len(entries) > KEEP:
                entries.pop(next(iter(entries)))
            _write(self.file, {"root": self.root, "entries": entries})
        except (OSError, ValueError, TypeError):
            return


def _valid(entry: Any) -> bool:
    """Whether a stored entry has the shape ``store`` writes, every value in range: text for the output, an exit
    status a process can have (0-255; a bool is no status), folder times as integers, file digests as text.
    Anything else is a miss (the check runs), never a crash or a status the shell would wrap."""
    if not isinstance(entry, dict):
        return False
    rc, dirs, files = entry.get("rc"), entry.get("dirs"), entry.get("files")
    return (
        isinstance(entry.get("stdout"), str)
        and isinstance(entry.get("stderr"), str)
        and type(rc) is int
        and 0 <= rc <= 255
        and isinstance(dirs, dict)
        and all(isinstance(k, str) and type(v) is int for k, v in dirs.items())
        and isinstance(files, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    )


def read_files(project: Any) -> set[str]:
    """The files a check of ``project`` reads (repository-relative)."""
    config = project.config
    prefixes = tuple(f"{str(config.get(k, '')).strip('/')}/" for k in ("docs",) if config.get(k))
    prefixes += tuple(f"{s.dir}/" for s in project.skills if s.dir)
    everything = any(not s.dir for s in project.skills)  # the root is one skill: all of it is its files
    discovering = config.get("skills") is None  # the walk reads the .gitignore files only then
    out = {
        p
        for p in project.files
        if everything
        or p.startswith(prefixes)
        or p == "pyproject.toml"
        or (discovering and p.rsplit("/", 1)[-1] == ".gitignore")
    }
    out |= {p for p in project.files if p.startswith((".agents/skills/", ".claude/"))}
    specs = [project.launcher, project.trainer, *project.scripts.values(), *(t.spec for t in project.tools.values())]
    out |= {s.path for s in specs if s is not None}
    out |= set(project.included) | set(project.linked)
    return {p for p in out if p in project.files}


def _write(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, separators=(",", ":")).encode())
