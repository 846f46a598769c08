"""Run one launched job: supervision (:mod:`mgpu_lab.job.supervise`), the rendezvous deadline, the hang watchdog
(:mod:`mgpu_lab.health.watchdog`) and the failure report (:mod:`mgpu_lab.health.failures`). Stdlib only.

:mod:`mgpu_lab.launch.launcher` parses and validates its input into one
:class:`~mgpu_lab.job.config.LaunchConfig`, builds the command and hands both to :func:`run_job`, which
returns the launcher's exit status (:mod:`mgpu_lab.core.errors`): 0 done, 1 the job failed, 2 every rank
refused its input, 3 hang, 4 rendezvous deadline, 128+N after the launcher got signal N.

The monitor is a small state machine (:class:`State`): it waits for the rendezvous, watches the running
job, and once it stopped the job itself (hang, rendezvous deadline, a JAX rank's error file) it only waits
for the job to go. Its checks are separate objects (:mod:`mgpu_lab.job.checks`), each answering "what
happened by now"; the monitor turns their answers into lines, signals and the exit status.

torchrun's own failure text (its ``ChildFailedError`` traceback and summary) never reaches the terminal:
:class:`~mgpu_lab.job.stderr_route.StderrRouter` diverts it, and the launcher keeps it in a file its report
names (the run folder when the run made one) and reports in its own words.
"""

from __future__ import annotations

import enum
import os
import shlex
import signal
import sys

from mgpu_lab.core.errors import EXIT_FAILED, EXIT_HANG, EXIT_RDZV, EXIT_USAGE
from mgpu_lab.job import checks
from mgpu_lab.job.stderr_route import StderrRouter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mgpu_lab.health import failures
    from mgpu_lab.job.config import LaunchConfig
    from mgpu_lab.job.nccl_trace import NcclTrace
    from mgpu_lab.job.supervise import Supervisor

#: File name of torchrun's own failure text in the run folder, and the report line that says where it is.
TORCHRUN_TEXT = "torchrun_failure.txt"
TORCHRUN_KEPT = "[ERROR] launcher: torchrun's own report, with each failed rank's traceback:"
#: The longest grace the monitor gives the job when it stops it itself (hang, rendezvous deadline).
STOP_GRACE_S = 3.0


class State(enum.Enum):
    """Where the job is, as the monitor sees it."""

    RENDEZVOUS = "waiting for the ranks to join"
    RUNNING = "running"
    STOPPING = "stopped by the monitor; waiting for the job to go"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class JobMonitor:
    """Called on every supervision tick; polls its checks and acts on what they found, by state."""

    def __init__(
        self, config: LaunchConfig, supervise_dir: str, *, start: float, error_file: str | None, trace: NcclTrace | None
    ) -> None:
        from mgpu_lab.health.live_stacks import LiveStacks
        from mgpu_lab.health.watchdog import Watchdog

        self.config = config
        self.dir = supervise_dir
        self.trace = trace
        self.watchdog = Watchdog(supervise_dir, config.hang_timeout, config.startup_timeout)
        self.rendezvous = checks.RendezvousDeadline(start, config.rdzv_timeout)
        self.hang = checks.HangCheck(self.watchdog, config.hang_timeout)
        self.liveness = checks.Liveness()
        self.failure_file = checks.FailureFile(error_file)
        # skrl's JAX launcher has no rendezvous of its own
        self.state = State.RUNNING if config.jax else State.RENDEZVOUS
        self.outcome: int | None = None  # EXIT_HANG or EXIT_RDZV once the monitor stopped the job for that
        self.verdict: str | None = None  # the one-line error printed once the stopped job is gone (its last line)
        self.tail = bytearray()
        self.router = StderrRouter(self._show)
        self.live_stacks = LiveStacks()  # SIGUSR2: every rank's stack now, the job goes on (mgpu-lab stacks)

    def _show(self, data: bytes) -> None:
        if self.outcome is None:  # once the monitor stopped the job, torchrun's shutdown chatter stays out
            out = sys.stderr.buffer
            out.write(data)
            out.flush()

    def stderr(self, chunk: bytes) -> None:
        """Copy the job's stderr to ours (without torchrun's traceback), keeping a tail to read torchrun's
        failure summary from."""
        self.router.feed(chunk)
        self.tail += chunk
        del self.tail[:-262144]

    def tick(self, supervisor: Supervisor, now: float) -> None:
        import time

        from mgpu_lab.health import heartbeat

        self.router.release_stale()

        if self.live_stacks.collect_if_requested(self.dir, now, self._request_nccl_dumps) and self.trace:
            _say(f"[INFO] stacks: NCCL flight recorder dumps (when NCCL wrote any): {self.trace.dump_prefix}<rank>")
        if self.state is State.STOPPING:
            return
        beats = heartbeat.read_beats(self.dir)
        if self.state is State.RENDEZVOUS and not self._rendezvous(
            supervisor, now, joined=bool(beats) or self._workers_started(supervisor.pid)
        ):
            return
        self.liveness.poll(beats, time.time())
        if self.failure_file.poll():
            _say("[ERROR] launcher: a JAX rank failed; stopping the other ranks")
            self._stop(supervisor, None, None, grace_s=None)
        elif self.hang.poll(now):
            self._on_hang(supervisor, now)

    def _stop(
        self, supervisor: Supervisor, outcome: int | None, verdict: str | None, *, grace_s: float | None = STOP_GRACE_S
    ) -> None:
        self.state, self.outcome, self.verdict = State.STOPPING, outcome, verdict
        supervisor.stop(signal.SIGTERM, grace_s=None if grace_s is None else min(self.config.grace_s, grace_s))

    def _rendezvous(self, supervisor: Supervisor, now: float, *, joined: bool) -> bool:
        """Poll the deadline; True once the ranks joined (the state is RUNNING)."""
        from mgpu_lab.job import rendezvous

        event = self.rendezvous.poll(now, joined)
        if event == checks.JOINED:
            self.state = State.RUNNING
            if self.rendezvous.waited(now) >= self.rendezvous.report_every:
                _say(f"[INFO] launcher: rendezvous complete after {self.rendezvous.waited(now):.0f} s")
        elif event == checks.EXPIRED:
            self._stop(supervisor, EXIT_RDZV, f"mgpu-lab train_multigpu: error: {rendezvous.missing(self.config)}")
        elif event == checks.WAITING:
            _say(rendezvous.waiting(self.config, self.rendezvous.left(now)))
        return self.state is State.RUNNING

    def _workers_started(self, pid: int | None) -> bool:
        """torchrun starts the workers (processes running the training script) only after its rendezvous.

        A worker is a descendant whose command line names the script and is not torchrun's own: torchrun's command
        line names the script too, and so does a child it forks before that child runs a program (torch forks
        helpers on its own, during its rendezvous as well), until the child runs one."""
        from mgpu_lab.core import procs

        if pid is None:
            return False
        needle = self.config.train_script.encode()
        own = procs.cmdline(pid)
        return any(needle in words and words != own for words in map(procs.cmdline, procs.descendants(pid)))

    def _on_hang(self, supervisor: Supervisor, now: float) -> None:
        from mgpu_lab.health import heartbeat
        from mgpu_lab.health.watchdog import stall_words, write_report

        fired = self.watchdog.fired
        seconds = fired.seconds if fired is not None else self.config.hang_timeout
        _say(
            f"[ERROR] watchdog: no rank made progress for {seconds:g} s"
            f"{stall_words(fired, self.watchdog.starting)}; asking every rank for its stack"
        )
        self._request_nccl_dumps()
        report = self.watchdog.diagnose(now)
        folder = write_report(report, heartbeat.read_run_dir(self.dir))
        for line in report.summary_lines():
            print(line, file=sys.stderr)
        print(f"[ERROR] watchdog: stacks and summary in {folder}", file=sys.stderr)
        if self.trace is not None:
            print(
                f"[ERROR] watchdog: NCCL flight recorder dumps (when NCCL wrote any): {self.trace.dump_prefix}<rank>",
                file=sys.stderr,
            )
        stopped = [st for st in report.ranks if st.stopped]
        for st in stopped:
            print(
                f"[ERROR] watchdog: rank {st.rank} (pid {st.beat.pid}) is stopped and cannot take SIGTERM: killing it",
                file=sys.stderr,
            )
        _say("[ERROR] watchdog: stopping the job (exit 3)")
        self._stop(supervisor, EXIT_HANG, None)
        for st in stopped:  # waiting out the grace for a rank that cannot end on SIGTERM serves nobody
            try:
                os.kill(st.beat.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _request_nccl_dumps(self) -> None:
        if self.trace is not None:
            self.trace.request_dumps()

    def failure_report(self) -> failures.Report | None:
        from mgpu_lab.health import failures, heartbeat

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
        )

    def keep_launcher_text(self, key: str) -> str | None:
        """Write torchrun's diverted failure text to the run folder (else --log_dir, else the temp folder);
        return where, or None when there was none."""
        import tempfile

        from mgpu_lab.core.atomic import atomic_write_bytes
        from mgpu_lab.health import heartbeat

        text = bytes(self.router.diverted)
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


def job_key(config: LaunchConfig) -> str:
    """A string naming the job across restarts and nodes: the given key, SLURM's job id, the rdzv id, or fresh."""
    from mgpu_lab.runs.resume import JOB_KEY_ENV

    environ = config.environ
    if environ.get(JOB_KEY_ENV):
        return environ[JOB_KEY_ENV]
    if environ.get("SLURM_JOB_ID"):
        return f"slurm-{environ['SLURM_JOB_ID']}"
    rdzv_id = config.rdzv_id or environ.get("PET_RDZV_ID")
    if rdzv_id:
        return f"rdzv-{rdzv_id}"
    return f"job-{os.urandom(6).hex()}"


class JobEnvironment:
    """The ranks' environment for one job, and what the monitor needs to know about it."""

    def __init__(self, config: LaunchConfig, supervise_dir: str) -> None:
        import tempfile

        from mgpu_lab.health import heartbeat
        from mgpu_lab.job import supervise
        from mgpu_lab.job.nccl_trace import NcclTrace
        from mgpu_lab.runs.continue_run import LAUNCHER_PID_ENV
        from mgpu_lab.runs.resume import JOB_KEY_ENV

        self.key = job_key(config)
        self.tag = os.path.basename(supervise_dir)
        self.env = dict(config.environ)
        self.env[heartbeat.SUPERVISE_DIR_ENV] = supervise_dir
        self.env[JOB_KEY_ENV] = self.key
        self.env[supervise.JOB_TAG_ENV] = self.tag
        self.env[LAUNCHER_PID_ENV] = str(os.getpid())  # rank 0 writes it into the run folder's lock (mgpu-lab stacks)
        self.trace: NcclTrace | None = None
        if not config.on_cpu and not config.jax:  # CUDA ranks: PyTorch's NCCL flight recorder for this run
            self.trace = NcclTrace.configure(self.env, config.log_dir or tempfile.gettempdir(), self.key)
        self.error_file: str | None = None
        if config.jax and "TORCHELASTIC_ERROR_FILE" not in self.env:
            self.error_file = os.path.join(supervise_dir, "jax_error.json")
            self.env["TORCHELASTIC_ERROR_FILE"] = self.error_file


def run_job(config: LaunchConfig, cmd: list[str]) -> int:
    """Run the job under supervision and a watchdog; return the launcher's exit status."""
    import contextlib
    import shutil
    import tempfile
    import time

    from mgpu_lab.job import job_cgroup, supervise

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
        cleanup.enter_context(job_cgroup.confined(job.tag))  # daemons with a cleared environment included
        monitor = JobMonitor(config, supervise_dir, start=time.monotonic(), error_file=job.error_file, trace=job.trace)
        monitor.live_stacks.install()
        cleanup.callback(monitor.live_stacks.restore)
        rc, supervisor = supervise.run_supervised(
            cmd, job.env, grace_s=config.grace_s, tick=monitor.tick, stderr_sink=monitor.stderr, tick_s=0.2
        )
        monitor.router.close()
        return exit_status(monitor, supervisor, rc, job)
    raise AssertionError("unreachable")  # the ExitStack re-raises; for the type checker


def exit_status(monitor: JobMonitor, supervisor: Supervisor, rc: int, job: JobEnvironment) -> int:
    """The launcher's exit status once the job is gone, after the last lines that explain it."""
    if monitor.outcome is not None and supervisor.interrupted is None:
        if monitor.verdict is not None:  # after any message about stopping the job: the verdict is the last line
            _say(monitor.verdict)
        return monitor.outcome
    if supervisor.interrupted is not None or rc == 0:
        return rc
    from mgpu_lab.health import failures

    report = monitor.failure_report()
    lines = report.lines if report is not None else []
    if report is None or not report.refused:
        kept = monitor.keep_launcher_text(job.key)
        if kept is not None:  # just before the "first failure" line, which stays among the last
            at = next((i for i, line in enumerate(lines) if line.startswith(failures.FIRST_FAILURE)), len(lines))
            lines.insert(at, f"{TORCHRUN_KEPT} {kept}")
    if job.error_file is not None:
        failure = _jax_failure(job.error_file)
        if failure is not None:
            lines.insert(0, f"[ERROR] launcher: a JAX rank failed:\n{failure}")
    for line in lines:
        _say(line)
    if report is not None:
        return report.exit_status
    return EXIT_FAILED if rc != EXIT_USAGE else rc


def _jax_failure(error_file: str) -> str | None:
    """The message a failed JAX rank left in its elastic error file, if any."""
    try:
        with open(error_file, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    import json

    try:
        message = json.loads(text)["message"]
        if isinstance(message, dict):
            return f"{message.get('message')}\n{message.get('extraInfo', {}).get('py_callstack', '')}".rstrip()
        return str(message)
    except (ValueError, KeyError, TypeError):
        return text.strip() or "a rank failed"
