"""The Linux process table, read from ``/proc`` (stdlib only): the one place that walks it.

Used by the supervisor (:mod:`mgpu_lab.job.supervise`), the runner (:mod:`mgpu_lab.job.monitor`), the watchdog and the
test helpers. Without ``/proc`` (not Linux) every query answers "nothing found". The standalone NCCL probe
keeps its own copy: it must run with torch alone.
"""

from __future__ import annotations

import os
import socket

from mgpu_lab.core.names import JOB_KEY_ENV


def _stat(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def state(pid: int) -> str | None:
    """The process state letter (R, S, D, T, t, Z, X, ...), or None when there is no such process."""
    data = _stat(pid)
    if data is None:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0].decode() if fields else None


def catches(pid: int, signum: int) -> bool:
    """True when ``pid`` has a handler for ``signum`` (``SigCgt`` in ``/proc/PID/status``): sending it runs that
    handler instead of the signal's default action."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def alive(pid: int) -> bool:
    """True while ``pid`` is a live process: it exists (another user's counts) and is no zombie (exited, not
    yet reaped). The one definition of process liveness: supervisor, monitor, watchdog and run locks use it."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return state(pid) not in ("Z", "X")


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot, ``/proc/PID/stat``'s field 22), or None when there is no such
    process: with the pid, it names one process for good (a pid is reused, a start time with it is not)."""
    data = _stat(pid)
    if data is None:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def owner(pid: int) -> int | None:
    """The user id a process runs as, or None."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def same_process(pid: int, started: int | None) -> bool:
    """``pid`` is alive and, where its start time was recorded, still the process that recorded it."""
    return alive(pid) and (started is None or start_time(pid) == started)


def not_the_jobs(pid: int, started: int | None, *, root: int, job_key: str | None = None) -> str | None:
    """Why ``pid`` is not provably a process of the job below ``root`` (None: it is, and may be signalled).

    It must be alive, be the process its record names (same start time, where one was recorded), run as this
    user, and be a descendant of ``root`` or carry the job's key in its environment; ``root`` itself is not one."""
    if not alive(pid):
        return "not running"
    if started is not None and start_time(pid) != started:
        return "a reused pid: another process, started at another time"
    if owner(pid) != os.getuid():
        return "a process of another user"
    if pid == root or pid not in descendants(root) and (job_key is None or env_value(pid, JOB_KEY_ENV) != job_key):
        return "no process of this job"
    return None


def stopped(pid: int) -> bool:
    """True while ``pid`` is stopped by a signal (SIGSTOP, or a debugger)."""
    return state(pid) in ("T", "t")


def pids() -> list[int]:
    """Every process id in /proc (live or not)."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def process_table() -> dict[int, int]:
    """pid -> parent pid for every live (non-zombie) process; {} without /proc."""
    table: dict[int, int] = {}
    for pid in pids():
        data = _stat(pid)
        if data is None:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            table[pid] = int(fields[1])
    return table


def parent(pid: int) -> int | None:
    """The parent of a live process, or None."""
    data = _stat(pid)
    if data is None:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 and fields[0] not in (b"Z", b"X") else None


def descends_from(pid: int, root: int) -> bool:
    """True when ``root`` is among the ancestors of the live process ``pid`` (``root`` itself is not one)."""
    seen = {pid}
    up = parent(pid)
    while up is not None and up > 0 and up not in seen:
        if up == root:
            return True
        seen.add(up)
        up = parent(up)
    return False


def descendants(root: int) -> list[int]:
    """Live processes below ``root`` (any session or process group), parents first."""
    children: dict[int, list[int]] = {}
    for pid, ppid in process_table().items():
        children.setdefault(ppid, []).append(pid)
    found, queue = [], list(children.get(root, []))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def environ(pid: int) -> list[bytes]:
    """The ``NAME=value`` entries of a process's environment ([] when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return [item for item in fh.read().split(b"\0") if item]
    except OSError:
        return []


def env_value(pid: int, name: str) -> str | None:
    """The value of one variable in a process's environment, or None."""
    prefix = name.encode() + b"="
    for item in environ(pid):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def with_env(name: str, value: str) -> list[int]:
    """Live processes (this one excluded) whose environment holds ``name=value``."""
    needle = f"{name}={value}".encode()
    me = os.getpid()
    return [pid for pid in pids() if pid != me and needle in environ(pid) and alive(pid)]


def cmdline(pid: int) -> list[bytes]:
    """A process's command line, word by word ([] when unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return []


def name(pid: int) -> str | None:
    """A process's short name (``/proc/PID/comm``), or None when unreadable."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def socket_owners(inodes: set[int]) -> dict[int, int]:
    """socket inode -> the first process holding it open (``/proc/PID/fd/N`` -> ``socket:[INODE]``), for the
    inodes whose holder this user may see (another user's file descriptors stay unreadable unless root)."""
    found: dict[int, int] = {}
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    for pid in sorted(pids()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            inode = wanted.get(link)
            if inode is not None and inode not in found:
                found[inode] = pid
        if len(found) == len(wanted):
            break
    return found


def node_name() -> str:
    """This machine's name, the one every launcher and rank line uses: the host name (``socket.gethostname``),
    never torchrun's fully qualified one (``socket.getfqdn``), which often resolves to "localhost"."""
    return socket.gethostname()
