"""Does ``--num_envs`` fit in memory? A lower-bound estimate checked before training starts.

Every library keeps a rollout of at least 16 steps per environment (observations, actions, rewards,
values, log-probabilities, advantages, returns: well over 16 float32 numbers per step), so one
environment needs at least :data:`MIN_BYTES_PER_ENV` bytes on the training device. A count whose
lower bound already exceeds the free memory is refused in one line with the count that could fit;
counts under it can still run out of memory, which ``train.py`` reports in one line as well.
"""

from __future__ import annotations

import os

from mgpu_lab.train.config import UsageError

#: Lower bound of the memory one environment needs: 16 rollout steps x 16 float32 values.
MIN_BYTES_PER_ENV = 16 * 16 * 4


def host_available() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free physical pages, in bytes; None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def available_bytes(device: str) -> tuple[int | None, str]:
    """(free bytes this rank can count on, where): the GPU's free memory, or host memory shared by the local ranks."""
    if device.startswith("cuda"):
        import torch  # torch: only for a CUDA device's memory

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free), device
    host = host_available()
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    if host is None:
        return None, "host memory"
    where = f"host memory shared by {ranks} local rank(s)" if ranks > 1 else "host memory"
    return host // ranks, where


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_num_envs(num_envs: int, device: str) -> None:
    """UsageError when even the lower bound for ``num_envs`` environments exceeds the free memory."""
    free, where = available_bytes(device)
    need = num_envs * MIN_BYTES_PER_ENV
    if free is None or need <= free:
        return
    fits = max(free // MIN_BYTES_PER_ENV, 0)
    raise UsageError(
        f"--num_envs {num_envs} needs at least {_gib(need)} on {device} ({MIN_BYTES_PER_ENV} bytes "
        f"per env) but {where} has {_gib(free)} free: use at most {fits} envs per rank"
    )


def out_of_memory_message(num_envs: int, device: str) -> str:
    """The one line for an out-of-memory error during training."""
    return (
        f"out of memory on {device} with --num_envs {num_envs} per rank: use fewer environments "
        f"(for example --num_envs {max(num_envs // 2, 1)})"
    )
