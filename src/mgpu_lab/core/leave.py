"""Ending this project's own entry scripts without CPython's module teardown (stdlib only).

A process that imported torch (and an RL library) spends about a second of CPU after its last line, in the
interpreter's finalization: every module's globals cleared, then full garbage collections over the millions of
objects torch made at import (measured on 2 cores: ``train.py`` with rsl_rl, 2 iterations, 5.1 CPU-seconds when it
exits normally against 3.8 through :func:`leave`). A training job starts a process per rank, per attempt, so the
launcher's ranks, ``mgpu-lab train`` and ``mgpu-lab play`` end through :func:`leave` once their work is done.

Everything a normal exit does that someone could observe still happens, in the same order:

1. the threads the interpreter would wait for: while one that is not a daemon is alive, this is a plain
   ``sys.exit`` (the interpreter joins it, then tears down as usual), as it is on a Python whose ``atexit`` lacks
   ``_run_exitfuncs`` (CPython's own, which its exit calls);
2. a full garbage collection, so the finalizers of objects that only reference cycles kept alive (an RL library's
   runner and the writer it holds) run, as they do in the teardown's own collection;
3. the ``atexit`` handlers (``logging``'s flush and close, ``multiprocessing``'s clean-up, JAX's and the libraries'
   own), last registered first;
4. ``sys.stdout`` and ``sys.stderr`` flushed; a flush that fails turns a status of 0 into 120, as CPython's does.

From the collection on, SIGINT is ignored: the rank's work is done, and a Ctrl-C (the launcher forwards one to every
rank) landing in these last steps would otherwise raise KeyboardInterrupt in a finalizer, a handler or here, skip
what follows and print a traceback.

What is skipped is the finalization of objects still reachable from a module at exit, which CPython does not
promise either. The entry scripts hold nothing there that writes: the tests read back every iteration's TensorBoard
scalars of each library's healthy job (rl_games' writer keeps all of them buffered until it is finalized). A user's
script under the launcher (:mod:`mgpu_lab.health.rank_entry`) always ends as Python ends it.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import threading
from typing import NoReturn

#: CPython's exit status when flushing ``sys.stdout`` or ``sys.stderr`` fails at exit
FLUSH_FAILED = 120


def _waited_for() -> bool:
    """Whether a thread is alive that the interpreter would join before exiting (not the main one, not a daemon)."""
    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


def leave(status: int | None) -> NoReturn:
    """End the process with ``status`` (None is 0), as ``sys.exit(status)`` from the main module would, less the
    module teardown (see the module's documentation)."""
    code = 0 if status is None else status
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's own, what its exit calls
    if run_exit_handlers is None or _waited_for() or threading.current_thread() is not threading.main_thread():
        sys.exit(code)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C now cannot stop the exit halfway: the work is done
    gc.collect()
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or a closed stream
            if code == 0:
                code = FLUSH_FAILED
    os._exit(code)
