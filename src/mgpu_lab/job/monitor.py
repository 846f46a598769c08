"""Run one launched job: supervision (:mod:`mgpu_lab.job.supervise`), the rendezvous deadline, the hang watchdog
(:mod:`mgpu_lab.health.watchdog`) and the failure report (:mod:`mgpu_lab.health.failures`). Stdlib only.

:mod:`mgpu_lab.launch.launcher` parses and validates its input into one
:class:`~mgpu_lab.job.config.LaunchConfig`, builds the command and hands both to :func:`run_job`, which
returns the launcher's exit status (:mod:`mgpu_lab.core.errors`): 0 done, 1 the job failed, 2 every rank
refused its input, 3 hang, 4 rendezvous deadline, 128+N after the launcher got signal N.

The monitor is a small state machine (:class:`State`): it waits for the rendezvous, watches the running
job, and once it stopped the job itself (hang, rendezvous deadline, a JAX rank's error file) it only waits
for the job to go. When the job is gone, :meth:`JobMonitor.finish` moves it into its terminal state (succeeded,
failed, hung, interrupted, rendezvous timed out), whose :class:`Outcome` carries the exit status and the report's
lines. Its checks are separate objects (:mod:`mgpu_lab.job.checks`), each answering "what happened by now"; the
monitor turns their answers into lines and states. It sends no signal itself: the
:class:`~mgpu_lab.job.supervise.Supervisor` does (stop, kill the ranks that cannot stop).

torchrun's own failure text (its ``ChildFailedError`` traceback and summary) and its log lines never reach the
terminal: :class:`~mgpu_lab.job.stderr_route.StderrRouter` diverts them, and the launcher keeps them in a file
its report names (the run folder when the run made one) and reports in its own words, on every path (failure,
hang, interrupt, restart).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass

from mgpu_lab.core import deadlines, procs
from mgpu_lab.core.atomic import atomic_write_bytes
from mgpu_lab.core.errors import EXIT_FAILED, EXIT_HANG, EXIT_RDZV, EXIT_USAGE
from mgpu_lab.core.names import JOB_KEY_ENV
from mgpu_lab.health import failures, flight_recorder, heartbeat
from mgpu_lab.health.hang_report import stall_words, write_report
from mgpu_lab.health.live_stacks import LiveStacks
from mgpu_lab.health.watchdog import Watchdog
from mgpu_lab.job import checks, job_cgroup, oom, rendezvous, supervise
from mgpu_lab.job.nccl_trace import NcclTrace
from mgpu_lab.job.stderr_route import StderrRouter
from mgpu_lab.runs import attempt
from mgpu_lab.runs.continue_run import LAUNCHER_PID_ENV

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from mgpu_lab.job.config import LaunchConfig
    from mgpu_lab.job.supervise import Supervisor

#: File name of torchrun's own failure text in the run folder, and the report line that says where it is.
TORCHRUN_TEXT = "torchrun_failure.txt"
TORCHRUN_KEPT = "[ERROR] launcher: torchrun's own report, with each failed rank's traceback:"
#: The line that names the file on the other paths (hang, interrupt, rendezvous deadline), when torchrun logged.
TORCHRUN_LOG_KEPT = "[INFO] launcher: torchrun's own log lines:"
#: The launcher's line when torchrun restarted the worker group (torchrun says it only at its INFO level, kept out).
RESTARTED = "[WARN] launcher: a rank's process was replaced: torchrun restarted the worker group (--max_restarts)"


class State(enum.Enum):
    """Where the job is, as the monitor sees it; the last five are terminal (:meth:`JobMonitor.finish`)."""

    RENDEZVOUS = "waiting for the ranks to join"
    RUNNING = "running"
    STOPPING = "stopped by the monitor; waiting for the job to go"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    HUNG = "hung"
    INTERRUPTED = "interrupted"
    RDZV_TIMEOUT = "rendezvous timed out"


#: The exit status of the terminal states the monitor decides alone (the others take the job's or the report's).
_STATUS = {State.HUNG: EXIT_HANG, State.RDZV_TIMEOUT: EXIT_RDZV}


@dataclass(frozen=True)
class Outcome:
    """A terminal state, with the launcher's exit status and the lines that explain it (printed last)."""

    state: State
    exit_status: int
    lines: tuple[str, ...] = ()


def _say(line: str) -> None:
    """One line on the launcher's stderr; a stderr that cannot take it (closed, a full pipe's error) loses it, and
    nothing else is lost: the exit status is decided apart from what could be printed."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class JobMonitor:
    """Called on every supervision tick; polls its checks and acts on what they found, by state."""

    def __init__(
        self, config: LaunchConfig, supervise_dir: str, *, start: float, error_file: str | None, trace: NcclTrace | None
    ) -> None:

        self.config = config
        self.dir = supervise_dir
        self.trace = trace
        local = int(config.nproc) if config.nproc is not None and config.nproc.isdigit() else None
        self.watchdog = Watchdog(supervise_dir, config.hang_timeout, config.startup_timeout, local_ranks=local)
        self.rendezvous = checks.RendezvousDeadline(start, config.rdzv_timeout)
        self.hang = checks.HangCheck(self.watchdog, config.hang_timeout)
        self.liveness = checks.Liveness()
        self.failure_file = checks.FailureFile(error_file)
        # skrl's JAX launcher has no rendezvous of its own
        self.state = State.RUNNING if config.jax else State.RENDEZVOUS
        self.stopping_for: State | None = None  # HUNG or RDZV_TIMEOUT once the monitor stopped the job for that
        self.verdict: str | None = None  # the one-line error printed once the stopped job is gone (its last line)
        self.outcome: Outcome | None = None  # the terminal state, once the job is gone
        self.tail = bytearray()
        self.router = StderrRouter(self._show)
        self._pids: dict[int, int] = {}  # each rank's process, as its beats name it
        self._replaced: set[int] = set()  # ranks whose process was replaced since the group last restarted
        self.live_stacks = LiveStacks()  # SIGUSR2: every rank's stack now, the job goes on (mgpu-lab stacks)
        self.oom = oom.OomWatch()  # the kernel's OOM records before the job: a SIGKILLed rank's reason later

    def _note_restart(self, beats: dict[int, heartbeat.Beat]) -> None:
        """Say once per restart, in the launcher's words, that torchrun restarted the worker group: a rank's beat
        names a new process."""
        for rank, beat in beats.items():
            old = self._pids.get(rank)
            self._pids[rank] = beat.pid
            if old is not None and old != beat.pid and rank not in self._replaced:
                if not self._replaced:
                    _say(RESTARTED)
                self._replaced.add(rank)
        if self._replaced and self._replaced >= set(beats):  # every rank runs in the new group now
            self._replaced.clear()

    def _show(self, data: bytes) -> None:
        if self.state is not State.STOPPING:  # once the monitor stopped the job, torchrun's shutdown chatter stays out
            out = sys.stderr.buffer
            try:
                out.write(data)
                out.flush()
            except OSError:  # the terminal closed just now, before the SIGHUP handler ran: drop the output
                if not supervise.leave_hung_up_terminal():
                    raise

    def stderr(self, chunk: bytes) -> None:
        """Copy the job's stderr to ours (without torchrun's traceback), keeping a tail to read torchrun's
        failure summary from."""
        self.router.feed(chunk)
        self.tail += chunk
        del self.tail[:-262144]

    def tick(self, supervisor: Supervisor, now: float) -> None:

        self.router.release_stale()

        if self.live_stacks.collect_if_requested(self.dir, now, self._request_nccl_dumps) and self.trace:
            _say(f"[INFO] stacks: NCCL flight recorder dumps (when NCCL wrote any): {self.trace.dump_prefix}<rank>")
        if self.state is State.STOPPING:
            return
        beats, unusable = heartbeat.scan_beats(self.dir)
        if self.state is State.RENDEZVOUS and not self._rendezvous(
            supervisor, now, beats, joined=bool(beats or unusable) or self._workers_started(supervisor.pid)
        ):
            return
        self.liveness.poll(beats, time.time())
        self._note_restart(beats)
        gone = self._peers_gone()
        if gone is not None:  # a restart whose other ranks never came back: no further restart can help
            self._stop(supervisor, State.RDZV_TIMEOUT, gone)
        elif self.failure_file.poll():
            _say("[ERROR] launcher: a JAX rank failed; stopping the other ranks")
            self._stop(supervisor, None, None, grace_s=None)
        elif self.hang.poll(now):
            self._on_hang(supervisor, now)
        for line in self.watchdog.notices():  # records the watchdog could not use: named once each
            _say(line)

    def _peers_gone(self) -> str | None:
        """The verdict when a rank of this node recorded that its peers never came back after a restart."""
        for rank, failure in sorted(heartbeat.read_failures(self.dir).items()):
            if failure.kind == heartbeat.PEERS_GONE:
                return (
                    f"mgpu-lab train_multigpu: error: the job's other node(s) gave up: rank {rank} on this node "
                    f"({rendezvous.node(self.config)}) waited {self.config.rdzv_timeout:g} s for them after a "
                    f"restart (--rdzv_timeout): {failure.detail}; this node stops too"
                )
        return None

    def _stop(
        self,
        supervisor: Supervisor,
        why: State | None,
        verdict: str | None,
        *,
        grace_s: float | None = deadlines.MONITOR_STOP_GRACE_S,
    ) -> None:
        self.state, self.stopping_for, self.verdict = State.STOPPING, why, verdict
        supervisor.stop(signal.SIGTERM, grace_s=None if grace_s is None else min(self.config.grace_s, grace_s))

    def _rendezvous(self, supervisor: Supervisor, now: float, beats: Mapping[int, object], *, joined: bool) -> bool:
        """Poll the deadline; True once the ranks joined (the state is RUNNING); ``beats``: the ranks heard from."""

        event = self.rendezvous.poll(now, joined)
        if event == checks.JOINED:
            self.state = State.RUNNING
            if self.rendezvous.waited(now) >= self.rendezvous.report_every:
                _say(f"[INFO] launcher: rendezvous complete after {self.rendezvous.waited(now):.0f} s")
        elif event == checks.EXPIRED:
            self._stop(
                supervisor,
                State.RDZV_TIMEOUT,
                f"mgpu-lab train_multigpu: error: {rendezvous.missing(self.config, set(beats))}",
            )
        elif event == checks.WAITING:
            _say(rendezvous.waiting(self.config, self.rendezvous.left(now)))
        return self.state is State.RUNNING

    def _workers_started(self, pid: int | None) -> bool:
        """torchrun starts the workers (processes running the training script) only after its rendezvous.

        A worker is a descendant whose command line names the script and is not torchrun's own: torchrun's command
        line names the script too, and so does a child it forks before that child runs a program (torch forks
        helpers on its own, during its rendezvous as well), until the child runs one."""

        if pid is None:
            return False
        needle = self.config.train_script.encode()
        own = procs.cmdline(pid)
        return any(needle in words and words != own for words in map(procs.cmdline, procs.descendants(pid)))

    def _on_hang(self, supervisor: Supervisor, now: float) -> None:
        """Report the hang and stop the job. The verdict (exit 3, the job stopped) never depends on the report: a
        report that cannot be written degrades to the console, and one that fails outright is one line."""

        fired = self.watchdog.fired
        seconds = fired.seconds if fired is not None else self.config.hang_timeout
        _say(
            f"[ERROR] watchdog: no rank made progress for {seconds:g} s"
            f"{stall_words(fired, self.watchdog.starting)}; asking every rank for its stack"
        )
        stopped: dict[int, int] = {}
        try:
            stopped = self._report_hang(now)
        except Exception as exc:  # noqa: BLE001 - whatever broke the report, the job must still stop with exit 3
            _say(f"[ERROR] watchdog: the report could not be made ({type(exc).__name__}: {exc})")
        _say("[ERROR] watchdog: stopping the job (exit 3)")
        self._stop(supervisor, State.HUNG, None)
        supervisor.kill_ranks(list(stopped.values()))  # waiting out the grace for them serves nobody

    def _report_hang(self, now: float) -> dict[int, int]:
        """Ask for stacks, write and print the report; return the ranks stopped by a signal (rank -> pid)."""
        self._request_nccl_dumps()
        dumps = _dump_request(self.dir)  # issue 47: every backend's flight recorder, before the stacks
        report = self.watchdog.diagnose(now)
        folder = write_report(report, heartbeat.read_run_dir(self.dir))
        for line in report.summary_lines():
            _say(line)
        for why in report.unwritten:
            _say(f"[WARN] watchdog: the report could not be written to {why}")
        if folder is not None:
            _say(f"[ERROR] watchdog: stacks and summary in {folder}")
        else:
            _say("[ERROR] watchdog: no folder could take the stacks and summary: the lines above are the report")
        for line in _dump_lines(dumps):
            _say(line)
        if self.trace is not None:
            _say(f"[ERROR] watchdog: NCCL flight recorder dumps (when NCCL wrote any): {self.trace.dump_prefix}<rank>")
        stopped: dict[int, int] = {}
        for st in report.ranks:
            pid = st.beat.pid if st.beat is not None else st.silent_pid
            if st.stopped and pid is not None:
                stopped[st.rank] = pid
                _say(f"[ERROR] watchdog: rank {st.rank} (pid {pid}) is stopped and cannot take SIGTERM: killing it")
        return stopped

    def _request_nccl_dumps(self) -> None:
        if self.trace is not None:
            self.trace.request_dumps()

    def failure_report(self) -> failures.Report | None:

        exits, root = failures.parse_torchrun_summary(self.tail.decode("utf-8", errors="replace"))
        beats = heartbeat.read_beats(self.dir)
        world = next((b.world_size for b in beats.values()), None)
        return failures.report(
            heartbeat.read_failures(self.dir),
            exits,
            beats,
            self.liveness.last_alive,
            self.liveness.vanished,
            world,
            root,
            local_ranks=int(self.config.nproc)
            if self.config.nproc is not None and self.config.nproc.isdigit()
            else None,
        )

    def finish(self, rc: int, interrupted: int | None, job: JobEnvironment) -> Outcome:
        """The job is gone (``rc``: its status; ``interrupted``: the signal the launcher got, if any): move into the
        terminal state and return it."""
        if interrupted is not None:
            self.outcome = Outcome(State.INTERRUPTED, rc, self._log_kept(job))
        elif self.stopping_for is not None:
            verdict = (self.verdict,) if self.verdict is not None else ()  # the verdict is the last line
            self.outcome = Outcome(self.stopping_for, _STATUS[self.stopping_for], self._log_kept(job) + verdict)
        elif rc == 0:
            self.outcome = Outcome(State.SUCCEEDED, 0)
        elif (lost := rendezvous.lost_after_restart(self.router.kept())) is not None:  # torchrun's own rendezvous
            # after a restart (the monitor's deadline covers the first one and ends first): the other nodes left
            self.outcome = Outcome(
                State.RDZV_TIMEOUT, EXIT_RDZV, (*self._log_kept(job), rendezvous.gave_up(self.config, lost))
            )
        else:
            self.outcome = self._failed(rc, job)
        self.state = self.outcome.state
        return self.outcome

    def _log_kept(self, job: JobEnvironment) -> tuple[str, ...]:
        kept = self.keep_launcher_text(job.key)
        return (f"{TORCHRUN_LOG_KEPT} {kept}",) if kept is not None else ()

    def _failed(self, rc: int, job: JobEnvironment) -> Outcome:
        """The failure report: which ranks failed, which first, where torchrun's own text went."""

        report = self.failure_report()
        lines = report.lines if report is not None else []
        if report is None or not report.refused:
            kept = self.keep_launcher_text(job.key)
            if kept is not None:  # just before the "first failure" line, which stays among the last
                at = next((i for i, line in enumerate(lines) if line.startswith(failures.FIRST_FAILURE)), len(lines))
                lines.insert(at, f"{TORCHRUN_KEPT} {kept}")
        at = next((i for i, line in enumerate(lines) if line.startswith(failures.FIRST_FAILURE)), len(lines))
        lines[at:at] = self.oom.lines(self._sigkilled())
        lines[at:at] = flight_recorder.found_lines(heartbeat.read_run_dir(self.dir))  # issue 47: the ranks' dumps
        if job.error_file is not None:
            failure = _jax_failure(job.error_file)
            if failure is not None:
                lines.insert(0, f"[ERROR] launcher: a JAX rank failed:\n{failure}")
        if report is not None:
            status = report.exit_status
        else:
            status = EXIT_FAILED if rc != EXIT_USAGE else rc
        return Outcome(State.FAILED, status, tuple(lines))

    def _sigkilled(self) -> dict[int, int]:
        """rank -> pid of the ranks torchrun saw killed by SIGKILL (the OOM killer's signal)."""
        exits, _ = failures.parse_torchrun_summary(self.tail.decode("utf-8", errors="replace"))
        return {rank: e.pid for rank, e in exits.items() if e.code == -signal.SIGKILL}

    def keep_launcher_text(self, key: str) -> str | None:
        """Write torchrun's diverted failure text to the run folder (else --log_dir, else the temp folder);
        return where, or None when there was none."""

        text = self.router.kept()
        if not text:
            return None
        run_dir = heartbeat.read_run_dir(self.dir)
        log_dir = self.config.log_dir
        if run_dir is not None and run_dir.is_dir():
            target = str(run_dir / TORCHRUN_TEXT)
        elif log_dir is not None and os.path.isdir(log_dir):
            target = os.path.join(log_dir, f"torchrun_failure_{key}.txt")
        else:
            target = os.path.join(tempfile.gettempdir(), f"mgpu_lab_torchrun_failure_{key}.txt")
        try:
            atomic_write_bytes(target, text)
        except OSError:
            return None
        return target


def _dump_request(supervise_dir: str) -> flight_recorder.DumpRequest | None:
    """Ask every rank for its flight recorder dump; None (and one line) where no folder can take them, so a full
    disk costs the dumps, never the report."""
    try:
        return flight_recorder.DumpRequest(supervise_dir, heartbeat.read_run_dir(supervise_dir))
    except OSError as exc:
        _say(f"[WARN] watchdog: no flight recorder dumps: no folder can take them ({exc.strerror or exc})")
        return None


def _dump_lines(dumps: flight_recorder.DumpRequest | None) -> list[str]:
    """The report's lines about the dumps (none when none were asked for, or they cannot be said)."""
    try:
        return dumps.lines() if dumps is not None else []
    except OSError as exc:
        return [f"[WARN] watchdog: the flight recorder dumps cannot be listed ({exc.strerror or exc})"]


def job_key(config: LaunchConfig) -> str:
    """A string naming the job across restarts and nodes, from what every node of the job is given alike: the given
    key, SLURM's job id, else on several nodes the rendezvous (its id and endpoint), else the rdzv id, else fresh.
    Under torchrun the ranks still agree through the job's store (:mod:`mgpu_lab.runs.attempt`): rank 0's key is
    the job's, whatever the other nodes computed."""
    env = config.scheduler
    if env.job_key:
        return env.job_key
    if env.slurm_job_id:
        return f"slurm-{env.slurm_job_id}"
    rdzv_id = config.rdzv_id or env.rdzv_id
    if rendezvous.nodes(config) != "1":
        where = rendezvous.endpoint(config).replace(" ", "-")
        return _file_safe(f"nodes-{rdzv_id or 'none'}-{where}")
    if rdzv_id:
        return _file_safe(f"rdzv-{rdzv_id}")
    return f"job-{os.urandom(6).hex()}"


def _file_safe(text: str) -> str:
    """The key goes into file names: anything but letters, digits, ``.``, ``_`` and ``-`` becomes ``-``."""
    return "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "-" for c in text)[:120]


class JobEnvironment:
    """The ranks' environment for one job, and what the monitor needs to know about it."""

    def __init__(self, config: LaunchConfig, supervise_dir: str) -> None:

        self.key = job_key(config)
        self.tag = os.path.basename(supervise_dir)
        self.env = dict(config.environ)
        self.env[heartbeat.SUPERVISE_DIR_ENV] = supervise_dir
        self.env[JOB_KEY_ENV] = self.key
        self.env[attempt.WAIT_ENV] = f"{config.rdzv_timeout:g}"  # how long a restarted rank waits for its peers
        self.env[supervise.JOB_TAG_ENV] = self.tag
        self.env[LAUNCHER_PID_ENV] = str(os.getpid())  # rank 0 writes it into the run folder's lock (mgpu-lab stacks)
        self.trace: NcclTrace | None = None
        if not config.jax:
            flight_recorder.configure(self.env)  # issue 47: the recorder on for gloo as for NCCL
        if not config.on_cpu and not config.jax:  # CUDA ranks: PyTorch's NCCL flight recorder for this run
            self.trace = NcclTrace.configure(self.env, config.log_dir or tempfile.gettempdir(), self.key)
        self.error_file: str | None = None
        if config.jax and "TORCHELASTIC_ERROR_FILE" not in self.env:
            self.error_file = os.path.join(supervise_dir, "jax_error.json")
            self.env["TORCHELASTIC_ERROR_FILE"] = self.error_file


def run_job(config: LaunchConfig, cmd: list[str]) -> int:
    """Run the job under supervision and a watchdog; return the launcher's exit status."""

    with contextlib.ExitStack() as cleanup:
        supervise_dir = tempfile.mkdtemp(prefix="mgpu_lab_supervise_")
        cleanup.callback(shutil.rmtree, supervise_dir, ignore_errors=True)
        job = JobEnvironment(config, supervise_dir)
        if job.trace is not None:
            print(
                f"[INFO] launcher: NCCL flight recorder on; dumps go to {job.trace.dump_prefix}<rank>", file=sys.stderr
            )
        _say(f"[INFO] launcher: {shlex.join(cmd)}")
        cleanup.callback(supervise.dismiss_janitor, supervise.start_janitor(job.tag, config.grace_s))
        cleanup.enter_context(job_cgroup.confined(job.tag, _say))  # daemons with a cleared environment included
        monitor = JobMonitor(config, supervise_dir, start=time.monotonic(), error_file=job.error_file, trace=job.trace)
        monitor.live_stacks.install()
        cleanup.callback(monitor.live_stacks.restore)
        rc, supervisor = supervise.run_supervised(
            cmd, job.env, grace_s=config.grace_s, tick=monitor.tick, stderr_sink=monitor.stderr, tick_s=deadlines.TICK_S
        )
        monitor.router.close()
        return exit_status(monitor, supervisor, rc, job)
    raise AssertionError("unreachable")  # the ExitStack re-raises; for the type checker


def exit_status(monitor: JobMonitor, supervisor: Supervisor, rc: int, job: JobEnvironment) -> int:
    """The launcher's exit status once the job is gone, after the last lines that explain it."""
    outcome = monitor.finish(rc, supervisor.interrupted, job)
    for line in outcome.lines:
        _say(line)
    return outcome.exit_status


def _jax_failure(error_file: str) -> str | None:
    """The message a failed JAX rank left in its elastic error file, if any."""
    try:
        with open(error_file, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None

    try:
        message = json.loads(text)["message"]
        if isinstance(message, dict):
            return f"{message.get('message')}\n{message.get('extraInfo', {}).get('py_callstack', '')}".rstrip()
        return str(message)
    except (ValueError, KeyError, TypeError):
        return text.strip() or "a rank failed"
