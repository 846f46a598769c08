"""The trainer's runtime: one rank (or the only process) of a training run, after ``train.py`` parsed its input.

``scripts/reinforcement_learning/train.py`` owns the argparse definition and calls :func:`main`. Here:

- the torch-free checks (:mod:`mgpu_lab.train.checks`) and a checkpoint's library and format
  (:func:`mgpu_lab.runs.checkpoint.check_library`), before any RL library is imported;
- device choice, the resume point, the run folder, the adapter's ``train``, and the log lines of the
  contract (``[INFO] training time: ...``, ``[INFO] throughput: ...``);
- how a failure ends: bad input is one line and exit 2 (recorded for the launcher as a refusal, so it can
  say "all N ranks refused: ..."), a lost peer is one line and exit 1, running out of memory is one line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from mgpu_lab.core.errors import EXIT_USAGE, UsageError
from mgpu_lab.health import rank_progress
from mgpu_lab.health.failures import lost_peer, peer_detail
from mgpu_lab.health.rank_progress import interrupted
from mgpu_lab.runs import continue_run, resume, run_dir
from mgpu_lab.runs.attempt import PeersGone, publish_run_dir
from mgpu_lab.runs.preflight import nothing_left
from mgpu_lab.runs.resume import restart_count
from mgpu_lab.runs.run_dir import discard
from mgpu_lab.train import adapters, resume_point, returns
from mgpu_lab.train.checks import check_args, check_checkpoint, rehearsed_faults, world_size_hint
from mgpu_lab.train.config import TrainConfig
from mgpu_lab.train.dist import (
    context_from_env,
    cuda_available,
    destroy_process_group,
    device_warning,
    is_rank0,
    launcher_env,
    log_line,
    param_digest,
    store_per_attempt,
    sum_over_ranks,
)
from mgpu_lab.train.resources import check_num_envs, out_of_memory_message
from mgpu_lab.train.write_guard import WriteGuard

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace
    from collections.abc import Callable
    from typing import NoReturn

    from mgpu_lab.health.rank_progress import Fault, RankProgress
    from mgpu_lab.train.adapters import Adapter
    from mgpu_lab.train.config import TrainResult
    from mgpu_lab.train.dist import DistContext


def refuse(message: str) -> int:
    """Bad input: one line on stderr; the exit status the caller returns."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def _run_dir(log_root: str, library: str, task: str, run_name: str | None, create: bool = True) -> Path:
    """Rank 0 (``create``): make a new run folder atomically (never one another run has); others: its planned name."""
    if not create:
        return run_dir.planned(log_root, library, task, run_name)
    try:
        return run_dir.create(log_root, library, task, run_name)
    except OSError as exc:
        raise UsageError(
            f"--log_root {log_root}: cannot create the run folder ({exc.strerror or exc}: {exc.filename or log_root})"
        ) from None


class _Start:
    """Where this rank starts: its context, the library's adapter, the training config, and the resume point."""

    def __init__(
        self, ctx: DistContext, adapter: Adapter, cfg: TrainConfig, restart: int, key: str | None, reuse: Path | None
    ) -> None:
        self.ctx = ctx
        self.adapter = adapter
        self.cfg = cfg
        self.restart = restart  # torchrun's restart count (0: the first attempt)
        self.key = key  # the job's key across restarts (MGPU_LAB_JOB_KEY), if launched by the launcher
        self.reuse = reuse  # the run folder to write into again (a restart's or --continue_run's), else None
        self.shared: resume_point.Shared | None = None  # what every rank of this attempt agreed on, under torchrun


def _choose_device(args: Namespace) -> str:
    """--device as given, else CUDA when usable; a distributed rank without CUDA refuses (no silent CPU)."""
    if args.device is not None:
        return args.device
    if args.distributed and not cuda_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise UsageError(
            f"--distributed: no CUDA device is usable here{shown}; ranks train on the CPU only with --device cpu"
        )
    return "cuda:0" if cuda_available() else "cpu"


def _prepare(args: Namespace, progress: RankProgress) -> _Start:
    """Everything before the run folder: checkpoint format, device, context, adapter, config, resume point."""
    from mgpu_lab.train.tasks.catalog import TASK_DEFAULTS  # the tasks' package (gymnasium): once the checks pass

    defaults = TASK_DEFAULTS.get(args.task, {})
    if args.checkpoint is not None and args.checkpoint != resume.LATEST:
        # the file's library and format first: a refused checkpoint pays no RL library import
        check_checkpoint(args.checkpoint, args.rl_library, args.ml_framework, args.task)
    args.device = _choose_device(args)
    ctx = context_from_env(args.device, args.distributed)
    try:
        restart = resume.restart_count()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    key = resume.job_key()
    shared = resume_point.agree(ctx, key)
    if shared is not None:  # torchrun's count differs between nodes: the agreed one is the job's
        restart, key = shared.attempt.number, shared.attempt.key
        if restart:
            progress.faults = None  # rehearsed faults act on the job's first attempt only, on every node
    num_envs = args.num_envs or defaults.get("num_envs", 256)
    check_num_envs(num_envs, ctx.device)  # before the library import
    adapter = adapters.load(args.rl_library)
    cfg = TrainConfig(
        rl_library=args.rl_library,
        task=args.task,
        num_envs=num_envs,
        max_iterations=args.max_iterations or defaults.get("max_iterations", 100),
        seed=args.seed,
        device=ctx.device,
        distributed=ctx.distributed,
        ml_framework=args.ml_framework,
        advantage_norm=args.advantage_norm or "all_ranks",
        run_name=args.run_name,
        save_interval=args.save_interval,
        log_root=args.log_root,
        restart=restart,
        on_iteration=progress.on_iteration,
    )
    if shared is not None:
        reuse, cfg.checkpoint = resume_point.shared_resume_point(args, adapter, cfg, shared, ctx.rank)
    else:
        reuse, cfg.checkpoint = resume_point.resume_point(args, adapter, cfg, restart, key)
    if cfg.checkpoint is not None:
        if cfg.checkpoint != args.checkpoint:  # found here (latest, or a restart's own run): check it too
            check_checkpoint(cfg.checkpoint, args.rl_library, args.ml_framework, args.task)
        cfg.start_iteration = adapter.checkpoint_iteration(cfg.checkpoint, cfg)
    start = _Start(ctx, adapter, cfg, restart, key, reuse)
    start.shared = shared
    return start


def _nothing_left(args: Namespace, start: _Start, progress: RankProgress) -> int:
    """The resume point is already at --max_iterations: done after a restart, refused when asked for."""
    cfg = start.cfg
    if start.restart:  # the previous attempt saved the last iteration and died before leaving: nothing is left
        if is_rank0(start.ctx):
            log_line(
                f"[INFO] restart {start.restart}: {cfg.checkpoint} is at iteration {cfg.start_iteration}, "
                f"the run's last; nothing left to train"
            )
        progress.done()
        return 0
    given = (
        f"--checkpoint {cfg.checkpoint}:"
        if getattr(args, "continue_run", None) is None
        else f"--continue_run {args.continue_run}: {cfg.checkpoint} is"
    )
    raise nothing_left(given, cfg.start_iteration, cfg.max_iterations)


def _unless_failed(action: Callable[[], object]) -> Callable[..., bool]:
    """An ExitStack exit callback that runs ``action`` when the block ends normally or by a refusal (UsageError),
    never after a failure (a failing rank leaves at once; its process group may be mid-operation)."""

    def on_exit(exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc_type is None or issubclass(exc_type, UsageError):
            action()
        return False

    return on_exit


def _on_refusal(action: Callable[[], object]) -> Callable[..., bool]:
    """An ExitStack exit callback that runs ``action`` only when the block ends by a refusal (UsageError)."""

    def on_exit(exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc_type is not None and issubclass(exc_type, UsageError):
            action()
        return False

    return on_exit


def _open_run(args: Namespace, start: _Start, progress: RankProgress, cleanup: contextlib.ExitStack) -> None:
    """Pick (rank 0: create) the run folder, record the job, take the folder's lock; ``cleanup`` releases the
    lock, and removes a folder this process made if the run is refused."""
    ctx, cfg, reuse = start.ctx, start.cfg, start.reuse
    log_line(
        f"[INFO] rank {ctx.rank}/{ctx.world_size}: device {ctx.device}, backend "
        f"{ctx.backend if ctx.distributed else 'none'}, node {progress.node}"
    )
    created = reuse is None and is_rank0(ctx)  # a folder this process makes (and removes if the run is refused)
    cfg.log_dir = (
        str(reuse)
        if reuse is not None
        else str(_run_dir(args.log_root, args.rl_library, args.task, args.run_name, create=is_rank0(ctx)))
    )
    if not is_rank0(ctx):
        return
    if created:
        cleanup.push(_on_refusal(lambda: discard(cfg.log_dir)))
    log_line(
        f"[INFO] {args.rl_library} on {args.task}: {cfg.num_envs} envs/rank x {ctx.world_size} rank(s), "
        f"device {ctx.device}, backend {ctx.backend if ctx.distributed else 'none'}"
    )
    log_line(f"[INFO] logging to {cfg.log_dir}")
    continuing = getattr(args, "continue_run", None) is not None and reuse is not None
    if start.key is not None and (reuse is None or continuing):
        resume.record_job_key(cfg.log_dir, start.key)
    progress.run_dir(cfg.log_dir)
    if start.shared is not None:  # the ranks of every later attempt reuse this folder
        publish_run_dir(start.shared.store, cfg.log_dir)
    # run.json and the folder's lock (see mgpu_lab.runs.continue_run)
    run_lock = continue_run.start_writing(
        cfg.log_dir,
        created=created,
        library=args.rl_library,
        task=args.task,
        ml_framework=args.ml_framework,
        job_key=start.key,
        value=getattr(args, "continue_run", None),
    )
    cleanup.push(_unless_failed(run_lock.release))
    if continuing and not start.restart and cfg.checkpoint is not None:
        log_line(continue_run.continuing_line(cfg.log_dir, cfg.start_iteration, cfg.checkpoint))


def _fit(start: _Start, progress: RankProgress) -> tuple[TrainResult, float]:
    """The adapter's training, with the rank's failures turned into one line each; (result, seconds)."""
    ctx, cfg = start.ctx, start.cfg
    cfg.returns = returns.for_rank(ctx.rank, ctx.world_size, ctx.device, cfg.ml_framework, log_line)
    cfg.on_iteration = cfg.returns.chain(cfg.on_iteration)
    if ctx.distributed:
        # a restarted group must not read the dead attempt's addresses
        store_per_attempt(attempt=start.shared.attempt.number if start.shared is not None else None)
    progress.start()  # heartbeats from here on: every library sets its process group up inside train()
    began = time.perf_counter()
    guard = WriteGuard(cfg.log_dir, ctx.rank, progress.failed).install()  # a dead writer thread: one line, exit 1
    try:
        result = start.adapter.train(cfg, ctx)
    except OSError as exc:  # disk full, read-only file system, ...: one line, exit 1
        guard.fatal(exc)
    except MemoryError:
        _out_of_memory(ctx.rank, out_of_memory_message(cfg.num_envs, ctx.device))
    except RuntimeError as exc:
        text = str(exc).lower()
        if ctx.distributed and lost_peer(text):  # another rank died first (it says why)
            progress.failed(exc)
            detail = peer_detail(str(exc) or type(exc).__name__)
            sys.stderr.write(
                f"error: rank {ctx.rank}: another rank left the job ({detail}); "
                "the first failure is reported by that rank and the launcher\n"
            )
            sys.stderr.flush()
            raise SystemExit(1) from None
        if "out of memory" not in text and "can't allocate memory" not in text:  # CUDA and CPU allocator failures
            raise
        _out_of_memory(ctx.rank, out_of_memory_message(cfg.num_envs, ctx.device))
    guard.uninstall()
    cfg.returns.finish()  # the last iteration (every rank, while the process group is up)
    return result, (result.seconds or time.perf_counter() - began)


def _out_of_memory(rank: int, message: str) -> NoReturn:
    sys.stderr.write(f"error: rank {rank}: {message}\n")
    sys.stderr.flush()
    os._exit(1)  # the libraries' writers and process group may be mid-operation: leave at once


def _report(result: TrainResult, seconds: float, ctx: DistContext) -> None:
    """The contract's log lines: every rank's steps and digest; rank 0's time, throughput and checkpoint."""
    log_line(f"[INFO] rank {ctx.rank}/{ctx.world_size}: stepped {result.env_steps} env-steps")
    total_steps = (
        result.world_env_steps if result.world_env_steps is not None else sum_over_ranks(result.env_steps, ctx)
    )
    if is_rank0(ctx):
        rate = total_steps / seconds if seconds > 0 else float("inf")
        log_line(f"[INFO] training time: {seconds:.2f} s")
        log_line(f"[INFO] throughput: {rate:.0f} env-steps/s over {ctx.world_size} rank(s)")
        if result.checkpoint:
            log_line(f"[INFO] checkpoint: {result.checkpoint}")
    log_line(f"[INFO] rank {ctx.rank}/{ctx.world_size}: parameter digest {param_digest(result.params)}")


def _train(args: Namespace, progress: RankProgress) -> int:
    """Everything after the torch-free checks: context, adapter, resume point, training, the contract's log lines.
    Clean-up (the process group, the run folder's lock, a refused run's new folder) is the ExitStack's."""
    start = _prepare(args, progress)
    if start.cfg.remaining_iterations <= 0:
        return _nothing_left(args, start, progress)
    with contextlib.ExitStack() as cleanup:
        cleanup.push(_unless_failed(destroy_process_group))  # last: after the lock and the folder
        _open_run(args, start, progress, cleanup)
        ctx = start.ctx
        if start.shared is not None and start.restart:  # every node's rank says the one count: they agree
            log_line(
                f"[INFO] rank {ctx.rank}/{ctx.world_size}: restart {start.restart} of the job "
                f"(torchrun's count on this node: {restart_count()})"
            )
        if start.restart and start.cfg.checkpoint is None and is_rank0(ctx):
            log_line(f"[INFO] restart {start.restart}: no checkpoint of this job yet; training from iteration 0")
        if ctx.is_cuda:

            def check_device() -> None:
                import torch  # torch: only for a CUDA device, after the checks

                warning = device_warning(ctx, torch.cuda.current_device())
                if warning:
                    log_line(warning)

            progress.first_iteration_checks.append(check_device)
        result, seconds = _fit(start, progress)
        _report(result, seconds, ctx)
        progress.done()
    return 0


def _record_refusal(args: Namespace, message: str) -> None:
    """Tell the launcher (when it supervises this rank) that this rank refused its input."""
    try:
        where = launcher_env() if args.distributed else None
        if where is not None:
            local_rank, rank, world_size = where
            rank_progress.from_env(rank, local_rank, world_size, ()).refused(message)
    except (UsageError, ValueError, OSError):
        pass  # the line on stderr still says it


def _supervised_train(args: Namespace, faults: tuple[Fault, ...]) -> int:
    """Run ``_train`` for this rank with its RankProgress; record the first failure before ``record`` re-raises.

    A refusal (UsageError) is recorded as one ("refused", its line) so the launcher can tell bad input that
    every rank refused from a failure, then ends this rank with exit 2 and no traceback.
    """
    try:
        where = launcher_env() if args.distributed else None
        local_rank, rank, world_size = where if where is not None else (0, 0, 1)
        progress = rank_progress.from_env(rank, local_rank, world_size, faults)
    except (UsageError, ValueError) as exc:
        return refuse(str(exc))
    progress.stack_dump()  # a rank stuck before its first beat can still show where
    try:
        return _train(args, progress)
    except PeersGone as exc:  # a restart whose other ranks never came: no further restart helps
        progress.peers_gone(str(exc))
        sys.stderr.write(f"error: rank {progress.rank}: {exc}\n")
        sys.stderr.flush()
        return 1
    except UsageError as exc:
        progress.refused(str(exc))
        return refuse(str(exc))
    except SystemExit as exc:
        if exc.code not in (0, None):
            progress.failed(exc)
        raise
    except Exception as exc:
        progress.failed(exc)
        raise


def main(args: Namespace, faults: tuple[Fault, ...] = ()) -> int:
    """Check the input (no torch), then train inside torch's elastic ``record``, so a failing rank's traceback
    is reported to torchrun; returns the exit status. ``faults`` (:mod:`mgpu_lab.health.rank_progress`) are
    injected by the tests; ``--rehearse_fault`` adds the ones a user rehearses."""
    try:
        check_args(args, world_size_hint(args.distributed))
        faults = tuple(faults) + rehearsed_faults(args)
        if args.ml_framework == "jax" and any(f.kind == "skip" for f in faults):
            raise UsageError(
                "fault skip acts on torch.distributed collectives, which skrl --ml_framework jax does not use"
            )
    except (UsageError, ValueError) as exc:
        _record_refusal(args, str(exc))
        return refuse(str(exc))
    from torch.distributed.elastic.multiprocessing.errors import record  # torch: only once the arguments pass

    try:
        status = record(_supervised_train)(args, faults)
    except KeyboardInterrupt:  # Ctrl-C, forwarded by the launcher: one line per rank, never a traceback
        return interrupted()
    return status if status is not None else 0
