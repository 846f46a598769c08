"""The documented CPU rehearsals, timed as a user runs them (issue 37 item 5): the two-node loopback rehearsal
(two launchers, one CPU rank each, static rendezvous) against the single-node one (one launcher, two CPU ranks).

Each run's time is the training time rank 0 prints (``[INFO] training time: S s``) and the wall time of the whole
command. ``OMP_NUM_THREADS`` is removed from the environment, as in a fresh shell, unless ``--keep_omp`` is given.
Prints the medians and the ratio two-node / single-node (the issue asks for at most 2).

    uv run python benchmarks/bench_rehearsal.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from _bench import LAUNCHER, REPO, free_port

COMMON = ["--device", "cpu", "--task", "Toy-Cartpole-v0", "--num_envs", "64", "--max_iterations", "20"]
TIME = re.compile(r"^\[INFO\] training time: ([0-9.]+) s$", re.M)


def _env(keep_omp: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    if not keep_omp:
        env.pop("OMP_NUM_THREADS", None)
    return env


def _training_time(out: str) -> float:
    found = TIME.findall(out)
    if not found:
        raise SystemExit(f"no training time in the output:\n{out[-3000:]}")
    return float(found[-1])


def single_node(env: dict[str, str]) -> tuple[float, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(LAUNCHER), "--num_gpus", "2", *COMMON], cwd=REPO, env=env, capture_output=True, text=True
    )
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"single node failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return _training_time(proc.stdout), wall


def two_nodes(env: dict[str, str]) -> tuple[float, float]:
    port = str(free_port())
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, str(LAUNCHER), "--nnodes", "2", "--node_rank", str(node), "--master_addr", "127.0.0.1"]
            + ["--master_port", port, "--num_gpus", "1", *COMMON],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    outs = [p.communicate() for p in procs]
    wall = time.monotonic() - start
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise SystemExit(f"a node failed ({p.returncode}):\n{err[-3000:]}")
    return _training_time(outs[0][0]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep_omp", action="store_true", help="keep OMP_NUM_THREADS from this environment")
    args = parser.parse_args()
    env = _env(args.keep_omp)
    one = [single_node(env) for _ in range(args.repeat)]
    two = [two_nodes(env) for _ in range(args.repeat)]
    for name, runs in (("single node, 2 CPU ranks", one), ("two loopback nodes, 1 CPU rank each", two)):
        train = statistics.median(t for t, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(f"{name}: training time median {train:.2f} s, command wall median {wall:.2f} s ({len(runs)} runs)")
    ratio = statistics.median(t for t, _ in two) / statistics.median(t for t, _ in one)
    print(f"two-node / single-node training time: {ratio:.2f} (at most 2 wanted)")


if __name__ == "__main__":
    main()
