"""A parse cache: parsed documents keyed by path and content digest, so unchanged files skip the
parsers (and their imports). One JSON file per checked root under ``$SKILLS_CHECK_CACHE_DIR`` or
``$XDG_CACHE_HOME/skills-check`` (default ``~/.cache/skills-check``). The cache is invalidated as a
whole when the checker's parser sources, the parser libraries or Python change. Files an RST page
shows with ``literalinclude`` are not cached: the page's parse holds only the directive, and the loader
reads the included file on every run, so an edit to it is always seen. Any problem with
it (unreadable, corrupt, unwritable) silently means "no cache"; ``--no-cache`` turns it off.

The format cannot carry code: plain JSON, decoded into the model's own dataclasses by name from a
fixed table (``codec.py``); a planted or restored cache file can at worst hold wrong parse results
for a file whose digest it names, never run anything. The file is read only when it is a regular
file under a size cap.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..atomic_write import write_atomic

PACKAGE = Path(__file__).resolve().parents[1]  # skills_check
_SOURCES = (
    "caches/parse.py",
    "caches/codec.py",
    "inputs.py",
    "model.py",
    "parsers/argspec.py",
    "parsers/markdown.py",
    "parsers/quick.py",
    "parsers/rst.py",
)
_LIBS = ("docutils", "markdown_it", "mdit_py_plugins", "yaml")
FORMAT = 2  # 2: JSON (1 was a pickle, never read again)
MAX_CACHE_BYTES = 64 * 1024 * 1024
KEEP = 32  # cache files kept (one per checked root); the least recently written go first


def cache_dir() -> Path:
    env = os.environ.get("SKILLS_CHECK_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "skills-check"


def parser_stamps() -> list[str]:
    """Where each parser library is installed and when it changed (not imported): a cache keyed on these is
    dropped when a parser is upgraded."""
    parts = []
    for lib in _LIBS:
        try:
            spec = importlib.util.find_spec(lib)
            origin = spec.origin if spec else None
            st = os.stat(origin) if origin else None
            parts.append(f"{lib}:{origin}:{st.st_mtime_ns if st else '?'}")
        except (ImportError, ValueError, OSError):
            parts.append(f"{lib}:?")
    return parts


def _stamp() -> str:
    """Changes whenever parsing could give another result."""
    parts = [str(FORMAT), sys.version]
    for name in _SOURCES:
        try:
            st = (PACKAGE / name).stat()
            parts.append(f"{name}:{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append(f"{name}:?")
    parts += parser_stamps()
    import hashlib

    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def digest(text: str) -> str:
    import hashlib

    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class ParseCache:
    """get/put parsed objects by (kind, path, text); ``save()`` writes atomically when changed."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.enabled = enabled
        # (kind, path) -> (digest, encoded value): values are kept encoded (JSON-ready) and decoded on
        # each hit, so a caller changing a returned object never changes the cache
        self.entries: dict[tuple[str, str], tuple[str, Any]] = {}
        self.used: set[tuple[str, str]] = set()
        self.dirty = False
        self.root = root
        if not enabled:
            return
        self.stamp = _stamp()
        try:
            from ..inputs import read_bytes_bounded

            raw = read_bytes_bounded(str(self.file), MAX_CACHE_BYTES)
            data = json.loads(raw) if isinstance(raw, bytes) else None
            if isinstance(data, dict) and data.get("stamp") == self.stamp and isinstance(data.get("entries"), list):
                for item in data["entries"]:
                    kind, path, dig, value = item
                    self.entries[(str(kind), str(path))] = (str(dig), value)
        except Exception:  # absent, corrupt, from another version: start empty
            self.entries = {}

    @property
    def file(self) -> Path:
        """This root's cache file (hashing is imported only when a cache is used)."""
        import hashlib

        return cache_dir() / f"{hashlib.sha256(str(self.root).encode()).hexdigest()[:24]}.json"

    def get(self, kind: str, path: str, text: str, expect: Any = Any) -> Any | None:
        """The cached parse of ``text`` at ``path``, or None: not cached, another text, or an entry that is not
        of the ``expect``ed shape (a type hint, e.g. the model's MarkdownDoc), which is dropped."""
        if not self.enabled:
            return None
        key = (kind, path)
        hit = self.entries.get(key)
        if hit is not None and hit[0] == digest(text):
            from .codec import CodecError, conforms, decode

            try:
                value = decode(hit[1])
                if not conforms(value, expect):
                    raise CodecError(f"a cached {kind} entry of another shape")
            except (CodecError, RecursionError, TypeError, ValueError, KeyError, NameError, AttributeError):
                del self.entries[key]
                self.dirty = True
                return None
            self.used.add(key)
            return value
        return None

    def put(self, kind: str, path: str, text: str, value: Any) -> None:
        if not self.enabled:
            return
        from .codec import CodecError, encode

        key = (kind, path)
        try:
            encoded = encode(value)
        except (CodecError, RecursionError):
            return  # a value the format cannot hold is simply not cached
        self.entries[key] = (digest(text), encoded)
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
        try:
            entries = [[k[0], k[1], d, v] for k, (d, v) in sorted(self.entries.items())]
            write_atomic(
                self.file, json.dumps({"stamp": self.stamp, "entries": entries}, separators=(",", ":")).encode()
            )
            _prune(self.file.parent)
        except Exception:  # a cache that cannot be written is only a slower next check
            pass


def _prune(folder: Path) -> None:
    """Keep the KEEP most recently written cache files (checks of temporary trees leave old ones)."""
    files = []
    for entry in os.scandir(folder):
        if entry.name.endswith(".json"):
            try:
                files.append((entry.stat().st_mtime, entry.path))
            except OSError:
                pass
    for _, path in sorted(files, reverse=True)[KEEP:]:
        try:
            os.unlink(path)
        except OSError:
            pass
