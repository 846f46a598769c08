"""The rank entry for any training script: supervision installed, then the script run in this same process.

The launcher, given ``--train_script PATH`` (or ``-m MODULE``), has torchrun start each rank as::

    python .../mgpu_lab/health/rank_entry.py [--job_root DIR] (PATH | -m MODULE) [the script's arguments]

(a file path, not ``-m``: a rank's traceback must not begin the way torchrun's own does). Before the script
runs, this rank

- registers the stack dump on the launcher's signal and beats ``start`` (:class:`~mgpu_lab.health.rank_progress.
  Supervision`, the built-in trainer's own);
- installs the :class:`~mgpu_lab.health.collectives.CollectiveTracker` as soon as the script's first ``import
  torch`` finishes (never loading torch itself: a script without torch pays no torch import); a daemon thread
  beats each time the
  count of collectives (:meth:`~mgpu_lab.health.collectives.CollectiveTracker.progress`) and optimizer steps
  (PyTorch's global step hook), or the collective the rank is in, changes (phase ``train`` from the first of either;
  the beat's iteration counts both), and closes a timing window
  every :data:`mgpu_lab.health.timing.WINDOW_S` seconds;
- rank 0 with ``--job_root``: creates the job's records folder ``<DIR>/train_multigpu/<script>/<time>/``
  (the watchdog's and ``mgpu-lab stacks``' files, timing, torchrun's failure text) and holds its lock, so
  ``mgpu-lab stacks latest`` and ``mgpu-lab timing latest`` find the job.

The script then runs as ``python PATH`` (or ``python -m MODULE``) would run it: ``__main__``, its own
``sys.argv``, the script's folder first on ``sys.path``, its exit status. An exception is recorded as this
rank's failure (the launcher's report names it) and written to torchrun's error file by torch elastic's error
handler, as its ``record`` decorator would (torch is imported for that, on a failure only).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run by path: this folder must not shadow anything; the package's root replaces it
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import faulthandler
import runpy
import threading
import time

# no torch at module level in any of these (torch comes with the collective tracker's install); after the path fix
from mgpu_lab.core import procs
from mgpu_lab.health import heartbeat
from mgpu_lab.health.collectives import CollectiveTracker
from mgpu_lab.health.rank_progress import Supervision, interrupted
from mgpu_lab.health.timing import WINDOW_S, TimingLog
from mgpu_lab.runs import continue_run, resume, run_dir

JOB_DIR_KIND = "train_multigpu"  # <job_root>/train_multigpu/<script>/<time>: the layout mgpu-lab stacks searches
USAGE = "usage: rank_entry.py [--job_root DIR] (SCRIPT | -m MODULE) [ARGS...]"


def parse(argv: list[str]) -> tuple[str | None, str, bool, list[str]]:
    """(job root or None, script path or module, is a module, the script's arguments)."""
    job_root = None
    if argv[:1] == ["--job_root"] and len(argv) > 1:
        job_root, argv = argv[1], argv[2:]
    if argv[:1] == ["-m"] and len(argv) > 1:
        return job_root, argv[1], True, argv[2:]
    if not argv:
        raise SystemExit(USAGE)
    return job_root, argv[0], False, argv[1:]


def script_name(target: str, module: bool) -> str:
    """The folder name of a script's jobs: its file stem, or the module's last component(s) without ``__main__``."""
    if module:
        parts = [p for p in target.split(".") if p != "__main__"]
        return parts[-1] if parts else target
    stem = os.path.splitext(os.path.basename(target))[0]
    if stem in ("train", "main", "__main__"):  # Isaac Lab's scripts/reinforcement_learning/<library>/train.py
        parent = os.path.basename(os.path.dirname(os.path.abspath(target)))
        return f"{parent}_{stem}" if parent else stem
    return stem


class Beater:
    """The daemon thread that turns the tracker's progress into beats and closes timing windows."""

    def __init__(
        self, supervision: Supervision | None, tracker: CollectiveTracker, log: TimingLog, poll_s: float = 0.1
    ) -> None:

        self.supervision, self.tracker, self.log, self.poll_s = supervision, tracker, log, poll_s
        self.stop = threading.Event()
        self.last: tuple[int, str | None] | None = None  # (collectives + optimizer steps, the collective it is in)
        self.thread = threading.Thread(target=self._run, name="mgpu_lab-collective-beats", daemon=True)

    def _run(self) -> None:

        next_window = time.monotonic() + WINDOW_S
        while not self.stop.wait(self.poll_s):
            self.beat_if_changed()
            if time.monotonic() >= next_window:
                next_window = time.monotonic() + WINDOW_S
                self.log.close_window()

    def beat_if_changed(self) -> None:
        """Beat when the rank made progress of any kind the tracker sees: a collective, or an optimizer step (a rank
        that trains alone, or without any collective, trains all the same); phase ``train`` from the first."""
        state = (self.tracker.progress() + self.tracker.steps, self.tracker.inside)
        if state == self.last or state[0] == 0 and state[1] is None:
            return
        self.last = state
        if self.supervision is not None:
            try:
                self.supervision.beat(state[0], heartbeat.Phase.TRAIN, collective=state[1])
            except OSError:
                pass  # the launcher removed its folder (the job is ending), or its disk is full

    def finish(self, ok: bool) -> None:
        self.stop.set()
        self.thread.join(timeout=2.0)
        self.log.close_window()
        if ok and self.supervision is not None:
            self.supervision.beat(self.tracker.progress(), heartbeat.Phase.DONE)


def records_folder(supervise_dir: str | None, job_root: str | None, name: str):
    """Rank 0: the job's records folder (a restarted group keeps the first one) and its lock, or None."""

    if supervise_dir is None or job_root is None:
        return None
    folder = heartbeat.read_run_dir(supervise_dir)
    try:
        if folder is None or not folder.is_dir():
            folder = run_dir.create(job_root, JOB_DIR_KIND, name, None)
            heartbeat.write_run_dir(supervise_dir, folder)
            print(
                f"[INFO] rank 0: this job's records (watchdog, stacks, timing): {folder}", file=sys.stderr, flush=True
            )
        return continue_run.hold(folder, os.environ.get(resume.JOB_KEY_ENV))
    except OSError as exc:  # the script still runs: only mgpu-lab stacks/timing will not find this job
        print(
            f"[WARN] rank 0: no records folder under {job_root} ({exc.strerror or exc}); mgpu-lab stacks and "
            "mgpu-lab timing will not find this job",
            file=sys.stderr,
            flush=True,
        )
        return None


def run_target(target: str, module: bool, args: list[str]) -> int:
    """Run the script as ``python target args`` (or ``python -m target args``) would; return its exit status."""

    if module:
        sys.argv = [target, *args]  # run_module puts the module's file in argv[0]
        sys.path.insert(0, os.getcwd())  # python -m searches the working folder first
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        path = os.path.abspath(target)
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(path)
        runpy.run_path(path, run_name="__main__")
    return 0


def supervised(job_root: str | None, target: str, module: bool, args: list[str]) -> int:
    """Install supervision, run the script, record how it ended."""

    env = os.environ
    rank, local, world = int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0")), int(env.get("WORLD_SIZE", "1"))
    folder = env.get(heartbeat.SUPERVISE_DIR_ENV) or None
    supervision = Supervision(folder, rank, local, world) if folder and os.path.isdir(folder) else None
    if supervision is not None:
        supervision.register_stack_dump()
        supervision.beat(-1, heartbeat.Phase.START)
    lock = records_folder(folder, job_root, script_name(target, module)) if rank == 0 else None
    tracker = CollectiveTracker().install_with_torch()
    beater = Beater(supervision, tracker, TimingLog(tracker, rank, procs.node_name(), folder))
    beater.thread.start()
    status = 1
    try:
        status = run_target(target, module, args)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if status != 0 and supervision is not None:
            supervision.record_failure(exc, own_script=False)  # a user's script: its status, never "a usage error"
        raise
    except BaseException as exc:
        if supervision is not None and not isinstance(exc, KeyboardInterrupt):
            supervision.record_failure(exc)
        raise
    finally:
        beater.finish(ok=status == 0)
        if lock is not None:
            lock.release()
    return status


def main(argv: list[str]) -> int:
    try:
        job_root, target, module, args = parse(argv)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    try:  # what torch elastic's ``record`` sets up before its entry point runs (it, too, goes on without it)
        faulthandler.enable(all_threads=True)
    except (OSError, ValueError, RuntimeError, AttributeError):  # no usable stderr: no fault dumps, same run
        pass
    try:
        status = supervised(job_root, target, module, args)
    except KeyboardInterrupt:  # Ctrl-C, forwarded by the launcher: one line per rank, never a traceback
        return interrupted()
    except Exception as exc:
        _record(exc)
        if not _kept(exc):
            raise
        return 1
    return status


def _record(exc: Exception) -> None:
    """What torch elastic's ``record`` does with an entry point's exception: its error handler writes the file
    torchrun's failure report reads. torch is imported here, on a failure, and not before: a script that never
    imports torch runs without it."""
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler  # torch: on a failure only

    get_error_handler().record_exception(exc)


def _kept(exc: BaseException) -> bool:
    """Under torchrun, whose error file keeps this rank's traceback (the launcher's report names where): say the
    error in one line instead of the traceback. Elsewhere (no error file) the traceback is all there is."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or not os.path.isfile(path):
        return False
    lines = str(exc).strip().splitlines()
    what = f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
    print(
        f"[ERROR] rank {os.environ.get('RANK', '0')}: {what} (its traceback is in torchrun's report, which the "
        "launcher names)",
        file=sys.stderr,
        flush=True,
    )
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
