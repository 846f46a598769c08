"""Raw step throughput of the built-in Toy-Cartpole-v0 vs gymnasium's vectorized numpy CartPole.

Both step N cart-poles per call with auto-reset; actions are generated up front so only the env is
timed. Prints env-steps/s for each batch size and the ratio (toy / gymnasium). Not a test.

    uv run python benchmarks/bench_tasks.py [--batch 64 1024 16384] [--steps 300] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import gymnasium as gym
import numpy as np
import torch

from mgpu_lab.train.tasks import make_env


def time_toy(n: int, steps: int, device: str) -> float:
    env = make_env("Toy-Cartpole-v0", n, device, seed=0)
    env.reset()
    actions = torch.rand(steps, n, 1, generator=torch.Generator().manual_seed(0)).mul(2).sub(1).to(device)
    for i in range(10):  # warm-up
        env.step(actions[i])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        env.step(actions[i])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return n * steps / (time.perf_counter() - start)


def time_gymnasium(n: int, steps: int) -> float:
    env = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, n))
    for i in range(10):
        env.step(actions[i])
    start = time.perf_counter()
    for i in range(steps):
        env.step(actions[i])
    rate = n * steps / (time.perf_counter() - start)
    env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 1024, 16384])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, like numpy)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'batch':>7} {'toy (torch, ' + args.device + ')':>22} {'gymnasium (numpy)':>19} {'ratio':>7}")
    for n in args.batch:
        toy = time_toy(n, args.steps, args.device)
        ref = time_gymnasium(n, args.steps)
        print(f"{n:>7} {toy:>18,.0f}/s {ref:>17,.0f}/s {toy / ref:>6.2f}x", flush=True)


if __name__ == "__main__":
    main()
