"""Helpers for the NCCL probe tests: the probe's path, reading its output and finding processes a test left
behind."""

from __future__ import annotations

import re
import time
import uuid
from types import ModuleType

import pytest

from mgpu_testing import REPO, loopback_env
from mgpu_testing.docs import load_script

PROBE = REPO / "skills/user/train-multi-gpu/scripts/nccl_probe.py"
SMALL = ["--backend", "gloo", "-b", "8", "-e", "64K", "--iters", "2", "--warmup", "1"]
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$", re.M)


def check_passing_output(out: str, world: int) -> None:
    """A passing sweep of SMALL's sizes at this world size: every row right, busbw = algbw * 2(n-1)/n,
    rank 0's OK verdict and every rank's ok line."""
    assert "busbw(GB/s)" in out and "#wrong" in out
    rows = ROW.findall(out)
    sizes = [int(r[0]) for r in rows]
    assert sizes == [8 * 2**i for i in range(14)]  # 8 B .. 64 KiB, doubling
    assert all(int(r[5]) == 0 for r in rows)
    for r in rows:
        assert float(r[4]) == pytest.approx(float(r[3]) * 2 * (world - 1) / world, abs=2e-3)
    assert f"world size {world} " in out
    assert re.search(r"^# versions: torch \S+, CUDA \S+, NCCL \S+, driver \S+$", out, re.M), "no versions line"
    assert "# result: OK" in out
    for rank in range(world):
        assert re.search(rf"^rank {rank} ok$", out, re.M), f"rank {rank} did not report ok"


def tagged_env(**extra: str) -> tuple[dict[str, str], str]:
    """A loopback environment carrying a unique tag, so leftover processes can be found."""
    tag = uuid.uuid4().hex
    return loopback_env(PROBETEST_TAG=tag, **extra), tag


def leftovers(tag: str) -> list[int]:
    """Processes still alive whose environment carries the tag (zombies have none)."""
    from mgpu_lab.core import procs

    return procs.with_env("PROBETEST_TAG", tag)


def assert_nothing_left(tag: str) -> None:
    end = time.monotonic() + 10
    while leftovers(tag) and time.monotonic() < end:
        time.sleep(0.2)
    assert leftovers(tag) == []


def probe_module() -> ModuleType:
    """The probe imported by path (its top level needs no torch), for its pure functions."""
    return load_script(PROBE, "_mgpu_probe_tests_nccl_probe")


def beyond_host_memory() -> str:
    """An -e value whose single buffer is already larger than this host's MemAvailable."""
    from mgpu_lab.train.resources import host_available  # the package's one reader of the host's free memory

    available = host_available()
    assert available is not None, "this host does not say how much memory is free"
    gib = 1
    while gib * 1024**3 <= available:
        gib *= 2
    return f"{gib}G"
