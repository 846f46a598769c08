"""Evaluate a trained policy: load a checkpoint of rsl_rl, rl_games or skrl and play it on one device.

    mgpu-lab play --rl_library rsl_rl --task Toy-Cartpole-v0 --checkpoint latest --device cpu

Everything after parsing is :mod:`mgpu_lab.train.play`; this script holds only the argparse definition the
checker reads. It imports no torch up front.
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

_usage_error = OneLineErrors("mgpu-lab play")  # argparse's errors: one line, exit 2, no usage block


def build_parser() -> argparse.ArgumentParser:
    """The play command line (the one source of truth for its flags)."""
    parser = argparse.ArgumentParser(
        prog="mgpu-lab play",
        description="Evaluate a trained policy: load a checkpoint of any library (trained on any number of GPUs or "
        "ranks), run its mean action (no sampling) on --num_envs envs of the task on one device until "
        "--num_episodes episodes have ended, and print the mean and spread of their return. The same --seed on the "
        "same device prints the same numbers (a GPU draws other start states than the CPU).",
        epilog="Output: '[INFO] play: LIBRARY policy from PATH (iteration I) on TASK: N envs, device D, seed S', then "
        "'[INFO] return over K episodes: mean M, std S, min A, max B'. Each env plays its first ceil(K/N) episodes "
        "and the first K of those count, so short episodes are not favoured. Checkpoints are read without running "
        "code (torch.load with weights_only=True; skrl JAX: MessagePack). Nothing is written. Exit status: 0 done, "
        "2 bad input (one line on stderr), 130 after Ctrl-C.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.error = _usage_error  # type: ignore[method-assign]  # one-line errors, exit 2
    parser.add_argument(
        "--rl_library",
        choices=["rsl_rl", "rl_games", "skrl"],
        default="rsl_rl",
        help="RL library that wrote the checkpoint (default: rsl_rl).",
    )
    parser.add_argument(
        "--task",
        default="Toy-Cartpole-v0",
        help="Built-in task id the policy was trained on (default: Toy-Cartpole-v0).",
    )
    parser.add_argument(
        "--checkpoint",
        default="latest",
        metavar="PATH",
        help="A checkpoint file, a run folder (its newest checkpoint), or 'latest': the newest "
        "checkpoint of the newest run of this --rl_library and --task under --log_root, as in "
        "training (default: latest).",
    )
    parser.add_argument("--num_envs", type=int, default=64, help="Parallel environments to play on (default: 64).")
    parser.add_argument(
        "--num_episodes", type=int, default=100, metavar="K", help="Episodes whose return counts (default: 100)."
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=42,
        help="Seed of the task's start states (default: 42); the same seed on the same device plays the same episodes.",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda or cuda:N: the one device to play on (default: cuda:0 if CUDA is available, else cpu).",
    )
    parser.add_argument(
        "--ml_framework",
        choices=["torch", "jax"],
        default="torch",
        help="skrl only: the framework the checkpoint was trained with (default: torch).",
    )
    parser.add_argument("--log_root", default="logs", help="Where --checkpoint latest looks (default: logs).")
    return parser


def main() -> int:
    """Parse the command line, then hand it to :func:`mgpu_lab.train.play.main`."""
    args = build_parser().parse_args()
    from mgpu_lab.train import play

    return play.main(args)


if __name__ == "__main__":
    # without the interpreter's teardown, a second of CPU; imported here, not at the top: the launcher loads
    # this file for its parser (--dry_run included) and never exits through it
    from mgpu_lab.core.leave import leave

    leave(main())
