"""One training rank's side of supervision: heartbeats, stack dumps, failure records, and the fault switch.

The trainer builds one :class:`RankProgress` per process (:func:`from_env`). When the launcher set
``MGPU_LAB_SUPERVISE_DIR`` (see :mod:`mgpu_lab.health.heartbeat`), the rank

- beats once at start-up (phase ``start``, before any process group exists), once per training
  iteration (phase ``train``, at the iteration's first env step) and once at the end (``done``);
- dumps every thread's Python stack into ``stack.<rank>`` when it receives ``heartbeat.STACK_SIGNAL``;
- records the first exception that ends it in ``failure.<rank>``; rank 0 records the run folder.

Adapters count env steps through a :class:`StepClock`, which turns steps into iterations and calls the
per-iteration hook. Files are named by global rank (torchrun's virtual local rank gives every worker
local rank 0).

Injected faults (a seam: :func:`mgpu_lab.train.trainer.main` takes them as a parameter, and the tests pass
them; nothing reads them from the environment), written ``KIND:RANK:ITER[:ARG]`` (:func:`parse_faults`), each
fire on the given global rank at the first training iteration at or after ITER, on the first attempt only
(``TORCHELASTIC_RESTART_COUNT`` unset or 0):

- ``hang``: the rank stops making progress in a Python sleep loop, outside any collective;
- ``skip``: the rank returns from its next ``torch.distributed`` collective without joining it, so its
  peers block inside that collective; the rank then waits (outside any collective) instead of
  entering its next one;
- ``raise``: the rank raises ``RuntimeError("injected fault ...")``;
- ``signal``: the rank sends itself signal ARG (a number or a name such as ``SIGTERM``; default SIGKILL);
- ``slow``: from ITER on, the rank sleeps ARG seconds (default 0.5) at the start of every iteration: a
  straggler, held slow by the fault itself (``mgpu-lab timing`` names it);
- ``oom``: the rank allocates memory (every page written) until the kernel's OOM killer ends it with SIGKILL;
  refused (a RuntimeError) unless the rank's memory cgroup has a limit, so the machine's other processes are
  never the ones to run out (:func:`allocate_until_killed`).

This module imports no torch at load time; ``skip`` imports ``torch.distributed`` when it installs itself.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mgpu_lab.core import memcg, procs
from mgpu_lab.health import flight_recorder, heartbeat
from mgpu_lab.runs.resume import restart_count

FAULT_KINDS = ("hang", "skip", "raise", "signal", "slow", "oom")
SLOW_DEFAULT_S = 0.5


# --- the fault switch ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``kind`` on global rank ``rank`` at iteration ``iteration``."""

    kind: str
    rank: int
    iteration: int
    signum: int = int(signal.SIGKILL)  # for kind "signal"
    seconds: float = SLOW_DEFAULT_S  # for kind "slow": the sleep added to each iteration

    def describe(self) -> str:
        extra = f" ({signal.Signals(self.signum).name})" if self.kind == "signal" else ""
        extra = f" ({self.seconds:g} s per iteration)" if self.kind == "slow" else extra
        return f"{self.kind}{extra} at iteration {self.iteration} on rank {self.rank}"


def allocate_until_killed(rank: int, iteration: int, chunk: int = 32 << 20) -> None:
    """The ``oom`` fault: hold ever more written memory until the kernel kills this process (under a memory limit)."""
    cap = memcg.limited()
    if cap is None:
        raise RuntimeError(
            "injected fault oom: this rank's memory cgroup has no limit, so it would exhaust the whole machine; "
            "run the job in a memory-limited cgroup"
        )
    _say(
        f"[FAULT] rank {rank}: allocating memory at iteration {iteration} until the kernel's OOM killer ends it "
        f"(memory limit {cap >> 20} MiB; injected fault)"
    )
    held = []
    while True:
        block = bytearray(chunk)
        block[:: 1 << 12] = b"\1" * len(range(0, chunk, 1 << 12))  # write every page: reserved is not used
        held.append(block)


def _signal_number(text: str) -> int:
    name = text.strip().upper()
    if name.isdigit():
        number = int(name)
    else:
        name = name if name.startswith("SIG") else f"SIG{name}"
        if not hasattr(signal, name) or not isinstance(getattr(signal, name), signal.Signals):
            raise ValueError(f"unknown signal {text!r}")
        number = int(getattr(signal, name))
    if number not in {int(s) for s in signal.Signals}:
        raise ValueError(f"unknown signal {text!r}")
    return number


def _fault_arg(kind: str, text: str, signum: int, seconds: float) -> tuple[int, float]:
    """(signal number, seconds) with ARG applied: a signal for ``signal``, seconds (0 to 60) for ``slow``."""
    if kind == "signal":
        return _signal_number(text), seconds
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 60:
        raise ValueError(f"slow takes seconds per iteration, more than 0 and at most 60, not {text!r}")
    return signum, value


def parse_faults(text: str | None) -> tuple[Fault, ...]:
    """Parse comma-separated ``KIND:RANK:ITER[:ARG]`` faults; ValueError with a one-line message naming the bad entry."""
    if not text or not text.strip():
        return ()
    faults = []
    for entry in text.split(","):
        parts = [p.strip() for p in entry.strip().split(":")]
        usage = (
            f"fault: bad entry {entry.strip()!r}: expected KIND:RANK:ITER[:ARG] with KIND one of "
            f"{', '.join(FAULT_KINDS)}"
        )
        if len(parts) not in (3, 4) or parts[0] not in FAULT_KINDS:
            raise ValueError(usage)
        kind, rank_text, it_text = parts[:3]
        if not (rank_text.isdigit() and it_text.isdigit()):
            raise ValueError(usage + " (RANK and ITER are integers >= 0)")
        signum, seconds = int(signal.SIGKILL), SLOW_DEFAULT_S
        if len(parts) == 4:
            if kind not in ("signal", "slow"):
                raise ValueError(usage + " (only signal and slow take an ARG)")
            try:
                signum, seconds = _fault_arg(kind, parts[3], signum, seconds)
            except ValueError as exc:
                raise ValueError(f"fault: bad entry {entry.strip()!r}: {exc}") from None
        faults.append(Fault(kind, int(rank_text), int(it_text), signum, seconds))
    return tuple(faults)


def first_attempt(environ: Mapping[str, str] = os.environ) -> bool:
    """True unless torchrun says this is a restarted worker group (an unreadable count is no first attempt)."""
    try:
        return restart_count(environ) == 0
    except ValueError:
        return False


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def interrupted(environ: Mapping[str, str] = os.environ) -> int:
    """A rank's end on Ctrl-C: one line, exit 128 + SIGINT. The launcher forwarded the user's interrupt to every
    rank; a traceback per rank (the library's frames, a collective's) would only bury the launcher's own lines."""
    _say(f"[INFO] rank {environ.get('RANK', '0')}: interrupted (SIGINT), stopping")
    return 128 + int(signal.SIGINT)


def wait_forever(reason: str) -> None:
    """The injected hang: a Python sleep loop outside any collective (the launcher's watchdog ends it)."""
    _say(f"[FAULT] {reason}: waiting forever (injected fault)")
    while True:
        time.sleep(1.0)


class _DoneWork:
    """What an ``async_op=True`` collective returns when ``skip`` swallowed it: already complete."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


@dataclass
class SkipCollective:
    """``skip``: wraps torch.distributed's collectives in this process; armed at the fault's iteration."""

    fault: Fault
    armed: bool = False
    skipped: str | None = None
    originals: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def install(self) -> None:
        import torch.distributed as tdist  # torch: only for the skip fault

        for name in heartbeat.COLLECTIVES:
            original = getattr(tdist, name, None)
            if original is not None:
                self.originals[name] = original
                setattr(tdist, name, self._wrap(name, original))

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def collective(*args: Any, **kwargs: Any) -> Any:
            if self.skipped is not None:
                wait_forever(f"rank {self.fault.rank} skipped {self.skipped}, now before {name}")
            if self.armed:
                self.skipped = name
                _say(f"[FAULT] rank {self.fault.rank}: skipped torch.distributed.{name} (injected fault)")
                return _DoneWork() if kwargs.get("async_op") else None
            return original(*args, **kwargs)

        collective.__name__ = name
        collective.__wrapped__ = original  # type: ignore[attr-defined]
        return collective


class FaultSwitch:
    """The faults meant for this rank, fired from the per-iteration hook."""

    def __init__(self, faults: tuple[Fault, ...], rank: int) -> None:
        self.pending = [f for f in faults if f.rank == rank]
        self.skips = [SkipCollective(f) for f in self.pending if f.kind == "skip"]
        for skip in self.skips:
            skip.install()

    def at_iteration(self, iteration: int) -> None:
        for fault in [f for f in self.pending if f.iteration <= iteration]:
            if fault.kind == "slow":  # stays pending: every iteration from ITER on
                time.sleep(fault.seconds)
                continue
            self.pending.remove(fault)
            if fault.kind == "skip":
                for skip in self.skips:
                    if skip.fault is fault:
                        skip.armed = True
            elif fault.kind == "hang":
                wait_forever(f"rank {fault.rank}: injected hang at iteration {iteration}")
            elif fault.kind == "oom":
                allocate_until_killed(fault.rank, iteration)
            elif fault.kind == "raise":
                raise RuntimeError(f"injected fault: raise at iteration {iteration} on rank {fault.rank}")
            elif fault.kind == "signal":
                _say(
                    f"[FAULT] rank {fault.rank}: sending itself {signal.Signals(fault.signum).name} at iteration "
                    f"{iteration} (injected fault)"
                )
                os.kill(os.getpid(), fault.signum)


# --- supervision ----------------------------------------------------------------------------------------


def exit_detail(code: object, *, own_script: bool) -> str:
    """A rank's ``sys.exit(code)`` in words: "a usage error" only for 2 from this project's own trainer."""
    if own_script and code == 2:
        return "exited with status 2 (a usage error; the rank's stderr has the line)"
    if isinstance(code, int) or code is None:
        return f"exited with status {code or 0}"
    return f"exited with status 1 ({str(code)[:300]})"  # sys.exit("message"): python prints it, exits 1


class Supervision:
    """Writes this rank's heartbeats, stack dumps, failure record and (rank 0) run folder."""

    def __init__(self, folder: str, rank: int, local_rank: int, world_size: int) -> None:
        self.folder = folder
        self.rank, self.local_rank, self.world_size = rank, local_rank, world_size
        self.node = procs.node_name()
        self.pid = os.getpid()
        self.started = procs.start_time(self.pid)  # with the pid in every beat: the launcher signals only this process
        self._stack_file: TextIO | None = None

    def beat(self, iteration: int, phase: heartbeat.Phase, collective: str | None = None) -> None:
        heartbeat.write_beat(
            self.folder,
            heartbeat.Beat(
                self.rank,
                self.local_rank,
                self.world_size,
                self.node,
                self.pid,
                iteration,
                phase,
                time.time(),
                collective,
                self.started,
            ),
        )

    def register_stack_dump(self) -> None:
        """On ``heartbeat.STACK_SIGNAL``, write every thread's Python stack into ``stack.<rank>``, which starts with
        the line naming this process's main thread (once)."""
        if self._stack_file is not None:
            return
        self._stack_file = open(heartbeat.stack_path(self.folder, self.rank), "w", encoding="utf-8")  # noqa: SIM115
        main = threading.main_thread().ident
        if main is not None:  # before any dump: faulthandler writes to the file's descriptor, past this line
            self._stack_file.write(heartbeat.main_thread_line(main))
            self._stack_file.flush()
        faulthandler.register(heartbeat.STACK_SIGNAL, file=self._stack_file, all_threads=True)
        flight_recorder.listen(self.folder, self.rank)  # its flight recorder dump, asked through a FIFO (issue 47)

    def record_failure(self, exc: BaseException, *, own_script: bool = True) -> None:
        """Record how this rank failed; ``own_script``: this project's trainer (not a user's ``--train_script``)."""
        if isinstance(exc, SystemExit):
            detail = exit_detail(exc.code, own_script=own_script)
        else:
            text = str(exc).strip()
            detail = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")[:400]
        heartbeat.write_failure(
            self.folder,
            heartbeat.Failure(
                self.rank, self.local_rank, self.node, self.pid, heartbeat.EXCEPTION, detail, time.time()
            ),
        )
        flight_recorder.dump_on_failure(self.folder)  # before this rank exits and torchrun stops the others

    def record_refusal(self, message: str, kind: heartbeat.FailureKind = heartbeat.REFUSED) -> None:
        """Bad input this rank refused (exit 2): ``kind`` "refused", the line it printed as the detail (or another
        kind that ends the job, such as "peers_gone")."""
        heartbeat.write_failure(
            self.folder,
            heartbeat.Failure(self.rank, self.local_rank, self.node, self.pid, kind, message[:400], time.time()),
        )

    def record_run_dir(self, run_dir: str | os.PathLike) -> None:
        heartbeat.write_run_dir(self.folder, run_dir)


class RankProgress:
    """Everything the trainer reports about this rank's progress; inert when nothing asked for it."""

    def __init__(
        self, rank: int, local_rank: int, world_size: int, supervise_dir: str | None, faults: tuple[Fault, ...]
    ) -> None:
        self.rank = rank
        self.node = procs.node_name()
        self.iteration = -1
        self.supervision = Supervision(supervise_dir, rank, local_rank, world_size) if supervise_dir else None
        self.faults = FaultSwitch(faults, rank) if faults else None
        self.first_iteration_checks: list[Callable[[], None]] = []
        self.timing: Any = None  # mgpu_lab.health.timing.TimingLog once start() installed the collective tracker

    def start(self) -> None:
        """Beat "start", register the stack dump and track collectives for timing (before any process group)."""
        if self.supervision is not None:
            self.supervision.register_stack_dump()
            self.supervision.beat(-1, heartbeat.Phase.START)
            from mgpu_lab.health.collectives import CollectiveTracker  # only under the launcher's supervision
            from mgpu_lab.health.timing import TimingLog

            self.timing = TimingLog(CollectiveTracker().install(), self.rank, self.node, self.supervision.folder)

    def stack_dump(self) -> None:
        """Set up the stack dump and beat "start" before anything slow (the peers' agreement, the RL library's
        import): from here on the watchdog sees this rank and can read its stack."""
        if self.supervision is not None:
            self.supervision.register_stack_dump()
            self.supervision.beat(-1, heartbeat.Phase.START)

    def on_iteration(self, iteration: int) -> None:
        """Called at the first env step of each training iteration (``iteration`` counts from 0 over the run)."""
        if self.iteration < 0:
            for check in self.first_iteration_checks:
                check()
        if self.timing is not None:  # the window that ends here: the previous iteration (None: start-up)
            self.timing.close_window(self.iteration if self.iteration >= 0 else None)
        if self.faults is not None:
            self.faults.at_iteration(iteration)  # before the beat: a faulty rank stays behind on iterations
        self.iteration = iteration
        if self.supervision is not None:
            self.supervision.beat(iteration, heartbeat.Phase.TRAIN)

    def done(self) -> None:
        if self.timing is not None and self.iteration >= 0:
            self.timing.close_window(self.iteration)
            self.timing = None
        if self.supervision is not None:
            self.supervision.beat(self.iteration, heartbeat.Phase.DONE)

    def failed(self, exc: BaseException) -> None:
        if self.supervision is not None:
            self.supervision.record_failure(exc)

    def refused(self, message: str) -> None:
        if self.supervision is not None:
            self.supervision.record_refusal(message)

    def peers_gone(self, message: str) -> None:
        """The other ranks of a restarted job never came back: the launcher stops the job (no restart helps)."""
        if self.supervision is not None:
            self.supervision.record_refusal(message, heartbeat.PEERS_GONE)

    def run_dir(self, path: str | os.PathLike) -> None:
        if self.supervision is not None and self.rank == 0:
            self.supervision.record_run_dir(path)


def from_env(
    rank: int,
    local_rank: int,
    world_size: int,
    faults: tuple[Fault, ...],
    environ: dict[str, str] | os._Environ = os.environ,
) -> RankProgress:
    """This rank's RankProgress: supervised when the launcher set the folder; faults on the first attempt only."""
    folder = environ.get(heartbeat.SUPERVISE_DIR_ENV) or None
    if folder is not None and not Path(folder).is_dir():
        raise ValueError(f"{heartbeat.SUPERVISE_DIR_ENV}={folder}: not a folder")
    return RankProgress(rank, local_rank, world_size, folder, faults if first_attempt(environ) else ())


# --- counting env steps ------------------------------------------------------------------------------


class StepClock:
    """Counts this rank's env steps and calls ``on_iteration(i)`` at the first step of each iteration.

    ``steps_per_iteration`` batched env steps make one training iteration of the library;
    ``start_iteration`` is where a resumed run starts counting.
    """

    __slots__ = ("_left", "batches", "env_steps", "on_iteration", "start_iteration", "steps_per_iteration")

    def __init__(
        self, steps_per_iteration: int, start_iteration: int = 0, on_iteration: Callable[[int], None] | None = None
    ) -> None:
        if steps_per_iteration < 1:
            raise ValueError(f"steps_per_iteration must be >= 1, got {steps_per_iteration}")
        self.steps_per_iteration = steps_per_iteration
        self.start_iteration = start_iteration
        self.on_iteration = on_iteration
        self.batches = 0  # batched env steps taken (each steps every env once)
        self.env_steps = 0  # single-env transitions: sum of num_envs over batches
        self._left = 0  # batched steps left in the current iteration

    def tick(self, num_envs: int) -> None:
        """Count one batched env step of ``num_envs`` envs (call it before stepping)."""
        if self._left == 0:
            self._left = self.steps_per_iteration
            if self.on_iteration is not None:
                self.on_iteration(self.start_iteration + self.batches // self.steps_per_iteration)
        self._left -= 1
        self.batches += 1
        self.env_steps += num_envs
