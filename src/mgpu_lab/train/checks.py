"""Checks of ``train.py``'s input that need no torch and no RL library (stdlib only).

The trainer runs them before it imports anything heavy, and the launcher runs the very same checks on the
arguments it forwards, with the job's world size, so a bad value is refused once, before any rank starts.
Each check raises :class:`mgpu_lab.core.errors.UsageError` with one line.
"""

from __future__ import annotations

import os
import sys

from mgpu_lab.core.errors import UsageError
from mgpu_lab.core.names import LATEST
from mgpu_lab.core.source_loader import load_source
from mgpu_lab.runs import run_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    import types
    from argparse import Namespace

    from mgpu_lab.health.rank_progress import Fault

#: Largest seed: NumPy's legacy seeding (np.random.seed, used by rsl_rl, rl_games and skrl) takes 0..2**32-1.
SEED_MAX = 2**32 - 1


def check_seed(seed: int, ranks: int) -> None:
    """Every rank seeds with ``seed + rank``: all of them must stay in NumPy's range."""
    if not 0 <= seed <= SEED_MAX - (ranks - 1):
        room = f" (rank R seeds with seed + R, and {ranks} ranks must stay under {SEED_MAX + 1})" if ranks > 1 else ""
        raise UsageError(
            f"--seed must be between 0 and {SEED_MAX - (ranks - 1)}{room}: NumPy's seed range, used by "
            f"every library; got {seed}"
        )


def check_checkpoint_path(checkpoint: str | None) -> None:
    """--checkpoint names an existing regular file (or is ``latest``)."""
    if checkpoint is None or checkpoint == LATEST:
        return
    if not os.path.exists(checkpoint):
        raise UsageError(f"--checkpoint {checkpoint}: no such file")
    if not os.path.isfile(checkpoint):
        raise UsageError(f"--checkpoint {checkpoint}: not a file")
    if os.path.getsize(checkpoint) == 0:
        raise UsageError(f"--checkpoint {checkpoint}: an empty file, not a checkpoint")


def task_catalog() -> types.ModuleType:
    """``mgpu_lab.train.tasks.catalog``: the package's own when it is imported already, else the file on its own
    (``mgpu_lab.train.tasks``'s ``__init__`` registers the tasks with gymnasium: numpy, about a second)."""
    if "mgpu_lab.train.tasks" in sys.modules:
        import mgpu_lab.train.tasks.catalog  # loaded already with its package (gymnasium): the file alone otherwise

        return mgpu_lab.train.tasks.catalog
    return load_source("_mgpu_lab_task_catalog", os.path.join(os.path.dirname(__file__), "tasks", "catalog.py"))


def check_args(args: Namespace, ranks: int) -> None:
    """Every torch-free check of the trainer's parsed arguments; ``ranks`` is the job's world size (1 alone)."""
    catalog = task_catalog()
    if args.task not in catalog.TASKS:
        raise UsageError(f"--task {args.task}: {catalog.unknown_task_message(args.task)}")
    for flag in ("num_envs", "max_iterations", "save_interval"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag} must be >= 1, got {value}")
    if args.ml_framework == "jax" and args.rl_library != "skrl":
        raise UsageError(f"--ml_framework jax is for skrl only, not {args.rl_library}")
    if args.advantage_norm is not None and args.rl_library != "rsl_rl":
        raise UsageError(
            f"--advantage_norm is for rsl_rl only: {args.rl_library} always normalizes each rank's batch alone"
        )
    rehearsed_faults(args)
    check_seed(args.seed, ranks)
    run_dir.check_run_name(args.run_name)
    run_dir.check_log_root(args.log_root, args.rl_library, args.task)
    check_checkpoint_path(args.checkpoint)
    check_continue_run(args)


def check_continue_run(args: Namespace, folder: bool = True) -> None:
    """--continue_run: not with --checkpoint; then (``folder``) the folder, who wrote it, and no other live job on
    it."""
    value = getattr(args, "continue_run", None)
    if value is None:
        return
    if args.checkpoint is not None:
        raise UsageError(
            f"--continue_run {value} with --checkpoint {args.checkpoint}: give one of them "
            "(--continue_run resumes from the folder's newest checkpoint)"
        )
    if not folder:
        return
    from mgpu_lab.runs import continue_run  # the run layer's records (dataclasses): only to check a folder
    from mgpu_lab.runs.resume import job_key

    continue_run.check(value, args.log_root, args.rl_library, args.task, args.ml_framework, job_key())


def world_size_hint(distributed: bool, environ: dict[str, str] | os._Environ[str] = os.environ) -> int:
    """The launcher's world size for the seed check (1 when not distributed or not readable yet)."""
    if not distributed:
        return 1
    raw = environ.get("WORLD_SIZE") or environ.get("JAX_WORLD_SIZE") or "1"
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def check_checkpoint(path: str, library: str, ml_framework: str, task: str | None) -> None:
    """A checkpoint's library and format (:func:`mgpu_lab.runs.checkpoint.check_library`, torch but no RL library)
    and, for a built-in ``task``, that its policy takes the task's observations."""
    from mgpu_lab.runs.checkpoint import check_library  # torch: only when a checkpoint is given

    task_obs = None
    if task is not None:
        from mgpu_lab.train.tasks import ENTRY_POINTS, env_class  # the tasks (gymnasium): only for a checkpoint

        task_obs = env_class(task).num_obs if task in ENTRY_POINTS else None
    check_library(path, library, ml_framework, task, task_obs)


def check_resume(targs: Namespace, *, dry_run: bool = False) -> str | None:
    """The launcher, before any rank: refuse ``--checkpoint latest`` without a checkpoint, and a checkpoint with
    nothing left to train. Returns the checkpoint that will be loaded (None: none, or not looked up).

    A dry run does not look for ``latest`` (the job finds it when it runs, as it does ``--continue_run``'s
    folder); a given path's iteration is read either way. Imports torch and the RL library's adapter, which
    knows its checkpoint files; only when a checkpoint is given.
    """
    if targs.checkpoint is None or targs.continue_run is not None or (dry_run and targs.checkpoint == LATEST):
        return None
    from mgpu_lab.runs import resume  # torch and the adapter: only when a checkpoint is given
    from mgpu_lab.runs.preflight import no_latest, nothing_left
    from mgpu_lab.train import adapters
    from mgpu_lab.train.config import TrainConfig
    from mgpu_lab.train.tasks.catalog import TASK_DEFAULTS

    defaults = TASK_DEFAULTS.get(targs.task, {})
    cfg = TrainConfig(
        rl_library=targs.rl_library,
        task=targs.task,
        ml_framework=targs.ml_framework,
        max_iterations=targs.max_iterations or defaults.get("max_iterations", 100),
    )
    adapter = adapters.load(targs.rl_library)
    if targs.checkpoint == LATEST:
        found = resume.latest_checkpoint(
            targs.log_root, targs.rl_library, targs.task, lambda run_dir: adapter.checkpoints(run_dir, cfg)
        )
        if found is None:
            raise no_latest(targs.log_root, targs.rl_library, targs.task, targs.ml_framework)
        path = str(found[1])
        check_checkpoint(path, targs.rl_library, targs.ml_framework, targs.task)
    else:
        path = os.path.realpath(targs.checkpoint)  # (no pathlib: the launcher's --dry_run imports this module)
    start = adapter.checkpoint_iteration(path, cfg)
    if start >= cfg.max_iterations:
        raise nothing_left(f"--checkpoint {path}:", start, cfg.max_iterations)
    return path


def rehearsed_faults(args: Namespace) -> tuple[Fault, ...]:
    """The faults ``--rehearse_fault`` asks for (UsageError for a malformed one; none when not given). The
    fault grammar is imported only when one is given: the launcher's --dry_run runs this check."""
    if not getattr(args, "rehearse_fault", None):
        return ()
    from mgpu_lab.health.rank_progress import parse_faults  # the supervision's fault grammar: only when given

    try:
        return parse_faults(getattr(args, "rehearse_fault", None))
    except ValueError as exc:
        raise UsageError(f"--rehearse_fault: {exc}") from None
