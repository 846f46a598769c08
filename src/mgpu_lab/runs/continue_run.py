"""Continuing a run across jobs in its own run folder: ``--continue_run {latest|RUN_DIR}`` (stdlib only, no torch).

Two files in every run folder that rank 0 writes:

- ``run.json`` (:data:`META_FILE`): who wrote the folder (library, task, ml_framework), written once, atomically,
  when rank 0 creates the folder. A continuing job must match it.
- ``run.lock`` (:data:`LOCK_FILE`): the job writing to the folder now (host, pid of rank 0, job key, the
  launcher's pid, lease, last renewal), renewed every :data:`RENEW_S` seconds by a thread of rank 0 and removed
  when the run ends. A lock is *stale*, so a crashed job never leaves it stuck, when its pid is dead on this host,
  or when it was not renewed for :data:`LEASE_S` seconds (a job on another host that died).

The launcher checks a ``--continue_run`` folder before any rank starts (:func:`check`); rank 0 then takes the
lock (:func:`hold`). A lock held by the same job key (a restart under ``--max_restarts``, a requeued SLURM job)
is taken over. Which files are checkpoints is the adapter's knowledge, so the checkpoint itself is found by the
callers (:func:`no_checkpoint` words the refusal).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mgpu_lab.core import procs, records
from mgpu_lab.core.atomic import atomic_write_bytes
from mgpu_lab.core.errors import UsageError
from mgpu_lab.core.safe_read import read_regular
from mgpu_lab.runs import resume
from mgpu_lab.runs.resume import LATEST, newest_checkpoint

META_FILE = "run.json"
LOCK_FILE = "run.lock"
#: A lock not renewed for this long is stale (a job on another host that died without removing it).
LEASE_S = 120.0
#: How often rank 0 renews its lock.
RENEW_S = 20.0
#: Environment variable carrying the launcher's pid to the ranks (rank 0 writes it into the lock).
LAUNCHER_PID_ENV = "MGPU_LAB_LAUNCHER_PID"


# --- run.json ------------------------------------------------------------------------------------------

#: the most read of a run.json or a run.lock (each is well under a kilobyte)
MAX_RECORD_BYTES = 64 * 1024
#: ``run.json``'s one schema, for rank 0 that writes it and the launcher that reads it (version 0: written before
#: the file carried a version, the same fields, read as it is)
META = records.Codec(
    META_FILE,
    1,
    {"library": records.text, "task": records.text, "ml_framework": records.text},
    dict,
    missing=("ml_framework",),
    older={0: None},
    unversioned=True,
)


def write_meta(run_dir: str | os.PathLike, library: str, task: str, ml_framework: str) -> None:
    """Rank 0: record who writes this run folder (atomically)."""
    body = {"library": library, "task": task, "ml_framework": ml_framework}
    atomic_write_bytes(Path(run_dir) / META_FILE, META.encode(body, indent=2) + b"\n")


def read_meta(run_dir: str | os.PathLike) -> dict[str, str] | None:
    """The folder's ``run.json`` as a dict of strings, or None when there is none (or it is damaged);
    :class:`~mgpu_lab.core.records.OtherVersion` when it is of a version this code does not read."""
    try:
        raw, more = read_regular(Path(run_dir) / META_FILE, MAX_RECORD_BYTES, within=run_dir)
        return None if more else META.decode(raw)
    except records.OtherVersion:
        raise
    except (OSError, records.Unreadable):
        return None


def describe(library: str, task: str, ml_framework: str | None) -> str:
    framework = f" --ml_framework {ml_framework}" if library == "skrl" and ml_framework else ""
    return f"--rl_library {library}{framework} --task {task}"


# --- which folder ----------------------------------------------------------------------------------------


def resolve(value: str, log_root: str, library: str, task: str) -> Path:
    """The run folder ``--continue_run value`` names: ``latest`` is the newest run folder of this library and task
    under ``log_root``; anything else is a folder path. UsageError when there is none."""
    if value == LATEST:
        found = resume.runs(log_root, library, task)
        if not found:
            raise UsageError(
                f"--continue_run latest: no run of {library} on {task} under "
                f"{Path(log_root).resolve() / library / task}; start one without --continue_run"
            )
        return found[-1].resolve()
    path = Path(value)
    if not path.exists():
        raise UsageError(f"--continue_run {value}: no such folder")
    if not path.is_dir():
        raise UsageError(f"--continue_run {value}: not a folder (give a run folder, or latest)")
    return path.resolve()


def check_meta(run_dir: Path, value: str, library: str, task: str, ml_framework: str) -> None:
    """UsageError when the folder was written by another library, task or framework. A folder without run.json
    (written before it existed) is judged by its place ``<library>/<task>/<run>``."""
    try:
        meta = read_meta(run_dir)
    except records.OtherVersion as exc:
        raise UsageError(
            f"{_subject(value, run_dir)} cannot read {run_dir / META_FILE}: {exc}; continue it with the mgpu-lab "
            "that wrote it, or start a new run without --continue_run"
        ) from None
    if meta is None:
        meta = {"library": run_dir.parent.parent.name, "task": run_dir.parent.name}
        source = "its place under the log root"
    else:
        source = META_FILE
    theirs = (meta.get("library"), meta.get("task"), meta.get("ml_framework") if library == "skrl" else None)
    ours = (library, task, ml_framework if library == "skrl" else None)
    if meta.get("library") == "skrl" and library == "skrl" and theirs[2] is None:
        theirs = (theirs[0], theirs[1], ours[2])  # no framework recorded: the checkpoint's format decides later
    if theirs != ours:
        was = describe(theirs[0] or "?", theirs[1] or "?", theirs[2])
        raise UsageError(
            f"{_subject(value, run_dir)} was written with {was} ({source}), not "
            f"{describe(library, task, ml_framework)}; continue it with {was}, or start a new run "
            "without --continue_run"
        )


def _subject(value: str, run_dir: Path) -> str:
    """``--continue_run latest: RUN`` or ``--continue_run RUN:`` (the folder named once)."""
    return f"--continue_run latest: {run_dir}" if value == LATEST else f"--continue_run {value}:"


def no_checkpoint(value: str, run_dir: Path, library: str) -> UsageError:
    return UsageError(
        f"{_subject(value, run_dir)} has no {library} checkpoint yet, so there is nothing to "
        "continue; start a new run without --continue_run"
    )


# --- run.lock --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lock:
    """Who writes a run folder now."""

    host: str
    pid: int
    job_key: str
    launcher_pid: int | None
    lease_s: float
    renewed: float  # time.time() of the last renewal
    #: start times (:func:`mgpu_lab.core.procs.start_time`) of ``pid`` and ``launcher_pid``: ``mgpu-lab stacks``
    #: signals a launcher only while both are still the processes that wrote the lock (a pid is reused)
    started: int | None = None
    launcher_started: int | None = None

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.renewed


def _process(value: object) -> int:
    """A process id as a lock holds it: above 1 (0, 1 and negative ids name groups or init)."""
    if records.pid(value) <= 1:
        raise records.Unreadable(f"{value!r} is not a process id")
    return records.pid(value)


#: ``run.lock``'s one schema, for rank 0 that writes and renews it and the launcher and ``mgpu-lab stacks`` that
#: read it (version 0: written before the file carried a version, the same fields, read as it is: an older job's
#: live lock is honoured)
LOCK = records.Codec(
    LOCK_FILE,
    1,
    {
        "host": records.text,
        "pid": _process,
        "job_key": records.text,
        "launcher_pid": records.optional(_process),
        "lease_s": records.finite,
        "renewed": records.finite,
        "started": records.optional(records.integer),
        "launcher_started": records.optional(records.integer),
    },
    lambda **values: Lock(**{"launcher_pid": None, **values}),
    missing=("launcher_pid", "started", "launcher_started"),
    older={0: None},
    unversioned=True,
)


def read_lock(run_dir: str | os.PathLike) -> Lock | None:
    """The folder's lock, or None when there is none (a damaged lock counts as none: it cannot be honoured);
    :class:`~mgpu_lab.core.records.OtherVersion` when it is of a version this code does not read (a newer
    mgpu-lab's job may hold it: never taken for none)."""
    try:  # a regular file only (a FIFO there must not block), bounded, never a link out of the folder
        raw, more = read_regular(Path(run_dir) / LOCK_FILE, MAX_RECORD_BYTES, within=run_dir)
        return None if more else LOCK.decode(raw)
    except records.OtherVersion:
        raise
    except (OSError, records.Unreadable):
        return None


def _ours_or_none(run_dir: str | os.PathLike) -> Lock | None:
    """The lock as its holder checks whether it is still its own: one of another version never is (:data:`_FOREIGN`,
    which matches no job of this version)."""
    try:
        return read_lock(run_dir)
    except records.OtherVersion:
        return _FOREIGN


#: what :func:`_ours_or_none` says of a lock of another version: a holder no job of this version is
_FOREIGN = Lock("(another mgpu-lab version)", 2, "", None, 0.0, 0.0)


def is_live(lock: Lock, now: float | None = None) -> bool:
    """True while the lock's job may still write: renewed within its lease and, on this host, its pid alive."""
    if lock.age(now) > lock.lease_s:
        return False
    if lock.host == procs.node_name():
        return procs.alive(lock.pid)
    return True


def holder(lock: Lock, now: float | None = None) -> str:
    return (
        f"job {lock.job_key} (host {lock.host}, pid {lock.pid}, lock renewed {max(0.0, lock.age(now)):.0f} s "
        f"ago; a lock is stale once its pid is gone on that host or it was not renewed for {lock.lease_s:g} s)"
    )


def check_unlocked(run_dir: Path, value: str, job_key: str | None) -> None:
    """UsageError when another live job writes to ``run_dir`` (its own job key is no other job), or when its lock is
    of a version this code does not read."""
    try:
        lock = read_lock(run_dir)
    except records.OtherVersion as exc:
        raise UsageError(
            f"{_subject(value, run_dir)} cannot read {run_dir / LOCK_FILE}: {exc}; a job of that mgpu-lab may be "
            "writing the folder: wait for it to end (or remove the lock if no job runs)"
        ) from None
    if lock is not None and is_live(lock) and lock.job_key != job_key:
        raise UsageError(
            f"{_subject(value, run_dir)} is being written by {holder(lock)}; wait for it to end or stop it first"
        )


def check(value: str, log_root: str, library: str, task: str, ml_framework: str, job_key: str | None) -> Path:
    """Every torch-free check of ``--continue_run``: the folder, who wrote it, and that no other live job holds it."""
    run_dir = resolve(value, log_root, library, task)
    check_meta(run_dir, value, library, task, ml_framework)
    check_unlocked(run_dir, value, job_key)
    return run_dir


def resume_point(
    value: str, log_root: str, library: str, task: str, ml_framework: str, job_key: str | None, list_checkpoints
) -> tuple[Path, str]:
    """(run folder, its newest checkpoint) for ``--continue_run value``; UsageError when it cannot be continued."""
    run_dir = check(value, log_root, library, task, ml_framework, job_key)
    found = newest_checkpoint(run_dir, list_checkpoints)
    if found is None:
        raise no_checkpoint(value, run_dir, library)
    return run_dir, str(found[1].resolve())


def start_writing(
    run_dir: str | os.PathLike,
    *,
    created: bool,
    library: str,
    task: str,
    ml_framework: str,
    job_key: str | None,
    value: str | None,
) -> Holder:
    """Rank 0, once its run folder is known: record who writes it (a new folder, or one without run.json) and
    take its lock."""
    try:
        recorded = not created and read_meta(run_dir) is not None
    except records.OtherVersion:  # a newer mgpu-lab's record (the launcher refused to continue such a folder): kept
        recorded = True
    if not recorded:
        write_meta(run_dir, library, task, ml_framework)
    return hold(run_dir, job_key, value=value)


class Holder:
    """Rank 0's lock on its run folder: written at :func:`hold`, renewed by a daemon thread, removed by
    :meth:`release`."""

    def __init__(self, run_dir: Path, lock: Lock, renew_s: float) -> None:
        self.path = run_dir / LOCK_FILE
        self.lock = lock
        self.renew_s = renew_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="mgpu_lab-run-lock", daemon=True)

    def _write(self) -> None:
        atomic_write_bytes(self.path, LOCK.encode(self.lock), durable=False)

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_s):
            current = _ours_or_none(self.path.parent)
            if current is not None and (current.pid, current.host) != (self.lock.pid, self.lock.host):
                return  # taken over (ours went stale meanwhile): never overwrite another job's lock
            self.lock = Lock(**{**asdict(self.lock), "renewed": time.time()})
            try:
                self._write()
            except OSError:
                pass  # a full disk: the lease runs out, which is the safe side

    def release(self) -> None:
        """Stop renewing and remove the lock if it is still ours."""
        self._stop.set()
        current = _ours_or_none(self.path.parent)
        if current is not None and (current.pid, current.host) == (self.lock.pid, self.lock.host):
            try:
                self.path.unlink()
            except OSError:
                pass


def hold(
    run_dir: str | os.PathLike,
    job_key: str | None,
    *,
    value: str | None = None,
    lease_s: float = LEASE_S,
    renew_s: float = RENEW_S,
    environ: dict[str, str] | os._Environ = os.environ,
) -> Holder:
    """Rank 0: take the folder's lock (UsageError when another live job holds it) and keep renewing it."""
    folder = Path(run_dir)
    key = job_key or f"pid-{os.getpid()}"
    check_unlocked(folder, value or str(folder), key)
    raw = environ.get(LAUNCHER_PID_ENV, "")
    launcher = int(raw) if raw.isdigit() else None
    lock = Lock(
        procs.node_name(),
        os.getpid(),
        key,
        launcher,
        lease_s,
        time.time(),
        procs.start_time(os.getpid()),
        procs.start_time(launcher) if launcher is not None else None,
    )
    held = Holder(folder, lock, renew_s)
    held._write()
    current = _ours_or_none(folder)  # two jobs that both found the lock stale: the last write wins, the other refuses
    if current is None or (current.pid, current.host) != (lock.pid, lock.host):
        raise UsageError(
            f"--continue_run {value or folder}: another job took {folder} at the same moment"
            + (f": {holder(current)}" if current is not None and current is not _FOREIGN else "")
        )
    held._thread.start()
    return held


def continuing_line(run_dir: str | os.PathLike, iteration: int, checkpoint: str) -> str:
    """The log line of a continued run."""
    return f"[INFO] continuing {run_dir} at iteration {iteration} (from {checkpoint})"
