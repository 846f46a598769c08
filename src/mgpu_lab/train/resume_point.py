"""Where a rank resumes: a restart's own run folder, ``--continue_run``, ``--checkpoint latest`` or a path; under
torchrun, the attempt every rank of the job agrees on, with rank 0 choosing the resume point for all of them.

Called by :mod:`mgpu_lab.train.trainer` while it prepares a rank; no torch import at load time.
"""

from __future__ import annotations

import os
from pathlib import Path

from mgpu_lab.core.errors import UsageError
from mgpu_lab.runs import attempt, continue_run, resume
from mgpu_lab.runs.preflight import no_latest
from mgpu_lab.train.dist import job_store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace

    from mgpu_lab.runs.attempt import Attempt, Store
    from mgpu_lab.train.adapters import Adapter
    from mgpu_lab.train.config import TrainConfig
    from mgpu_lab.train.dist import DistContext


def resume_point(
    args: Namespace, adapter: Adapter, cfg: TrainConfig, restart: int, key: str | None, known: str | None = None
) -> tuple[Path | None, str | None]:
    """(run folder to reuse or None, checkpoint to load or None): a restart's own run, ``latest``, or --checkpoint.
    ``known``: the job's run folder as rank 0 of an earlier attempt published it (else found by the job key)."""

    def listing(run_dir: Path):
        return adapter.checkpoints(run_dir, cfg)

    if restart and key:
        run_dir = Path(known) if known else resume.find_job_run(args.log_root, args.rl_library, args.task, key)
        if run_dir is not None:
            found = resume.newest_checkpoint(run_dir, listing)
            return run_dir, (str(found[1]) if found else None)
        if getattr(args, "continue_run", None) is None:
            return None, None  # rank 0 never recorded this job's folder: start over in a new one
    if getattr(args, "continue_run", None) is not None:  # continue a run in its own folder
        return continue_run.resume_point(
            args.continue_run, args.log_root, args.rl_library, args.task, args.ml_framework, key, listing
        )
    if args.checkpoint == resume.LATEST:
        found = resume.latest_checkpoint(args.log_root, args.rl_library, args.task, listing)
        if found is None:
            raise no_latest(args.log_root, args.rl_library, args.task, args.ml_framework)
        return None, str(found[1])
    return None, (str(Path(args.checkpoint).resolve()) if args.checkpoint else None)


class Shared:
    """Under torchrun: the job's store and the attempt every rank of this start agreed on (mgpu_lab.runs.attempt)."""

    def __init__(self, store: Store, attempt: Attempt, wait_s: float) -> None:
        self.store = store
        self.attempt = attempt
        self.wait_s = wait_s


def agree(ctx: DistContext, key: str | None) -> Shared | None:
    """Under torchrun, the attempt number, job key and run folder every rank of the job agrees on (None outside
    torchrun, or for one rank); raises PeersGone when the other ranks never come."""
    if not ctx.distributed or ctx.world_size < 2:
        return None
    wait_s = attempt.wait_s()
    try:
        store = job_store(wait_s)
    except (RuntimeError, TimeoutError, OSError) as exc:  # torch's DistNetworkError and DistStoreError included
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        raise attempt.PeersGone(
            f"the job's store at {where} (kept by the torchrun of rank 0's node) did not answer within {wait_s:g} s "
            f"(--rdzv_timeout): that node gave up or is gone ({type(exc).__name__})"
        ) from None
    if store is None:
        return None
    return Shared(store, attempt.agree(store, ctx.rank, ctx.world_size, key, timeout_s=wait_s), wait_s)


def shared_resume_point(
    args: Namespace, adapter: Adapter, cfg: TrainConfig, shared: Shared, rank: int
) -> tuple[Path | None, str | None]:
    """Rank 0 finds the resume point and publishes it; every other rank takes exactly that one."""
    agreed = shared.attempt
    if rank == 0:
        reuse, checkpoint = resume_point(args, adapter, cfg, agreed.number, agreed.key, agreed.run_dir)
        attempt.publish_resume(shared.store, agreed, str(reuse) if reuse else None, checkpoint)
        return reuse, checkpoint
    run_dir, checkpoint = attempt.resume_of(shared.store, agreed, timeout_s=shared.wait_s)
    if checkpoint is not None and not Path(checkpoint).is_file():
        raise UsageError(
            f"restart {agreed.number}: rank 0 resumes from {checkpoint}, which this node cannot read: put "
            "--log_root on a filesystem every node mounts at the same path"
        )
    return (Path(run_dir) if run_dir else None), checkpoint
