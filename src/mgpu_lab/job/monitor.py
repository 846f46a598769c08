"""Run one launched job: supervision (:mod:`mgpu_lab.job.supervise`), the rendezvous deadline, the hang watchdog
(:mod:`mgpu_lab.health.watchdog`) and the failure report (:mod:`mgpu_lab.health.failures`). Stdlib only.

:mod:`mgpu_lab.launch.launcher` parses and validates its input, builds the command and hands a :class:`JobSpec` to
:func:`run_job`, which returns the launcher's exit status (:mod:`mgpu_lab.core.errors`): 0 done, 1 the job failed,
2 every rank refused its input, 3 hang, 4 rendezvous deadline, 128+N after the launcher got signal N.

torchrun's own failure text (its ``ChildFailedError`` traceback and summary) never reaches the terminal:
:class:`StderrRouter` diverts it, and the launcher keeps it in a file its report names (the run folder when
the run made one) and reports in its own words.
"""

from __future__ import annotations

import os
import shlex
import sys

from mgpu_lab.core.errors import EXIT_FAILED, EXIT_HANG, EXIT_OK, EXIT_RDZV, EXIT_USAGE  # noqa: F401

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mgpu_lab.health import failures

#: Environment variable naming the job across restarts and nodes (launcher -> ranks).
JOB_KEY_ENV = "MGPU_LAB_JOB_KEY"
#: File name of torchrun's own failure text in the run folder, and the report line that says where it is.
TORCHRUN_TEXT = "torchrun_failure.txt"
TORCHRUN_KEPT = "[ERROR] launcher: torchrun's own report, with each failed rank's traceback:"
_TRACEBACK = b"Traceback (most recent call last):"


class StderrRouter:
    """Copies the job's stderr to ours line by line, except torchrun's (or skrl's JAX launcher's) own traceback.

    The launchers run as ``python -m MODULE``, so their traceback's first frame is runpy's
    ``_run_module_as_main``; a rank's traceback starts in the training script (and carries a ``[rankN]:``
    prefix under ``--local_ranks_filter``). From the launcher's traceback on, everything is its final text:
    kept in :attr:`diverted`, not shown. Text without a line end goes out at once unless it may begin
    such a traceback.
    """

    def __init__(self, write) -> None:  # noqa: ANN001 - a callable taking bytes
        self.write = write
        self.diverted = bytearray()
        self._pending = b""  # the start of a line that may begin a traceback
        self._held: bytes | None = None  # a traceback's first line, until its next line says whose it is
        self._mid_line = False  # part of the current line went out already

    def feed(self, chunk: bytes) -> None:
        if self.diverted:
            self.diverted += chunk
            return
        data, self._pending = self._pending + chunk, b""
        out = bytearray()
        while data and not self.diverted:
            end = data.find(b"\n")
            if self._mid_line:
                piece, data = (data, b"") if end < 0 else (data[:end + 1], data[end + 1:])
                out += piece
                self._mid_line = end < 0
                continue
            if end < 0:
                if self._held is not None or _TRACEBACK.startswith(data[:len(_TRACEBACK)]):
                    self._pending = data
                else:
                    out += data
                    self._mid_line = True
                break
            self._route(data[:end + 1], out)
            data = data[end + 1:]
        if self.diverted and data:
            self.diverted += data
        if out:
            self.write(bytes(out))

    def _route(self, line: bytes, out: bytearray) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if b"_run_module_as_main" in line:
                self.diverted += held + line
                return
            out += held
        if line.rstrip(b"\r\n") == _TRACEBACK:
            self._held = line
        else:
            out += line

    def close(self) -> None:
        """At the job's end: what is still held back was not the launcher's traceback."""
        rest = (self._held or b"") + self._pending
        self._held, self._pending = None, b""
        if rest and not self.diverted:
            self.write(rest)


class JobSpec:
    """What the runner needs to know about the job (all validated by the launcher)."""

    def __init__(self, cmd: list[str], *, jax: bool, on_cpu: bool, train_script: str, hang_timeout: float,
                 startup_timeout: float, rdzv_timeout: float, log_dir: str | None = None, rdzv_id: str | None = None,
                 nnodes: str | None = None, node_rank: int | None = None, master_addr: str | None = None,
                 master_port: int | None = None, rdzv_backend: str | None = None, rdzv_endpoint: str | None = None,
                 hosts_store: bool = False) -> None:
        self.cmd = cmd
        self.jax = jax
        self.on_cpu = on_cpu
        self.train_script = train_script
        self.hang_timeout = hang_timeout
        self.startup_timeout = startup_timeout
        self.rdzv_timeout = rdzv_timeout
        self.log_dir = log_dir
        self.rdzv_id = rdzv_id
        self.nnodes = nnodes
        self.node_rank = node_rank
        self.master_addr = master_addr
        self.master_port = master_port
        self.rdzv_backend = rdzv_backend
        self.rdzv_endpoint = rdzv_endpoint
        self.hosts_store = hosts_store  # this node hosts the static rendezvous store


def job_key(spec: JobSpec) -> str:
    """A string naming the job across restarts and nodes: the given key, SLURM's job id, the rdzv id, or fresh."""
    if os.environ.get(JOB_KEY_ENV):
        return os.environ[JOB_KEY_ENV]
    if os.environ.get("SLURM_JOB_ID"):
        return f"slurm-{os.environ['SLURM_JOB_ID']}"
    rdzv_id = spec.rdzv_id or os.environ.get("PET_RDZV_ID")
    if rdzv_id:
        return f"rdzv-{rdzv_id}"
    return f"job-{os.urandom(6).hex()}"


class JobMonitor:
    """Called on every supervision tick: rendezvous deadline, hang watchdog, rank liveness, JAX errors."""

    def __init__(self, spec: JobSpec, supervise_dir: str, *, grace_s: float, start: float,
                 error_file: str | None, trace_prefix: str | None) -> None:
        from mgpu_lab.health.watchdog import Watchdog

        self.spec = spec
        self.dir = supervise_dir
        self.grace_s = grace_s
        self.start = start
        self.error_file = error_file
        self.trace_prefix = trace_prefix
        self.watchdog = Watchdog(supervise_dir, spec.hang_timeout, spec.startup_timeout)
        self.joined = spec.jax  # skrl's JAX launcher has no rendezvous of its own
        self.next_report = start + self._report_every()
        self.outcome: int | None = None  # EXIT_HANG or EXIT_RDZV once the monitor stopped the job
        self.verdict: str | None = None  # the one-line error printed once the stopped job is gone (its last line)
        self.last_alive: dict[int, float] = {}  # rank -> wall time its process was last seen alive
        self.vanished: set[int] = set()  # ranks whose process disappeared while the job ran
        self.tail = bytearray()
        self.router = StderrRouter(self._show)
        from mgpu_lab.health.live_stacks import LiveStacks

        self.live_stacks = LiveStacks()  # SIGUSR2: every rank's stack now, the job goes on (isaaclab stacks)

    def _show(self, data: bytes) -> None:
        if self.outcome is None:  # once the monitor stopped the job, torchrun's shutdown chatter stays out
            out = sys.stderr.buffer
            out.write(data)
            out.flush()

    def _report_every(self) -> float:
        return min(30.0, max(1.0, self.spec.rdzv_timeout / 10))

    def stderr(self, chunk: bytes) -> None:
        """Copy the job's stderr to ours (without torchrun's traceback), keeping a tail to read torchrun's
        failure summary from."""
        self.router.feed(chunk)
        self.tail += chunk
        del self.tail[:-262144]

    def tick(self, supervisor, now: float) -> None:  # noqa: ANN001 - mgpu_lab.job.supervise.Supervisor
        import signal
        import time

        from mgpu_lab.health import heartbeat
        from mgpu_lab.job import supervise

        if self.live_stacks.collect_if_requested(self.dir, now, self._trigger_nccl_dumps) and self.trace_prefix:
            print(f"[INFO] stacks: NCCL flight recorder dumps (when NCCL wrote any): {self.trace_prefix}<rank>",
                  file=sys.stderr, flush=True)
        beats = heartbeat.read_beats(self.dir)
        if not self.joined:
            if beats or self._workers_started(supervisor.pid):
                self.joined = True
                if now - self.start >= self._report_every():
                    print(f"[INFO] launcher: rendezvous complete after {now - self.start:.0f} s",
                          file=sys.stderr, flush=True)
            elif now - self.start >= self.spec.rdzv_timeout:
                self.verdict = f"isaaclab train_multigpu: error: {self._rdzv_missing()}"
                self.outcome = EXIT_RDZV
                supervisor.stop(signal.SIGTERM, grace_s=min(self.grace_s, 3.0))
                return
            elif now >= self.next_report:
                self.next_report = now + self._report_every()
                left = self.spec.rdzv_timeout - (now - self.start)
                print(f"[INFO] launcher: waiting for the rendezvous at {self._endpoint()}: this node "
                      f"({self._node()}) is in; expecting {self._nodes()} node(s); {left:.0f} s left "
                      f"(--rdzv_timeout)", file=sys.stderr, flush=True)
        wall = time.time()
        for rank, beat in beats.items():
            if supervise.alive(beat.pid):
                self.last_alive[rank] = wall
                self.vanished.discard(rank)  # a restarted worker took the rank over
            elif rank in self.last_alive:
                self.vanished.add(rank)
        if self.error_file is not None and os.path.exists(self.error_file):
            print("[ERROR] launcher: a JAX rank failed; stopping the other ranks", file=sys.stderr, flush=True)
            supervisor.stop(signal.SIGTERM)
            return
        if self.spec.hang_timeout > 0 and self.watchdog.check(now):
            self._on_hang(supervisor, now)

    def _workers_started(self, pid: int | None) -> bool:
        """torchrun starts the workers (processes running the training script) only after its rendezvous."""
        from mgpu_lab.core import procs
        from mgpu_lab.job import supervise

        if pid is None:
            return False
        needle = self.spec.train_script.encode()
        return any(needle in procs.cmdline(child) for child in supervise.descendants(pid))

    def _on_hang(self, supervisor, now: float) -> None:  # noqa: ANN001
        import signal

        from mgpu_lab.health import heartbeat
        from mgpu_lab.health.watchdog import stall_words, write_report

        fired = self.watchdog.fired
        seconds = fired.seconds if fired is not None else self.spec.hang_timeout
        print(f"[ERROR] watchdog: no rank made progress for {seconds:g} s"
              f"{stall_words(fired, self.watchdog.starting)}; asking every rank for its stack",
              file=sys.stderr, flush=True)
        self._trigger_nccl_dumps()
        report = self.watchdog.diagnose(now)
        folder = write_report(report, heartbeat.read_run_dir(self.dir))
        for line in report.summary_lines():
            print(line, file=sys.stderr)
        print(f"[ERROR] watchdog: stacks and summary in {folder}", file=sys.stderr)
        if self.trace_prefix is not None:
            print(f"[ERROR] watchdog: NCCL flight recorder dumps (when NCCL wrote any): {self.trace_prefix}<rank>",
                  file=sys.stderr)
        stopped = [st for st in report.ranks if st.stopped]
        for st in stopped:
            print(f"[ERROR] watchdog: rank {st.rank} (pid {st.beat.pid}) is stopped and cannot take SIGTERM: "
                  "killing it", file=sys.stderr)
        print("[ERROR] watchdog: stopping the job (exit 3)", file=sys.stderr, flush=True)
        self.outcome = EXIT_HANG
        supervisor.stop(signal.SIGTERM, grace_s=min(self.grace_s, 3.0))
        for st in stopped:  # waiting out the grace for a rank that cannot end on SIGTERM serves nobody
            try:
                os.kill(st.beat.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _trigger_nccl_dumps(self) -> None:
        """Ask each CUDA rank's NCCL flight recorder to dump now, through its debug pipe (best effort)."""
        if self.trace_prefix is None:
            return
        folder = os.path.dirname(self.trace_prefix)
        try:
            names = [n for n in os.listdir(folder) if n.endswith(".pipe")]
        except OSError:
            return
        for name in names:
            try:
                fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.write(fd, b"1\n")
            except OSError:
                pass
            finally:
                os.close(fd)

    # words for the rendezvous lines
    def _endpoint(self) -> str:
        a = self.spec
        if a.rdzv_endpoint:
            return f"{a.rdzv_backend or 'static'} {a.rdzv_endpoint}"
        if os.environ.get("PET_RDZV_ENDPOINT") and a.master_addr is None:
            return f"{os.environ.get('PET_RDZV_BACKEND', 'static')} {os.environ['PET_RDZV_ENDPOINT']}"
        host = a.master_addr or os.environ.get("PET_MASTER_ADDR", "127.0.0.1")
        port = a.master_port or os.environ.get("PET_MASTER_PORT", "29500")
        return f"static {host}:{port}"

    def _nodes(self) -> str:
        return self.spec.nnodes or os.environ.get("PET_NNODES", "1")

    def _node(self) -> str:
        import socket

        rank = self.spec.node_rank
        rank_text = f"node_rank {rank}" if rank is not None else "node_rank assigned at the rendezvous"
        return f"{socket.gethostname()}, {rank_text}"

    def _rdzv_missing(self) -> str:
        import socket

        endpoint = self._endpoint().split()[-1]
        host, _, port = endpoint.rpartition(":")
        answered = True
        if not self.spec.hosts_store:  # a node that only connects: did the endpoint answer at all?
            try:
                with socket.create_connection((host.strip("[]"), int(port or 29400)), timeout=1.0):
                    pass
            except (OSError, ValueError):
                answered = False
        what = (f"the other node(s) of {self._nodes()} expected never joined at {endpoint}" if answered
                else f"the rendezvous at {endpoint} never answered, so no other node could join "
                     f"({self._nodes()} node(s) expected)")
        return (f"rendezvous deadline passed after {self.spec.rdzv_timeout:g} s (--rdzv_timeout): "
                f"never arrived: {what}; this node ({self._node()}) was ready")

    def failure_report(self) -> failures.Report | None:
        from mgpu_lab.health import failures, heartbeat

        exits, root = failures.parse_torchrun_summary(self.tail.decode("utf-8", errors="replace"))
        beats = heartbeat.read_beats(self.dir)
        world = next((b.world_size for b in beats.values()), None)
        return failures.report(heartbeat.read_failures(self.dir), exits, beats, self.last_alive, self.vanished,
                               world, root)

    def keep_launcher_text(self, key: str) -> str | None:
        """Write torchrun's diverted failure text to the run folder (else --log_dir, else the temp folder);
        return where, or None when there was none."""
        import tempfile

        from mgpu_lab.health import heartbeat
        from mgpu_lab.core.atomic import atomic_write_bytes

        text = bytes(self.router.diverted)
        if not text:
            return None
        run_dir = heartbeat.read_run_dir(self.dir)
        if run_dir is not None and run_dir.is_dir():
            target = str(run_dir / TORCHRUN_TEXT)
        elif self.spec.log_dir is not None and os.path.isdir(self.spec.log_dir):
            target = os.path.join(self.spec.log_dir, f"torchrun_failure_{key}.txt")
        else:
            target = os.path.join(tempfile.gettempdir(), f"mgpu_lab_torchrun_failure_{key}.txt")
        try:
            atomic_write_bytes(target, text)
        except OSError:
            return None
        return target


def run_job(spec: JobSpec) -> int:
    """Run the job under supervision and a watchdog; return the launcher's exit status."""
    import shutil
    import tempfile
    import time

    from mgpu_lab.health import heartbeat
    from mgpu_lab.job import supervise

    grace = supervise.grace_from_env(os.environ)
    env = dict(os.environ)
    supervise_dir = tempfile.mkdtemp(prefix="mgpu_lab_supervise_")
    env[heartbeat.SUPERVISE_DIR_ENV] = supervise_dir
    env[JOB_KEY_ENV] = job_key(spec)
    tag = os.path.basename(supervise_dir)
    env[supervise.JOB_TAG_ENV] = tag
    from mgpu_lab.runs.continue_run import LAUNCHER_PID_ENV

    env[LAUNCHER_PID_ENV] = str(os.getpid())  # rank 0 writes it into the run folder's lock (isaaclab stacks)

    trace_prefix = None
    if not spec.on_cpu and not spec.jax:  # CUDA ranks: PyTorch's NCCL flight recorder for this run
        trace_dir = os.path.join(spec.log_dir or tempfile.gettempdir(), f"nccl_trace_{env[JOB_KEY_ENV]}")
        trace_prefix = os.path.join(trace_dir, "nccl_trace_rank_")
        env.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
        env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        env.setdefault("TORCH_FR_DUMP_TEMP_FILE", trace_prefix)
        env.setdefault("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", os.path.join(trace_dir, "nccl_trace_rank_"))
        trace_prefix = env["TORCH_FR_DUMP_TEMP_FILE"]
        os.makedirs(os.path.dirname(trace_prefix) or ".", exist_ok=True)
        print(f"[INFO] launcher: NCCL flight recorder on; dumps go to {trace_prefix}<rank>", file=sys.stderr)

    error_file = None
    if spec.jax and "TORCHELASTIC_ERROR_FILE" not in env:
        error_file = os.path.join(supervise_dir, "jax_error.json")
        env["TORCHELASTIC_ERROR_FILE"] = error_file

    print(f"[INFO] launcher: {shlex.join(spec.cmd)}", file=sys.stderr, flush=True)
    janitor = supervise.start_janitor(tag, grace)
    monitor = JobMonitor(spec, supervise_dir, grace_s=grace, start=time.monotonic(), error_file=error_file,
                         trace_prefix=trace_prefix)
    monitor.live_stacks.install()
    try:
        rc, supervisor = supervise.run_supervised(spec.cmd, env, grace_s=grace, tick=monitor.tick,
                                                  stderr_sink=monitor.stderr, tick_s=0.2)
        monitor.router.close()
        if monitor.outcome is not None and supervisor.interrupted is None:
            if monitor.verdict is not None:  # after any message about stopping the job: the verdict is the last line
                print(monitor.verdict, file=sys.stderr, flush=True)
            return monitor.outcome
        if supervisor.interrupted is not None or rc == 0:
            return rc
        from mgpu_lab.health import failures

        report = monitor.failure_report()
        lines = report.lines if report is not None else []
        if report is None or not report.refused:
            kept = monitor.keep_launcher_text(env[JOB_KEY_ENV])
            if kept is not None:  # just before the "first failure" line, which stays among the last
                at = next((i for i, line in enumerate(lines) if line.startswith(failures.FIRST_FAILURE)), len(lines))
                lines.insert(at, f"{TORCHRUN_KEPT} {kept}")
        if error_file is not None:
            failure = _jax_failure(error_file)
            if failure is not None:
                lines.insert(0, f"[ERROR] launcher: a JAX rank failed:\n{failure}")
        for line in lines:
            print(line, file=sys.stderr, flush=True)
        if report is not None:
            return report.exit_status
        return EXIT_FAILED if rc != EXIT_USAGE else rc
    finally:
        monitor.live_stacks.restore()
        supervise.dismiss_janitor(janitor)
        shutil.rmtree(supervise_dir, ignore_errors=True)


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
