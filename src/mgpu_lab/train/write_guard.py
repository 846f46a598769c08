"""A failed write ends the run with one line instead of freezing it or printing tracebacks.

The RL libraries log through TensorBoard writers whose events are written by a background thread
(``tensorboard``'s ``_AsyncWriterThread`` for rsl_rl and skrl, ``tensorboardX``'s
``_EventLoggerThread`` for rl_games). When the disk fills up, that thread dies with OSError; with
tensorboardX the training thread then blocks forever on the writer's full queue (2 ranks frozen at
epoch 99). Nothing in the libraries reports it, so the guard watches from outside:

- ``threading.excepthook``: any thread that dies with OSError ends the process;
- :meth:`WriteGuard.fatal`: ``train.py`` sends the training thread's own OSError (a checkpoint that
  cannot be written) the same way.

Either way the process prints one line (``error: rank R: disk full: writing PATH failed (...)``),
tells the launcher's supervisor (``on_fatal``), and exits with status 1 at once: a blocked writer
queue or an exit handler of a dead writer could otherwise still freeze it. Checkpoints are written
atomically, so every checkpoint written before the failure stays intact.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

#: Exit status of a run stopped by a failed write (the launcher's "the job failed").
EXIT_FAILED = 1


def describe(exc: BaseException, fallback_path: str) -> str:
    """``disk full: writing PATH failed (strerror)`` and the like, for an OSError."""
    code = getattr(exc, "errno", None)
    filename = getattr(exc, "filename", None)
    where = f"writing {filename}" if filename else f"writing under {fallback_path}"
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if code in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full"
    elif code == errno.EROFS:
        what = "read-only file system"
    elif code in (errno.EACCES, errno.EPERM):
        what = "permission denied"
    else:
        what = "write failed"
    return f"{what}: {where} failed ({reason}); the run stopped, checkpoints written before this are intact"


class WriteGuard:
    """Turns a failed write in any thread of this rank into one line and exit status 1."""

    def __init__(self, run_dir: str, rank: int, on_fatal: Callable[[BaseException], Any] | None = None) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self.on_fatal = on_fatal
        self._lock = threading.Lock()
        self._previous = threading.excepthook

    def install(self) -> WriteGuard:
        threading.excepthook = self._thread_died
        return self

    def uninstall(self) -> None:
        threading.excepthook = self._previous

    def _thread_died(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and isinstance(args.exc_value, OSError):
            self.fatal(args.exc_value)
        self._previous(args)

    def fatal(self, exc: BaseException) -> NoReturn:
        """Print the one line (once, whichever thread comes first), notify, and leave with EXIT_FAILED."""
        if not self._lock.acquire(timeout=30):
            os._exit(EXIT_FAILED)
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001 - stdout may be the broken thing; the line goes to stderr anyway
            pass
        line = f"error: rank {self.rank}: {describe(exc, self.run_dir)}\n"
        try:
            os.write(2, line.encode("utf-8", "replace"))
        except OSError:
            pass
        if self.on_fatal is not None:
            try:
                self.on_fatal(exc)
            except Exception:  # noqa: BLE001 - the supervisor's record is best effort on a full disk
                pass
        os._exit(EXIT_FAILED)
