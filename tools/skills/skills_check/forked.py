"""A list of jobs done by two processes from its two ends: this process from the first job on, a forked child
from the last one back (``from_both_ends``). The rules phase uses it: each rule is a job, its findings the
result.

The child says which job it starts before it runs it, and sends each result as plain values (``codec.pack``,
written by ``marshal`` in length-prefixed records over a pipe only the two processes hold; ``codec.unpack``'s
fixed table of the model's classes is all that turns them back into objects, so nothing received can run code).
Before each job this process reads what has arrived: a job the child has finished is taken, the one it is on is
waited for, and any other is run here, after this process has written how far it has got into memory the two
share; the child reads that before each job and stops where this process has been. So the two meet wherever
their speeds take them, and at most the job at the meeting point is run twice (this process uses its own
result). A child that dies, stalls past ``DEADLINE`` or sends anything else is stopped, and this process runs
what it had not sent. The results come back in the jobs' order, as one process would have made them.

Only a single-threaded process with ``fork`` forks (``may_fork``); the child never returns into the caller's
code. It is reaped when ``from_both_ends`` returns if it has exited by then, else by the next call or ``reap()``
(the ``check`` command reaps what is left just before its process ends, ``cli._leave``). The parsing worker
(``loader/prefetch.py``) forks, writes, reads and ends through the same functions.
"""

from __future__ import annotations

import _thread
import marshal
import mmap
import os
import select
import signal
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .caches.codec import CodecError, pack, unpack

T = TypeVar("T")
DEADLINE = 120.0  # seconds after the fork past which this process no longer waits for a child (either kind)
LENGTH = struct.Struct("<I")  # a record's length, before it (``send``, ``records``)


def default_jobs() -> int:
    """``check --jobs``'s default: 2 (this process and a forked helper at a time) where this process may run on
    two cores or more, else 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 2 if cores >= 2 else 1


def may_fork(jobs: int) -> bool:
    """Whether a second process may share the work: ``jobs`` > 1, ``fork`` available, no other thread running
    (a forked thread's locks would stay held in the child)."""
    return jobs >= 2 and hasattr(os, "fork") and threads() == 1


def threads() -> int:
    """The threads this process runs: the kernel's count where it gives one, so a library's own native threads
    (a numeric pool, JAX's) count too; else the interpreter's own and this one."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return _thread._count() + 1


def from_both_ends(jobs: Sequence[T], run: Callable[[T], Any], processes: int = 2) -> list[Any]:
    """``[run(job) for job in jobs]``, with a forked child running jobs from the last one back where
    ``processes`` > 1 and ``may_fork``; each result must be what ``codec.pack`` takes."""
    reap(wait=False)
    child = _fork(jobs, run) if len(jobs) > 1 and may_fork(processes) else None
    if child is None:
        return [run(job) for job in jobs]
    try:
        return [child.result(i) if child.has(i) else run(job) for i, job in enumerate(jobs)]
    finally:
        child.stop()


class _Child:
    """This process's side: what the child has started and sent (see the module's doc)."""

    def __init__(self, pid: int, fd: int, place: Frontier) -> None:
        self.pid, self.fd, self.place = pid, fd, place
        self.started = time.monotonic()
        self.buffer = bytearray()
        self.current: int | None = None  # the job it said it started, until its result arrives
        self.results: dict[int, Any] = {}
        self.alive = True

    def has(self, index: int) -> bool:
        """Whether the child ran (or is running) job ``index``; if not, it is this process's, and the child
        stops short of it."""
        self._read()
        if index not in self.results and self.current != index:
            self.place.reach(0, index)
            self._read()  # a start it sent before it saw the place
        while self.alive and self.current == index and index not in self.results:
            self._read(wait=True)
        return index in self.results

    def result(self, index: int) -> Any:
        return self.results.pop(index)

    def _read(self, wait: bool = False) -> None:
        if not self.alive:
            return
        open_ = drain(self.fd, self.buffer, self.started + DEADLINE, wait)
        entries = records(self.buffer)
        if entries is None or not self._take(entries) or not open_:
            self.alive = False  # it has sent all it will, or anything else
            self.current = None

    def _take(self, entries: list[Any]) -> bool:
        """Note the child's records (a job's ``index`` as it starts, ``(index, packed result)``); False for one
        that is not of these."""
        for entry in entries:
            if type(entry) is int:
                self.current = entry
            elif type(entry) is tuple and len(entry) == 2 and type(entry[0]) is int:
                try:
                    self.results[entry[0]] = unpack(entry[1])
                except (CodecError, TypeError, ValueError, IndexError, RecursionError):
                    return False
                self.current = None
            else:
                return False
        return True

    def stop(self) -> None:
        """End the child (what it had not sent was run here; ``end``)."""
        os.close(self.fd)
        self.place.close()
        end(self.pid)


_EXITING: list[int] = []  # children ended and not reaped yet


def end(pid: int) -> None:
    """Kill the child ``pid`` (one exiting already is not slowed by it) and reap it if it has exited, else at the
    next ``reap``: a child is still freeing its memory for a few milliseconds after its last word."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _EXITING.append(pid)
    reap(wait=False)


def reap(wait: bool = True) -> None:
    """Reap the children ``stop`` ended (``wait``: blocking until each has exited; else those that have)."""
    for pid in list(_EXITING):
        try:
            done, _ = os.waitpid(pid, 0 if wait else os.WNOHANG)
        except ChildProcessError:
            done = pid  # reaped elsewhere: nothing left to wait for
        if done:
            _EXITING.remove(pid)


class Frontier:
    """How far this process has got in each of ``lanes`` lists of work (the index of the last item it took there
    itself, -1 at first), in memory a forked child shares (an anonymous shared map made before the fork). The child
    reads it before each item and stops a lane once this process has got that far: a hint, never a lock; at worst
    both do the item at the meeting point, and this process uses its own result."""

    _SLOT = struct.Struct("<i")

    def __init__(self, lanes: int = 1) -> None:
        self.map = mmap.mmap(-1, self._SLOT.size * lanes)
        for lane in range(lanes):
            self._SLOT.pack_into(self.map, lane * self._SLOT.size, -1)

    def get(self, lane: int) -> int:
        return self._SLOT.unpack_from(self.map, lane * self._SLOT.size)[0]

    def reach(self, lane: int, place: int) -> None:
        if place > self.get(lane):
            self._SLOT.pack_into(self.map, lane * self._SLOT.size, place)

    def close(self) -> None:
        """Unmap it (this process's view; a child's ends with the child)."""
        self.map.close()


def spawn(serve: Callable[[int], None]) -> tuple[int, int] | None:
    """Fork a child that runs ``serve(fd)``, ``fd`` the write end of a pipe, and ends (it never returns into the
    caller's code, runs its exit handlers or flushes its buffers; an interrupt ends it, the parent reports it);
    (its pid, the pipe's non-blocking read end), or None when the pipe or the fork failed."""
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:
        status = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.close(read_fd)
            serve(write_fd)
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return pid, read_fd


def _fork(jobs: Sequence[T], run: Callable[[T], Any]) -> _Child | None:
    try:
        place = Frontier()
    except OSError:
        return None
    started = spawn(lambda fd: _serve(jobs, run, fd, place))
    if started is None:
        place.close()
        return None
    return _Child(*started, place)


def _serve(jobs: Sequence[T], run: Callable[[T], Any], fd: int, place: Frontier) -> None:
    """In the child: from the last job back to where this process has got, ``index`` as it starts a job and
    ``(index, packed result)`` when it is done."""
    for index in range(len(jobs) - 1, -1, -1):
        if index <= place.get(0):
            return
        send(fd, index)
        send(fd, (index, pack(run(jobs[index]))))


def drain(fd: int, buffer: bytearray, deadline: float, wait: bool) -> bool:
    """Add what the non-blocking pipe ``fd`` holds to ``buffer`` (``wait``: once something has arrived, waiting at
    most until ``deadline``, a ``time.monotonic()``); False when the pipe has closed, the deadline has passed or
    reading failed."""
    try:
        if wait:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return False
        while chunk := os.read(fd, 1 << 16):
            buffer += chunk
        return False  # the pipe closed
    except BlockingIOError:
        return True  # nothing more for now
    except OSError:
        return False


def records(buffer: bytearray) -> list[Any] | None:
    """The complete records at the start of ``buffer`` (each ``marshal``'d after its length, ``send``), removed
    from it; None when one does not load."""
    entries, at = [], 0
    while len(buffer) - at >= LENGTH.size:
        (size,) = LENGTH.unpack_from(buffer, at)
        if len(buffer) - at - LENGTH.size < size:
            break
        try:
            entries.append(marshal.loads(buffer[at + LENGTH.size : at + LENGTH.size + size]))
        except (EOFError, ValueError, TypeError):
            return None
        at += LENGTH.size + size
    del buffer[:at]
    return entries


def send(fd: int, record: Any) -> None:
    """Write ``record`` (``marshal``'d, after its length) whole to the pipe ``fd``."""
    data = marshal.dumps(record)
    view = memoryview(LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]
