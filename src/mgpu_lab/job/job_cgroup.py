"""A cgroup (v2) of the job's own, so that nothing the job starts outlives the launcher, daemons included.

The environment tag (:data:`mgpu_lab.job.supervise.JOB_TAG_ENV`) finds every process that kept its environment;
a process that double-forks into a session of its own with a cleared environment (a daemon) drops the tag and,
once the launcher is gone, its parent link too. A cgroup cannot be left that way: every process the job starts is
born in it, and only a process allowed to write the cgroup files can move out.

Where the machine allows it (a writable cgroup2 hierarchy: root, or a delegated subtree), :func:`confined`

- creates ``mgpu_lab_<tag>`` below the launcher's own cgroup and forks a janitor of its own (own session, stop
  signals ignored, outside the new cgroup) that waits on a pipe: if the launcher dies without closing the job
  (SIGKILL included) it kills every process in the cgroup (``cgroup.kill``, else SIGKILL to each listed pid until
  none is left) and removes it;
- moves the launcher into the cgroup, so the job it starts next is born there;
- at the end moves the launcher back, kills what is left in the cgroup, removes it and dismisses the janitor.

Elsewhere (no cgroup2, not writable: an unprivileged user without delegation, a container) it does nothing and
the documented limit applies: a daemonized descendant with a cleared environment can outlive a launcher killed
with SIGKILL. Stdlib only, Linux only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from mgpu_lab.core import deadlines, held
from mgpu_lab.job import supervise

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

PREFIX = "mgpu_lab_"


def _own_cgroup() -> str | None:
    """The folder of this process's cgroup v2 (None without a mounted cgroup2 hierarchy)."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as fh:
            rel = next((line.rstrip("\n")[3:] for line in fh if line.startswith("0::")), None)
        if rel is None:
            return None
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            mounts = [line.split() for line in fh]
    except (OSError, UnicodeDecodeError):
        return None
    for fields in mounts:
        dash = fields.index("-") if "-" in fields else -1
        if dash > 0 and fields[dash + 1 : dash + 2] == ["cgroup2"] and fields[3] == "/":
            folder = os.path.join(fields[4], rel.lstrip("/"))
            if os.path.isfile(os.path.join(folder, "cgroup.procs")):
                return folder
    return None


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def members(folder: str) -> list[int]:
    try:
        with open(os.path.join(folder, "cgroup.procs"), encoding="ascii") as fh:
            return [int(line) for line in fh if line.strip()]
    except (OSError, ValueError):
        return []


def kill_all(folder: str, *, within_s: float = deadlines.CGROUP_EMPTY_S) -> list[int]:
    """SIGKILL every process in the cgroup and remove it; the pids still there after ``within_s`` (else [])."""
    deadline = time.monotonic() + within_s
    left = members(folder)
    while left and time.monotonic() < deadline:
        try:
            _write(os.path.join(folder, "cgroup.kill"), "1")
        except OSError:  # before Linux 5.14: one by one (a fork between two reads is caught by the next sweep)
            for pid in left:
                held.send(pid, signal.SIGKILL, proof=_inside(folder))
        time.sleep(0.02)
        left = members(folder)
    while time.monotonic() < deadline:
        try:
            os.rmdir(folder)
            break
        except FileNotFoundError:
            break
        except OSError:  # killed processes leave the cgroup once they are reaped
            time.sleep(0.05)
    return left


def _inside(folder: str) -> held.Proof:
    """The proof that a process is the job's by its cgroup: it is in ``folder`` (``/proc/PID/cgroup``'s v2 line)."""
    rel = "/" + os.path.basename(folder)

    def proof(pid: int) -> str | None:
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
                inside = any(line.startswith("0::") and line.rstrip("\n").endswith(rel) for line in fh)
        except OSError:
            inside = False
        return None if inside else "no process of the job's cgroup"

    return proof


#: What the job loses without a cgroup of its own (the warning's second half; --help and the docs say the same).
WITHOUT = (
    "a process of the job that daemonises with a cleared environment can outlive a launcher killed with SIGKILL "
    "(every other process still goes with the launcher)"
)


def create(tag: str) -> tuple[str | None, str]:
    """(a new cgroup for the job below this process's own, or None where the machine does not allow it; why not)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return None, "not Linux"
    own = _own_cgroup()
    if own is None:
        return None, "no cgroup v2 hierarchy is mounted"
    folder = os.path.join(own, PREFIX + "".join(c if c.isalnum() or c in "-_" else "_" for c in tag))
    try:
        os.mkdir(folder)
    except OSError as exc:
        return None, f"{own} is not writable here ({exc.strerror or exc})"
    return folder, ""


def warning(why: str) -> str:
    """The launcher's one line when the job runs without a cgroup of its own."""
    return f"[WARN] launcher: the job runs without a cgroup of its own ({why}): {WITHOUT}"


@contextlib.contextmanager
def confined(tag: str, warn: Callable[[str], object] | None = None) -> Iterator[str | None]:
    """Run the body (which starts the job) with this process in the job's own cgroup; see the module text. Where
    none can be made, ``warn`` gets the one line that says so (:func:`warning`)."""
    folder, why = create(tag)
    if folder is None:
        if warn is not None:
            warn(warning(why))
        yield None
        return
    home = os.path.dirname(folder)
    fd = supervise.fork_janitor(
        lambda: kill_all(folder, within_s=deadlines.CGROUP_JANITOR_EMPTY_S)
    )  # the launcher SIGKILLed: the cgroup
    try:
        try:
            _write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))
        except OSError as exc:  # not allowed to move here (delegation rules): the environment tag alone, as before
            with contextlib.suppress(OSError):
                os.rmdir(folder)
            if warn is not None:
                warn(warning(f"this process may not move into {folder} ({exc.strerror or exc})"))
            yield None
            return
        try:
            yield folder
        finally:
            with contextlib.suppress(OSError):
                _write(os.path.join(home, "cgroup.procs"), str(os.getpid()))
            if os.getpid() not in members(folder):  # never kill the launcher itself: the janitor does it then
                kill_all(folder)
    finally:
        supervise.dismiss_janitor(fd)
