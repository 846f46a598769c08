"""/dev/shm before a CUDA launch: what NCCL needs there (:func:`shm_warning`) and how many ranks the estimate counts
on this node (:func:`ranks_on_node`).

``--num_gpus N`` is N. Without it (the default, ``gpu``: one rank per visible GPU), the node runs what its
scheduler asked for: a Kubernetes PyTorchJob's ``PET_NPROC_PER_NODE`` (torchrun reads it when the launcher passes
no ``--nproc_per_node``), else the visible GPUs, or SLURM's GPUs or tasks per node where those say more. It is an
estimate for a warning, so it takes the larger count. No torch import.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping

#: SLURM's per-node counts, in the order read (tasks per node use SLURM's ``2(x3),1`` notation)
SLURM_PER_NODE = ("SLURM_GPUS_ON_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


def _largest_count(value: str) -> int:
    """The largest count in SLURM's per-node notation (``4``, ``2(x3),1``, ``gpu:4``); 0 if none."""
    return max((int(n) for n in re.findall(r"(?:^|[,:])\s*(\d+)", value)), default=0)


def slurm_per_node(environ: Mapping[str, str]) -> int:
    """The most ranks SLURM's environment says one node runs (0: not under SLURM)."""
    return max((_largest_count(environ.get(name, "")) for name in SLURM_PER_NODE), default=0)


def ranks_on_node(nproc: str | None, environ: Mapping[str, str], visible: Callable[[], int]) -> int:
    """The ranks NCCL will start on this node: ``nproc`` is the resolved --num_gpus, else the PyTorchJob's
    PET_NPROC_PER_NODE as the launch configuration read it (None: neither, one rank per visible GPU), ``visible()``
    counts the visible GPUs (``gpu`` and ``auto`` mean one rank each)."""
    value = nproc if nproc is not None else "gpu"
    if value.isdigit():
        return int(value)
    if value == "cpu":
        return 0  # CPU ranks talk over gloo, which keeps nothing in /dev/shm
    return max(visible(), slurm_per_node(environ))


SHM_PATH = "/dev/shm"

# What NCCL needs in /dev/shm per rank on a node. NCCL's shared-memory transport creates one segment per
# receiving connection and channel; the failures reported publicly name its size: 9637888 bytes
# ("Error while creating shared memory segment ... (size 9637888)", NCCL issues 290 and 342, NCCL 1518,
# xgboost 5963). NCCL opens at least 2 channels, so each local rank needs at least 2 such segments
# (about 18.4 MiB). That lower bound matches what users saw with Docker's default 64 MiB: 2 ranks start
# (37 MiB), 4 ranks fail (74 MiB; NCCL issues 342 and 1518), and 8 ranks fail in 16 MiB (torchtitan 853).
# More channels need more, so the fix we name is NCCL's own recommendation, --shm-size=1g (NCCL docs,
# Troubleshooting > Shared memory > Docker), or more when the estimate exceeds it.
NCCL_SHM_SEGMENT_BYTES = 9637888
NCCL_MIN_CHANNELS = 2
NCCL_SHM_PER_RANK_BYTES = NCCL_SHM_SEGMENT_BYTES * NCCL_MIN_CHANNELS
MIB = 1 << 20
GIB = 1 << 30


def nccl_shm_bytes(ranks_on_node: int) -> int:
    """The least /dev/shm that NCCL needs for ``ranks_on_node`` ranks (see NCCL_SHM_PER_RANK_BYTES)."""
    return ranks_on_node * NCCL_SHM_PER_RANK_BYTES


_SHM_FIX = (
    "docker run --shm-size={size} (or --ipc=host), or on Kubernetes mount an emptyDir with "
    "medium: Memory at /dev/shm; NCCL_SHM_DISABLE=1 is a slower workaround, not the fix"
)


def shm_warning(ranks_on_node: int, *, path: str = SHM_PATH, free_bytes: int | None = None) -> str | None:
    """One ``[WARN]`` line when the shared-memory folder is missing or smaller than NCCL needs, else None.

    Call it before a CUDA launch with the number of ranks on this node (not for CPU ranks: gloo does not
    use /dev/shm). ``path`` is the folder to check and ``free_bytes`` its free space (read from the file
    system when None).
    """
    if ranks_on_node < 1:
        raise ValueError(f"ranks_on_node must be at least 1, got {ranks_on_node}")
    need = nccl_shm_bytes(ranks_on_node)
    size = f"{max(1, math.ceil(need / GIB))}g"
    if not os.path.isdir(path):
        return (
            f"[WARN] launcher: {path} does not exist; NCCL keeps its shared-memory segments there and fails "
            f"to start without it: {_SHM_FIX.format(size=size)}"
        )
    free = free_bytes
    if free is None:
        try:
            stat = os.statvfs(path)
        except OSError:
            return None  # cannot tell; NCCL reports its own error if it must
        free = stat.f_bavail * stat.f_frsize
    if free >= need:
        return None
    return (
        f"[WARN] launcher: {path} has {free // MIB} MiB free, less than the {math.ceil(need / MIB)} MiB NCCL "
        f"needs for {ranks_on_node} rank(s) on this node; enlarge it: {_SHM_FIX.format(size=size)}"
    )
