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
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*most recent call first")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def where(self) -> str:
        return f"{self.file}:{self.line} in {self.func}"


def parse_threads(text: str) -> list[list[Frame]]:
    """faulthandler's dump -> one list of frames per thread, most recent call first."""
    threads: list[list[Frame]] = []
    current: list[Frame] | None = None
    for line in text.splitlines():
        if _THREAD.match(line):
            current = []
            threads.append(current)
            continue
        m = _FRAME.match(line)
        if m and current is not None:
            current.append(Frame(m["file"], int(m["line"]), m["func"]))
    return threads


def main_thread(threads: list[list[Frame]]) -> list[Frame]:
    """The thread that runs the script: the one whose outermost frame is not a threading bootstrap."""
    for frames in threads:
        if frames and not frames[-1].file.endswith("threading.py"):
            return frames
    return threads[0] if threads else []


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
