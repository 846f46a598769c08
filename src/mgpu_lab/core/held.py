"""Signals to other processes, sent only to the process that was proven to be the one meant (stdlib only).

Every signal the launcher side sends to another process goes through :func:`hold` and :meth:`Held.send`: the
watchdog's and ``mgpu-lab stacks``' stack requests, the supervisor's stops and kills, the janitor's sweep.

A pid names a process only while that process lives: once it exits and is reaped, the pid can be handed to
another. "Check, then ``os.kill(pid)``" may therefore hit a process that was never checked. Here the process is
held first, by a pidfd (``os.pidfd_open``: a file descriptor that names one process for good), and proven second
(its start time, and whatever the caller's ``proof`` asks); signals then go through the descriptor
(``signal.pidfd_send_signal``). If the proven process exits afterwards, the descriptor still names it, so a signal
finds it gone (:meth:`Held.send` returns False and says so in :attr:`Held.gone`) and never reaches the pid's next
owner. If the pid changed hands between the caller's look and the hold, the proof (run after the hold, on the
process the descriptor names) fails or the signal finds the held process gone.

Where pidfds are missing (not Linux, a kernel before 5.3) it falls back to ``os.kill`` after the same proof; the
window between proof and signal is then only as small as the code between them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from mgpu_lab.core import procs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Self

#: ``proof(pid)`` -> None when the process is the one meant, else why not (in words, for a report).
Proof = Callable[[int], "str | None"]

_PIDFDS = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


class Held:
    """One process held by a pidfd (or, without pidfds, by its pid and start time)."""

    __slots__ = ("_fd", "gone", "pid", "started")

    def __init__(self, pid: int, fd: int | None, started: int | None) -> None:
        self.pid, self._fd, self.started = pid, fd, started
        self.gone = False  # True once a signal found the process gone

    def send(self, signum: int) -> bool:
        """Send ``signum`` to the held process; False (and :attr:`gone`) when it has exited. Never raises."""
        if self.gone:
            return False
        try:
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, signum)
            elif self.started is None or procs.start_time(self.pid) == self.started:
                os.kill(self.pid, signum)
            else:
                raise ProcessLookupError(self.pid)
        except (ProcessLookupError, PermissionError, OSError):
            self.gone = True
            return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def hold(pid: int, *, started: int | None = None, proof: Proof | None = None) -> Held | str:
    """Hold ``pid``, then prove it: a :class:`Held`, or why it may not be signalled (one phrase).

    ``started``: the start time a record gave for it (:func:`mgpu_lab.core.procs.start_time`); ``proof``: the
    caller's own test (it is the job's, a descendant of the launcher, ...), run after the process is held."""
    if pid <= 1:
        return "not a process id"
    fd = None
    if _PIDFDS:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return "not running"
        except OSError:
            fd = None  # a kernel without pidfds (ENOSYS), or out of descriptors: fall back to the pid
    now = procs.start_time(pid)
    why = None
    if now is None or not procs.alive(pid):
        why = "not running"
    elif started is not None and now != started:
        why = "a reused pid: another process, started at another time"
    elif proof is not None:
        why = proof(pid)
    if why is not None:
        if fd is not None:
            os.close(fd)
        return why
    return Held(pid, fd, now)


def send(pid: int, signum: int, *, started: int | None = None, proof: Proof | None = None) -> bool:
    """Hold, prove and signal ``pid`` once; False when it may not be signalled or is gone. Never raises."""
    held = hold(pid, started=started, proof=proof)
    if isinstance(held, str):
        return False
    with held:
        return held.send(signum)
