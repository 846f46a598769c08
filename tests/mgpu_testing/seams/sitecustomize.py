"""The test suite's seams in a process the tests start (the launcher, torchrun, every rank): Python imports this
``sitecustomize`` at start-up when :func:`mgpu_testing.seams_env` put this folder on ``PYTHONPATH``.

The product reads no test switch. What a test needs in a child process (made-up GPUs, another /dev/shm, a fixed
run-folder stamp, a stop inside a checkpoint save, a fault in a rank, a rank stopped before its first beat) is asked for in ``MGPU_TESTING_SEAMS`` (JSON, read here
only) and injected the way an in-process test does it with ``monkeypatch``: through the product's own
parameters (``devices.discover``'s inventory, ``shm_ranks.shm_warning``'s folder and free bytes,
``run_dir.folder_name``'s stamp, ``core.atomic.atomic_write``'s ``before_replace`` hook, ``trainer.main``'s
faults). Nothing here runs
without that variable. The modules patched are stdlib-only, so a patched process starts as fast as before.
"""

from __future__ import annotations

import json
import os

SEAMS_ENV = "MGPU_TESTING_SEAMS"


def _made_up_gpus(count: int) -> None:
    from mgpu_lab.launch import devices

    def discover(environ, *, need_migs=False):
        return devices.Inventory([devices.made_up_uuid(i) for i in range(count)], [], f"{count} made-up GPUs")

    devices.discover = discover


def _shm(path: str, free: int | None) -> None:
    import functools

    from mgpu_lab.launch import shm_ranks

    shm_ranks.shm_warning = functools.partial(shm_ranks.shm_warning, path=path, free_bytes=free)


def _run_stamp(stamp: str) -> None:
    import functools

    from mgpu_lab.runs import run_dir

    run_dir.folder_name = functools.partial(run_dir.folder_name, stamp=stamp)


def _stop_in_save(marker: str, pattern: str) -> None:
    """The first atomic write whose file name matches ``pattern`` writes ``marker`` (JSON: temp file, target,
    pid) once its temp file is complete, then stops this process with SIGSTOP before the rename: a test kills
    it there and knows the kill landed mid-save."""
    import fnmatch
    import signal

    from mgpu_lab.core import atomic

    original = atomic.atomic_write

    def stop(tmp: str, target: str) -> None:
        if not fnmatch.fnmatch(os.path.basename(target), pattern):
            return
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # stopped once already for this marker
        with os.fdopen(fd, "w") as fh:
            json.dump({"tmp": tmp, "target": str(target), "pid": os.getpid()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.kill(os.getpid(), signal.SIGSTOP)

    def atomic_write(path, write, *, durable=True, before_replace=None):
        def hooks(tmp: str, target: str) -> None:
            stop(tmp, target)
            if before_replace is not None:
                before_replace(tmp, target)

        return original(path, write, durable=durable, before_replace=hooks)

    atomic.atomic_write = atomic_write


def _faults(spec: str) -> None:
    """Faults for every rank's trainer (``KIND:RANK:ITER[:ARG],...``; :mod:`mgpu_lab.health.rank_progress`)."""
    import functools

    from mgpu_lab.health.rank_progress import parse_faults
    from mgpu_lab.train import trainer

    trainer.main = functools.partial(trainer.main, faults=parse_faults(spec))


def _stop_before_beat(rank: int) -> None:
    """Rank ``rank`` stops itself (SIGSTOP) as its trainer sets up its supervision, before its first beat."""
    import signal

    from mgpu_lab.health import rank_progress

    original = rank_progress.from_env

    def from_env(r, *args, **kwargs):
        if r == rank:
            os.kill(os.getpid(), signal.SIGSTOP)
        return original(r, *args, **kwargs)

    rank_progress.from_env = from_env


def install(seams: dict) -> None:
    if "gpus" in seams:
        _made_up_gpus(int(seams["gpus"]))
    if "shm_path" in seams:
        _shm(seams["shm_path"], seams.get("shm_free"))
    if "run_stamp" in seams:
        _run_stamp(seams["run_stamp"])
    if "fault" in seams:
        _faults(seams["fault"])
    if "stop_before_beat" in seams:
        _stop_before_beat(int(seams["stop_before_beat"]))
    if "stop_in_save" in seams:
        _stop_in_save(seams["stop_in_save"], seams.get("stop_in_save_name") or "*")


if os.environ.get(SEAMS_ENV):
    install(json.loads(os.environ[SEAMS_ENV]))
