"""Was a rank killed by SIGKILL the kernel's OOM killer's victim? The kernel's own record, where readable. Stdlib only.

A SIGKILL leaves no Python exception and no error file: the launcher's report says "killed by SIGKILL". Two
records of the kernel tell the OOM killer from a ``kill -9`` or a scheduler:

- the job's memory cgroup counts every OOM kill of its processes (:mod:`mgpu_lab.core.memcg`): :class:`OomWatch`
  reads the count when the job starts and again when a rank died; a rise is an OOM kill in the job;
- the kernel log (``/dev/kmsg``, what ``dmesg`` prints; root, or ``kernel.dmesg_restrict=0``) names the victim:
  ``Memory cgroup out of memory: Killed process 5141 (python3) ...`` or ``Out of memory: Killed process ...``.

:meth:`OomWatch.lines` turns them into the launcher's lines for the ranks that died by SIGKILL: the kernel's line
when the log names the rank's pid, else the count that rose, else (neither readable) how to check by hand; and,
when both were readable and show no OOM kill, that the SIGKILL came from elsewhere.
"""

from __future__ import annotations

import errno
import os
import re

from mgpu_lab.core import memcg

KMSG = "/dev/kmsg"
#: How the kernel names an OOM victim (mm/oom_kill.c: "Out of memory" or "Memory cgroup out of memory").
_KILLED = re.compile(r"(?:Out of memory|Memory cgroup out of memory)[^:]*: Killed process (\d+) \(([^)]*)\)[^\n]*")
#: What to change, said once after the kernel's reason.
FIXES = (
    "give each rank less to hold (fewer --num_envs per rank, or more ranks), raise the job's memory limit "
    "(the container's or scheduler's), or let --max_restarts retry it"
)
CHECK_BY_HAND = "sudo dmesg | grep -i -e 'out of memory' -e 'killed process'"


def _chunks(path: str) -> list[bytes] | None:
    """The kernel log's records (``/dev/kmsg`` gives one per read, never blocking), or a saved copy's lines."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    chunks: list[bytes] = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record overwritten while reading: go on with the next
                    continue
                break  # EAGAIN: no more records
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).splitlines() if os.path.isfile(path) else chunks


def kernel_log(path: str = KMSG, after: int = -1) -> tuple[int, str] | None:
    """(the last record's sequence number, the messages of the records after sequence number ``after``) of the
    kernel log (``PRIORITY,SEQ,USEC,FLAGS;MESSAGE`` records); None when unreadable. Sequence numbers, not times: the
    kernel's clock is not this process's."""
    chunks = _chunks(path)
    if chunks is None:
        return None
    last, messages = after, []
    for chunk in chunks:
        head, sep, message = chunk.decode("utf-8", "replace").partition(";")
        fields = head.split(",")
        if not sep or len(fields) < 2 or not fields[1].isdigit():
            continue  # a continuation line (" SUBSYSTEM=..."), or not a record
        seq = int(fields[1])
        last = max(last, seq)
        if seq > after:
            messages.append(message.split("\n", 1)[0])
    return last, "\n".join(messages)


def oom_victims(text: str) -> dict[int, str]:
    """pid -> the kernel's line for every OOM victim the log text names."""
    return {int(m.group(1)): m.group(0).strip() for m in _KILLED.finditer(text)}


class OomWatch:
    """The job's memory cgroups' OOM kill counts at its start, to compare when a rank died."""

    def __init__(self, kmsg: str = KMSG) -> None:
        self.kmsg = kmsg
        start = kernel_log(kmsg)
        self.log_seq = start[0] if start is not None else -1  # what the log held before the job
        self.before = {(kind, folder): memcg.oom_kills(kind, folder) for kind, folder in memcg.own()}

    def risen(self) -> list[str]:
        """``oom_kill 0 -> 1 in FILE`` for every cgroup whose count rose since the start."""
        found = []
        for (kind, folder), before in self.before.items():
            after = memcg.oom_kills(kind, folder)
            if before is not None and after is not None and after > before:
                found.append(f"oom_kill {before} -> {after} in {os.path.join(folder, memcg.EVENTS[kind])}")
        return found

    def lines(self, killed: dict[int, int]) -> list[str]:
        """The launcher's lines for the ranks killed by SIGKILL (``killed``: rank -> pid); [] for none."""
        if not killed:
            return []
        log = kernel_log(self.kmsg, self.log_seq)
        victims = oom_victims(log[1]) if log is not None else {}
        risen = self.risen()
        lines = []
        for rank, pid in sorted(killed.items()):
            if pid in victims:
                lines.append(
                    f"[ERROR] launcher: rank {rank} (pid {pid}) was killed by the kernel's OOM killer "
                    f'(kernel log: "{victims[pid]}")'
                )
            elif risen:
                lines.append(
                    f"[ERROR] launcher: rank {rank} (pid {pid}) was most likely killed by the kernel's OOM killer: "
                    f"the job's memory cgroup counted an OOM kill while it ran ({'; '.join(risen)})"
                )
        if lines:
            return [*lines, f"[ERROR] launcher: out of memory: {FIXES}"]
        readable = log is not None and any(count is not None for count in self.before.values())
        if readable:
            return [
                "[INFO] launcher: the SIGKILL was not the kernel's OOM killer (no OOM kill in the job's memory "
                "cgroup or the kernel log since the start): a person, a script or a scheduler sent it"
            ]
        return [
            "[INFO] launcher: a SIGKILL that nobody sent by hand is often the kernel's OOM killer; this launcher "
            f"cannot read the kernel's record here: check with {CHECK_BY_HAND}"
        ]
