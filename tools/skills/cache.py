"""A parse cache: parsed documents keyed by path and content digest, so unchanged files skip the
parsers (and their imports). One pickle per checked root under ``$SKILLS_CHECK_CACHE_DIR`` or
``$XDG_CACHE_HOME/skills-check`` (default ``~/.cache/skills-check``). The cache is invalidated as a
whole when the checker's parser sources, the parser libraries or Python change. Any problem with
it (unreadable, corrupt, unwritable) silently means "no cache"; ``--no-cache`` turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_SOURCES = ("cache.py", "inputs.py", "model.py", "parse_argparse.py", "parse_markdown.py", "parse_rst.py")
_LIBS = ("docutils", "markdown_it", "mdit_py_plugins", "yaml")
FORMAT = 1
KEEP = 32  # cache files kept (one per checked root); the least recently written go first


def cache_dir() -> Path:
    env = os.environ.get("SKILLS_CHECK_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "skills-check"


def _stamp() -> str:
    """Changes whenever parsing could give another result."""
    parts = [str(FORMAT), sys.version]
    for name in _SOURCES:
        try:
            st = (HERE / name).stat()
            parts.append(f"{name}:{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append(f"{name}:?")
    for lib in _LIBS:
        try:
            spec = importlib.util.find_spec(lib)
            origin = spec.origin if spec else None
            st = os.stat(origin) if origin else None
            parts.append(f"{lib}:{origin}:{st.st_mtime_ns if st else '?'}")
        except (ImportError, ValueError, OSError):
            parts.append(f"{lib}:?")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class ParseCache:
    """get/put parsed objects by (kind, path, text); ``save()`` writes atomically when changed."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.enabled = enabled
        self.entries: dict[tuple[str, str], tuple[str, Any]] = {}
        self.used: set[tuple[str, str]] = set()
        self.dirty = False
        self.file = cache_dir() / f"{hashlib.sha256(str(root).encode()).hexdigest()[:24]}.pickle"
        if not enabled:
            return
        self.stamp = _stamp()
        try:
            with open(self.file, "rb") as fh:
                data = pickle.load(fh)
            if isinstance(data, dict) and data.get("stamp") == self.stamp:
                self.entries = data["entries"]
        except Exception:  # absent, corrupt, from another version: start empty
            self.entries = {}

    def get(self, kind: str, path: str, text: str) -> Any | None:
        if not self.enabled:
            return None
        key = (kind, path)
        hit = self.entries.get(key)
        if hit is not None and hit[0] == digest(text):
            self.used.add(key)
            return hit[1]
        return None

    def put(self, kind: str, path: str, text: str, value: Any) -> None:
        if not self.enabled:
            return
        key = (kind, path)
        self.entries[key] = (digest(text), value)
        self.used.add(key)
        self.dirty = True

    def save(self) -> None:
        if not self.enabled:
            return
        if set(self.entries) != self.used:  # drop entries of files that are gone
            self.entries = {k: v for k, v in self.entries.items() if k in self.used}
            self.dirty = True
        if not self.dirty:
            return
        import tempfile

        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".tmp-", suffix=".pickle")
            with os.fdopen(fd, "wb") as fh:
                pickle.dump({"stamp": self.stamp, "entries": self.entries}, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.file)
            _prune(self.file.parent)
        except Exception:
            try:
                os.unlink(tmp)  # type: ignore[possibly-undefined]
            except Exception:
                pass


def _prune(folder: Path) -> None:
    """Keep the KEEP most recently written cache files (checks of temporary trees leave old ones)."""
    files = []
    for entry in os.scandir(folder):
        if entry.name.endswith(".pickle"):
            try:
                files.append((entry.stat().st_mtime, entry.path))
            except OSError:
                pass
    for _, path in sorted(files, reverse=True)[KEEP:]:
        try:
            os.unlink(path)
        except OSError:
            pass
