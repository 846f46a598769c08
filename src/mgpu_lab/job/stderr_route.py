"""The job's stderr on the terminal, without torchrun's (or skrl's JAX launcher's) own failure traceback.

The launcher keeps that traceback (:attr:`StderrRouter.diverted`) in a file its report names, and reports the
failure in its own words (:mod:`mgpu_lab.health.failures`). Stdlib only.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_TRACEBACK = b"Traceback (most recent call last):"


class StderrRouter:
    """Copies the job's stderr to ours line by line, except torchrun's (or skrl's JAX launcher's) own traceback.

    The launchers run as ``python -m MODULE``, so their traceback's first frame is runpy's
    ``_run_module_as_main``; a rank's traceback starts in the training script (and carries a ``[rankN]:``
    prefix under ``--local_ranks_filter``). From the launcher's traceback on, everything is its final text:
    kept in :attr:`diverted`, not shown. Text without a line end goes out at once unless it may begin
    such a traceback.
    """

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self.write = write
        self.diverted = bytearray()
        self._pending = b""  # the start of a line that may begin a traceback
        self._held: bytes | None = None  # a traceback's first line, until its next line says whose it is
        self._mid_line = False  # part of the current line went out already

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
                if self._held is not None or _TRACEBACK.startswith(data[: len(_TRACEBACK)]):
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

    def _route(self, line: bytes, out: bytearray) -> None:
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

    def close(self) -> None:
        """At the job's end: what is still held back was not the launcher's traceback."""
        rest = (self._held or b"") + self._pending
        self._held, self._pending = None, b""
        if rest and not self.diverted:
            self.write(rest)
