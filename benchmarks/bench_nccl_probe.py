"""Benchmark the NCCL probe on this machine (CPU, gloo): prints figures and ratios, asserts nothing.

1. gloo all_reduce busbw at 64 MiB over 2 ranks, against single-core memcpy bandwidth (ratio).
2. Time from a missed deadline (a rank skips a collective) to the probe's exit.
3. Peak memory of one rank's sweep buffers per byte of the largest message: the probe's repeated
   pattern against the int64-indexed construction it replaced (ratio; both measured here).

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
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(PROBE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        start_new_session=True,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


PEAK_SCRIPT = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("probe", sys.argv[1])
probe = sys.modules["probe"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
largest = int(sys.argv[2])
def peak(build):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident size
    before = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    bufs = build()
    bufs[-1].zero_()  # touch the receive buffer
    after = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    del bufs
    return (after - before) * 1024 / largest
def indexed():
    n = largest // 4
    mine = torch.arange(17, dtype=torch.float32)
    idx = torch.arange(n) % 17
    src, expected = mine[idx], mine[idx]
    del idx
    return src, expected, torch.empty_like(src)
print(peak(lambda: probe.sweep_buffers(torch, 0, 2, largest, torch.device("cpu"))), peak(indexed))
"""


def buffer_peaks(largest: int = 256 * 1024 * 1024) -> tuple[float, float]:
    """Peak resident bytes per byte of the largest message: (the probe's buffers, the indexed baseline)."""
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(PROBE), str(largest)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    ours, baseline = (float(x) for x in proc.stdout.split())
    return ours, baseline


def main() -> int:
    cores = os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {cores} CPU core(s), load average {load:.2f} at start")
    mem = memcpy_bandwidth()
    print(f"single-core memcpy (64 MiB, best of 10): {mem:.2f} GB/s")

    code, out, wall = probe(
        [
            "--nproc_per_node",
            "2",
            "--backend",
            "gloo",
            "-b",
            "64M",
            "-e",
            "64M",
            "--iters",
            "5",
            "--warmup",
            "2",
            "--timeout",
            "120",
            "--run_limit",
            "500",
        ],
        600,
    )
    row = re.search(r"^\s+67108864\s+\d+\s+float\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$", out, re.M)
    if code != 0 or row is None:
        print(out[-3000:])
        print(f"probe run failed (exit {code})")
        return 1
    t_us, algbw, busbw = float(row.group(1)), float(row.group(2)), float(row.group(3))
    print(
        f"gloo all_reduce 64 MiB, 2 ranks: time {t_us / 1e3:.1f} ms, algbw {algbw:.3f} GB/s, "
        f"busbw {busbw:.3f} GB/s (whole run {wall:.1f} s)"
    )
    print(f"ratio busbw / single-core memcpy: {busbw / mem:.3f}")

    timeout = 3
    code, out, wall = probe(
        [
            "--nproc_per_node",
            "2",
            "--backend",
            "gloo",
            "-b",
            "8",
            "-e",
            "64",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--timeout",
            str(timeout),
            "--fault",
            "skip:1@2",
            "--run_limit",
            "300",
        ],
        400,
    )
    after = re.search(r"the run ended ([\d.]+) s after the first missed deadline", out)
    if code != 3 or after is None:
        print(out[-3000:])
        print(f"deadline run did not end as expected (exit {code})")
        return 1
    seconds = float(after.group(1))
    print(
        f"missed deadline -> probe exit: {seconds:.2f} s (--timeout {timeout} s; whole run {wall:.1f} s, exit {code})"
    )
    print(f"ratio (deadline-to-exit) / --timeout: {seconds / timeout:.2f}")

    ours, baseline = buffer_peaks()
    print(
        f"sweep buffers, peak memory per byte of -e (256 MiB): probe {ours:.2f}, int64-indexed baseline {baseline:.2f}"
    )
    print(f"ratio probe / baseline peak memory: {ours / baseline:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
