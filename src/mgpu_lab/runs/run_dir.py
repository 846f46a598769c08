"""The run folder ``<log_root>/<library>/<task>/<timestamp>[_<run_name>]`` (stdlib only, no torch).

- :func:`check_run_name` and :func:`check_log_root` validate before anything is created.
- :func:`create` makes the folder with an exclusive ``mkdir``: two trainers that start in the same
  second never share one; the second gets ``<name>_1`` (then ``_2``, ...).
- :func:`discard` removes a folder this process created, when the run is refused before training.
"""

from __future__ import annotations

import os

from mgpu_lab.core.errors import UsageError

TYPE_CHECKING = False  # pathlib, shutil and datetime are imported where used: the launcher's checks stay quick
if TYPE_CHECKING:
    from pathlib import Path

#: Longest --run_name in bytes (UTF-8): the folder name adds a 19-character stamp, "_" and a
#: collision suffix, and most file systems allow 255 bytes per name.
RUN_NAME_MAX = 200
#: How many suffixed names to try before giving up (a sign of something odd in the folder).
MAX_TRIES = 1000


def check_run_name(run_name: str | None) -> None:
    """UsageError unless ``run_name`` is usable as part of one folder name."""
    if run_name is None:
        return
    size = len(run_name.encode("utf-8", "surrogateescape"))
    if not run_name.strip():
        raise UsageError("--run_name must not be empty")
    if size > RUN_NAME_MAX:
        raise UsageError(f"--run_name is {size} bytes long; at most {RUN_NAME_MAX} (it becomes part of a folder name)")
    bad = sorted({c for c in run_name if c in "/\\" or ord(c) < 32 or ord(c) == 127})
    if bad or run_name in (".", ".."):
        shown = ", ".join(repr(c) for c in bad) if bad else repr(run_name)
        raise UsageError(f"--run_name {run_name[:40]!r}: not a plain folder name (contains {shown})")


def check_log_root(log_root: str, *parts: str) -> None:
    """UsageError unless ``<log_root>/<parts...>`` is a folder or could be created as one, by this user.

    A regular file anywhere on that path, or a nearest existing folder that this process cannot
    write (permissions, read-only file system), is reported before anything is created.
    """
    probe = os.path.join(log_root, *parts)
    while True:
        if os.path.lexists(probe):
            if not os.path.isdir(probe):
                kind = "a file" if os.path.isfile(probe) else "not a folder"
                raise UsageError(f"--log_root {log_root}: {probe} is {kind}; logs need a folder there")
            break
        parent = os.path.dirname(probe) if probe not in ("", os.sep) else probe
        if parent == probe or parent == "":
            probe = parent or "."
            break
        probe = parent
    if not os.access(probe, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only_fs(probe) else "no write permission"
        raise UsageError(f"--log_root {log_root}: cannot create folders in {os.path.abspath(probe)} ({reason})")


def _read_only_fs(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def folder_name(run_name: str | None, stamp: str | None = None) -> str:
    """``<timestamp>[_<run_name>]``, the time stamp now unless ``stamp`` is given."""
    from datetime import datetime  # only to name a folder: the launcher's checks load this module without it

    stamp = stamp or datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return f"{stamp}_{run_name}" if run_name else stamp


def create(log_root: str, library: str, task: str, run_name: str | None) -> Path:
    """Create a new run folder atomically and return its absolute path (OSError if the file system refuses).

    ``mkdir`` without ``exist_ok`` is the exclusive create: when it fails with FileExistsError another
    run owns that name, and the next suffix is tried.
    """
    from pathlib import Path  # only when a folder is made: the launcher's checks stay quick

    base = Path(log_root) / library / task
    name = folder_name(run_name)
    for n in range(MAX_TRIES):
        path = base / (name if n == 0 else f"{name}_{n}")
        base.mkdir(parents=True, exist_ok=True)  # again on every try: a refused run may remove empty parents
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except FileNotFoundError:  # the parent went away between the two mkdirs: try this name again
            base.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir()
            except FileExistsError:
                continue
        return path.resolve()
    raise FileExistsError(17, f"{MAX_TRIES} run folders named {name}[_N] exist already", str(base))


def planned(log_root: str, library: str, task: str, run_name: str | None) -> Path:
    """The folder name a run would get, not created (ranks other than 0 never write there)."""
    from pathlib import Path  # as above

    return (Path(log_root) / library / task / folder_name(run_name)).resolve()


def discard(path: str | os.PathLike) -> None:
    """Remove a run folder this process created, when the run was refused before it trained, and the
    ``<library>/<task>`` folders above it when that leaves them empty (a refusal leaves nothing behind)."""
    import shutil  # shutil, pathlib: only to remove a refused run's folder
    from pathlib import Path

    shutil.rmtree(path, ignore_errors=True)
    for parent in list(Path(path).parents)[:2]:  # <task>, then <library>; never the log root itself
        try:
            parent.rmdir()  # only succeeds when empty
        except OSError:
            break
