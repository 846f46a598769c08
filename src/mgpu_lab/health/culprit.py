"""Who is stuck where: each rank's state as the watchdog found it, and the likely culprit of a hang (stdlib only).

:class:`RankState` is filled by :class:`mgpu_lab.health.watchdog.Watchdog`; :func:`blame` reads a list of them and
names the ranks to look at, with the reason in words. Nothing here signals or writes.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from mgpu_lab.health import heartbeat
from mgpu_lab.health.failures import lost_peer
from mgpu_lab.health.stack_text import Frame


@dataclass
class RankState:
    """What the watchdog found out about one rank (``beat`` None: its record was unusable, see ``unusable``)."""

    rank: int
    beat: heartbeat.Beat | None
    unusable: heartbeat.Unusable | None = None
    gone: bool = False  # the pid its beat names is not running
    foreign: str | None = None  # why the pid its beat names is not provably this job's (then it is never signalled)
    responding: bool = True
    stopped: bool = False  # stopped by a signal (SIGSTOP, or a debugger): it can answer nothing, not even SIGTERM
    stack: str = ""
    collective: str | None = None  # the collective the rank waits in
    where: Frame | None = None  # the caller of that collective, or the rank's innermost frame of interest
    silent_pid: int | None = None  # a rank the launcher started that never beat: its process (found by LOCAL_RANK)
    failed: str | None = None  # the failure this rank's process recorded already (it is failing, still exiting)

    def heading(self, world: object = "?", *, phase: bool = True) -> str:
        """``rank R/W (node N, pid P, iteration I[, phase X])``, or ``rank R/W (record PATH)`` for an unusable one."""
        b = self.beat
        if b is None and self.silent_pid is not None:
            return f"rank {self.rank}/{world} (pid {self.silent_pid})"
        if b is None:
            where = f"record {self.unusable.path}" if self.unusable is not None else "no record"
            return f"rank {self.rank}/{world} ({where})"
        tail = f", phase {b.phase}" if phase else ""
        return f"rank {self.rank}/{b.world_size} (node {b.node}, pid {b.pid}, iteration {b.iteration}{tail})"

    def stack_text(self) -> str:
        """What goes into the rank's stack file: its stack, or why there is none."""
        if self.responding:
            return self.stack
        if self.beat is None and self.silent_pid is not None and not self.responding:
            return (
                f"rank {self.rank} (pid {self.silent_pid}) {self.place()}\nno stack: it never set up its stack dump "
                f"(that comes with its first beat); where py-spy is installed: py-spy dump --pid {self.silent_pid}\n"
            )
        if self.beat is None:
            return f"rank {self.rank}: {self.place()}\n"
        return f"rank {self.rank} (pid {self.beat.pid}) did not answer the stack request: {self.place()}\n"

    def place(self) -> str:
        if self.failed is not None:
            return f"failed already, not exited yet: {self.failed}"
        if self.silent_pid is not None:
            how = "; stopped by a signal: SIGSTOP, or a debugger holds it" if self.stopped else ""
            if self.responding and self.collective is not None:
                how = f"; waiting in {self.collective}" + (f", called from {self.where.where()}" if self.where else "")
            elif self.responding and self.where is not None:
                how = f"; at {self.where.where()}"
            return f"never reported: stopped or stuck before its first beat{how}"
        if self.unusable is not None:
            return f"unusable record ({self.unusable.reason}); counted as no progress"
        if self.gone and self.beat is not None:
            return f"not responding (pid {self.beat.pid}, named by its beat record, is not running)"
        if self.foreign is not None and self.beat is not None:
            return (
                f"not signalled: pid {self.beat.pid}, named by its beat record, is {self.foreign} "
                "(a stale or foreign record)"
            )
        if self.stopped:
            return "not responding (stopped by a signal: SIGSTOP, or a debugger holds it)"
        if not self.responding:
            return "not responding (no stack within the deadline: stopped, or stuck outside Python)"
        if self.collective is not None:
            caller = f", called from {self.where.where()}" if self.where else ""
            return f"waiting in {self.collective}{caller}"
        return f"outside any collective, at {self.where.where()}" if self.where else "outside any collective"


def world_of(ranks: list[RankState]) -> object:
    """The world size the usable beats give ("?" when none is usable)."""
    return next((st.beat.world_size for st in ranks if st.beat is not None), "?")


def blame(states: list[RankState], local_ranks: int | None = None) -> tuple[list[int], str]:
    """The likely culprits and why: ranks not in the collective the others wait in; else ranks not
    responding; else the ranks behind on iterations; else a one-rank job's rank; else, on a job that spans
    nodes (more ranks than ``local_ranks``, this node's, or than ``states``), this node's ranks when none of them
    waits in a collective; else none."""
    if not states:
        return [], "no rank has beaten"
    if all(s.failed is not None for s in states):  # every rank here is failing already: not a hang of theirs
        if all(lost_peer(s.failed or "") for s in states):
            return [], (
                "every rank of this node failed because its collective lost a peer: the first failure is on "
                "another node; look at that node's report"
            )
        return [s.rank for s in states if not lost_peer(s.failed or "")], "it failed and has not exited"
    silent = [s.rank for s in states if not s.responding]
    waiting = [s for s in states if s.responding and s.collective is not None]
    elsewhere = [s.rank for s in states if s.responding and s.collective is None]
    if waiting and (elsewhere or silent):
        ops = collections.Counter(s.collective for s in waiting).most_common(1)[0][0]
        return sorted(elsewhere + silent), f"the other rank(s) wait in {ops} for it"
    if silent:
        unusable = [s.rank for s in states if s.unusable is not None]
        if unusable and len(unusable) == len(silent):
            return silent, "its record could not be used: no progress known"
        if all(s.silent_pid is not None for s in states if not s.responding):
            return silent, "the launcher started it and it never reported"
        return silent, "it did not answer the stack request"
    iterations = collections.Counter(s.beat.iteration for s in states if s.beat is not None)
    if len(iterations) > 1:
        low = min(iterations)
        behind = [s.rank for s in states if s.beat is not None and s.beat.iteration == low]
        return behind, f"behind the others at iteration {low}"
    only = states[0].beat if len(states) == 1 else None
    if only is not None and only.world_size == 1:  # no other rank to compare with: the job's own rank
        return [states[0].rank], "the job's only rank; " + (
            f"it waits in {states[0].collective}, which never completes"
            if states[0].collective
            else "it is outside any collective"
        )
    if waiting and len(waiting) == len(states):
        places = collections.Counter((s.collective, s.where) for s in waiting)
        if len(places) > 1:
            common = places.most_common(1)[0][0]
            odd = [s.rank for s in waiting if (s.collective, s.where) != common]
            return odd, f"in a different collective from the others ({common[0]})"
        if spans_nodes(states, local_ranks):
            return (
                [],
                f"every rank of this node waits in {waiting[0].collective}: look at the other node(s)' watchdog "
                "report for the rank outside it, or a collective that never completes",
            )
        return (
            [],
            f"every rank waits in {waiting[0].collective}: a rank on another node, or a collective "
            "that never completes",
        )
    if spans_nodes(
        states, local_ranks
    ):  # this node's ranks hold no collective up: the other nodes' ranks wait for them
        world = world_of(states)
        return [s.rank for s in states], (
            f"outside any collective while the job's {world} ranks span several nodes: the ranks on the other "
            "node(s) wait for this node"
        )
    return [], "every rank is outside any collective at the same iteration"


def spans_nodes(states: list[RankState], local_ranks: int | None = None) -> bool:
    """The job has more ranks than this node's (a beat's world size above the ranks this node started)."""
    world = world_of(states)
    return isinstance(world, int) and world > (local_ranks if local_ranks is not None else len(states))
