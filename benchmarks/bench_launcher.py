"""Launcher overhead, printed as ratios (never asserted in tests).

1. ``--dry_run`` wall time vs a bare ``python -c pass`` (target <= 2.5x), bytecode cached as on a user's machine.
2. A 2-rank CPU job through the launcher vs the same torchrun command run directly (target <= 1.05x).
   The command is the one ``--dry_run`` prints; runs alternate and each uses a fresh free port.

Usage: ``uv run python benchmarks/bench_launcher.py [--repeat N] [--job-repeat M] [--trainer]``.
By default the job is the test fixture that prints its rank (so the figure is the launcher's own cost on
top of torchrun); ``--trainer`` runs the real train.py for one iteration instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from _bench import LAUNCHER, REPO, free_port

FIXTURE = REPO / "tests" / "fixtures" / "launcher" / "print_rank.py"


def timed(cmd: list[str], env: dict[str, str], timeout: float) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"command failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="runs of each start-up command (default: 15)")
    parser.add_argument("--job-repeat", type=int, default=3, help="runs of each 2-rank job; 0 skips them (default: 3)")
    parser.add_argument("--trainer", action="store_true", help="run the real train.py instead of the fixture")
    args = parser.parse_args()

    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1"
    )
    # bytecode cached, as on a user's machine (a CI or sandbox environment may forbid writing it): without it every
    # run compiles the package from source and the ratio measures the compiler
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench_launcher_pyc_")
    py = sys.executable
    job_args = ["--num_gpus", "2", "--device", "cpu"]
    if args.trainer:
        job_args += ["--max_iterations", "1", "--num_envs", "16", "--log_root", "/tmp/bench_launcher_logs"]
    else:  # the fixture through the launcher's --train_script (its records in the temp folder)
        job_args = ["--train_script", str(FIXTURE), "--job_log_root", "/tmp/bench_launcher_jobs", *job_args]

    # 1. start-up: --dry_run vs bare interpreter
    # (always against the real train.py: the launcher then checks the training arguments with train.py's
    # parser and the task catalog, which --dry_run pays for too)
    bare, dry = [], []
    for _ in range(args.repeat + 1):  # the first round writes the bytecode: not counted
        bare.append(timed([py, "-c", "pass"], env, 60))
        dry.append(
            timed(
                [py, str(LAUNCHER), "--num_gpus", "2", "--device", "cpu", "--task", "Toy-Cartpole-v0", "--dry_run"],
                env,
                60,
            )
        )
    b, d = statistics.median(bare[1:]), statistics.median(dry[1:])
    print(f"python -c pass      median {b * 1000:7.1f} ms  ({args.repeat} runs, bytecode cached)")
    print(f"launcher --dry_run  median {d * 1000:7.1f} ms  ({args.repeat} runs, bytecode cached)")
    print(f"dry_run ratio: {d / b:.2f}x (target <= 2.5x)")

    if args.job_repeat < 1:
        return 0
    # 2. a 2-rank CPU job: through the launcher vs the torchrun command it prints, run directly
    via, direct = [], []
    for _ in range(args.job_repeat):
        port = ["--master_port", str(free_port())]
        printed = subprocess.run(
            [py, str(LAUNCHER), *job_args, *port, "--dry_run"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        direct.append(timed(shlex.split(printed), env, 600))
        port = ["--master_port", str(free_port())]
        via.append(timed([py, str(LAUNCHER), *job_args, *port], env, 600))
    v, t = statistics.median(via), statistics.median(direct)
    what = "train.py, 1 iteration" if args.trainer else "fixture print_rank.py"
    print(f"torchrun directly   median {t:7.2f} s  ({args.job_repeat} runs, {what})")
    print(f"through launcher    median {v:7.2f} s  ({args.job_repeat} runs, {what})")
    print(f"job ratio: {v / t:.3f}x (target <= 1.05x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
