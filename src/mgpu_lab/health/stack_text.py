"""faulthandler's text read as frames, and where a rank waits: which ``torch.distributed`` call, called from where.

Stdlib only. The watchdog and ``mgpu-lab stacks`` read each rank's stack dump through these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mgpu_lab.health import heartbeat

#: torch.distributed functions a rank can be found waiting in: every collective (heartbeat.COLLECTIVES, the one
#: list), plus the set-up and point-to-point calls that block until a peer answers.
WAITS = frozenset(heartbeat.COLLECTIVES) | {
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
    "init_process_group",
    "new_group",
    "_store_based_barrier",
    "wait",
}
_C10D_FILE = "torch/distributed/distributed_c10d.py"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
_THREAD = re.compile(r"^(?:Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+) .*most recent call first")
_CUT = re.compile(r"^\s*\.\.\.\s*$")  # faulthandler's mark where it stops a thread at its 100-frame limit


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def where(self) -> str:
        return f"{self.file}:{self.line} in {self.func}"


class ThreadFrames(list[Frame]):
    """One thread's frames, most recent call first. ``cut``: faulthandler stopped at its frame limit, so the
    outermost frames (which tell a thread the script runs in from one that ``threading`` started) are missing.
    ``ident``: the thread's id as the dump spells it (``0x`` and 16 hex digits)."""

    cut = False
    ident: str | None = None


def parse_threads(text: str) -> list[ThreadFrames]:
    """faulthandler's dump -> one list of frames per thread, most recent call first."""
    threads: list[ThreadFrames] = []
    current: ThreadFrames | None = None
    for line in text.splitlines():
        header = _THREAD.match(line)
        if header:
            current = ThreadFrames()
            current.ident = header["ident"].lower()
            threads.append(current)
            continue
        if current is None:
            continue
        m = _FRAME.match(line)
        if m:
            current.append(Frame(m["file"], int(m["line"]), m["func"]))
        elif _CUT.match(line):
            current.cut = True
    return threads


def main_thread(threads: list[ThreadFrames], ident: str | None = None) -> list[Frame]:
    """The thread that runs the script: the one of id ``ident`` (the stack file's first line,
    :func:`mgpu_lab.health.heartbeat.read_main_thread`) where the dump holds it; else the one whose outermost frame is
    not a threading bootstrap. A thread cut at faulthandler's frame limit (a helper thread deep in an import, say)
    shows no outermost frame: it is taken only when no whole thread qualifies."""
    named = [f for f in threads if ident is not None and f.ident == ident.lower()]
    if named:
        return named[0]
    whole = [f for f in threads if f and not f.cut and not f[-1].file.endswith("threading.py")]
    cut = [f for f in threads if f and f.cut]
    candidates = whole + cut or threads
    return candidates[0] if candidates else []


def _in_torch_distributed(frame: Frame) -> bool:
    """torch.distributed's own frames, and the rank's collective tracker wrapped around them (never the caller)."""
    path = frame.file.replace("\\", "/")
    return (
        "/torch/distributed/" in path
        or "/torch/nn/parallel/" in path
        or path.endswith(("/functools.py", "/mgpu_lab/health/collectives.py"))
    )


def locate(frames: list[Frame]) -> tuple[str | None, Frame | None]:
    """(collective the thread waits in or None, the caller's frame or the innermost frame of interest)."""
    for i, frame in enumerate(frames):
        if frame.file.replace("\\", "/").endswith(_C10D_FILE) and frame.func in WAITS:
            caller = next((f for f in frames[i + 1 :] if not _in_torch_distributed(f)), None)
            return frame.func, caller
    interesting = next((f for f in frames if "/lib/python" not in f.file.replace("\\", "/")), None)
    return None, interesting or (frames[0] if frames else None)
