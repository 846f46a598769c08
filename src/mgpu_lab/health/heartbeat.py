"""The protocol between training ranks and the launcher's supervisor (no torch import; stdlib only).

The launcher creates one *supervision folder* per job on each node and passes it to every rank in
``MGPU_LAB_SUPERVISE_DIR``. Each rank writes into it:

- ``beat.<rank>``: its latest heartbeat, one JSON object (:class:`Beat`), replaced atomically;
- ``stack.<rank>``: where ``faulthandler`` writes every thread's Python stack when the rank receives
  :data:`STACK_SIGNAL` (registered by the trainer at start-up);
- ``failure.<rank>``: written once when the rank fails with an exception (:class:`Failure`);
- ``run_dir`` (rank 0 only): the absolute path of the run's log folder (where ranks also append their
  timing, :mod:`mgpu_lab.health.timing`).

:data:`COLLECTIVES` is the one list of the torch.distributed functions that every rank of a group must
enter: the rank-side tracker (:mod:`mgpu_lab.health.collectives`) and the fault switch wrap them, the
watchdog recognises them in a stack.

The launcher reads them (:func:`read_beats`, :func:`read_failures`, :func:`read_run_dir`). Both sides
use only the names defined here.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from mgpu_lab.core.atomic import atomic_write_bytes

#: Folder (created by the launcher) where ranks leave heartbeats, stacks and failure records.
SUPERVISE_DIR_ENV = "MGPU_LAB_SUPERVISE_DIR"
#: Signal on which every rank dumps all its threads' Python stacks into ``stack.<rank>``.
STACK_SIGNAL = signal.SIGUSR1

RUN_DIR_FILE = "run_dir"

#: torch.distributed functions that block until every rank of the group (or the peer) takes part. The one list:
#: the rank-side tracker (:mod:`mgpu_lab.health.collectives`) and the ``skip`` fault wrap these, and the watchdog
#: places a rank whose stack waits in one (:mod:`mgpu_lab.health.watchdog`, which adds set-up calls).
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "barrier",
    "monitored_barrier",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
    "batch_isend_irecv",
)
#: What a DDP gradient bucket's all-reduce is called in a beat (it runs from C++, never through COLLECTIVES).
DDP_ALLREDUCE = "all_reduce (DDP gradient bucket)"


@dataclass(frozen=True)
class Beat:
    """One heartbeat: where a rank is and when it got there (``time`` is ``time.time()``)."""

    rank: int
    local_rank: int
    world_size: int
    node: str
    pid: int
    iteration: int  # -1 before the first training iteration
    phase: str  # "start", "train", "done"
    time: float
    #: the collective this rank is inside, when its tracker saw it enter one and not leave (None: outside any, or
    #: not tracked); lets the watchdog see a wait that leaves no torch.distributed frame in the stack (DDP's)
    collective: str | None = None


#: Failure kinds: an exception (or a non-zero exit), and bad input the rank refused (exit 2).
EXCEPTION, REFUSED = "exception", "refused"


@dataclass(frozen=True)
class Failure:
    """The first failure a rank saw: an exception (``kind`` "exception") or a refusal of its input (``kind``
    "refused"), with a one-line summary."""

    rank: int
    local_rank: int
    node: str
    pid: int
    kind: str
    detail: str
    time: float


def beat_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"beat.{rank}"


def stack_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"stack.{rank}"


def failure_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"failure.{rank}"


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (readers never see half a record; no fsync: records are transient)."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=False)


def write_beat(folder: str | os.PathLike, beat: Beat) -> None:
    _replace(beat_path(folder, beat.rank), json.dumps(asdict(beat)))


def write_failure(folder: str | os.PathLike, failure: Failure) -> None:
    """Record a rank's failure unless it already recorded one (the first failure is the one that counts)."""
    path = failure_path(folder, failure.rank)
    if not path.exists():
        _replace(path, json.dumps(asdict(failure)))


def write_run_dir(folder: str | os.PathLike, run_dir: str | os.PathLike) -> None:
    _replace(Path(folder) / RUN_DIR_FILE, str(Path(run_dir).resolve()))


def _read_records(folder: str | os.PathLike, prefix: str, kind: type) -> dict[int, object]:
    found: dict[int, object] = {}
    try:
        entries = os.listdir(folder)
    except OSError:
        return found
    for name in entries:
        head, _, tail = name.partition(".")
        if head != prefix or not tail.isdigit():
            continue
        try:
            data = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
            record = kind(**data)
        except (OSError, ValueError, TypeError):
            continue  # a record being replaced right now, or not ours: skip it this time
        found[int(tail)] = record
    return found


def read_beats(folder: str | os.PathLike) -> dict[int, Beat]:
    """Every rank's latest heartbeat, by global rank."""
    return _read_records(folder, "beat", Beat)  # type: ignore[return-value]


def read_failures(folder: str | os.PathLike) -> dict[int, Failure]:
    """Every recorded rank failure, by global rank."""
    return _read_records(folder, "failure", Failure)  # type: ignore[return-value]


def read_run_dir(folder: str | os.PathLike) -> Path | None:
    try:
        text = (Path(folder) / RUN_DIR_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return Path(text) if text else None
