"""Helpers for the NCCL probe tests: the probe's path and finding processes a test left behind."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from types import ModuleType

from mgpu_testing import REPO, loopback_env
from mgpu_testing.docs import load_script

PROBE = REPO / "skills/user/train-multi-gpu/scripts/nccl_probe.py"
SMALL = ["--backend", "gloo", "-b", "8", "-e", "64K", "--iters", "2", "--warmup", "1"]
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$", re.M)


def tagged_env(**extra: str) -> tuple[dict[str, str], str]:
    """A loopback environment carrying a unique tag, so leftover processes can be found."""
    tag = uuid.uuid4().hex
    return loopback_env(PROBETEST_TAG=tag, **extra), tag


def leftovers(tag: str) -> list[int]:
    """Processes still alive whose environment carries the tag (zombies have none)."""
    from mgpu_lab import procs

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
    from mgpu_lab.resources import host_available  # the package's one reader of the host's free memory

    available = host_available()
    assert available is not None, "this host does not say how much memory is free"
    gib = 1
    while gib * 1024**3 <= available:
        gib *= 2
    return f"{gib}G"
