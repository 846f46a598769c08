"""Train a policy on a built-in toy task with rsl_rl, rl_games or skrl, on one process or many.

One process (CPU or one GPU)::

    mgpu-lab train --rl_library rsl_rl --task Toy-Cartpole-v0 --device cpu

Many processes: launch through ``mgpu-lab train_multigpu`` (torchrun), which adds ``--distributed``;
each rank then reads LOCAL_RANK/RANK/WORLD_SIZE and trains on ``cuda:LOCAL_RANK`` (NCCL) or on the
CPU (gloo).

Everything after parsing (checks, device, resume, run folder, training, log lines) is
:mod:`mgpu_lab.train.trainer`; this script holds only the argparse definition the checker reads. It imports
no torch up front: the launcher loads it to check forwarded arguments with this very parser.
"""

from __future__ import annotations

import argparse
import os
import sys

# Make the runtime package importable when the script runs from a plain checkout.
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))), "src")
if os.path.isdir(_SRC) and _SRC not in sys.path:
    sys.path.insert(0, _SRC)

from mgpu_lab.core.help_format import HelpFormatter, OneLineErrors

_usage_error = OneLineErrors("mgpu-lab train")  # argparse's errors: one line, exit 2, no usage block


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line (the one source of truth for its flags)."""
    parser = argparse.ArgumentParser(
        prog="mgpu-lab train",
        description="Train an RL policy on a built-in toy task (pure PyTorch, no simulator) with a real RL "
        "library. Run it directly for one process; use `mgpu-lab train_multigpu` for several GPUs or CPU ranks.",
        epilog="Tasks: Toy-Cartpole-v0 (cart-pole balancing, continuous force), Toy-Pendulum-SwingUp-v0 "
        "(torque-limited pendulum swing-up). Logs and checkpoints go to "
        "<log_root>/<library>/<task>/<timestamp>[_<run_name>]/ on rank 0 only. "
        "Restarts: under torchrun with --max_restarts, a restarted worker group (TORCHELASTIC_RESTART_COUNT > 0) "
        "finds the run folder that rank 0 recorded for MGPU_LAB_JOB_KEY (set by mgpu-lab train_multigpu), reuses it "
        "and resumes from its newest checkpoint. "
        "Checkpoints are loaded without running code (torch.load with weights_only=True; skrl JAX checkpoints are "
        "MessagePack, agent_<timestep>.msgpack, and pickles are refused). Exit status: 0 done, 2 bad input "
        "(nothing written), 1 the run failed (a full disk or a failed write ends it with one line).",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.error = _usage_error  # type: ignore[method-assign]  # one-line errors, exit 2
    parser.add_argument(
        "--rl_library",
        choices=["rsl_rl", "rl_games", "skrl"],
        default="rsl_rl",
        help="RL library to train with (default: rsl_rl).",
    )
    parser.add_argument("--task", default="Toy-Cartpole-v0", help="Built-in task id (default: Toy-Cartpole-v0).")
    parser.add_argument(
        "--num_envs", type=int, default=None, help="Parallel environments per rank (default: the task's, 256)."
    )
    parser.add_argument(
        "--max_iterations",
        type=int,
        default=None,
        help="Training iterations of the whole run, counted from iteration 0 (default: the task's: "
        "100 for cartpole, 150 for the pendulum). A resumed run (--checkpoint, or a restart) trains "
        "only the iterations left: from a checkpoint at iteration 60, --max_iterations 100 trains 40.",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=42,
        help="Random seed, 0 to 4294967295 (NumPy's range, which every library seeds); each rank "
        "adds its rank to it, so the top of the range leaves room for the ranks (default: 42).",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda or cuda:N (default: cuda:0 if CUDA is available, else cpu). "
        "With --distributed a CUDA device becomes cuda:LOCAL_RANK.",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="Train as one rank of a multi-process job started by torchrun (`mgpu-lab train_multigpu` adds this flag).",
    )
    parser.add_argument(
        "--ml_framework",
        choices=["torch", "jax"],
        default="torch",
        help="skrl only: the framework skrl trains with (default: torch).",
    )
    parser.add_argument(
        "--advantage_norm",
        choices=["all_ranks", "per_rank"],
        default=None,
        help="rsl_rl only: normalize PPO's advantages over every rank's rollout together (all_ranks, the "
        "default: N ranks run the algorithm one rank with N times the environments runs) or over each rank's "
        "batch alone (per_rank: what rsl_rl as shipped, and so Isaac Lab's own trainer, does; use it to "
        "reproduce Isaac Lab's numbers).",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        metavar="PATH",
        help="Resume training from this checkpoint file, or 'latest': the newest checkpoint of the "
        "newest run of this --rl_library and --task under --log_root. A checkpoint written at another "
        "world size is fine; one from another task or library is refused.",
    )
    parser.add_argument(
        "--continue_run",
        default=None,
        metavar="RUN",
        help="Continue a run in its own run folder: 'latest' (the newest run folder of this "
        "--rl_library and --task under --log_root) or a run folder's path. Resumes from the folder's "
        "newest checkpoint, appends to its logs and TensorBoard events, and numbers checkpoints on. "
        "Refused (exit 2) when the folder was written with another library, task or framework, has "
        "no checkpoint, or another live job writes to it; not with --checkpoint, which resumes "
        "into a new run folder.",
    )
    parser.add_argument(
        "--save_interval",
        type=int,
        default=10,
        metavar="N",
        help="Write a checkpoint every N iterations (default: 10, so a restarted job loses at most "
        "10 iterations); the last iteration is always saved.",
    )
    parser.add_argument(
        "--run_name", default=None, help="Suffix for the run folder name (a plain name: no '/', at most 200 bytes)."
    )
    parser.add_argument("--log_root", default="logs", help="Root folder for logs and checkpoints (default: logs).")
    parser.add_argument(
        "--rehearse_fault",
        default=None,
        metavar="KIND:RANK:ITER[:ARG]",
        help="Rehearse a failure on CPU before it happens on GPUs: on global rank RANK from "
        "iteration ITER, KIND hang (stops outside any collective), skip (leaves its next collective), "
        "raise, signal (ARG: the signal, default SIGKILL), slow (ARG: seconds held back per "
        "iteration, default 0.5) or oom (allocates until the kernel's OOM killer ends it; only under a "
        "cgroup memory limit). Comma-separate several; first attempt only. For rehearsing the "
        "watchdog, the failure report and mgpu-lab timing; never in real training.",
    )
    return parser


def main() -> int:
    """Parse the command line, then hand it to :func:`mgpu_lab.train.trainer.main` (checks, then training)."""
    args = build_parser().parse_args()
    from mgpu_lab.train import trainer

    return trainer.main(args)


if __name__ == "__main__":
    # without the interpreter's teardown, a second of CPU; imported here, not at the top: the launcher loads
    # this file for its parser (--dry_run included) and never exits through it
    from mgpu_lab.core.leave import leave

    leave(main())
