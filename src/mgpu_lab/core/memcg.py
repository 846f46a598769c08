"""This process's memory cgroup, as the kernel's OOM killer counts it (stdlib only, Linux only).

The kernel counts every process it kills for want of memory in the victim's memory cgroup: ``oom_kill`` in
``memory.events`` (cgroup v2) or in ``memory.oom_control`` (cgroup v1, Linux 4.13 and later), whether the
cgroup's own limit or the whole machine ran out. :func:`own` finds the memory cgroup of a process (both
hierarchies: a machine may mount the v1 memory controller beside a v2 tree without one), :func:`oom_kills` reads the
count, :func:`limit` the cgroup's memory limit (None: unlimited) and :func:`left` what the limits still allow.
Nothing here writes.
"""

from __future__ import annotations

import os

#: The file with the ``oom_kill`` count, and the file with the limit, by hierarchy.
EVENTS = {"v2": "memory.events", "v1": "memory.oom_control"}
LIMITS = {"v2": "memory.max", "v1": "memory.limit_in_bytes"}
USAGE = {"v2": "memory.current", "v1": "memory.usage_in_bytes"}
#: cgroup v1 writes "no limit" as the largest page-aligned 64-bit count; anything this large is no limit.
NO_LIMIT = 1 << 62


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, file system type, super options) of every cgroup mount."""
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                dash = fields.index("-") if "-" in fields else -1
                if dash > 0 and fields[dash + 1] in ("cgroup", "cgroup2") and fields[3] == "/":
                    found.append((fields[4], fields[dash + 1], fields[-1]))
    except (OSError, UnicodeDecodeError):
        return []
    return found


def own(pid: int | str = "self") -> list[tuple[str, str]]:
    """``(hierarchy, folder)`` of the memory cgroups of ``pid`` that expose the OOM kill count: the v1 memory
    controller's, then the v2 one's when its memory controller is on there."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            entries = [line.rstrip("\n").split(":", 2) for line in fh]
    except (OSError, UnicodeDecodeError):
        return []
    found = []
    for mount, fstype, options in _mounts():
        for entry in entries:
            if len(entry) != 3:
                continue
            _, controllers, rel = entry
            v1 = fstype == "cgroup" and "memory" in controllers.split(",") and "memory" in options.split(",")
            v2 = fstype == "cgroup2" and controllers == ""
            if not (v1 or v2):
                continue
            kind = "v1" if v1 else "v2"
            folder = os.path.join(mount, rel.lstrip("/"))
            if os.path.isfile(os.path.join(folder, EVENTS[kind])):
                found.append((kind, folder))
    return found


def oom_kills(kind: str, folder: str) -> int | None:
    """The cgroup's ``oom_kill`` count (None when unreadable)."""
    try:
        with open(os.path.join(folder, EVENTS[kind]), encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _count(folder: str, name: str) -> int | None:
    """The number a cgroup file holds (None: unreadable, or not a number, as "max" is)."""
    try:
        with open(os.path.join(folder, name), encoding="ascii") as fh:
            text = fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def limit(kind: str, folder: str) -> int | None:
    """The cgroup's memory limit in bytes (None: no limit, or unreadable)."""
    value = _count(folder, LIMITS[kind])
    return value if value is not None and value < NO_LIMIT else None


def limited() -> int | None:
    """The smallest memory limit of this process's own memory cgroups (None: none is limited)."""
    limits = [value for kind, folder in own() if (value := limit(kind, folder)) is not None]
    return min(limits) if limits else None


def left() -> int | None:
    """The fewest bytes any limited memory cgroup of this process still allows (None: none is limited)."""
    room = []
    for kind, folder in own():
        cap, used = limit(kind, folder), _count(folder, USAGE[kind])
        if cap is not None and used is not None:
            room.append(max(cap - used, 0))
    return min(room) if room else None
