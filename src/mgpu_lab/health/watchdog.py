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

import collections
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mgpu_lab.core import deadlines, held, procs
from mgpu_lab.health import heartbeat
from mgpu_lab.health.failures import lost_peer

#: torch.distributed functions a rank can be found waiting in: every collective (heartbeat.COLLECTIVES, the one
#: list), plus the set-up and point-to-point calls that block until a peer answers.
WAITS = frozenset(heartbeat.COLLECTIVES) | {
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "init_process_group",
    "new_group",
    "_store_based_barrier",
    "wait",
}
_C10D_FILE = "torch/distributed/distributed_c10d.py"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*most recent call first")

#: The launcher options that set the two limits (named in the report, so a user knows which one to raise).
HANG_OPTION, STARTUP_OPTION = "--hang_timeout", "--startup_timeout"


@dataclass(frozen=True)
class Limit:
    """One stall limit: the stage it covers ("start-up" or "training"), its length, and the option that set it."""

    stage: str
    seconds: float
    option: str


def limits(hang_timeout_s: float, startup_timeout_s: float) -> tuple[Limit | None, Limit | None]:
    """(training limit, start-up limit); None where that stage is not watched.

    ``hang_timeout_s`` 0 turns the watchdog off; ``startup_timeout_s`` 0 leaves start-up unwatched. The
    start-up limit is never shorter than the training limit: where ``--hang_timeout`` is the longer, it is
    the start-up limit too (and the report names it)."""
    if hang_timeout_s <= 0:
        return None, None
    training = Limit("training", hang_timeout_s, HANG_OPTION)
    if startup_timeout_s <= 0:
        return training, None
    if startup_timeout_s >= hang_timeout_s:
        return training, Limit("start-up", startup_timeout_s, STARTUP_OPTION)
    return training, Limit("start-up", hang_timeout_s, HANG_OPTION)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def where(self) -> str:
        return f"{self.file}:{self.line} in {self.func}"


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


@dataclass
class Report:
    """The watchdog's findings: each rank's state, the likely culprits and why, and where files went."""

    stalled_s: float
    ranks: list[RankState]
    culprits: list[int]
    reason: str
    limit: Limit | None = None  # the limit that fired
    starting: list[int] = field(default_factory=list)  # ranks that had not begun training
    folder: Path | None = None
    files: list[Path] = field(default_factory=list)
    unwritten: list[str] = field(default_factory=list)  # the folders that could not take the report, and why

    def summary_lines(self) -> list[str]:
        lines = [
            f"[ERROR] watchdog: no rank made progress for {self.stalled_s:.0f} s"
            f"{stall_words(self.limit, self.starting)}; where each rank is:"
        ]
        world = world_of(self.ranks)
        lines += [
            f"[ERROR] watchdog:   rank {st.rank} {st.place()} (pid {st.silent_pid})"
            if st.silent_pid is not None
            else f"[ERROR] watchdog:   {st.heading(world)}: {st.place()}"
            for st in self.ranks
        ]
        if self.culprits:
            names = ", ".join(str(r) for r in self.culprits)
            lines.append(f"[ERROR] watchdog: likely culprit: rank {names} ({self.reason})")
        else:
            lines.append(f"[ERROR] watchdog: no single culprit ({self.reason})")
        return lines


# --------------------------------------------------------------------------------------------------
# faulthandler text
# --------------------------------------------------------------------------------------------------


def parse_threads(text: str) -> list[list[Frame]]:
    """faulthandler's dump -> one list of frames per thread, most recent call first."""
    threads: list[list[Frame]] = []
    current: list[Frame] | None = None
    for line in text.splitlines():
        if _THREAD.match(line):
            current = []
            threads.append(current)
            continue
        m = _FRAME.match(line)
        if m and current is not None:
            current.append(Frame(m["file"], int(m["line"]), m["func"]))
    return threads


def main_thread(threads: list[list[Frame]]) -> list[Frame]:
    """The thread that runs the script: the one whose outermost frame is not a threading bootstrap."""
    for frames in threads:
        if frames and not frames[-1].file.endswith("threading.py"):
            return frames
    return threads[0] if threads else []


def _in_torch_distributed(frame: Frame) -> bool:
    """torch.distributed's own frames, and the rank's collective tracker wrapped around them (never the caller)."""
    path = frame.file.replace("\\", "/")
    return (
        "/torch/distributed/" in path
        or "/torch/nn/parallel/" in path
        or path.endswith(("/functools.py", "/mgpu_lab/health/collectives.py"))
    )


def locate(frames: list[Frame]) -> tuple[str | None, Frame | None]:
    """(collective the thread waits in or None, the caller's frame or the innermost frame of interest)."""
    for i, frame in enumerate(frames):
        if frame.file.replace("\\", "/").endswith(_C10D_FILE) and frame.func in WAITS:
            caller = next((f for f in frames[i + 1 :] if not _in_torch_distributed(f)), None)
            return frame.func, caller
    interesting = next((f for f in frames if "/lib/python" not in f.file.replace("\\", "/")), None)
    return None, interesting or (frames[0] if frames else None)


# --------------------------------------------------------------------------------------------------
# the watchdog
# --------------------------------------------------------------------------------------------------


def stall_words(limit: Limit | None, starting: list[int]) -> str:
    """Which limit fired, in words for the report: " in start-up (...)" or " in training (...)"."""
    if limit is None:
        return ""
    if limit.stage == "start-up":
        who = ", ".join(str(r) for r in starting)
        return (
            f" in start-up (rank {who} had not begun training; start-up limit {limit.seconds:g} s, "
            f"{limit.option}: raise it if a healthy start-up takes longer)"
        )
    return f" in training (training limit {limit.seconds:g} s, {limit.option})"


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
            st.stack = _read_from(heartbeat.stack_path(self.folder, r), sizes[r])
            st.collective, st.where = locate(main_thread(parse_threads(st.stack)))
            beat = st.beat
            if st.collective is None and beat is not None and beat.collective is not None:  # a wait no Python
                st.collective = beat.collective  # frame shows (DDP's gradient all-reduce, from C++): the tracker saw it


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


def write_report(report: Report, run_dir: Path | None) -> Path | None:
    """Write ``stack_rank<R>.txt`` and ``summary.txt`` under ``<run_dir>/watchdog/``, else under a fresh temp folder
    (no run folder known, or it cannot be written: a full disk, a path that is a file); return the folder, or None
    when no folder took every file. Never raises: :attr:`Report.unwritten` says what failed, and the caller prints
    the summary whatever happened here."""
    files = [(f"stack_rank{st.rank}.txt", st.stack_text()) for st in report.ranks]
    files.append(("summary.txt", "\n".join(report.summary_lines()) + "\n"))
    for folder in _report_folders(run_dir):
        try:
            written = []
            for name, text in files:
                path = folder / name
                path.write_text(text, encoding="utf-8")
                written.append(path)
        except OSError as exc:
            report.unwritten.append(f"{folder}: {exc.strerror or exc}")
            continue
        report.files, report.folder = written, folder
        return folder
    return None


def _report_folders(run_dir: Path | None) -> Iterator[Path]:
    """Where the report may go, in order: ``<run_dir>/watchdog``, then a fresh temp folder (each made on demand)."""
    if run_dir is not None:
        try:
            folder = run_dir / "watchdog"
            folder.mkdir(parents=True, exist_ok=True)
            yield folder
        except OSError:
            pass
    try:
        yield Path(tempfile.mkdtemp(prefix="mgpu_lab_watchdog_"))
    except OSError:
        return


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
