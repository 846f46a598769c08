"""Every rank's Python stack from a running job, without stopping it (stdlib only, no torch).

How it works:

- the launcher handles :data:`REQUEST_SIGNAL` (SIGUSR2): on its next supervision tick it asks every rank of this
  node for its stack with the watchdog's own machinery (:meth:`mgpu_lab.health.watchdog.Watchdog.diagnose`: the stack
  signal, a deadline per rank, the frame classification), writes ``stack_rank<R>.txt`` and ``summary.txt`` under
  ``<run folder>/stacks/<stamp>/`` and prints one line per rank: in which collective, outside any, or not
  responding. On CUDA it first asks NCCL's flight recorder to dump (as the watchdog does). The job goes on.
- ``mgpu-lab stacks [latest|RUN_DIR]`` (:func:`request`) finds the launcher's pid in the run folder's lock
  (:mod:`mgpu_lab.runs.continue_run`), checks that it is the launcher of that run on this host, sends the signal and
  waits for the new summary with a visible deadline.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from mgpu_lab.core import held
from mgpu_lab.core.atomic import atomic_write_bytes
from mgpu_lab.core.deadlines import STACK_WAIT_S
from mgpu_lab.core.names import JOB_KEY_ENV
from mgpu_lab.core.procs import descends_from, env_value, node_name, owner, same_process
from mgpu_lab.core.records import OtherVersion
from mgpu_lab.core.safe_read import OutsideFolder, read_regular, resolved_inside
from mgpu_lab.health import heartbeat
from mgpu_lab.health.culprit import world_of
from mgpu_lab.health.watchdog import Watchdog
from mgpu_lab.runs import continue_run
from mgpu_lab.runs.continue_run import LAUNCHER_PID_ENV
from mgpu_lab.runs.resume import LATEST

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

#: Signal asking the launcher for every rank's stack.
REQUEST_SIGNAL = signal.SIGUSR2
#: Folder under the run folder that holds one sub-folder per request.
STACKS_DIR = "stacks"
SUMMARY = "summary.txt"
#: How long ``mgpu-lab stacks`` waits for the launcher's answer by default.
DEFAULT_TIMEOUT_S = 30.0
PREFIX = "[INFO] stacks:"


class LiveStacks:
    """The launcher's side: a flag the signal handler sets and the supervision tick consumes."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Callable[[int, FrameType | None], object] | int | None = None

    def install(self) -> None:
        self._previous = signal.signal(REQUEST_SIGNAL, self._on_signal)

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(REQUEST_SIGNAL, self._previous)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requested = True

    def collect_if_requested(self, supervise_dir: str, now: float, nccl_dump=None) -> Path | None:
        """On a pending request: collect, write and print; return the folder written (else None)."""
        if not self.requested:
            return None
        self.requested = False
        if nccl_dump is not None:
            nccl_dump()
        return collect(supervise_dir, now)


def _new_folder(run_dir: Path | None) -> Path:
    """``<run_dir>/stacks/<stamp>[_N]`` created exclusively (a temp folder when there is no writable run folder)."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    if run_dir is not None:
        base = run_dir / STACKS_DIR
        try:
            base.mkdir(parents=True, exist_ok=True)
            for n in range(1000):
                path = base / (stamp if n == 0 else f"{stamp}_{n}")
                try:
                    path.mkdir()
                    return path
                except FileExistsError:
                    continue
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix="mgpu_lab_stacks_"))


def summary_lines(ranks) -> list[str]:
    """One line per rank: where it is (the watchdog's classification)."""
    if not ranks:
        return [f"{PREFIX} no rank of this node is training yet (no heartbeat); ask again once training runs"]
    return [f"{PREFIX} {st.heading(world_of(ranks), phase=False)}: {st.place()}" for st in ranks]


def collect(supervise_dir: str, now: float, *, stack_wait_s: float | None = None, out=None) -> Path:
    """Ask every rank of this node for its stack; write the files and the summary; print the summary."""
    out = out if out is not None else sys.stderr
    report = Watchdog(supervise_dir, 0, 0).diagnose(
        now, stack_wait_s=STACK_WAIT_S if stack_wait_s is None else stack_wait_s
    )
    folder = _new_folder(heartbeat.read_run_dir(supervise_dir))
    for st in report.ranks:
        atomic_write_bytes(folder / f"stack_rank{st.rank}.txt", st.stack_text().encode("utf-8"), durable=False)
    lines = summary_lines(report.ranks)
    atomic_write_bytes(folder / SUMMARY, ("\n".join(lines) + "\n").encode("utf-8"), durable=False)  # last: "done"
    for line in lines:
        print(line, file=out)
    print(f"{PREFIX} stacks and summary in {folder} (the job goes on)", file=out, flush=True)
    return folder


# --- mgpu-lab stacks ------------------------------------------------------------------------------------


class RequestError(Exception):
    """Why no request could be sent (one line, exit 2)."""


def live_runs(log_root: str) -> list[Path]:
    """Run folders under ``<log_root>/<library>/<task>/`` with a live lock, oldest renewal first."""
    found = []
    for lock_path in Path(log_root).glob(f"*/*/*/{continue_run.LOCK_FILE}"):
        try:
            lock = continue_run.read_lock(lock_path.parent)
        except OtherVersion:  # a newer mgpu-lab's job: not one this command can ask
            continue
        if lock is not None and continue_run.is_live(lock):
            found.append((lock.renewed, lock_path.parent))
    return [p for _, p in sorted(found)]


def find_run(target: str, log_root: str) -> Path:
    if target == LATEST:
        runs = live_runs(log_root)
        if not runs:
            raise RequestError(
                f"no live job writes a run folder under {Path(log_root).resolve()} (give the run "
                "folder, or --log_root where the job logs)"
            )
        return runs[-1].resolve()
    path = Path(target)
    if not path.is_dir():
        raise RequestError(f"{target}: not a run folder")
    return path.resolve()


def launcher_of(run_dir: Path) -> held.Held:
    """The launcher whose job writes ``run_dir`` on this host, held (:mod:`mgpu_lab.core.held`) once it proved to be
    that job's launcher (RequestError otherwise).

    The proof never rests on a command line (any process may name ``train_multigpu``): the lock's rank 0 must still
    be the process that wrote the lock, run below the named launcher, and carry in its environment what only that
    launcher gave its ranks: the lock's job key and the launcher's own pid."""
    try:  # the lock is read only inside the run folder (read_lock says None for a link out: say why here)
        resolved_inside(run_dir, run_dir / continue_run.LOCK_FILE)
    except OutsideFolder as exc:
        raise RequestError(f"{exc.filename}: {exc.strerror}; not read, nothing signalled") from None
    try:
        lock = continue_run.read_lock(run_dir)
    except OtherVersion as exc:
        raise RequestError(f"{run_dir / continue_run.LOCK_FILE}: {exc}; nothing signalled") from None
    if lock is None or not continue_run.is_live(lock):
        raise RequestError(f"{run_dir}: no live job writes to it (no {continue_run.LOCK_FILE}, or a stale one)")
    if lock.host != node_name():
        raise RequestError(f"{run_dir}: its job runs on host {lock.host}; run mgpu-lab stacks there")
    if lock.launcher_pid is None:
        raise RequestError(
            f"{run_dir}: its job was not started by mgpu-lab train_multigpu, so no launcher can "
            "collect stacks; use py-spy dump --pid PID on each rank instead"
        )
    if lock.launcher_pid in (lock.pid, os.getpid()):
        raise RequestError(
            f"{run_dir}: its lock names no launcher apart from rank 0: the lock is damaged, stale or foreign; "
            "nothing signalled"
        )
    launcher = held.hold(lock.launcher_pid, started=lock.launcher_started, proof=lambda pid: _unproven(pid, lock))
    if isinstance(launcher, str):
        raise RequestError(
            f"{run_dir}: its lock names launcher pid {lock.launcher_pid}, which is not provably this job's launcher "
            f"({launcher}): the job is ending, or the lock is stale or foreign; nothing signalled"
        )
    return launcher


def _unproven(pid: int, lock: continue_run.Lock) -> str | None:
    """Why ``pid`` is not proven to be the launcher of ``lock``'s job (None: proven)."""
    if owner(pid) != os.getuid():
        return "a process of another user"
    if not same_process(lock.pid, lock.started) or owner(lock.pid) != os.getuid():
        return f"its rank 0, pid {lock.pid}, is another process now (a reused pid, or another user's)"
    if not descends_from(lock.pid, pid):
        return f"no ancestor of its rank 0 (pid {lock.pid})"
    if env_value(lock.pid, LAUNCHER_PID_ENV) != str(pid) or env_value(lock.pid, JOB_KEY_ENV) != lock.job_key:
        return f"its rank 0 (pid {lock.pid}) was not started by it for job {lock.job_key}"
    return None


def request(target: str, log_root: str, timeout_s: float, out=None) -> int:
    """``mgpu-lab stacks``: ask the launcher of a live run for every rank's stack; print its summary.
    0: summary printed; 1: no answer within ``timeout_s``; 2: no live launcher to ask."""
    out = out if out is not None else sys.stdout
    try:
        run_dir = find_run(target, log_root)
        launcher = launcher_of(run_dir)
    except RequestError as exc:
        print(f"mgpu-lab stacks: error: {exc}", file=sys.stderr)
        return 2
    base = run_dir / STACKS_DIR
    before = _entries(base)
    pid = launcher.pid
    print(
        f"{PREFIX} asked the launcher (pid {pid}) of {run_dir}; waiting up to {timeout_s:g} s (--timeout)",
        file=out,
        flush=True,
    )
    with launcher:
        if not launcher.send(REQUEST_SIGNAL):
            print(f"mgpu-lab stacks: error: {run_dir}: its launcher (pid {pid}) is gone", file=sys.stderr)
            return 2
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        summary = _new_summary(base, before, out)
        if summary is not None:
            print(summary[1], end="" if summary[1].endswith("\n") else "\n", file=out)
            print(f"{PREFIX} stacks and summary in {summary[0]}", file=out, flush=True)
            return 0
        time.sleep(0.1)
    print(
        f"mgpu-lab stacks: error: no answer from the launcher (pid {pid}) within {timeout_s:g} s; its "
        "terminal may say why (a rank not training yet answers nothing)",
        file=sys.stderr,
    )
    return 1


def _entries(base: Path) -> set[str]:
    try:
        return set(os.listdir(base)) if base.is_dir() else set()
    except OSError:
        return set()


#: the most of a summary ``mgpu-lab stacks`` prints (one line per rank: far less than this)
MAX_SUMMARY_BYTES = 1024 * 1024


def _new_summary(base: Path, before: set[str], out=None) -> tuple[Path, str] | None:
    """The first request folder that appeared since ``before`` and holds a readable summary: (folder, its text).
    A summary that leads out of the run folder (``base``'s parent) is never opened: one line on ``out``, and its
    folder joins ``before`` (it is never looked at again)."""
    for name in sorted(_entries(base) - before):
        try:
            data, more = read_regular(base / name / SUMMARY, MAX_SUMMARY_BYTES, within=base.parent)
        except OutsideFolder as exc:
            before.add(name)
            print(f"[WARN] stacks: {exc.filename}: {exc.strerror}; skipped", file=out or sys.stdout, flush=True)
            continue
        except OSError:  # not written yet, or not a regular file: not an answer
            continue
        text = data.decode("utf-8", "replace").replace("\0", "")
        return base / name, text + (f"{PREFIX} (summary cut at {MAX_SUMMARY_BYTES} bytes)\n" if more else "")
    return None
