"""Rank and device bookkeeping for one training process (torchrun or skrl's JAX launcher).

The RL libraries initialise the process group themselves, so nothing here calls
``init_process_group``: this module only reads the launcher's environment, picks the device and the
backend (NCCL on ``cuda:LOCAL_RANK``, gloo on CPU), and offers small helpers every adapter needs.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from mgpu_lab.runs.checkpoint import load_torch_dict
from mgpu_lab.train.config import UsageError

_TORCHRUN_VARS = ("LOCAL_RANK", "RANK", "WORLD_SIZE")
_JAX_VARS = ("JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE")


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job."""

    distributed: bool = False
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: str = "cpu"
    backend: str = "gloo"  # "nccl" | "gloo"

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")


def _read_int(name: str) -> int:
    raw = os.environ[name]
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not an integer") from None


def launcher_env() -> tuple[int, int, int] | None:
    """(local_rank, rank, world_size) from torchrun's or skrl JAX's variables, or None if absent."""
    for names in (_TORCHRUN_VARS, _JAX_VARS):
        if all(n in os.environ for n in names):
            local_rank, rank, world = (_read_int(n) for n in names)
            return local_rank, rank, world
    return None


def cuda_available() -> bool:
    import torch  # torch: only on a rank that trains or plays, never for the input checks

    return torch.cuda.is_available()


def check_device(device: str) -> str:
    """Normalise ``cpu`` / ``cuda`` / ``cuda:N``; raise UsageError when CUDA is asked for but absent."""
    dev = device.strip().lower()
    if dev == "cpu":
        return "cpu"
    if dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit()):
        if not cuda_available():
            raise UsageError(f"--device {device}: CUDA is not available here; use --device cpu")
        if dev != "cuda":
            import torch  # torch: as above

            index = int(dev[5:])
            if index >= torch.cuda.device_count():
                raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible")
        return dev
    raise UsageError(f"--device {device!r}: expected cpu, cuda or cuda:N")


def context_from_env(device: str, distributed: bool) -> DistContext:
    """Build the DistContext for this process.

    Without ``distributed`` this is rank 0 of 1 on ``device``. With it, the launcher's variables
    must be set; a CUDA device becomes ``cuda:LOCAL_RANK`` with NCCL, a CPU device uses gloo.
    """
    dev = check_device(device)
    if not distributed:
        return DistContext(False, 0, 0, 1, "cuda:0" if dev == "cuda" else dev, "nccl" if dev != "cpu" else "gloo")
    env = launcher_env()
    if env is None:
        raise UsageError(
            "--distributed needs torchrun's environment (LOCAL_RANK, RANK, WORLD_SIZE); "
            "launch with `mgpu-lab train_multigpu ...` instead"
        )
    local_rank, rank, world = env
    if world < 1 or not (0 <= rank < world) or local_rank < 0:
        raise UsageError(f"inconsistent launcher environment: rank {rank}, local rank {local_rank}, world {world}")
    if dev == "cpu":
        return DistContext(True, rank, local_rank, world, "cpu", "gloo")
    import torch  # torch: as above

    if local_rank >= torch.cuda.device_count():
        raise UsageError(
            f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} visible; "
            "lower --num_gpus or use --device cpu"
        )
    return DistContext(True, rank, local_rank, world, f"cuda:{local_rank}", "nccl")


def is_rank0(ctx: DistContext) -> bool:
    return ctx.rank == 0


def rank_seed(seed: int, ctx: DistContext) -> int:
    """Seed offset by rank, so ranks explore different trajectories."""
    return seed + ctx.rank


def log_line(text: str) -> None:
    """Print one whole line with a single write, so lines from ranks sharing a pipe never interleave.

    (``print`` writes the text and the newline separately; with unbuffered output another rank's line
    can land between the two.)
    """
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def report_synchronized(ctx: DistContext) -> None:
    """Print the contract line every rank prints after the initial parameter broadcast."""
    log_line(f"[INFO] rank {ctx.rank}/{ctx.world_size}: parameters synchronized")


def param_digest(tensors: Iterable[Any]) -> str:
    """sha256 over shape, dtype and raw bytes of each tensor, in order (equal digests = equal parameters)."""
    import torch  # torch: as above

    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().to("cpu").contiguous()
        h.update(str(tuple(t.shape)).encode())
        h.update(str(t.dtype).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def atomic_write(path: str | os.PathLike, write: Any) -> Path:
    """A durable :func:`mgpu_lab.core.atomic.atomic_write` (fsync, then os.replace); returns the target as a Path."""
    from mgpu_lab.core import atomic  # tempfile, shutil: only when a rank writes (play's checks load this module)

    return Path(atomic.atomic_write(path, write, durable=True))


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` made atomic (temp file in the same folder + fsync + os.replace).

    The checkpoint is serialized in memory first and written with one plain file write, so a full
    disk is an OSError (ENOSPC) naming the file, not an error from inside torch's zip writer.
    """
    import torch  # torch: as above

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def load_torch_checkpoint(path: str, required: tuple[str, ...], kind: str, library: str) -> dict[str, Any]:
    """Read a checkpoint dict on the CPU without running code from it (``weights_only=True`` and the
    library's allow-list, see :mod:`mgpu_lab.runs.checkpoint`), or raise a one-line UsageError: refused,
    unreadable, or without ``required`` keys."""
    return load_torch_dict(path, library, required, kind)


_JOB_STORE: list[Any] = []  # the job's store, once opened (job_store)


def job_store(timeout_s: float, environ: dict[str, str] | os._Environ = os.environ) -> Any:
    """The store every worker of the job shares (torchrun's agent store at ``MASTER_ADDR:MASTER_PORT``), opened once
    by this rank as torch's env:// rendezvous opens it; None outside torchrun."""
    from mgpu_lab.runs.resume import RESTART_ENV  # the run layer (tempfile): only on a training rank

    if _JOB_STORE:
        return _JOB_STORE[0]
    if not environ.get(RESTART_ENV, "").strip() or not environ.get("MASTER_ADDR") or not environ.get("MASTER_PORT"):
        return None
    import torch.distributed as tdist  # torch: as above

    store, _, _ = next(tdist.rendezvous("env://", timeout=timedelta(seconds=timeout_s)))
    _JOB_STORE.append(store)
    return store


def store_per_attempt(environ: dict[str, str] | os._Environ = os.environ, attempt: int | None = None) -> bool:
    """Give every process group this rank creates a store namespace of its attempt; True if installed.

    torchrun keeps its store across restarts of the worker group, and a rank killed by a signal leaves
    its gloo/NCCL address keys in it: a restarted group then reads the dead rank's address and never
    connects ("Gloo connectFullMesh failed ... Connection refused"). The libraries call
    ``torch.distributed.init_process_group(backend, ...)`` with the env:// default, so this wraps that one
    function in this process: such a call gets the env:// store under the prefix ``mgpu_lab/attempt_<N>/``, N the
    attempt every rank agreed on (:mod:`mgpu_lab.runs.attempt`; torchrun's ``TORCHELASTIC_RESTART_COUNT`` when
    none was agreed, which differs between nodes). Calls with their own store or init_method pass through.
    """
    from mgpu_lab.runs.resume import RESTART_ENV, restart_count  # as in job_store

    if not environ.get(RESTART_ENV, "").strip():
        return False
    number = restart_count(environ) if attempt is None else attempt
    import torch.distributed as tdist  # torch: as above

    original = tdist.init_process_group
    if getattr(original, "__mgpu_lab_attempt__", None) is not None:
        return True

    def init_process_group(
        backend: Any = None,
        init_method: str | None = None,
        timeout: Any = None,
        world_size: int = -1,
        rank: int = -1,
        store: Any = None,
        **kwargs: Any,
    ) -> Any:
        if store is None and init_method in (None, "env://"):
            if _JOB_STORE:
                store = _JOB_STORE[0]
                rank, world_size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
            else:
                extra = {"timeout": timeout} if timeout is not None else {}
                store, rank, world_size = next(tdist.rendezvous("env://", rank=rank, world_size=world_size, **extra))
            store = tdist.PrefixStore(f"mgpu_lab/attempt_{number}/", store)
        return original(backend=backend, timeout=timeout, world_size=world_size, rank=rank, store=store, **kwargs)

    init_process_group.__mgpu_lab_attempt__ = number  # type: ignore[attr-defined]
    init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
    tdist.init_process_group = init_process_group  # type: ignore[assignment]
    return True


def sum_over_ranks(value: int, ctx: DistContext) -> int:
    """``value`` summed over every rank of the job (an all_reduce on the default process group)."""
    if not ctx.distributed or ctx.world_size == 1:
        return value
    import torch  # torch: as above
    import torch.distributed as tdist

    if not tdist.is_initialized():
        raise RuntimeError("no process group to sum over (the library tore it down early)")
    total = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    tdist.all_reduce(total, op=tdist.ReduceOp.SUM)
    return int(total.item())


def moments(values: Any) -> Any:
    """What one rank adds to :func:`normalized_over_ranks`' all_reduce: count, sum and sum of squares (float64)."""
    import torch  # torch: as above

    flat = values.detach().reshape(-1).to(torch.float64)
    return torch.stack([flat.new_tensor(float(flat.numel())), flat.sum(), flat.square().sum()])


def normalized_over_ranks(values: Any, eps: float = 1e-8) -> Any:
    """``(values - mean) / (std + eps)`` with the mean and unbiased std of every rank's ``values`` together.

    One all_reduce of three float64 numbers (:func:`moments`). On one rank this is
    ``(v - v.mean()) / (v.std() + eps)``, the normalization the libraries apply to each rank's batch alone.
    """
    import torch.distributed as tdist  # torch: as above

    stats = moments(values)
    tdist.all_reduce(stats, op=tdist.ReduceOp.SUM)
    count, total, squares = stats.unbind()
    mean = total / count
    std = ((squares - count * mean * mean) / (count - 1)).clamp_min(0.0).sqrt()
    return (values - mean.to(values.dtype)) / (std.to(values.dtype) + eps)


def device_warning(ctx: DistContext, current: int) -> str | None:
    """The ``[WARN]`` line for a distributed CUDA rank whose current device is not ``cuda:LOCAL_RANK``."""
    if not (ctx.distributed and ctx.is_cuda) or current == ctx.local_rank:
        return None
    return (
        f"[WARN] rank {ctx.rank}/{ctx.world_size}: running on cuda:{current}, not cuda:{ctx.local_rank} "
        f"(LOCAL_RANK {ctx.local_rank}); two ranks on one GPU hang NCCL at parameter sync: "
        "check CUDA_VISIBLE_DEVICES and how the ranks were launched"
    )


def destroy_process_group() -> None:
    """Tear down the default process group if one is up (quietly)."""
    try:
        import torch.distributed as tdist  # torch: as above

        if tdist.is_available() and tdist.is_initialized():
            tdist.destroy_process_group()
    except Exception:  # noqa: BLE001 - leaving anyway: a group that cannot be torn down changes nothing
        pass
