"""Where a run resumes from: restarts under torchrun, this job's run folder, ``--checkpoint latest``.

- torchrun exports ``TORCHELASTIC_RESTART_COUNT`` (0 on the first start, K on the K-th restart).
- The launcher exports ``MGPU_LAB_JOB_KEY``, a string naming the job across restarts and nodes. Rank 0
  records it in the run folder it creates (file ``job_key``); a restarted worker group (every rank)
  finds that folder under ``<log_root>/<library>/<task>/``, reuses it and resumes from its newest
  checkpoint.
- ``--checkpoint latest`` picks the newest checkpoint of the newest run (of that library and task)
  under the log root.

Which files are checkpoints, and at which iteration, is the adapter's knowledge: every function
here takes a ``list_checkpoints(run_dir) -> [(iteration, path), ...]`` from the adapter. Iterations
count completed training iterations from 0 over the whole run. No torch import here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from mgpu_lab.core.atomic import atomic_write
from mgpu_lab.core.names import JOB_KEY_ENV, LATEST  # noqa: F401 - LATEST re-exported; both spelled in core.names

RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"
JOB_KEY_FILE = "job_key"

ListCheckpoints = Callable[[Path], list[tuple[int, Path]]]

_STAMP = re.compile(r"^\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d")


def restart_count(environ: Mapping[str, str] = os.environ) -> int:
    """How many times torchrun restarted this worker group (0: the first attempt, or not under torchrun)."""
    raw = environ.get(RESTART_ENV, "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise ValueError(f"{RESTART_ENV}={raw!r} is not an integer >= 0")
    return int(raw)


def job_key(environ: dict[str, str] | os._Environ = os.environ) -> str | None:
    """The launcher's job key, or None when not set."""
    key = environ.get(JOB_KEY_ENV, "").strip()
    return key or None


def record_job_key(run_dir: str | os.PathLike, key: str) -> None:
    """Rank 0: write the job key into the run folder (atomically), so restarts find the folder."""
    text = key.encode()
    atomic_write(Path(run_dir) / JOB_KEY_FILE, lambda f: f.write(text))


def runs(log_root: str | os.PathLike, library: str, task: str) -> list[Path]:
    """The run folders under ``<log_root>/<library>/<task>``, oldest first (by the folder name's time stamp)."""
    base = Path(log_root) / library / task
    try:
        found = [p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []

    def order(path: Path) -> tuple[str, float, str]:
        stamp = _STAMP.match(path.name)
        try:
            mtime = path.stat().st_mtime
        except OSError:
            mtime = 0.0
        return (stamp.group(0) if stamp else "", mtime, path.name)

    return sorted(found, key=order)


def find_job_run(log_root: str | os.PathLike, library: str, task: str, key: str) -> Path | None:
    """The newest run folder whose ``job_key`` file holds ``key``, or None."""
    for run in reversed(runs(log_root, library, task)):
        try:
            if (run / JOB_KEY_FILE).read_text(encoding="utf-8").strip() == key:
                return run.resolve()
        except (OSError, UnicodeDecodeError):
            continue
    return None


def newest_checkpoint(run_dir: Path, list_checkpoints: ListCheckpoints) -> tuple[int, Path] | None:
    """The checkpoint with the highest iteration in ``run_dir`` (newest file on a tie), or None."""
    found = list_checkpoints(run_dir)
    if not found:
        return None

    def order(item: tuple[int, Path]) -> tuple[int, float]:
        try:
            return item[0], item[1].stat().st_mtime
        except OSError:
            return item[0], 0.0

    return max(found, key=order)


def latest_checkpoint(
    log_root: str | os.PathLike, library: str, task: str, list_checkpoints: ListCheckpoints
) -> tuple[int, Path] | None:
    """``--checkpoint latest``: the newest checkpoint of the newest run that has one, or None."""
    for run in reversed(runs(log_root, library, task)):
        found = newest_checkpoint(run, list_checkpoints)
        if found is not None:
            return found[0], found[1].resolve()
    return None


def resume_line(checkpoint: str, iteration: int, restart: int) -> str:
    """The log line after a resume: ``[INFO] [restart K: ]resumed from PATH at iteration I``."""
    prefix = f"restart {restart}: " if restart else ""
    return f"[INFO] {prefix}resumed from {checkpoint} at iteration {iteration}"


def numbered(run_dir: Path, pattern: str, regex: str, scale: int = 1, offset: int = 0) -> list[tuple[int, Path]]:
    """Files under ``run_dir`` matching the glob ``pattern`` whose name's ``regex`` group 1 is a number N,
    as ``(N // scale + offset, path)``: the helper adapters use to list their checkpoints."""
    rx = re.compile(regex)
    found = []
    for path in run_dir.glob(pattern):
        match = rx.search(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)) // scale + offset, path))
    return found
