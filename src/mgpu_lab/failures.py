"""Name the rank whose failure came first, from the ranks' failure records, torchrun's failure summary and
the launcher's own observation of rank processes vanishing. Stdlib only.

torchrun's "Root Cause" is the failure with the earliest error file; a rank killed by a signal leaves no
error file, and ranks that fail *because* a peer died (a broken collective) leave theirs soon after, so
torchrun often blames a rank that was a victim. Here:

- a rank's exception counts at the time the rank recorded it (``failure.<rank>``);
- a rank that died by a signal other than SIGTERM (torchrun stops the other workers with SIGTERM), or
  exited without an exception record, counts at the last time the launcher saw it alive;
- the earliest of these is the culprit.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from mgpu_lab import heartbeat

_ENTRY = re.compile(
    r"host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)"
)
_ROOT = re.compile(r"Root Cause \(first observed failure\):\s*\n\[\d+\]:\s*\n(?:.*\n)*?\s*rank\s*:\s*(?P<rank>\d+)")


@dataclass(frozen=True)
class Exit:
    """How torchrun saw a rank end: its exit code (negative: killed by that signal)."""

    rank: int
    node: str
    pid: int
    code: int


@dataclass(frozen=True)
class Event:
    rank: int
    node: str
    pid: int
    what: str
    time: float


def parse_torchrun_summary(text: str) -> tuple[dict[int, Exit], int | None]:
    """(rank -> Exit for every failure torchrun listed, the rank torchrun named as root cause)."""
    exits = {}
    for m in _ENTRY.finditer(text):
        rank = int(m["rank"])
        exits[rank] = Exit(rank, m["host"], int(m["pid"]), int(m["code"]))
    root = _ROOT.search(text)
    return exits, int(root["rank"]) if root else None


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def first_failure(records: dict[int, heartbeat.Failure], exits: dict[int, Exit],
                  last_alive: dict[int, tuple[float, heartbeat.Beat]]) -> Event | None:
    """The earliest failure. ``last_alive``: rank -> (wall time it was last seen alive, its last beat), for
    ranks whose process vanished while the job ran."""
    events: list[Event] = []
    for r, f in records.items():
        events.append(Event(r, f.node, f.pid, f"{f.detail}", f.time))
    for r, (seen, beat) in last_alive.items():
        if r in records:
            continue
        code = exits[r].code if r in exits else None
        if code == -signal.SIGTERM:
            continue  # torchrun stopping the survivors
        if code is not None and code < 0:
            what = f"killed by {_signal_name(code)} (no Python exception)"
        elif code is not None:
            what = f"exited with status {code} without a Python exception"
        else:
            what = "its process vanished (killed by a signal or exited) without a Python exception"
        events.append(Event(r, beat.node, beat.pid, what, seen))
    for r, e in exits.items():  # listed by torchrun but never seen to vanish (it died between two looks)
        if r in records or r in last_alive or e.code == -signal.SIGTERM:
            continue
        what = f"killed by {_signal_name(e.code)}" if e.code < 0 else f"exited with status {e.code}"
        events.append(Event(r, e.node, e.pid, what, float("inf")))
    if not events:
        return None
    return min(events, key=lambda e: (e.time, e.rank))


def report_lines(event: Event, world: int | None, torchrun_root: int | None) -> list[str]:
    where = f"rank {event.rank}" + (f"/{world}" if world else "")
    lines = [f"[ERROR] launcher: first failure: {where} on node {event.node} (pid {event.pid}): {event.what}"]
    if torchrun_root is not None and torchrun_root != event.rank:
        lines.append(f"[ERROR] launcher: torchrun's \"Root Cause\" above names rank {torchrun_root}, which failed "
                     f"after rank {event.rank} (a consequence, not the cause)")
    return lines
