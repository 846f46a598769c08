"""PyTorch's flight recorder on every backend: turned on for the ranks, dumped into the run folder on demand.

torch (2.5 and later) keeps a ring buffer of each process group's recent collectives, the *flight recorder*: gloo
records itself, NCCL too. Its size comes from ``TORCH_FR_BUFFER_SIZE`` (older name ``TORCH_NCCL_TRACE_BUFFER_SIZE``;
0 turns it off); :func:`configure` sets it for the ranks unless the user set either. torch writes NCCL's record on a
timeout by itself, gloo's never: here every rank dumps on request, whatever its backend.

The request travels through a FIFO per rank in the job's supervision folder, ``fr_pipe.<rank>``, not through a
signal: a rank blocked in a collective runs no Python signal handler until the collective returns (which it never
does in a hang), but another thread of it still runs. :class:`Listener` is that thread: it waits on its FIFO
(blocked in ``read``, costing nothing per training step), reads each request, the folder to dump into (a record of
the rank protocol's codec, :mod:`mgpu_lab.health.heartbeat`, versioned like every other), and writes
``<backend>_rank_<rank>`` there with ``torch._C._distributed_c10d._dump_fr_trace``: torch's own pickled format,
so torch's ``torchfrtrace`` reads the files too. The asking side (:func:`request`) writes that request to every FIFO
a rank reads, never blocking; :class:`DumpRequest` waits, with a deadline, for the files.

Who asks: the launcher's watchdog when it found a hang, before it stops the job; a rank that fails, before it
exits (:func:`dump_on_failure`), so the ranks of its node still alive dump while torchrun has not stopped them yet.
The dumps go to ``<run folder>/flight_recorder/`` (:data:`FOLDER`), where ``mgpu-lab trace`` reads them
(:mod:`mgpu_lab.health.trace`). Stdlib only: torch is imported by the listening thread, when asked to dump.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mgpu_lab.core.atomic import atomic_write_bytes
from mgpu_lab.health import heartbeat

#: The flight recorder's size variable, its older NCCL-only name, and the size set when the user set neither.
BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
LEGACY_BUFFER_ENV = "TORCH_NCCL_TRACE_BUFFER_SIZE"
BUFFER_DEFAULT = "2000"
#: The run folder's subfolder that holds the dumps.
FOLDER = "flight_recorder"
#: Each rank's FIFO in the supervision folder, ``fr_pipe.<rank>``, and the file it touches once it answered.
PIPE_PREFIX, ANSWER_PREFIX = "fr_pipe.", "fr_answer."
#: How long the asking side waits for the dumps (a dump of a full 2000-entry buffer takes milliseconds).
DUMP_WAIT_S = 5.0
#: The most a request may hold (a folder path in one record).
MAX_REQUEST_BYTES = 4096


def configure(env: dict[str, str]) -> None:
    """Turn the recorder on in the ranks' environment ``env``, unless the user sized it (0 included: off)."""
    if BUFFER_ENV not in env and LEGACY_BUFFER_ENV not in env:
        env[BUFFER_ENV] = BUFFER_DEFAULT


def dump_name(backend: str, rank: int) -> str:
    """A dump's file name: ``<backend>_rank_<rank>`` (one prefix per backend, as ``torchfrtrace -p`` takes it)."""
    return f"{backend}_rank_{rank}"


def pipe_path(supervise_dir: str | os.PathLike, rank: int) -> Path:
    return Path(supervise_dir) / f"{PIPE_PREFIX}{rank}"


def answer_path(supervise_dir: str | os.PathLike, rank: int) -> Path:
    """Touched by a rank once it served a request (dumped, or had nothing to dump)."""
    return Path(supervise_dir) / f"{ANSWER_PREFIX}{rank}"


def folder_of(run_dir: Path | None) -> Path:
    """Where dumps go: ``<run folder>/flight_recorder``, or a fresh temp folder when no run folder is known."""
    if run_dir is not None:
        with contextlib.suppress(OSError):
            (run_dir / FOLDER).mkdir(parents=True, exist_ok=True)
            return run_dir / FOLDER
    return Path(tempfile.mkdtemp(prefix="mgpu_lab_flight_recorder_"))


# --------------------------------------------------------------------------------------------------
# the rank side
# --------------------------------------------------------------------------------------------------


def backends_in_use() -> list[str]:
    """The backends of this process's default group (``gloo``, ``nccl``, or both for ``cpu:gloo,cuda:nccl``)."""
    import torch.distributed as dist  # the listener runs in a rank, where torch is imported already

    if not dist.is_available() or not dist.is_initialized():
        return []
    names = [part.rpartition(":")[2] for part in str(dist.get_backend()).split(",")]
    return list(dict.fromkeys(n for n in names if n))


def record_of(c10d: object, backend: str) -> bytes:
    """One backend's record from torch's c10d bindings: ``_dump_fr_trace`` (torch 2.8 and later, every backend),
    else ``_dump_nccl_trace`` (older torch, NCCL only). LookupError when this torch cannot dump that backend."""
    dump = getattr(c10d, "_dump_fr_trace", None)
    if dump is not None:
        return bytes(dump(includeCollectives=True, includeStackTraces=True, backend=backend))
    legacy = getattr(c10d, "_dump_nccl_trace", None)
    if backend == "nccl" and legacy is not None:
        return bytes(legacy(includeCollectives=True, includeStackTraces=True))
    raise LookupError(f"this torch has no flight recorder dump for {backend}")


def dump_now(folder: str | os.PathLike, rank: int) -> list[Path]:
    """Write this process's flight recorder, one file per backend in use, into ``folder``; return the files."""
    from torch._C import _distributed_c10d as c10d  # torch: only in a rank, when asked to dump

    written = []
    for backend in backends_in_use():
        try:
            data = record_of(c10d, backend)
        except (LookupError, RuntimeError, TypeError, ValueError) as exc:  # this torch does not record that backend
            print(f"[WARN] rank {rank}: no flight recorder dump for {backend}: {exc}", file=sys.stderr, flush=True)
            continue
        path = Path(folder) / dump_name(backend, rank)
        atomic_write_bytes(path, data, durable=False)
        written.append(path)
    return written


class Listener:
    """A daemon thread of one rank: dumps its flight recorder each time a folder arrives on its FIFO."""

    def __init__(
        self, supervise_dir: str | os.PathLike, rank: int, dump: Callable[[str, int], object] | None = None
    ) -> None:
        self.rank = rank
        self.pipe = pipe_path(supervise_dir, rank)
        self.answer = answer_path(supervise_dir, rank)
        self.dump = dump if dump is not None else dump_now  # the seam: what "dump into this folder" does
        self.fd = -1  # the FIFO, held open from start() on
        self.thread = threading.Thread(target=self._run, name="mgpu_lab-flight-recorder", daemon=True)

    def start(self) -> Listener:
        """Make the FIFO and hold it open, reading and writing, before the thread starts: from here on a request
        never finds it unread (no race with the thread), and it is never at end of file (requests are lines of
        one stream, however close together they come). The rank's exit closes it: a request then finds no reader."""
        with contextlib.suppress(FileNotFoundError):
            self.pipe.unlink()  # a restarted group's rank: the old FIFO is its predecessor's
        os.mkfifo(self.pipe, 0o600)
        self.fd = os.open(self.pipe, os.O_RDWR | os.O_CLOEXEC)
        self.thread.start()
        return self

    def _run(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.fd, MAX_REQUEST_BYTES)  # blocks (without the GIL) until someone asks
            except OSError:
                return
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) > MAX_REQUEST_BYTES:  # no request is that long: drop it rather than grow
                pending = b""
            folders = self.folders(b"\n".join(lines))
            for folder in folders:
                try:
                    self.dump(folder, self.rank)
                except Exception as exc:  # noqa: BLE001 (a dump must never end the rank)
                    print(f"[WARN] rank {self.rank}: flight recorder dump failed: {exc}", file=sys.stderr, flush=True)
            if folders:  # answered, with a dump or without (no process group yet, a JAX rank): nobody waits longer
                with contextlib.suppress(OSError):
                    atomic_write_bytes(self.answer, b"", durable=False)

    def folders(self, data: bytes) -> list[str]:
        """The folders the requests in ``data`` (one record a line) ask for, each once; an unusable one is a
        warning line (another version's launcher, or not a request at all)."""
        found: list[str] = []
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                folder = heartbeat.decode(heartbeat.RunDir, line).path
            except heartbeat.Unreadable as exc:
                print(f"[WARN] rank {self.rank}: unusable dump request ({exc})", file=sys.stderr, flush=True)
                continue
            if folder not in found and os.path.isdir(folder):
                found.append(folder)
        return found


_listening: dict[tuple[str, int], Listener] = {}


def listen(supervise_dir: str | os.PathLike, rank: int) -> Listener | None:
    """Start this rank's listener once per process (None when its FIFO cannot be made: dumps are a bonus)."""
    key = (os.fspath(supervise_dir), rank)
    if key not in _listening:
        try:
            _listening[key] = Listener(supervise_dir, rank).start()
        except OSError:
            return None
    return _listening[key]


# --------------------------------------------------------------------------------------------------
# the asking side
# --------------------------------------------------------------------------------------------------


def request(supervise_dir: str | os.PathLike, folder: Path) -> list[int]:
    """Ask every rank listening in ``supervise_dir`` to dump into ``folder``; return the ranks asked (never blocks:
    a FIFO nobody reads, a rank gone, is skipped)."""
    asked = []
    try:
        names = sorted(os.listdir(supervise_dir))
    except OSError:
        return []
    line = heartbeat.encode(heartbeat.RunDir(str(folder))) + b"\n"  # the protocol's codec, one record a line
    for name in names:
        rank = name[len(PIPE_PREFIX) :]
        if not name.startswith(PIPE_PREFIX) or not rank.isdigit():
            continue
        try:
            fd = os.open(os.path.join(supervise_dir, name), os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:  # ENXIO: no reader (the rank is gone); ELOOP/ENOENT: not ours
            if exc.errno not in (errno.ENXIO, errno.ENOENT, errno.ELOOP, errno.EACCES):
                raise
            continue
        try:
            os.write(fd, line)
            asked.append(int(rank))
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked


class DumpRequest:
    """One request to every rank of a supervision folder; :meth:`wait` waits for their answers."""

    def __init__(self, supervise_dir: str | os.PathLike, run_dir: Path | None) -> None:
        self.dir = Path(supervise_dir)
        self.since = time.time() - 0.05  # file times are coarser than the clock
        self.deadline = time.monotonic() + DUMP_WAIT_S
        self.asked: list[int] = []
        self.folder = run_dir / FOLDER if run_dir is not None else Path(tempfile.gettempdir())
        if any(self.dir.glob(f"{PIPE_PREFIX}*")):  # some rank listens: make the folder
            self.folder = folder_of(run_dir)
            self.asked = request(supervise_dir, self.folder)

    def _since(self, paths: list[Path]) -> bool:
        for path in paths:
            with contextlib.suppress(OSError):
                if path.stat().st_mtime >= self.since:
                    return True
        return False

    def answered(self) -> set[int]:
        return {r for r in self.asked if self._since([answer_path(self.dir, r)])}

    def written(self) -> set[int]:
        """The ranks asked whose dump is in the folder, written since the request."""
        return {r for r in self.asked if self._since(list(self.folder.glob(f"*_rank_{r}")))}

    def wait(self) -> set[int]:
        """Wait (until the deadline) for every rank asked to answer; return those whose dump is there."""
        while len(self.answered()) < len(self.asked) and time.monotonic() < self.deadline:
            time.sleep(0.05)
        return self.written()

    def lines(self, who: str = "watchdog") -> list[str]:
        """The report's lines once the ranks answered: where the dumps are, how to read them, who did not answer."""
        if not self.asked:
            return []
        done = self.wait()
        lines = []
        if done:
            run = self.folder.parent if self.folder.name == FOLDER else self.folder
            lines.append(
                f"[ERROR] {who}: flight recorder dumps of {len(done)} rank(s) in {self.folder}; "
                f"read them with: mgpu-lab trace {run}"
            )
        silent = sorted(set(self.asked) - self.answered())
        if silent:
            names = ", ".join(map(str, silent))
            lines.append(
                f"[WARN] {who}: rank {names} did not answer the flight recorder request within {DUMP_WAIT_S:g} s"
            )
        return lines


def found_lines(run_dir: Path | None, who: str = "launcher") -> list[str]:
    """The report's line naming the run folder's dumps and how to read them (none when there are none)."""
    folder = run_dir / FOLDER if run_dir is not None else None
    try:
        names = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder is not None else []
    except OSError:
        names = []
    ranks = sorted({int(n.rpartition("_rank_")[2]) for n in names if n.rpartition("_rank_")[2].isdigit()})
    if not ranks or run_dir is None:
        return []
    return [
        f"[ERROR] {who}: flight recorder dumps of rank {', '.join(map(str, ranks))} in {folder}; "
        f"read them with: mgpu-lab trace {run_dir}"
    ]


def dump_on_failure(supervise_dir: str | os.PathLike) -> None:
    """A rank failed: have every rank of this node still alive (itself included) dump into the run folder before
    the rank exits and torchrun stops the others. Best effort, bounded by :data:`DUMP_WAIT_S`."""
    dist = sys.modules.get("torch.distributed")  # no process group yet: nothing recorded, and the peers neither
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    run_dir = heartbeat.read_run_dir(supervise_dir)
    if run_dir is None or not run_dir.is_dir():
        return
    with contextlib.suppress(OSError):
        DumpRequest(supervise_dir, run_dir).wait()
