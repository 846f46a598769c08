"""Training throughput at world size 1 vs 2 on CPU (gloo), same per-rank --num_envs.

Runs train.py once as a single process and once as 2 CPU ranks through the launcher, reads the
`[INFO] throughput: N env-steps/s over W rank(s)` lines and prints the ratio (ideal: 2.0; the
target is >= 1.7 on a machine with at least 2 free cores). Not a test.

With ``--supervision`` it instead measures what the launcher's supervision costs a rank: the same
single-process run without and with ``MGPU_LAB_SUPERVISE_DIR`` (a heartbeat file per iteration, the
stack-dump handler), plus the cost of one heartbeat in-process, as a ratio to one training iteration.

    uv run python benchmarks/bench_trainer.py [--rl_library rsl_rl] [--num_envs 256] [--max_iterations 10]
    uv run python benchmarks/bench_trainer.py --supervision [--num_envs 256] [--max_iterations 20]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

from _bench import LAUNCHER, REPO, free_port

TRAIN = REPO / "scripts" / "reinforcement_learning" / "train.py"
THROUGHPUT = re.compile(r"\[INFO\] throughput: (\d+) env-steps/s over (\d+) rank\(s\)")


def measure(cmd: list[str], timeout: float, **extra_env: str) -> float:
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
        **extra_env,
    )
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        env.pop(name, None)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    match = THROUGHPUT.search(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not match:
        sys.exit(f"run failed (exit {proc.returncode}): {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
    return float(match.group(1))


def beat_cost(iterations: int = 2000) -> float:
    """Seconds one per-iteration hook takes in-process with a supervision folder (heartbeat file replace)."""
    sys.path.insert(0, str(REPO / "src"))
    from mgpu_lab.health import rank_progress

    with tempfile.TemporaryDirectory(prefix="bench_beats_") as folder:
        progress = rank_progress.from_env(0, 0, 1, (), environ={"MGPU_LAB_SUPERVISE_DIR": folder})
        start = time.perf_counter()
        for it in range(iterations):
            progress.on_iteration(it)
        return (time.perf_counter() - start) / iterations


def supervision(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as log_root:
        common = [
            sys.executable,
            str(TRAIN),
            "--rl_library",
            args.rl_library,
            "--task",
            args.task,
            "--device",
            "cpu",
            "--num_envs",
            str(args.num_envs),
            "--max_iterations",
            str(args.max_iterations),
            "--log_root",
            log_root,
        ]
        rates = {"without": [], "with": []}
        for _ in range(args.repeats):  # alternate, so a load change hits both sides alike
            rates["without"].append(measure(common, args.timeout))
            folder = tempfile.mkdtemp(prefix="supervise_", dir=log_root)
            rates["with"].append(measure(common, args.timeout, MGPU_LAB_SUPERVISE_DIR=folder))
    best = {k: max(v) for k, v in rates.items()}
    per_beat = beat_cost()
    steps_per_iteration = {"rsl_rl": 24, "rl_games": 16, "skrl": 16}[args.rl_library]
    iteration_s = steps_per_iteration * args.num_envs / best["without"]
    print(
        f"{args.rl_library} on {args.task}, {args.num_envs} envs, {args.max_iterations} iterations, "
        f"best of {args.repeats} each"
    )
    print(f"without supervision: {best['without']:,.0f} env-steps/s")
    print(f"with supervision:    {best['with']:,.0f} env-steps/s")
    print(f"ratio (with / without): {best['with'] / best['without']:.3f}  (1.0 = free)")
    print(
        f"one heartbeat: {per_beat * 1e6:.0f} us = {per_beat / iteration_s:.5f} of one iteration ({iteration_s * 1e3:.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rl_library", default="rsl_rl", choices=["rsl_rl", "rl_games", "skrl"])
    parser.add_argument("--task", default="Toy-Cartpole-v0")
    parser.add_argument(
        "--num_envs",
        type=int,
        default=4096,
        help="per rank, the same at both world sizes (small batches measure gloo latency, not scaling)",
    )
    parser.add_argument("--max_iterations", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--supervision",
        action="store_true",
        help="measure the supervision overhead (one process, with vs. without the folder) instead",
    )
    parser.add_argument("--repeats", type=int, default=2, help="--supervision: runs per side (default: 2)")
    args = parser.parse_args()
    if args.supervision:
        supervision(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as log_root:
        common = [
            "--rl_library",
            args.rl_library,
            "--task",
            args.task,
            "--device",
            "cpu",
            "--num_envs",
            str(args.num_envs),
            "--max_iterations",
            str(args.max_iterations),
            "--log_root",
            log_root,
        ]
        load_before = os.getloadavg()[0]
        one = measure([sys.executable, str(TRAIN), *common], args.timeout)
        load_between = os.getloadavg()[0]
        two = measure(
            [sys.executable, str(LAUNCHER), "--num_gpus", "2", "--master_port", str(free_port()), *common], args.timeout
        )
    print(
        f"cores visible: {os.cpu_count()}; {args.rl_library} on {args.task}, {args.num_envs} envs/rank, "
        f"{args.max_iterations} iterations"
    )
    print(f"world size 1: {one:,.0f} env-steps/s")
    print(f"world size 2: {two:,.0f} env-steps/s")
    print(f"ratio (2 / 1): {two / one:.2f}x  (target >= 1.7x)")
    print(
        f"1-min load average before the runs: {load_before:.2f}, {load_between:.2f} "
        f"(the ratio only means something when {2} cores are otherwise idle)"
    )


if __name__ == "__main__":
    main()
