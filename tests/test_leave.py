"""mgpu_lab.core.leave: the entry scripts' exit without the module teardown keeps what a normal exit does.

Each case is a small Python process (its exit is what is under test), without torch: what ``leave`` keeps does not
depend on what the process imported. That the real entry scripts' writers are complete after it is asserted on the
session's healthy runs (tests/test_rsl_rl.py, test_rl_games.py, test_skrl.py, test_skrl_jax.py: every iteration's
TensorBoard scalars on rank 0).
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from mgpu_testing import PYTHON, REPO

PREAMBLE = f"""
import atexit, os, sys, threading
sys.path.insert(0, {str(REPO / "src")!r})
from mgpu_lab.core.leave import leave
"""


def run(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``body`` in a fresh interpreter whose stdout is a pipe, block-buffered (PYTHONUNBUFFERED would hide a lost
    flush), in ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    code = PREAMBLE + textwrap.dedent(body)
    return subprocess.run(
        [PYTHON, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_finalizers_in_cycles_and_atexit_handlers_and_stdout_survive(tmp_path: Path) -> None:
    """The finalizer of an object that only a reference cycle kept alive runs (the collection before leaving, as the
    teardown's own), the atexit handlers run last registered first, buffered stdout arrives, and the status is the
    one given."""
    proc = run(
        """
        class Writer:  # a library's writer that closes its file when it is finalized, in a cycle with its runner
            def __init__(self):
                self.me = self
            def __del__(self):
                with open("events.txt", "w") as fh:
                    fh.write("every iteration\\n")
        Writer()
        atexit.register(lambda: print("registered first, runs last"))
        atexit.register(lambda: print("registered last, runs first"))
        sys.stdout.write("buffered on a pipe\\n")
        leave(3)
        """,
        tmp_path,
    )
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "events.txt").read_text() == "every iteration\n"
    assert proc.stdout.splitlines() == [
        "buffered on a pipe",
        "registered last, runs first",
        "registered first, runs last",
    ]
    assert proc.stderr == ""


def test_none_is_status_zero(tmp_path: Path) -> None:
    proc = run("leave(None)", tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_thread_the_interpreter_would_wait_for_is_waited_for(tmp_path: Path) -> None:
    """A live thread that is not a daemon: the normal exit, which joins it. The thread finishes only once the main
    thread has stopped (the interpreter's shutdown marks it so), so an exit that did not wait would lose its line."""
    proc = run(
        """
        def outlive_main():
            while threading.main_thread().is_alive():
                threading.Event().wait(0.01)
            with open("thread.txt", "w") as fh:
                fh.write("finished after the main thread")
        threading.Thread(target=outlive_main).start()
        leave(0)
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "thread.txt").read_text() == "finished after the main thread"


def test_a_stdout_that_cannot_be_flushed_turns_success_into_120(tmp_path: Path) -> None:
    """As CPython's own exit: output that cannot be written is not a success (a failure's status stays)."""
    ok = run("sys.stdout.write('lost'); os.close(1); leave(0)", tmp_path)
    failed = run("sys.stdout.write('lost'); os.close(1); leave(4)", tmp_path)
    assert (ok.returncode, failed.returncode) == (120, 4)


def test_a_python_without_cpythons_exit_hook_exits_normally(tmp_path: Path) -> None:
    """Where ``atexit`` has no ``_run_exitfuncs`` (CPython's private hook), ``leave`` is ``sys.exit``: the
    handlers still run (by the interpreter's own exit), and the status is the one given."""
    proc = run(
        """
        del atexit._run_exitfuncs
        atexit.register(lambda: print("handler ran"))
        leave(5)
        """,
        tmp_path,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (5, "handler ran\n", "")


def test_a_ctrl_c_during_the_last_steps_stops_nothing(tmp_path: Path) -> None:
    """SIGINT sent from a finalizer that the collection runs: no KeyboardInterrupt (in the finalizer or after it),
    so the handlers still run, nothing is printed on stderr and the status is the one given."""
    proc = run(
        """
        import signal
        class Interrupting:
            def __init__(self):
                self.me = self
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(1000))  # bytecode after the signal, where a handler would raise
        Interrupting()
        atexit.register(lambda: print("handler ran"))
        leave(0)
        """,
        tmp_path,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "handler ran\n", "")
