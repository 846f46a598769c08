"""PyTorch's NCCL flight recorder for one job of CUDA ranks: where it dumps, and the pipes that ask it to dump now.

Each CUDA rank's ``ProcessGroupNCCL`` writes its dump to ``TORCH_FR_DUMP_TEMP_FILE<rank>`` and, when
``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` is set, listens on the FIFO ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe``;
writing to that FIFO makes it dump at once. The user may set either variable: the launcher's defaults never
replace a value the user gave, and the pipes are looked for where the ranks make them. Stdlib only.
"""

from __future__ import annotations

import os

DUMP_ENV = "TORCH_FR_DUMP_TEMP_FILE"
PIPE_ENV = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
#: the file name stem of the dumps and pipes in the launcher's default folder
STEM = "nccl_trace_rank_"


class NcclTrace:
    """The dump prefix (``<prefix><rank>`` files) and the pipe prefix (``<prefix><rank>.pipe`` FIFOs) of one job."""

    def __init__(self, dump_prefix: str, pipe_prefix: str) -> None:
        self.dump_prefix = dump_prefix
        self.pipe_prefix = pipe_prefix

    @classmethod
    def configure(cls, env: dict[str, str], folder: str, key: str) -> NcclTrace:
        """Turn the recorder on in the ranks' environment ``env`` (what the user set wins), with dumps and
        pipes in ``folder``/nccl_trace_<key>/ by default; create the folders the ranks will write to."""
        default = os.path.join(folder, f"nccl_trace_{key}", STEM)
        env.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
        env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        trace = cls(env.setdefault(DUMP_ENV, default), env.setdefault(PIPE_ENV, default))
        for prefix in (trace.dump_prefix, trace.pipe_prefix):
            os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
        return trace

    def pipes(self) -> list[str]:
        """The ranks' debug pipes that exist now."""
        folder, stem = os.path.split(self.pipe_prefix)
        try:
            names = os.listdir(folder or ".")
        except OSError:
            return []
        return sorted(os.path.join(folder, name) for name in names if name.startswith(stem) and name.endswith(".pipe"))

    def request_dumps(self) -> int:
        """Ask every rank that listens to dump now (best effort, never blocks); return how many were asked."""
        asked = 0
        for path in self.pipes():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when no rank reads it: skipped
            except OSError:
                continue
            try:
                os.write(fd, b"1\n")
                asked += 1
            except OSError:
                pass
            finally:
                os.close(fd)
        return asked
