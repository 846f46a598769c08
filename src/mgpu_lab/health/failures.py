"""Name the rank whose failure came first, from the ranks' failure records, torchrun's failure summary and
the launcher's own observation of rank processes vanishing. Stdlib only.

torchrun's "Root Cause" is the failure with the earliest error file; a rank killed by a signal leaves no
error file, and ranks that fail *because* a peer died (a broken collective) leave theirs soon after, so
torchrun often blames a rank that was a victim. Here:

- a rank's exception counts at the time the rank recorded it (``failure.<rank>``);
- a rank that died by a signal other than SIGTERM (torchrun stops the other workers with SIGTERM), or
  exited without an exception record, counts at the last time it was known alive (its last heartbeat,
  or the launcher's last sighting of its process);
- the earliest of these is the culprit, except that a rank whose collective lost a peer is a culprit only
  when no rank failed on its own.

:func:`report` turns that into the launcher's own report: every failed rank with its node and its own last
error line, which came first (one line when only one rank failed), and whether the failures were only refusals
of bad input (every rank refusing the same input is said once: "all N ranks refused: ...", or "K of N ranks
refused: ..." when torchrun stopped the others before they reached the same check). A rank is called a
consequence only when its failure is a broken collective or a lost peer, or torchrun stopped it after another rank
failed.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from mgpu_lab.core import procs
from mgpu_lab.health import heartbeat

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
        # torchrun lists its own node's workers, naming the node by its fully qualified name (often "localhost"):
        # the node's name is the one every other line uses
        exits[rank] = Exit(rank, procs.node_name(), int(m["pid"]), int(m["code"]))
    root = _ROOT.search(text)
    return exits, int(root["rank"]) if root else None


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def first_failure(
    records: dict[int, heartbeat.Failure],
    exits: dict[int, Exit],
    beats: dict[int, heartbeat.Beat],
    last_alive: dict[int, float],
    vanished: set[int],
) -> Event | None:
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
    # A rank whose collective lost a peer failed because of another rank: it is never first while a rank
    # that failed on its own is listed (a SIGKILLed rank may still look alive after its sockets closed).
    return min(events, key=lambda e: (lost_peer(e.what), e.time, e.rank))


#: How a collective reports that a peer rank is gone (gloo and NCCL wording), lower case.
PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote process exited",
    "communicator was aborted",
)
FIRST_FAILURE = "[ERROR] launcher: first failure:"
STOPPED_BY_TORCHRUN = "stopped by torchrun (SIGTERM) after another rank failed"


def lost_peer(detail: str) -> bool:
    """True when a rank's error says a collective broke because another rank went away."""
    text = detail.lower()
    return any(s in text for s in PEER_LOST)


def peer_detail(text: str) -> str:
    """The short part of a lost-peer error: gloo's 'Connection closed by peer [ADDR]:PORT', else its first 120
    characters."""
    first = text.strip().splitlines()[0] if text.strip() else text
    found = re.search(r"connection (closed|reset) by peer( \[[^\]]*\](:\d+)?)?", first, re.IGNORECASE)
    return found.group(0) if found else first[:120]


class Report:
    """The launcher's failure report: its lines (stderr) and the exit status they stand for."""

    def __init__(self, lines: list[str], exit_status: int, refused: bool) -> None:
        self.lines = lines
        self.exit_status = exit_status
        self.refused = refused  # only refusals of input: torchrun's text adds nothing, so none is kept


def _rank_line(rank: int, world: int | None, node: str, pid: int, what: str) -> str:
    where = f"rank {rank}" + (f"/{world}" if world else "")
    return f"{where} on node {node} (pid {pid}): {what}"


def report(
    records: dict[int, heartbeat.Failure],
    exits: dict[int, Exit],
    beats: dict[int, heartbeat.Beat],
    last_alive: dict[int, float],
    vanished: set[int],
    world: int | None,
    torchrun_root: int | None,
    *,
    prog: str = "mgpu-lab train_multigpu",
    local_ranks: int | None = None,
) -> Report | None:
    """The report for a failed job, or None when nothing says which rank failed. ``local_ranks``: how many ranks
    this node's launcher started (a job of more ranks spans nodes)."""
    refusals = {r: f for r, f in records.items() if f.kind == heartbeat.REFUSED}
    stopped = {r for r, e in exits.items() if e.code == -signal.SIGTERM and r not in records}
    causes = {r for r in set(records) | set(exits) if r not in stopped}
    if refusals and causes <= set(refusals):  # nothing failed but input that ranks refused
        messages = sorted({f.detail for f in refusals.values()})
        count = world if world else len(set(refusals) | set(exits))
        if len(messages) == 1 and len(refusals) + len(stopped) == count:
            line = f"all {count} ranks refused: {messages[0]}"
            if stopped:  # the first refusal ended the job: torchrun stopped the rest before the same check
                rest = (
                    "the other rank before it" if len(stopped) == 1 else f"the other {len(stopped)} ranks before they"
                )
                line = f"{len(refusals)} of {count} ranks refused: {messages[0]} (torchrun stopped {rest} checked)"
            return Report([f"{prog}: error: {line}"], 2, True)
        lines = [f"{prog}: error: {len(refusals)} of {count} rank(s) refused their input:"]
        for r in sorted(refusals):
            refusal = refusals[r]
            lines.append(
                f"[ERROR] launcher:   {_rank_line(r, world, refusal.node, refusal.pid, 'refused: ' + refusal.detail)}"
            )
        lines += [f"[ERROR] launcher:   rank {r}: {STOPPED_BY_TORCHRUN}" for r in sorted(stopped)]
        return Report(lines, 2, True)

    event = first_failure(records, exits, beats, last_alive, vanished)
    if event is None:
        return None
    failed = sorted(set(records) | set(exits) | (vanished if not exits else set()))
    here = local_ranks if local_ranks is not None else len(set(beats) | set(failed))
    if lost_peer(event.what) and world is not None and world > here:  # no rank of this node failed on its own
        return Report(elsewhere_lines(failed, records, exits, beats, world), 1, False)
    if failed == [event.rank]:  # one rank failed (a job of one rank): its line says it all, once
        return Report(report_lines(event, world, torchrun_root, records), 1, False)
    lines = [f"[ERROR] launcher: {len(failed)} rank(s) failed" + (f" of {world}" if world else "") + ":"]
    for r in failed:
        f, e, b = records.get(r), exits.get(r), beats.get(r)
        node = f.node if f else (e.node if e else (b.node if b else "?"))
        pid = f.pid if f else (e.pid if e else (b.pid if b else -1))
        if r == event.rank:
            what, tag = event.what, " <- first"
        elif f is not None:
            what = ("refused: " if f.kind == heartbeat.REFUSED else "") + f.detail
            tag = ""
            if lost_peer(f.detail):
                what = f"its collective lost a peer ({peer_detail(f.detail.partition(': ')[2] or f.detail)})"
                tag = " (a consequence)"
        elif r in stopped:
            what, tag = STOPPED_BY_TORCHRUN, " (a consequence)"
        elif e is not None and e.code < 0:
            what, tag = f"killed by {_signal_name(e.code)} (no Python exception)", ""
        else:
            what, tag = (f"exited with status {e.code}" if e else "its process vanished"), ""
        lines.append(f"[ERROR] launcher:   {_rank_line(r, world, node, pid, what)}{tag}")
    lines += report_lines(event, world, torchrun_root, records)
    return Report(lines, 1, False)


def peer_address(text: str) -> str | None:
    """The peer's address a lost-peer error names (gloo: ``Read error [127.0.0.1]:40123: Connection reset by
    peer``), without the port, or None."""
    found = re.search(r"\[([0-9A-Fa-f:.]+)\]:\d+", text)
    return found.group(1) if found else None


def elsewhere_lines(
    failed: list[int],
    records: dict[int, heartbeat.Failure],
    exits: dict[int, Exit],
    beats: dict[int, heartbeat.Beat],
    world: int,
) -> list[str]:
    """Every rank of this node failed because a peer on another node left: each one a consequence, and which node
    to look at (the ranks this node did not run; the peer's address, where the error names it)."""
    lines = []
    peers = set()
    for r in failed:
        f, e, b = records.get(r), exits.get(r), beats.get(r)
        node = f.node if f else (e.node if e else (b.node if b else "?"))
        pid = f.pid if f else (e.pid if e else (b.pid if b else -1))
        if f is not None and lost_peer(f.detail):
            address = peer_address(f.detail)
            peers |= {address} if address else set()
            what = f"its collective lost a peer ({peer_detail(f.detail.partition(': ')[2] or f.detail)})"
        else:
            what = STOPPED_BY_TORCHRUN
        lines.append(f"[ERROR] launcher: {_rank_line(r, world, node, pid, what)} (a consequence)")
    others = sorted(set(range(world)) - set(beats) - set(failed))
    who = f"rank(s) {', '.join(map(str, others))}" if others else "the other ranks"
    at = f" (the lost peer: {', '.join(sorted(peers))})" if peers else ""
    lines.append(
        f"[ERROR] launcher: no rank of this node failed first: the first failure is on another node; look at the "
        f"report of the node running {who}{at}"
    )
    return lines


def report_lines(
    event: Event, world: int | None, torchrun_root: int | None, records: dict[int, heartbeat.Failure] | None = None
) -> list[str]:
    where = f"rank {event.rank}" + (f"/{world}" if world else "")
    lines = [f"{FIRST_FAILURE} {where} on node {event.node} (pid {event.pid}): {event.what}"]
    if torchrun_root is not None and torchrun_root != event.rank:
        blamed = (records or {}).get(torchrun_root)
        why = " (a consequence, not the cause)" if blamed is None or lost_peer(blamed.detail) else ""
        lines.append(
            f'[ERROR] launcher: torchrun\'s "Root Cause" names rank {torchrun_root}, which failed '
            f"after rank {event.rank}{why}"
        )
    return lines
