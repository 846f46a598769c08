"""Benchmark the NCCL probe on this machine (CPU, gloo): prints figures and ratios, asserts nothing.

1. gloo all_reduce busbw at 64 MiB over 2 ranks, against single-core memcpy bandwidth (ratio).
2. Time from a missed deadline (a rank skips a collective) to the probe's exit.

Run: .venv/bin/python benchmarks/bench_nccl_probe.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "skills/user/train-multi-gpu/scripts/nccl_probe.py"
MIB64 = 64 * 1024 * 1024


def memcpy_bandwidth(nbytes: int = MIB64, repeats: int = 10) -> float:
    """Single-core memcpy bandwidth in GB/s (bytes copied per second; memoryview slice copy)."""
    src = bytearray(os.urandom(1024)) * (nbytes // 1024)
    dst = bytearray(nbytes)
    view_src, view_dst = memoryview(src), memoryview(dst)
    view_dst[:] = view_src  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        view_dst[:] = view_src
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def probe(args: list[str], timeout: float) -> tuple[int, str, float]:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, start_new_session=True)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def main() -> int:
    cores = os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {cores} CPU core(s), load average {load:.2f} at start")
    mem = memcpy_bandwidth()
    print(f"single-core memcpy (64 MiB, best of 10): {mem:.2f} GB/s")

    code, out, wall = probe(["--nproc_per_node", "2", "--backend", "gloo", "-b", "64M", "-e", "64M",
                             "--iters", "5", "--warmup", "2", "--timeout", "120", "--run_limit", "500"], 600)
    row = re.search(r"^\s+67108864\s+\d+\s+float\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$", out, re.M)
    if code != 0 or row is None:
        print(out[-3000:])
        print(f"probe run failed (exit {code})")
        return 1
    t_us, algbw, busbw = float(row.group(1)), float(row.group(2)), float(row.group(3))
    print(f"gloo all_reduce 64 MiB, 2 ranks: time {t_us / 1e3:.1f} ms, algbw {algbw:.3f} GB/s, "
          f"busbw {busbw:.3f} GB/s (whole run {wall:.1f} s)")
    print(f"ratio busbw / single-core memcpy: {busbw / mem:.3f}")

    timeout = 3
    code, out, wall = probe(["--nproc_per_node", "2", "--backend", "gloo", "-b", "8", "-e", "64",
                             "--iters", "2", "--warmup", "1", "--timeout", str(timeout),
                             "--fault", "skip:1@2", "--run_limit", "300"], 400)
    after = re.search(r"the run ended ([\d.]+) s after the first missed deadline", out)
    if code != 3 or after is None:
        print(out[-3000:])
        print(f"deadline run did not end as expected (exit {code})")
        return 1
    seconds = float(after.group(1))
    print(f"missed deadline -> probe exit: {seconds:.2f} s (--timeout {timeout} s; whole run {wall:.1f} s, exit {code})")
    print(f"ratio (deadline-to-exit) / --timeout: {seconds / timeout:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
