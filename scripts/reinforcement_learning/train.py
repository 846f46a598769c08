"""Train a policy on a built-in toy task with rsl_rl, rl_games or skrl, on one process or many.

One process (CPU or one GPU)::

    isaaclab train --rl_library rsl_rl --task Toy-Cartpole-v0 --device cpu

Many processes: launch through ``isaaclab train_multigpu`` (torchrun), which adds ``--distributed``;
each rank then reads LOCAL_RANK/RANK/WORLD_SIZE and trains on ``cuda:LOCAL_RANK`` (NCCL) or on the
CPU (gloo).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Make the runtime package importable when the script runs from a plain checkout.
_SRC = Path(__file__).resolve().parents[2] / "src"
if _SRC.is_dir() and str(_SRC) not in sys.path:
    sys.path.insert(0, str(_SRC))


def _usage_error(message: str) -> None:
    """argparse's error hook: one line on stderr, exit 2, no usage block (like the launcher's)."""
    sys.stderr.write(f"isaaclab train: error: {message} (see --help)\n")
    sys.stderr.flush()
    raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line (the one source of truth for its flags)."""
    parser = argparse.ArgumentParser(
        prog="isaaclab train",
        description="Train an RL policy on a built-in toy task (pure PyTorch, no simulator) with a real RL "
        "library. Run it directly for one process; use `isaaclab train_multigpu` for several GPUs or CPU ranks.",
        epilog="Tasks: Toy-Cartpole-v0 (cart-pole balancing, continuous force), Toy-Pendulum-SwingUp-v0 "
        "(torque-limited pendulum swing-up). Logs and checkpoints go to "
        "<log_root>/<library>/<task>/<timestamp>[_<run_name>]/ on rank 0 only. "
        "Restarts: under torchrun with --max_restarts, a restarted worker group (TORCHELASTIC_RESTART_COUNT > 0) "
        "finds the run folder that rank 0 recorded for MGPU_LAB_JOB_KEY (set by isaaclab train_multigpu), reuses it "
        "and resumes from its newest checkpoint. "
        "Testing aid, off unless set: MGPU_LAB_FAULT=KIND:RANK:ITER[:ARG][,...] injects a fault on global rank RANK "
        "at training iteration ITER, on the first attempt only: hang (a sleep loop outside any collective), "
        "skip (return from the next torch.distributed collective without joining it, then wait), "
        "raise (RuntimeError), signal (send itself signal ARG, default SIGKILL). "
        "Further testing aids, off unless set: MGPU_LAB_TEST_STOP_IN_SAVE=MARKER stops the process (SIGSTOP) inside "
        "the first checkpoint save whose file name matches MGPU_LAB_TEST_STOP_IN_SAVE_NAME (default: any), after "
        "the temp file is written and before it is renamed, and writes MARKER first; MGPU_LAB_TEST_RUN_STAMP=STAMP "
        "replaces the time stamp in the run folder's name. "
        "Checkpoints are loaded without running code (torch.load with weights_only=True; skrl JAX checkpoints are "
        "MessagePack, agent_<timestep>.msgpack, and pickles are refused). Exit status: 0 done, 2 bad input "
        "(nothing written), 1 the run failed (a full disk or a failed write ends it with one line).",
        allow_abbrev=False,
    )
    parser.error = _usage_error  # type: ignore[method-assign]  # one-line errors, exit 2
    parser.add_argument("--rl_library", choices=["rsl_rl", "rl_games", "skrl"], default="rsl_rl",
                        help="RL library to train with (default: rsl_rl).")
    parser.add_argument("--task", default="Toy-Cartpole-v0",
                        help="Built-in task id (default: Toy-Cartpole-v0).")
    parser.add_argument("--num_envs", type=int, default=None,
                        help="Parallel environments per rank (default: the task's, 256).")
    parser.add_argument("--max_iterations", type=int, default=None,
                        help="Training iterations of the whole run, counted from iteration 0 (default: the task's: "
                        "100 for cartpole, 150 for the pendulum). A resumed run (--checkpoint, or a restart) trains "
                        "only the iterations left: from a checkpoint at iteration 60, --max_iterations 100 trains 40.")
    parser.add_argument("--seed", type=int, default=42,
                        help="Random seed, 0 to 4294967295 (NumPy's range, which every library seeds); each rank "
                        "adds its rank to it, so the top of the range leaves room for the ranks (default: 42).")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:N (default: cuda:0 if CUDA is available, else cpu). "
                        "With --distributed a CUDA device becomes cuda:LOCAL_RANK.")
    parser.add_argument("--distributed", action="store_true",
                        help="Train as one rank of a multi-process job started by torchrun "
                        "(`isaaclab train_multigpu` adds this flag).")
    parser.add_argument("--ml_framework", choices=["torch", "jax"], default="torch",
                        help="skrl only: the framework skrl trains with (default: torch).")
    parser.add_argument("--checkpoint", default=None, metavar="PATH",
                        help="Resume training from this checkpoint file, or 'latest': the newest checkpoint of the "
                        "newest run of this --rl_library and --task under --log_root. A checkpoint written at another "
                        "world size is fine; one from another task or library is refused.")
    parser.add_argument("--save_interval", type=int, default=10, metavar="N",
                        help="Write a checkpoint every N iterations (default: 10, so a restarted job loses at most "
                        "10 iterations); the last iteration is always saved.")
    parser.add_argument("--run_name", default=None,
                        help="Suffix for the run folder name (a plain name: no '/', at most 200 bytes).")
    parser.add_argument("--log_root", default="logs",
                        help="Root folder for logs and checkpoints (default: logs).")
    return parser


def _fail(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def _check_args(args: argparse.Namespace) -> None:
    """Checks that need no torch: numbers, task id, checkpoint path, launcher environment."""
    from mgpu_lab.tasks.catalog import TASKS, unknown_task_message

    if args.task not in TASKS:
        _fail(unknown_task_message(args.task))
    if args.num_envs is not None and args.num_envs < 1:
        _fail(f"--num_envs must be >= 1, got {args.num_envs}")
    if args.max_iterations is not None and args.max_iterations < 1:
        _fail(f"--max_iterations must be >= 1, got {args.max_iterations}")
    if args.save_interval is not None and args.save_interval < 1:
        _fail(f"--save_interval must be >= 1, got {args.save_interval}")
    if args.ml_framework == "jax" and args.rl_library != "skrl":
        _fail(f"--ml_framework jax is for skrl only, not {args.rl_library}")
    ranks = _world_size_hint(args)
    if not 0 <= args.seed <= SEED_MAX - (ranks - 1):
        room = f" - {ranks - 1} for the rank offset of {ranks} ranks" if ranks > 1 else ""
        _fail(f"--seed must be between 0 and {SEED_MAX}{room} (NumPy's seed range, used by every library), "
              f"got {args.seed}")
    from mgpu_lab import run_dir
    from mgpu_lab.train_config import UsageError

    try:
        run_dir.check_run_name(args.run_name)
        run_dir.check_log_root(args.log_root, args.rl_library, args.task)
    except UsageError as exc:
        _fail(str(exc))
    if args.checkpoint is not None and args.checkpoint != "latest":
        path = Path(args.checkpoint)
        if not path.exists():
            _fail(f"--checkpoint {args.checkpoint}: no such file")
        if not path.is_file():
            _fail(f"--checkpoint {args.checkpoint}: not a file")


#: Largest seed: NumPy's legacy seeding (np.random.seed, used by rsl_rl, rl_games and skrl) takes 0..2**32-1.
SEED_MAX = 2**32 - 1


def _world_size_hint(args: argparse.Namespace) -> int:
    """The launcher's world size for the seed check (1 when not distributed or not readable yet)."""
    if not args.distributed:
        return 1
    raw = os.environ.get("WORLD_SIZE") or os.environ.get("JAX_WORLD_SIZE") or "1"
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def _check_checkpoint_file(path: str, library: str) -> None:
    """Reject, in one line, a file that is not a plain-tensor torch checkpoint; nothing in it is executed
    (``torch.load(weights_only=True)`` with the library's allow-list, see mgpu_lab.checkpoint)."""
    from mgpu_lab.checkpoint import load_torch
    from mgpu_lab.train_config import UsageError

    try:
        load_torch(path, library)
    except UsageError as exc:
        _fail(str(exc))


#: How a collective reports that a peer rank is gone (gloo and NCCL wording), lower case.
PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe", "remote process exited",
             "communicator was aborted")


def _peer_detail(exc: BaseException) -> str:
    """The short part of a lost-peer error: gloo's 'Connection closed by peer [ADDR]:PORT', else the first 120 chars."""
    import re

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    found = re.search(r"connection (closed|reset) by peer( \[[^\]]*\](:\d+)?)?", text, re.IGNORECASE)
    return found.group(0) if found else text[:120]


def _run_dir(log_root: str, library: str, task: str, run_name: str | None, create: bool = True) -> Path:
    """Rank 0 (``create``): make a new run folder atomically (never one another run has); others: its planned name."""
    from mgpu_lab import run_dir

    if not create:
        return run_dir.planned(log_root, library, task, run_name)
    try:
        return run_dir.create(log_root, library, task, run_name)
    except OSError as exc:
        _fail(f"--log_root {log_root}: cannot create the run folder ({exc.strerror or exc}: {exc.filename or log_root})")


def _resume_point(args: argparse.Namespace, adapter, cfg, restart: int, key: str | None):
    """(run folder to reuse or None, checkpoint to load or None): a restart's own run, ``latest``, or --checkpoint."""
    from mgpu_lab import resume

    def listing(run_dir: Path):
        return adapter.checkpoints(run_dir, cfg)

    if restart and key:
        run_dir = resume.find_job_run(args.log_root, args.rl_library, args.task, key)
        if run_dir is not None:
            found = resume.newest_checkpoint(run_dir, listing)
            return run_dir, (str(found[1]) if found else None)
        return None, None  # rank 0 never recorded this job's folder: start over in a new one
    if args.checkpoint == resume.LATEST:
        found = resume.latest_checkpoint(args.log_root, args.rl_library, args.task, listing)
        if found is None:
            framework = f" --ml_framework {args.ml_framework}" if args.rl_library == "skrl" else ""
            _fail(f"--checkpoint latest: no {args.rl_library}{framework} checkpoint of {args.task} under "
                  f"{Path(args.log_root).resolve() / args.rl_library / args.task}")
        return None, str(found[1])
    return None, (str(Path(args.checkpoint).resolve()) if args.checkpoint else None)


def _train(args: argparse.Namespace, progress) -> int:
    """Everything after the torch-free checks: context, adapter, resume point, training, the contract's log lines."""
    from mgpu_lab import adapters, resume
    from mgpu_lab.dist import (context_from_env, destroy_process_group, device_warning, is_rank0, log_line,
                               param_digest, store_per_attempt, sum_over_ranks)
    from mgpu_lab.resources import check_num_envs, out_of_memory_message
    from mgpu_lab.run_dir import discard
    from mgpu_lab.tasks.catalog import TASK_DEFAULTS
    from mgpu_lab.train_config import TrainConfig, UsageError
    from mgpu_lab.write_guard import WriteGuard

    defaults = TASK_DEFAULTS.get(args.task, {})
    try:
        if args.device is None:
            from mgpu_lab.dist import cuda_available

            if args.distributed and not cuda_available():
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                shown = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
                _fail(f"--distributed: no CUDA device is usable here{shown}; ranks train on the CPU only "
                      "with --device cpu")
            args.device = "cuda:0" if cuda_available() else "cpu"
        ctx = context_from_env(args.device, args.distributed)
        try:
            restart = resume.restart_count()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        key = resume.job_key()
        adapter = adapters.load(args.rl_library)
        cfg = TrainConfig(
            rl_library=args.rl_library,
            task=args.task,
            num_envs=args.num_envs or defaults.get("num_envs", 256),
            max_iterations=args.max_iterations or defaults.get("max_iterations", 100),
            seed=args.seed,
            device=ctx.device,
            distributed=ctx.distributed,
            ml_framework=args.ml_framework,
            run_name=args.run_name,
            save_interval=args.save_interval,
            log_root=args.log_root,
            restart=restart,
            on_iteration=progress.on_iteration,
        )
        check_num_envs(cfg.num_envs, ctx.device)
        reuse, cfg.checkpoint = _resume_point(args, adapter, cfg, restart, key)
        if cfg.checkpoint is not None:
            if args.ml_framework != "jax":  # skrl JAX saves its own format; its adapter checks it
                _check_checkpoint_file(cfg.checkpoint, args.rl_library)
            cfg.start_iteration = adapter.checkpoint_iteration(cfg.checkpoint, cfg)
    except UsageError as exc:
        _fail(str(exc))

    if cfg.remaining_iterations <= 0:
        if restart:  # the previous attempt saved the last iteration and died before leaving: nothing is left
            if is_rank0(ctx):
                log_line(f"[INFO] restart {restart}: {cfg.checkpoint} is at iteration {cfg.start_iteration}, "
                         f"the run's last; nothing left to train")
            progress.done()
            return 0
        _fail(f"--checkpoint {cfg.checkpoint}: already at iteration {cfg.start_iteration} and --max_iterations "
              f"{cfg.max_iterations} counts from iteration 0: nothing left to train (raise --max_iterations)")

    log_line(f"[INFO] rank {ctx.rank}/{ctx.world_size}: device {ctx.device}, backend "
             f"{ctx.backend if ctx.distributed else 'none'}, node {progress.node}")
    created = reuse is None and is_rank0(ctx)  # a folder this process makes (and removes if the run is refused)
    cfg.log_dir = str(reuse) if reuse is not None else str(_run_dir(args.log_root, args.rl_library, args.task,
                                                                     args.run_name, create=is_rank0(ctx)))
    if is_rank0(ctx):
        log_line(f"[INFO] {args.rl_library} on {args.task}: {cfg.num_envs} envs/rank x {ctx.world_size} rank(s), "
                 f"device {ctx.device}, backend {ctx.backend if ctx.distributed else 'none'}")
        log_line(f"[INFO] logging to {cfg.log_dir}")
        if key is not None and reuse is None:
            resume.record_job_key(cfg.log_dir, key)
        progress.run_dir(cfg.log_dir)
    if restart and cfg.checkpoint is None and is_rank0(ctx):
        log_line(f"[INFO] restart {restart}: no checkpoint of this job yet; training from iteration 0")
    if ctx.is_cuda:
        def check_device() -> None:
            import torch

            warning = device_warning(ctx, torch.cuda.current_device())
            if warning:
                log_line(warning)

        progress.first_iteration_checks.append(check_device)

    if ctx.distributed:
        store_per_attempt()  # a restarted group must not read the dead attempt's addresses
    progress.start()  # heartbeats from here on: every library sets its process group up inside train()
    start = time.perf_counter()
    guard = WriteGuard(cfg.log_dir, ctx.rank, progress.failed).install()  # a dead writer thread: one line, exit 1
    try:
        result = adapter.train(cfg, ctx)
    except UsageError as exc:  # refused before training: leave nothing behind
        destroy_process_group()
        if created:
            discard(cfg.log_dir)
        _fail(str(exc))
    except OSError as exc:  # disk full, read-only file system, ...: one line, exit 1
        guard.fatal(exc)
    except MemoryError:
        sys.stderr.write(f"error: rank {ctx.rank}: {out_of_memory_message(cfg.num_envs, ctx.device)}\n")
        sys.stderr.flush()
        os._exit(1)  # the libraries' writers and process group may be mid-operation: leave at once
    except RuntimeError as exc:
        text = str(exc).lower()
        if ctx.distributed and any(s in text for s in PEER_LOST):  # another rank died first (it says why)
            progress.failed(exc)
            sys.stderr.write(f"error: rank {ctx.rank}: another rank left the job ({_peer_detail(exc)}); "
                             "the first failure is reported by that rank and the launcher\n")
            sys.stderr.flush()
            raise SystemExit(1) from None
        if "out of memory" not in text and "can't allocate memory" not in text:  # CUDA and CPU allocator failures
            raise
        sys.stderr.write(f"error: rank {ctx.rank}: {out_of_memory_message(cfg.num_envs, ctx.device)}\n")
        sys.stderr.flush()
        os._exit(1)
    guard.uninstall()
    elapsed = time.perf_counter() - start
    seconds = result.seconds if result.seconds else elapsed

    log_line(f"[INFO] rank {ctx.rank}/{ctx.world_size}: stepped {result.env_steps} env-steps")
    total_steps = result.world_env_steps if result.world_env_steps is not None else sum_over_ranks(result.env_steps,
                                                                                                    ctx)
    if is_rank0(ctx):
        rate = total_steps / seconds if seconds > 0 else float("inf")
        log_line(f"[INFO] training time: {seconds:.2f} s")
        log_line(f"[INFO] throughput: {rate:.0f} env-steps/s over {ctx.world_size} rank(s)")
        if result.checkpoint:
            log_line(f"[INFO] checkpoint: {result.checkpoint}")
    log_line(f"[INFO] rank {ctx.rank}/{ctx.world_size}: parameter digest {param_digest(result.params)}")
    progress.done()
    destroy_process_group()
    return 0


def _supervised_train(args: argparse.Namespace, faults) -> int:
    """Run ``_train`` for this rank with its RankProgress; record the first failure before ``record`` re-raises."""
    from mgpu_lab import rank_progress
    from mgpu_lab.dist import launcher_env
    from mgpu_lab.train_config import UsageError

    try:
        where = launcher_env() if args.distributed else None
        local_rank, rank, world_size = where if where is not None else (0, 0, 1)
        progress = rank_progress.from_env(rank, local_rank, world_size, faults)
    except (UsageError, ValueError) as exc:
        _fail(str(exc))
    try:
        return _train(args, progress)
    except SystemExit as exc:
        if exc.code not in (0, None):
            progress.failed(exc)
        raise
    except Exception as exc:
        progress.failed(exc)
        raise


def main() -> int:
    """Entry point; training runs inside torch's elastic ``record`` so a failing rank's traceback is reported."""
    args = build_parser().parse_args()
    _check_args(args)  # no torch needed: --help and plain usage errors stay quick
    from mgpu_lab.rank_progress import FAULT_ENV, parse_faults

    try:
        faults = parse_faults(os.environ.get(FAULT_ENV))
    except ValueError as exc:
        _fail(str(exc))
    if args.ml_framework == "jax" and any(f.kind == "skip" for f in faults):
        _fail(f"{FAULT_ENV}: skip acts on torch.distributed collectives, which skrl --ml_framework jax does not use")
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_supervised_train)(args, faults)


if __name__ == "__main__":
    sys.exit(main())
