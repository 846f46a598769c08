"""Watchdog cost and reaction time, printed as ratios (never asserted in tests).

1. Overhead on a healthy 2-rank CPU job: the launcher with the watchdog on (``--hang_timeout 300``, the
   default) vs off (``--hang_timeout 0``), same job, runs alternating (target: ~1.00x).
2. Reaction to a hang: time from the last heartbeat to the launcher's exit, as a ratio to ``--hang_timeout``
   (target: a little above 1.0x; the rest is stack collection and stopping the job).

The job is ``tests/fixtures/launcher/beat_rank.py`` (gloo ranks that beat once per iteration). For the hang, the
faulty rank waits for a go file before it hangs; the benchmark creates that file, so the last heartbeat is
known to precede it.

Usage: ``uv run python benchmarks/bench_watchdog.py [--repeat N] [--iterations K] [--hang_timeout T]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import LAUNCHER, REPO, free_port

FIXTURE = REPO / "tests" / "fixtures" / "launcher" / "beat_rank.py"


def launch(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    cmd = [
        sys.executable,
        str(LAUNCHER),
        "--train_script",
        str(FIXTURE),
        "--job_log_root",
        "/tmp/bench_watchdog_jobs",
        "--num_gpus",
        "2",
        "--device",
        "cpu",
        "--master_port",
        str(free_port()),
        *args,
    ]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant (default: 3)")
    parser.add_argument("--iterations", type=int, default=2000, help="iterations of the healthy job (default: 2000)")
    parser.add_argument("--hang_timeout", type=float, default=5.0, help="timeout for the hang runs (default: 5)")
    args = parser.parse_args()
    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1"
    )

    on, off = [], []
    for _ in range(args.repeat):
        for timeout, bucket in (("300", on), ("0", off)):
            start = time.perf_counter()
            proc = launch(["--hang_timeout", timeout, "--iterations", str(args.iterations)], env)
            _, err = proc.communicate(timeout=900)
            if proc.returncode != 0:
                sys.exit(f"healthy run failed ({proc.returncode}):\n{err[-2000:]}")
            bucket.append(time.perf_counter() - start)
    a, b = statistics.median(on), statistics.median(off)
    print(f"healthy job, watchdog off  median {b:7.2f} s  ({args.repeat} runs, {args.iterations} iterations)")
    print(f"healthy job, watchdog on   median {a:7.2f} s")
    print(f"watchdog overhead ratio: {a / b:.3f}x (target ~1.00x)")

    ratios = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            go = Path(tmp) / "go"
            proc = launch(
                [
                    "--hang_timeout",
                    f"{args.hang_timeout:g}",
                    "--iterations",
                    "100000",
                    "--fault",
                    "hang:1:3",
                    "--go_file",
                    str(go),
                    "--run_dir",
                    str(Path(tmp) / "run"),
                ],
                env,
            )
            deadline = time.monotonic() + 600
            while not (Path(tmp) / "run").exists() and time.monotonic() < deadline:  # rank 0 is up
                time.sleep(0.05)
            time.sleep(0.5)  # let the ranks reach the fault iteration (the faulty rank waits for the go file)
            go.touch()
            start = time.perf_counter()
            _, err = proc.communicate(timeout=900)
            elapsed = time.perf_counter() - start
            if proc.returncode != 3:
                sys.exit(f"hang run ended with {proc.returncode}, not 3:\n{err[-2000:]}")
            ratios.append(elapsed / args.hang_timeout)
    print(
        f"hang: last heartbeat -> launcher exit, median {statistics.median(ratios):.2f}x --hang_timeout "
        f"({args.hang_timeout:g} s; {args.repeat} runs; target a little above 1x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
