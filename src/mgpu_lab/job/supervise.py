"""Process supervision for the launcher: run a job, forward signals, and leave no process behind.

Stdlib only (the launcher must start fast and never import torch). What it knows: processes (the
Linux process table), signals, and the job's lifetime. It knows nothing about training, heartbeats or
torchrun's options; the launcher passes a ``tick`` callback for that.

Lifetime guarantees (Linux):

- the job runs in its own session; the launcher is a child subreaper, so workers orphaned by torchrun
  come back to it and are killed at the end;
- the first SIGINT/SIGTERM/SIGHUP is forwarded to the job, escalating to SIGKILL after a grace
  period; a second one kills at once; the launcher then exits 128 + the signal number (129 when its terminal
  closed: stdout and stderr on a hung-up terminal then go to /dev/null, where writing cannot fail);
- if the launcher itself dies (even by SIGKILL) or its parent goes away, a *janitor* process that it
  forked at start-up kills every process of the job. The job's processes are found by a tag in their
  environment (:data:`JOB_TAG_ENV`), which torchrun passes to every worker, so orphans are found too.
"""

from __future__ import annotations

import errno
import math
import os
import signal
import sys
import termios
import time

from mgpu_lab.core import deadlines, held, procs
from mgpu_lab.core.procs import alive, descendants

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Sequence

#: Environment variable whose value tags every process of one job (unique per job).
JOB_TAG_ENV = "MGPU_LAB_JOB_TAG"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# --------------------------------------------------------------------------------------------------
# the process table
# --------------------------------------------------------------------------------------------------


def _prctl():
    """libc's prctl on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # Linux only, and only for the supervisor's two prctl calls

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def tagged(tag: str) -> list[int]:
    """Live processes (this one excluded) whose environment holds ``JOB_TAG_ENV=tag``."""
    return procs.with_env(JOB_TAG_ENV, tag)


def signal_pids(pids: Sequence[int], sig: int, proof: held.Proof) -> None:
    """Signal each process that ``proof`` still shows to be the job's once it is held (:mod:`mgpu_lab.core.held`):
    a pid that changed hands since it was listed is left alone, one gone by then is skipped."""
    for pid in pids:
        held.send(pid, sig, proof=proof)


def below(root: int) -> held.Proof:
    """The proof that a process is the job's by descent: ``root`` (the launcher) is among its ancestors."""
    return lambda pid: None if procs.descends_from(pid, root) else "no process below the launcher"


def carrying(tag: str) -> held.Proof:
    """The proof that a process is the job's by its environment: it carries the job's tag."""
    return lambda pid: None if procs.env_value(pid, JOB_TAG_ENV) == tag else "no process of this job"


def leave_hung_up_terminal() -> bool:
    """Point stdout and stderr at /dev/null where they are a terminal that hung up (it was closed: every write
    fails with EIO, and the launcher must still stop its job and exit 129); True when one was."""
    dropped = False
    for fd in (1, 2):
        try:
            termios.tcgetattr(fd)
        except termios.error as exc:  # a pipe or file: ENOTTY; a hung-up terminal: EIO
            if exc.args and exc.args[0] == errno.EIO:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)
                dropped = True
        except (OSError, ValueError):
            pass
    return dropped


def reap() -> None:
    """Collect exit statuses of children (orphans handed to this subreaper included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# --------------------------------------------------------------------------------------------------
# the janitor: the job dies with the launcher, however the launcher dies
# --------------------------------------------------------------------------------------------------


def fork_janitor(on_abandoned: Callable[[], object]) -> int | None:
    """Fork a janitor (twice, so it is no child of the launcher and never among the job's processes it kills; own
    session; stop signals ignored; no open file of the launcher's) that waits on a pipe and calls ``on_abandoned``
    when the launcher goes away without :func:`dismiss_janitor`. Returns the pipe's write end (None: no fork here)."""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(read_fd)
        os.set_inheritable(write_fd, False)
        os.waitpid(pid, 0)  # the intermediate child exits at once
        return write_fd
    try:
        os.close(write_fd)
        os.setsid()
        if os.fork():
            os._exit(0)
        for sig in (*STOP_SIGNALS, signal.SIGALRM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)
        os.closerange(3, read_fd)
        os.closerange(read_fd + 1, 1024)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):  # keep stderr for nothing but fatal errors; never hold the caller's stdout pipe
            os.dup2(devnull, fd)
        data = b""
        while True:
            try:
                chunk = os.read(read_fd, 16)
            except InterruptedError:
                continue
            if not chunk:
                break
            data += chunk
        if not data:  # the launcher died without dismissing us
            os.dup2(devnull, 2)
            on_abandoned()
    finally:
        os._exit(0)


def start_janitor(tag: str, grace_s: float) -> int | None:
    """A janitor (:func:`fork_janitor`) that kills every process tagged ``tag`` once this launcher is gone: SIGTERM,
    then SIGKILL after ``min(grace_s, JANITOR_TERM_S)`` s. Call it before the launcher becomes a subreaper."""

    def kill_tagged() -> None:
        pids = tagged(tag)
        signal_pids(pids, signal.SIGTERM, carrying(tag))
        deadline = time.monotonic() + min(grace_s, deadlines.JANITOR_TERM_S)
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = [p for p in pids if alive(p)]
        for _ in range(3):
            pids = tagged(tag)
            if not pids:
                break
            signal_pids(pids, signal.SIGKILL, carrying(tag))
            time.sleep(0.05)

    return fork_janitor(kill_tagged)


def dismiss_janitor(fd: int | None) -> None:
    if fd is None:
        return
    try:
        os.write(fd, b"x")
        os.close(fd)
    except OSError:
        pass


# --------------------------------------------------------------------------------------------------
# the supervisor: signals, escalation, clean-up
# --------------------------------------------------------------------------------------------------


class Supervisor:
    """Forward the first stop signal to the job, escalate to SIGKILL, kill at once on the second."""

    def __init__(self, grace_s: float) -> None:
        self.pid: int | None = None  # the job's main process, once started
        self.grace_s = grace_s
        self.signum: int | None = None  # the first stop signal sent to the job
        self.interrupted: int | None = None  # the signal that came from outside (user, scheduler)
        self.kill_at: float | None = None  # monotonic time of the SIGKILL escalation
        self.stop_grace_s = grace_s  # the grace period of the stop under way
        self.reaped = False  # the job's main process was reaped: its group id may name another group now
        self._mine = below(os.getpid())

    def started(self, pid: int) -> None:
        """The job runs now; pass on an interrupt that came while it was starting."""
        self.pid = pid
        if self.signum is not None:
            self._forward(self.signum)

    def _group(self, signum: int) -> None:
        """Signal the job's process group, only while its leader (the launcher's own child) is not reaped: until then
        the group's id cannot name anyone else's group (the one signal not sent through a held process)."""
        if self.pid is not None and not self.reaped:
            try:
                os.killpg(self.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def _forward(self, signum: int) -> None:
        self._group(signum)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.grace_s

    def kill_all(self) -> None:
        """SIGKILL the job's process group and every process below the launcher."""
        self._group(signal.SIGKILL)
        for _ in range(3):  # processes may fork while we kill; a few sweeps catch them
            pids = descendants(os.getpid())
            if not pids:
                break
            signal_pids(pids, signal.SIGKILL, self._mine)

    def kill_ranks(self, pids: Sequence[int]) -> None:
        """SIGKILL these ranks of the job at once (a rank stopped by SIGSTOP cannot take SIGTERM); a pid that is no
        process of this job below the launcher is left alone."""
        signal_pids(pids, signal.SIGKILL, self._mine)

    def stop(self, signum: int, grace_s: float | None = None) -> None:
        """Ask the job to stop with ``signum``; SIGKILL everything after the grace period."""
        if grace_s is not None and self.kill_at is None:
            self.kill_at = time.monotonic() + grace_s
            self.stop_grace_s = grace_s
        self.signum = signum
        self._forward(signum)
        # workers live in sessions of their own; the job's main process got the signal once, above
        signal_pids([p for p in descendants(os.getpid()) if p != self.pid], signum, self._mine)

    def on_signal(self, signum: int, frame: object) -> None:
        if signum == signal.SIGHUP:
            leave_hung_up_terminal()  # a closed terminal: our messages go nowhere rather than fail with EIO
        if self.interrupted is None:
            self.interrupted = signum
            print(
                f"[INFO] launcher: {signal.Signals(signum).name} received, stopping the job "
                f"(again to kill at once; killing in {self.grace_s:g} s otherwise)",
                file=sys.stderr,
                flush=True,
            )
            self.signum = signum
            self._forward(signum)
        else:
            print("[INFO] launcher: second interrupt, killing the job", file=sys.stderr, flush=True)
            self.kill_all()

    def escalate_if_due(self) -> None:
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self.kill_at = math.inf
            print(
                f"[WARN] launcher: job still running {self.stop_grace_s:g} s after it was told to stop, killing it",
                file=sys.stderr,
                flush=True,
            )
            self.kill_all()

    def clean_up(self) -> None:
        """After the job's main process ended: stop whatever it left behind, then reap. Returns once nothing
        of the job is alive below the launcher (a SIGKILLed rank may take a moment to exit), so no worker
        outlives the launcher; the janitor covers what is still there after a few seconds."""
        leftovers = descendants(os.getpid())
        if leftovers:
            signal_pids(leftovers, signal.SIGTERM, self._mine)
            deadline = time.monotonic() + min(self.grace_s, deadlines.LEFTOVERS_TERM_S)
            while leftovers and time.monotonic() < deadline:
                time.sleep(0.05)
                reap()
                leftovers = descendants(os.getpid())
            self.kill_all()
        _wait_until_gone(deadline=time.monotonic() + deadlines.REAP_S)
        reap()


def _wait_until_gone(*, deadline: float) -> None:
    """SIGKILL and reap every process below the launcher until none is alive, or until ``deadline``."""
    while True:
        reap()
        left = descendants(os.getpid())
        if not left or time.monotonic() >= deadline:
            return
        signal_pids(left, signal.SIGKILL, below(os.getpid()))
        time.sleep(0.02)


def _watch(
    proc: subprocess.Popen[bytes],
    supervisor: Supervisor,
    *,
    tick: Callable[[Supervisor, float], None] | None,
    tick_s: float,
    stderr_sink: Callable[[bytes], None] | None,
    parent_pid: int,
) -> None:
    """Until the job is gone: hand its stderr to the sink, tick, escalate, and notice a vanished parent."""
    import select  # only while a job runs

    err_fd = proc.stderr.fileno() if proc.stderr is not None and stderr_sink is not None else None
    next_tick = time.monotonic()
    drain_until: float | None = None
    while True:
        timeout = max(0.0, next_tick - time.monotonic())
        if err_fd is not None and stderr_sink is not None:
            try:
                ready, _, _ = select.select([err_fd], [], [], timeout)
            except InterruptedError:
                ready = []
            if ready:
                chunk = os.read(err_fd, 65536)
                if chunk:
                    stderr_sink(chunk)
                else:
                    err_fd = None
        elif proc.poll() is None:
            time.sleep(min(timeout, tick_s))
        if proc.poll() is not None:
            supervisor.reaped = True
            if err_fd is None:
                return
            if drain_until is None:  # torchrun is gone; a leftover worker may still hold the pipe
                drain_until = time.monotonic() + deadlines.DRAIN_S
            elif time.monotonic() >= drain_until:
                return
        now = time.monotonic()
        if now >= next_tick:
            next_tick = now + tick_s
            if os.getppid() != parent_pid and supervisor.interrupted is None:
                supervisor.on_signal(signal.SIGHUP, None)  # whoever started us is gone
            supervisor.escalate_if_due()
            if tick is not None and supervisor.signum is None:
                tick(supervisor, now)


def run_supervised(
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    grace_s: float,
    tick: Callable[[Supervisor, float], None] | None = None,
    tick_s: float = deadlines.TICK_S,
    stderr_sink: Callable[[bytes], None] | None = None,
) -> tuple[int, Supervisor]:
    """Run ``cmd`` in its own session under a :class:`Supervisor`; return (exit status, supervisor).

    ``tick(supervisor, now)`` runs about every ``tick_s`` seconds while the job runs (watchdogs). With
    ``stderr_sink``, the job's stderr is read through a pipe and every chunk is handed to it (the sink copies
    it to the console). The status is the job's, 128 + N when it died of signal N, or 128 + N when the
    launcher got stop signal N; 2 when the command could not start.
    """
    import subprocess  # only while a job runs: the janitor and the tests import this module without it

    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphaned workers come back to us, not to init
    launcher_pid = os.getpid()
    parent_pid = os.getppid()

    def child_setup() -> None:  # runs in the child before exec
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # launcher killed -> job told to stop
            if os.getppid() != launcher_pid:
                os._exit(1)

    supervisor = Supervisor(grace_s)
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, supervisor.on_signal)
    rc = 0
    try:
        try:
            proc = subprocess.Popen(
                list(cmd),
                env=env,
                start_new_session=True,
                preexec_fn=child_setup,
                stderr=subprocess.PIPE if stderr_sink else None,
            )
        except OSError as exc:
            print(f"mgpu-lab train_multigpu: error: cannot start {cmd[0]}: {exc}", file=sys.stderr)
            return 2, supervisor
        supervisor.started(proc.pid)
        try:
            _watch(proc, supervisor, tick=tick, tick_s=tick_s, stderr_sink=stderr_sink, parent_pid=parent_pid)
            rc = proc.wait()
            supervisor.reaped = True
        finally:
            supervisor.clean_up()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if rc < 0:
        rc = 128 - rc
    if supervisor.interrupted is not None:
        rc = 128 + supervisor.interrupted
    return rc, supervisor
