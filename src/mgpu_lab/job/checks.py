"""The job monitor's checks, each a small object that answers one question: "what happened by now?".

:class:`mgpu_lab.job.monitor.JobMonitor` polls them on every supervision tick and acts on the answers; none of
them prints, signals or stops anything, so each is tested alone with made-up times and inputs. Stdlib only.
"""

from __future__ import annotations

import os

from mgpu_lab.core import procs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mgpu_lab.health.heartbeat import Beat
    from mgpu_lab.health.watchdog import Watchdog

#: :meth:`RendezvousDeadline.poll`'s answers
JOINED = "joined"
WAITING = "waiting"
EXPIRED = "expired"


class RendezvousDeadline:
    """Until the ranks joined: did they join, is it time to say we still wait, or did the deadline pass?"""

    def __init__(self, start: float, timeout_s: float) -> None:
        self.start = start
        self.timeout_s = timeout_s
        #: how often the waiting line is printed: a tenth of the deadline, from 1 to 30 s
        self.report_every = min(30.0, max(1.0, timeout_s / 10))
        self._next_report = start + self.report_every

    def poll(self, now: float, joined: bool) -> str | None:
        """:data:`JOINED`, :data:`EXPIRED`, :data:`WAITING` (once per :attr:`report_every`), or None."""
        if joined:
            return JOINED
        if now - self.start >= self.timeout_s:
            return EXPIRED
        if now >= self._next_report:
            self._next_report = now + self.report_every
            return WAITING
        return None

    def waited(self, now: float) -> float:
        return now - self.start

    def left(self, now: float) -> float:
        return self.timeout_s - (now - self.start)


class HangCheck:
    """Did the watchdog (:class:`mgpu_lab.health.watchdog.Watchdog`) see no progress for its limit?"""

    def __init__(self, watchdog: Watchdog, hang_timeout: float) -> None:
        self.watchdog = watchdog
        self.enabled = hang_timeout > 0

    def poll(self, now: float) -> bool:
        return self.enabled and self.watchdog.check(now)


class Liveness:
    """Which ranks' processes vanished while the job ran (a restarted worker taking a rank over revives it)."""

    def __init__(self, alive: Callable[[int], bool] = procs.alive) -> None:
        self.alive = alive
        self.last_alive: dict[int, float] = {}  # rank -> wall time its process was last seen alive
        self.vanished: set[int] = set()

    def poll(self, beats: Mapping[int, Beat], wall: float) -> set[int]:
        """Update from the ranks' latest beats; return the ranks whose process is gone by now."""
        for rank, beat in beats.items():
            if self.alive(beat.pid):
                self.last_alive[rank] = wall
                self.vanished.discard(rank)
            elif rank in self.last_alive:
                self.vanished.add(rank)
        return set(self.vanished)


class FailureFile:
    """Did a rank write its elastic error file (skrl's JAX launcher reports no worker's failure itself)?"""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def poll(self) -> bool:
        return self.path is not None and os.path.exists(self.path)
