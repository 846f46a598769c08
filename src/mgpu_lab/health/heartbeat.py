"""The protocol between training ranks and the launcher's supervisor (no torch import; stdlib only).

The launcher creates one *supervision folder* per job on each node and passes it to every rank in
``MGPU_LAB_SUPERVISE_DIR``. Each rank writes into it:

- ``beat.<rank>``: its latest heartbeat, one JSON object (:class:`Beat`), replaced atomically;
- ``stack.<rank>``: where ``faulthandler`` writes every thread's Python stack when the rank receives
  :data:`STACK_SIGNAL` (registered by the trainer at start-up), after a first line naming the rank's main thread
  (:func:`main_thread_line`);
- ``failure.<rank>``: written once when the rank fails with an exception (:class:`Failure`);
- ``run_dir`` (rank 0 only): the absolute path of the run's log folder (where ranks also append their
  timing, :mod:`mgpu_lab.health.timing`).

:data:`COLLECTIVES` is the one list of the torch.distributed functions that every rank of a group must
enter: the rank-side tracker (:mod:`mgpu_lab.health.collectives`) and the fault switch wrap them, the
watchdog recognises them in a stack.

The launcher reads them (:func:`scan_beats`, :func:`read_beats`, :func:`read_failures`, :func:`read_run_dir`).
Both sides use only the names defined here.

The protocol is versioned (:data:`VERSION`): every record is one JSON object with the field
:data:`VERSION_FIELD`, built by :func:`encode` and read back by :func:`decode` through the codec every record of a
job uses (:mod:`mgpu_lab.core.records`), against the one schema of its record type (:class:`Beat`, :class:`Failure`, :class:`RunDir`); phases and failure kinds are enumerations
(:class:`Phase`, :class:`FailureKind`). A record the reader cannot use (empty, garbage, truncated, not an
object, another version, a field missing or of the wrong type, a pid that cannot be a rank's) is returned as
an :class:`Unusable` naming the rank, the file and why, never dropped; fields a newer writer added are ignored.
"""

from __future__ import annotations

import enum
import os
import re
import signal
import stat
from dataclasses import dataclass, fields
from pathlib import Path

from mgpu_lab.core import records
from mgpu_lab.core.atomic import atomic_write_bytes
from mgpu_lab.core.records import VERSION_FIELD, Unreadable  # noqa: F401 - the protocol's names, read here too

#: Folder (created by the launcher) where ranks leave heartbeats, stacks and failure records.
SUPERVISE_DIR_ENV = "MGPU_LAB_SUPERVISE_DIR"
#: Signal on which every rank dumps all its threads' Python stacks into ``stack.<rank>``.
STACK_SIGNAL = signal.SIGUSR1

RUN_DIR_FILE = "run_dir"
#: The protocol's version, written into every record; a reader uses only records of its own version.
VERSION = 1
#: The most a reader reads of one record (a beat is about 250 bytes; anything larger is not ours).
MAX_RECORD_BYTES = 65536

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


class Phase(enum.StrEnum):
    """Where a rank is: importing and setting up, training, finished."""

    START = "start"
    TRAIN = "train"
    DONE = "done"


class FailureKind(enum.StrEnum):
    """How a rank failed: an exception (or a non-zero exit), bad input it refused (exit 2), or the other ranks of
    a restarted job that never came back within the rendezvous deadline (their node gave up: the job must stop)."""

    EXCEPTION = "exception"
    REFUSED = "refused"
    PEERS_GONE = "peers_gone"


#: Failure kinds under their short names.
EXCEPTION, REFUSED, PEERS_GONE = FailureKind.EXCEPTION, FailureKind.REFUSED, FailureKind.PEERS_GONE


@dataclass(frozen=True)
class Beat:
    """One heartbeat: where a rank is and when it got there (``time`` is ``time.time()``)."""

    rank: int
    local_rank: int
    world_size: int
    node: str
    pid: int
    iteration: int  # -1 before the first training iteration
    phase: Phase
    time: float
    #: the collective this rank is inside, when its tracker saw it enter one and not leave (None: outside any, or
    #: not tracked); lets the watchdog see a wait that leaves no torch.distributed frame in the stack (DDP's)
    collective: str | None = None
    #: the process's start time (:func:`mgpu_lab.core.procs.start_time`): a reused pid is never taken for the rank
    started: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase", Phase(self.phase))


@dataclass(frozen=True)
class Failure:
    """The first failure a rank saw: an exception (:data:`EXCEPTION`) or a refusal of its input
    (:data:`REFUSED`), with a one-line summary."""

    rank: int
    local_rank: int
    node: str
    pid: int
    kind: FailureKind
    detail: str
    time: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FailureKind(self.kind))


@dataclass(frozen=True)
class RunDir:
    """Rank 0's record of the run's log folder (an absolute path)."""

    path: str


# --- the one schema of each record, in the codec every record of a job uses (mgpu_lab.core.records) -------------


def _codec(kind: type, checks: dict[str, records.Check]) -> records.Codec:
    """The codec of one record type: its dataclass fields with a default may be missing."""
    optional = [f.name for f in fields(kind) if f.default is not f.default_factory]  # both MISSING: required
    assert [f.name for f in fields(kind)] == list(checks), kind  # one schema, field for field
    return records.Codec(kind.__name__, VERSION, checks, kind, missing=optional, reader="launcher")


_CODECS: dict[type, records.Codec] = {
    Beat: _codec(
        Beat,
        {
            "rank": records.count,
            "local_rank": records.count,
            "world_size": records.count,
            "node": records.text,
            "pid": records.pid,
            "iteration": records.integer,
            "phase": records.one_of(Phase),
            "time": records.number,
            "collective": records.optional(records.text),
            "started": records.optional(records.integer),
        },
    ),
    Failure: _codec(
        Failure,
        {
            "rank": records.count,
            "local_rank": records.count,
            "node": records.text,
            "pid": records.pid,
            "kind": records.one_of(FailureKind),
            "detail": records.text,
            "time": records.number,
        },
    ),
    RunDir: _codec(RunDir, {"path": records.text}),
}


def encode(record: Beat | Failure | RunDir) -> bytes:
    """A record as the bytes a rank writes: one JSON object with the protocol's version."""
    return _CODECS[type(record)].encode(record)


def decode(kind: type, data: bytes):
    """The record of type ``kind`` in ``data``; :class:`Unreadable` saying why when it cannot be used. Fields this
    version does not know (a newer writer's) are ignored; a field with a default may be missing."""
    return _CODECS[kind].decode(data)


@dataclass(frozen=True)
class Unusable:
    """A rank's record the reader could not use: which rank, which file, why."""

    rank: int
    path: Path
    reason: str

    def line(self, who: str = "watchdog") -> str:
        return f"[WARN] {who}: rank {self.rank}: unusable record {self.path} ({self.reason}); counted as no progress"


def beat_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"beat.{rank}"


def stack_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"stack.{rank}"


#: the first line of ``stack.<rank>``: the id of the thread that runs the rank's script, as faulthandler spells a
#: thread's id. A dump lists the newest thread first, and a helper thread caught mid-call (an import, under load)
#: can look like a script's thread, so the watchdog finds the script's frames by this id.
_MAIN_THREAD = re.compile(r"# main thread (0x[0-9a-f]{16})")


def main_thread_line(ident: int) -> str:
    """The stack file's first line for a rank whose main thread has ``threading`` id ``ident``."""
    return f"# main thread 0x{ident:016x}\n"


def read_main_thread(path: str | os.PathLike) -> str | None:
    """The main thread's id from a stack file's first line (``0x`` and 16 hex digits, faulthandler's spelling), or
    None: no such line (a rank that wrote none), or no file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline(64)
    except OSError:
        return None
    found = _MAIN_THREAD.fullmatch(first.rstrip("\n"))
    return found[1] if found else None


def failure_path(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"failure.{rank}"


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (readers never see half a record; no fsync: records are transient)."""
    atomic_write_bytes(path, data, durable=False)


def write_beat(folder: str | os.PathLike, beat: Beat) -> None:
    _replace(beat_path(folder, beat.rank), encode(beat))


def write_failure(folder: str | os.PathLike, failure: Failure) -> None:
    """Record a rank's failure unless it already recorded one (the first failure is the one that counts); a restarted
    rank whose peers never came back (:data:`PEERS_GONE`) replaces it: that ends the job, whatever came before."""
    path = failure_path(folder, failure.rank)
    if not path.exists() or failure.kind == FailureKind.PEERS_GONE:
        _replace(path, encode(failure))


def write_run_dir(folder: str | os.PathLike, run_dir: str | os.PathLike) -> None:
    _replace(Path(folder) / RUN_DIR_FILE, encode(RunDir(str(Path(run_dir).resolve()))))


def read_record(path: Path) -> bytes:
    """A record file's bytes: regular files only, never more than :data:`MAX_RECORD_BYTES` (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        raise Unreadable(f"larger than {MAX_RECORD_BYTES} bytes")
    return data


def _scan(folder: str | os.PathLike, prefix: str, kind: type) -> tuple[dict[int, object], dict[int, Unusable]]:
    found: dict[int, object] = {}
    bad: dict[int, Unusable] = {}
    try:
        entries = os.listdir(folder)
    except OSError:
        return found, bad
    for name in entries:
        head, _, tail = name.partition(".")
        if head != prefix or not tail.isdigit():
            continue  # atomic writes' temp files, and whatever else is not a record
        rank, path = int(tail), Path(folder) / name
        try:
            record = decode(kind, read_record(path))
            if getattr(record, "rank", rank) != rank:
                raise Unreadable(f"it names rank {record.rank}")
            found[rank] = record
        except FileNotFoundError:
            continue  # removed since the listing
        except Unreadable as exc:
            bad[rank] = Unusable(rank, path, str(exc))
        except OSError as exc:
            bad[rank] = Unusable(rank, path, f"unreadable: {exc.strerror or exc}")
    return found, bad


def scan_beats(folder: str | os.PathLike) -> tuple[dict[int, Beat], dict[int, Unusable]]:
    """Every rank's latest heartbeat by global rank, and the beat records that could not be used."""
    return _scan(folder, "beat", Beat)  # type: ignore[return-value]


def read_beats(folder: str | os.PathLike) -> dict[int, Beat]:
    """Every rank's latest usable heartbeat, by global rank (:func:`scan_beats` says which were not usable)."""
    return scan_beats(folder)[0]


def scan_failures(folder: str | os.PathLike) -> tuple[dict[int, Failure], dict[int, Unusable]]:
    """Every recorded rank failure by global rank, and the failure records that could not be used."""
    return _scan(folder, "failure", Failure)  # type: ignore[return-value]


def read_failures(folder: str | os.PathLike) -> dict[int, Failure]:
    """Every usable rank failure record, by global rank."""
    return scan_failures(folder)[0]


def read_run_dir(folder: str | os.PathLike) -> Path | None:
    """The run folder rank 0 recorded, or None (none yet, or an unusable record)."""
    try:
        record = decode(RunDir, read_record(Path(folder) / RUN_DIR_FILE))
    except (OSError, ValueError):
        return None
    return Path(record.path) if record.path else None
