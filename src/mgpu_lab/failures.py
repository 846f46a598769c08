"""Name the rank whose failure came first, from the ranks' failure records, torchrun's failure summary and
the launcher's own observation of rank processes vanishing. Stdlib only.

torchrun's "Root Cause" is the failure with the earliest error file; a rank killed by a signal leaves no
error file, and ranks that fail *because* a peer died (a broken collective) leave theirs soon after, so
torchrun often blames a rank that was a victim. Here:

- a rank's exception counts at the time the rank recorded it (``failure.<rank>``);
- a rank that died by a signal other than SIGTERM (torchrun stops the other workers with SIGTERM), or
  exited without an exception record, counts at the last time it was known alive (its last heartbeat,
  or the launcher's last sighting of its process);
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


def first_failure(records: dict[int, heartbeat.Failure], exits: dict[int, Exit], beats: dict[int, heartbeat.Beat],
                  last_alive: dict[int, float], vanished: set[int]) -> Event | None:
    """The earliest failure.

    ``beats``: every rank's last heartbeat; ``last_alive``: rank -> wall time the launcher last saw its process
    alive; ``vanished``: ranks whose process the launcher saw disappear while the job ran. A rank without an
    exception record that torchrun lists with a signal other than SIGTERM, or with an exit status (or, without
    torchrun's summary, that vanished), died at some time after both its last beat and its last sighting: that
    lower bound is its time, so a rank that died first is never outrun by the exceptions it caused in its peers.
    """
    events: list[Event] = []
    for r, f in records.items():
        events.append(Event(r, f.node, f.pid, f.detail, f.time))
    candidates = set(exits) | (vanished if not exits else set())
    for r in sorted(candidates - set(records)):
        exit_ = exits.get(r)
        if exit_ is not None and exit_.code == -signal.SIGTERM:
            continue  # torchrun stopping the survivors
        beat = beats.get(r)
        if exit_ is None:
            what = "its process vanished (killed by a signal or exited) without a Python exception"
        elif exit_.code < 0:
            what = f"killed by {_signal_name(exit_.code)} (no Python exception)"
        else:
            what = f"exited with status {exit_.code} without a recorded Python exception"
        seen = max(beat.time if beat else float("-inf"), last_alive.get(r, float("-inf")))
        node = exit_.node if exit_ else (beat.node if beat else "?")
        pid = exit_.pid if exit_ else (beat.pid if beat else -1)
        events.append(Event(r, node, pid, what, seen if seen != float("-inf") else float("inf")))
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
