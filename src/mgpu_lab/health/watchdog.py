"""The hang watchdog: notice that no rank makes progress, ask every rank for its stack, say who is stuck where.

Stdlib only. It reads the heartbeats that ranks leave in the supervision folder (:mod:`mgpu_lab.health.heartbeat`),
and knows nothing about processes beyond sending a rank the stack signal. The launcher calls
:meth:`Watchdog.check` on every tick; when it returns True the launcher calls :meth:`Watchdog.diagnose`,
prints the summary and stops the job.

Progress means that some rank's heartbeat changed (a new iteration or phase). The clock starts at the first
heartbeat, so rendezvous time never counts. Two limits apply to a stall (:class:`Limit`): while some rank has
not begun training (its beat is still phase ``start``: importing a library, compiling, starting a simulator)
the start-up limit, which is long; once every rank trains, the training limit (``--hang_timeout``). A
restarted group beats ``start`` afresh, so it is in start-up again; while a rank's beat names a process that is
gone and no live rank trains, torchrun is restarting the group: start-up too.

A record the watchdog cannot use (:class:`mgpu_lab.health.heartbeat.Unusable`: garbage, truncated, another version,
a missing field, a pid that is no process id) counts as no progress for its rank: it cannot hold the clock back,
and it is named in one line when first seen (:meth:`Watchdog.notices`) and in the report. A beat naming a process
that is gone resets the clock once (a rank died: torchrun stops or restarts the group), never again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from mgpu_lab.core import deadlines, held, procs
from mgpu_lab.health import heartbeat
from mgpu_lab.health.culprit import RankState, blame
from mgpu_lab.health.hang_report import Limit, Report, limits
from mgpu_lab.health.stack_text import locate, main_thread, parse_threads


class Watchdog:
    """Tracks heartbeats in ``folder``; fires when none changed for the limit that applies (see :func:`limits`):
    the start-up limit while some rank has not begun training, else the training limit ``timeout_s``."""

    def __init__(
        self,
        folder: str | os.PathLike,
        timeout_s: float,
        startup_s: float,
        *,
        root: int | None = None,
        local_ranks: int | None = None,
        hold: Callable[..., held.Held | str] = held.hold,
    ) -> None:
        self.folder = Path(folder)
        self.local_ranks = local_ranks  # how many ranks the launcher started on this node, when it is a number
        self.root = os.getpid() if root is None else root  # the launcher: only its job's processes are signalled
        self.hold = hold  # the one way this watchdog reaches a process (:mod:`mgpu_lab.core.held`)
        self.training, self.startup = limits(timeout_s, startup_s)
        self.seen: dict[int, object] = {}
        self.last_progress: float | None = None  # monotonic time of the last change; None before any beat
        self.fired: Limit | None = None  # the limit that fired, once check() returned True
        self.starting: list[int] = []  # the ranks that had not begun training then
        self.unusable: dict[int, heartbeat.Unusable] = {}  # the records it could not use at the last check
        self.gone: set[int] = set()  # pids named by beats, found not running (each resets the clock once)
        self._named: set[tuple[int, str]] = set()  # unusable records already named in a notice
        self._notices: list[str] = []

    def beats(self) -> dict[int, heartbeat.Beat]:
        beats, self.unusable = heartbeat.scan_beats(self.folder)
        for rank, bad in self.unusable.items():
            if (rank, bad.reason) not in self._named:
                self._named.add((rank, bad.reason))
                self._notices.append(bad.line())
        return beats

    def notices(self) -> list[str]:
        """The one-line notices of unusable records first seen since the last call."""
        notices, self._notices = self._notices, []
        return notices

    def limit(self, beats: dict[int, heartbeat.Beat]) -> Limit | None:
        """The limit that applies to these beats: start-up while some rank has not begun training, or while
        torchrun restarts the group (a rank's process is gone and no live rank trains)."""
        if any(b.phase == heartbeat.Phase.START for b in beats.values()):
            return self.startup
        if any(b.pid in self.gone for b in beats.values()) and not any(
            b.pid not in self.gone and b.phase == heartbeat.Phase.TRAIN for b in beats.values()
        ):
            return self.startup
        return self.training

    def check(self, now: float) -> bool:
        """Note progress; True when the job has stalled for the limit that applies (some rank beat, none
        changed since). Then :attr:`fired` says which limit it was."""
        beats = self.beats()
        state: dict[int, object] = {r: (b.iteration, b.phase, b.time) for r, b in beats.items()}
        state.update({r: "unusable" for r in self.unusable})  # whatever it holds: no progress
        if state != self.seen:
            self.seen = state
            self.last_progress = now
            return False
        if not state or self.last_progress is None or self.training is None:
            return False
        newly_gone = {
            b.pid for b in beats.values() if b.pid not in self.gone and not procs.same_process(b.pid, b.started)
        }
        if newly_gone:
            # a rank's process is gone: torchrun stops or restarts the group (a new attempt's ranks beat
            # afresh), so the clock starts again, once per process: a record naming a dead pid holds it no longer
            self.gone |= newly_gone
            self.last_progress = now
            return False
        if not self.unusable and all(b.phase == heartbeat.Phase.DONE for b in beats.values()):
            return False
        limit = self.limit(beats)
        if limit is None or now - self.last_progress < limit.seconds:
            return False
        self.fired = limit
        self.starting = sorted(r for r, b in beats.items() if b.phase == heartbeat.Phase.START)
        return True

    def diagnose(self, now: float, *, stack_wait_s: float = deadlines.STACK_WAIT_S) -> Report:
        """Ask every rank for its stack, locate each one, and name the likely culprit."""
        beats = self.beats()
        states = {r: RankState(r, b) for r, b in sorted(beats.items()) if b.phase != heartbeat.Phase.DONE}
        for r, failure in heartbeat.read_failures(self.folder).items():
            if r in states and failure.pid == beats[r].pid:  # this very process recorded a failure
                states[r].failed = failure.detail
        sizes = {r: _size(heartbeat.stack_path(self.folder, r)) for r in states}
        for r, st in states.items():
            self._ask(st, beats[r].pid, beats[r].started)
        for st in self.silent_ranks(beats):  # a silent rank that set up its stack dump is asked too
            if st.rank not in states and st.silent_pid is not None:
                states[st.rank] = st
                sizes[st.rank] = _size(heartbeat.stack_path(self.folder, st.rank))
                if st.responding:
                    self._ask(st, st.silent_pid, None)
        self._collect_stacks(states, sizes, stack_wait_s)
        for r, bad in self.unusable.items():
            states[r] = RankState(r, None, unusable=bad, responding=False)
        ranks = [states[r] for r in sorted(states)]
        culprits, reason = blame(ranks, self.local_ranks)
        stalled = now - self.last_progress if self.last_progress is not None else 0.0
        return Report(stalled, ranks, culprits, reason, self.fired, list(self.starting))

    def _ask(self, st: RankState, pid: int, started: int | None) -> None:
        """Send one rank the stack signal, through a hold on the very process proven to be the job's (never a pid
        that changed hands); a rank gone by then, or not provably the job's, is noted, never raised."""
        held = self.hold(pid, started=started, proof=lambda p: procs.not_the_jobs(p, None, root=self.root))
        if isinstance(held, str):
            st.responding = False
            if held == "not running":  # a record naming a process that is gone: nothing to ask
                st.gone = st.beat is not None
            else:  # never signal what is not provably the job's (a reused pid, a crafted record)
                st.foreign = held
            return
        with held:
            if procs.stopped(pid):  # it cannot run its handler: waiting for its stack would gain nothing
                st.responding, st.stopped = False, True
            elif not held.send(heartbeat.STACK_SIGNAL):  # it exited between the look and the signal
                st.responding, st.gone = False, st.beat is not None

    def silent_ranks(self, beats: dict[int, heartbeat.Beat]) -> list[RankState]:
        """The ranks this node's launcher started that never beat: a process below the launcher, of this job (its
        supervision folder), whose ``LOCAL_RANK`` no beat names. Asked for its stack only when its process handles the
        stack signal (``SigCgt``): the trainer sets its stack dump up first thing, but a rank stopped or stuck before
        that would be ended by the signal's default action."""
        if self.local_ranks is None:
            return []
        heard = {b.local_rank for b in beats.values()}
        missing = set(range(self.local_ranks)) - heard
        found: dict[int, RankState] = {}
        for pid in procs.descendants(self.root) if missing else ():  # parents first: a rank's own process
            if procs.env_value(pid, heartbeat.SUPERVISE_DIR_ENV) != str(self.folder):
                continue
            local, rank = procs.env_value(pid, "LOCAL_RANK"), procs.env_value(pid, "RANK")
            if local is None or rank is None or not (local.isdigit() and rank.isdigit()) or int(local) not in missing:
                continue
            if int(rank) in beats or int(rank) in self.unusable:
                continue
            missing.discard(int(local))
            stopped = procs.stopped(pid)
            answers = not stopped and procs.catches(pid, heartbeat.STACK_SIGNAL)  # its stack dump is set up
            found[int(rank)] = RankState(int(rank), None, responding=answers, stopped=stopped, silent_pid=pid)
        return [found[r] for r in sorted(found)]

    def _collect_stacks(self, states: dict[int, RankState], sizes: dict[int, int], stack_wait_s: float) -> None:
        """Wait (up to ``stack_wait_s``) for each signalled rank's stack to be written, then locate it."""
        pending = {r for r, st in states.items() if st.responding}
        deadline = time.monotonic() + stack_wait_s
        grown: dict[int, int] = {}
        while pending and time.monotonic() < deadline:
            time.sleep(0.05)
            for r in list(pending):
                size = _size(heartbeat.stack_path(self.folder, r))
                if size > sizes[r] and grown.get(r) == size:  # grew, then stayed put for one poll: written
                    pending.discard(r)
                grown[r] = size
        for r, st in states.items():
            if r in pending or not st.responding:
                st.responding = False
                continue
            path = heartbeat.stack_path(self.folder, r)
            st.stack = _read_from(path, sizes[r])
            st.collective, st.where = locate(main_thread(parse_threads(st.stack), heartbeat.read_main_thread(path)))
            beat = st.beat
            if st.collective is None and beat is not None and beat.collective is not None:  # a wait no Python
                st.collective = beat.collective  # frame shows (DDP's gradient all-reduce, from C++): the tracker saw it


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
