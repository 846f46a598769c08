"""The job's stderr on the terminal, without torchrun's (or skrl's JAX launcher's) own failure traceback.

The launcher keeps that traceback (:attr:`StderrRouter.diverted`) in a file its report names, and reports the
failure in its own words (:mod:`mgpu_lab.health.failures`).

One more block of torchrun's is replaced by a line of the launcher's: the error it logs when its *exit
barrier* fails. torchrun waits there only after every rank of its node finished well; on several nodes, the
node whose torchrun hosts the rendezvous store (the static rendezvous' node 0) may leave the barrier and
close the store while another node's torchrun still asks it (pytorch/pytorch#69520). torchrun then logs the
store's C++ warning with its native frames and a Python traceback, and exits 0 all the same. The store's
warning is held until the next line says whether that record follows, or until :data:`WARNING_HOLD_S` passed
(:meth:`StderrRouter.release_stale`, on the monitor's clock): a warning of anything else is shown, late by that
much at most.

torchrun's own log lines (its logger's ``W1204 12:00:00.000000 4959 .../api.py:123] ...`` format: workers sent
SIGTERM, a worker failed, the group restarted, a death signal received) never reach the terminal either: they are
kept in :attr:`StderrRouter.logged`, which the launcher writes into the same file as the traceback. Stdlib only.
"""

from __future__ import annotations

import re
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_TRACEBACK = b"Traceback (most recent call last):"
#: torchrun's logger: ``E1204 13:53:55.589000 4959 .../agent/server/api.py:1007] Error waiting on exit barrier...``
#: (every line of the record, traceback included, carries the same header)
_BARRIER = re.compile(rb"^(E\d{4} [\d:.]+ +\d+ [^\]\n]+:\d+\] )Error waiting on exit barrier")
#: the TCPStore client's C++ warning that comes first: ``[W1204 14:04:48.090825663 TCPStore.cpp:138] [c10d] ...``,
#: then its native frames, then an empty line
_STORE_WARNING = re.compile(rb"^\[W\d{4} [\d:.]+ TCPStore\.cpp:\d+\] \[c10d\] ")
#: torchrun's logger (``W``/``E``/``I`` and the date, time, pid, ``file:line]``): its own lines, never a rank's
TORCHRUN_LOG = re.compile(rb"^[WEIDC]\d{4} [\d:.]+ +\d+ [^\]\n]+:\d+\] ")
#: a held block longer than this is not the one above: it goes out as it came
_HOLD_LIMIT = 65536
#: how long a complete store warning waits for torchrun's exit-barrier record (logged right after it)
WARNING_HOLD_S = 1.0


def barrier_note(record: bytes) -> bytes:
    """The launcher's line for torchrun's failed exit barrier: what failed, and what it means."""
    lines = [line.split(b"] ", 1)[-1].strip() for line in record.splitlines()]
    error = next((line for line in reversed(lines) if line), b"").decode("utf-8", "replace")
    name, colon, message = error.partition(": ")
    if colon and " " not in name:  # an exception's last line: its class without the module
        error = f"{name.rsplit('.', 1)[-1]}: {message}"
    return (
        "[WARN] launcher: every rank on this node finished; then torchrun's exit barrier, its wait for the other "
        f"nodes, failed ({error[:200]}). When the node hosting the rendezvous store left first, that is torchrun's "
        "known race (pytorch/pytorch#69520) and the run is unaffected: the exit status says how the job ended\n"
    ).encode()


class StderrRouter:
    """Copies the job's stderr to ours line by line, except torchrun's (or skrl's JAX launcher's) own traceback.

    The launchers run as ``python -m MODULE``, so their traceback's first frame is runpy's
    ``_run_module_as_main``; a rank's traceback starts in the training script (and carries a ``[rankN]:``
    prefix under ``--local_ranks_filter``). From the launcher's traceback on, everything is its final text:
    kept in :attr:`diverted`, not shown. Text without a line end goes out at once unless it may begin
    such a traceback.
    """

    def __init__(self, write: Callable[[bytes], object], clock: Callable[[], float] = time.monotonic) -> None:
        self.write = write
        self.clock = clock
        self.diverted = bytearray()
        self.logged = bytearray()  # torchrun's own log lines, kept out of the terminal
        self._pending = b""  # the start of a line that may begin a traceback
        self._held: bytes | None = None  # a traceback's first line, until its next line says whose it is
        self._mid_line = False  # part of the current line went out already
        self._store_warning: bytearray | None = None  # a TCPStore warning held until the next line says what it is
        self._warning_ended: float | None = None  # when the held warning's empty last line came
        self._barrier_header: bytes | None = None  # the header of torchrun's exit-barrier record being replaced
        self._barrier_record = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self.diverted:
            self.diverted += chunk
            return
        data, self._pending = self._pending + chunk, b""
        out = bytearray()
        while data and not self.diverted:
            end = data.find(b"\n")
            if self._mid_line:
                piece, data = (data, b"") if end < 0 else (data[: end + 1], data[end + 1 :])
                out += piece
                self._mid_line = end < 0
                continue
            if end < 0:
                if self._holding() or _may_begin_a_held_line(data):
                    self._pending = data
                else:
                    out += data
                    self._mid_line = True
                break
            self._route(data[: end + 1], out)
            data = data[end + 1 :]
        if self.diverted and data:
            self.diverted += data
        if out:
            self.write(bytes(out))

    def _holding(self) -> bool:
        return self._held is not None or self._store_warning is not None or self._barrier_header is not None

    def _route(self, line: bytes, out: bytearray) -> None:
        if self._barrier_header is not None:
            if line.startswith(self._barrier_header) and len(self._barrier_record) < _HOLD_LIMIT:
                self._barrier_record += line
                return
            out += barrier_note(bytes(self._barrier_record))
            self._barrier_header, self._barrier_record = None, bytearray()
        if self._store_warning is not None:
            if self._warning_ended is None and len(self._store_warning) < _HOLD_LIMIT:
                self._store_warning += line
                self._warning_ended = None if line.strip() else self.clock()
                return
            warning, self._store_warning, self._warning_ended = bytes(self._store_warning), None, None
            if _BARRIER.match(line) is None:
                out += warning
        match = _BARRIER.match(line)
        if match is not None:
            self._barrier_header, self._barrier_record = match[1], bytearray(line)
            return
        if _STORE_WARNING.match(line) is not None:
            self._store_warning, self._warning_ended = bytearray(line), None
            return
        if self._held is None and TORCHRUN_LOG.match(line) is not None:
            self.logged += line
            del self.logged[: -(1 << 20)]  # the last MiB: a long job's log stays bounded
            return
        if self._held is not None:
            held, self._held = self._held, None
            if b"_run_module_as_main" in line:
                self.diverted += held + line
                return
            out += held
        if line.rstrip(b"\r\n") == _TRACEBACK:
            self._held = line
        else:
            out += line

    def release_stale(self) -> None:
        """Show a complete store warning that no exit-barrier record followed within :data:`WARNING_HOLD_S`."""
        ended = self._warning_ended
        if self._store_warning is None or ended is None or self.clock() - ended < WARNING_HOLD_S:
            return
        warning, self._store_warning, self._warning_ended = bytes(self._store_warning), None, None
        if not self.diverted:
            self.write(warning)

    def kept(self) -> bytes:
        """What the terminal did not show: torchrun's log lines, then its (or skrl's) traceback and final text."""
        return bytes(self.logged) + bytes(self.diverted)

    def close(self) -> None:
        """At the job's end: what is still held back was not the launcher's traceback, and an exit-barrier
        record is complete."""
        rest = bytearray()
        if self._barrier_header is not None:
            rest += barrier_note(bytes(self._barrier_record))
        rest += (self._store_warning or b"") + (self._held or b"") + self._pending
        self._held, self._pending, self._store_warning, self._barrier_header = None, b"", None, None
        if rest and not self.diverted:
            self.write(bytes(rest))


def _may_begin_a_held_line(data: bytes) -> bool:
    """Whether text without a line end yet may begin a line the router holds back (torchrun's traceback, the
    store's warning, torchrun's exit-barrier record or another of its log lines)."""
    return (
        _TRACEBACK.startswith(data[: len(_TRACEBACK)])
        or b"[W".startswith(data[:2])
        or re.match(rb"^[WEIDC]\d*$|^[WEIDC]\d{4} ", data) is not None
    ) and len(data) < _HOLD_LIMIT
