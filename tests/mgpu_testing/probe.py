"""Helpers for the NCCL probe tests: the probe's path and finding processes a test left behind."""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

from mgpu_testing import REPO, loopback_env

PROBE = REPO / "skills/user/train-multi-gpu/scripts/nccl_probe.py"
SMALL = ["--backend", "gloo", "-b", "8", "-e", "64K", "--iters", "2", "--warmup", "1"]
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$", re.M)


def tagged_env(**extra: str) -> tuple[dict[str, str], str]:
    """A loopback environment carrying a unique tag, so leftover processes can be found."""
    tag = uuid.uuid4().hex
    return loopback_env(PROBETEST_TAG=tag, **extra), tag


def leftovers(tag: str) -> list[int]:
    """Processes still alive whose environment carries the tag (zombies have none)."""
    needle = f"PROBETEST_TAG={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.append(int(entry))
        except OSError:
            continue
    return found


def assert_nothing_left(tag: str) -> None:
    end = time.monotonic() + 10
    while leftovers(tag) and time.monotonic() < end:
        time.sleep(0.2)
    assert leftovers(tag) == []
