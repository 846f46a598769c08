"""How many ranks the /dev/shm estimate counts on this node (:func:`mgpu_lab.launch.cluster.shm_warning`).

``--num_gpus N`` is N. Without it (the default, ``gpu``: one rank per visible GPU), the node runs what its
scheduler asked for: a Kubernetes PyTorchJob's ``PET_NPROC_PER_NODE`` (torchrun reads it when the launcher passes
no ``--nproc_per_node``), else the visible GPUs, or SLURM's GPUs or tasks per node where those say more. It is an
estimate for a warning, so it takes the larger count. No torch import.
"""

from __future__ import annotations

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
