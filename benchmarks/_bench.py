"""What the benchmark scripts share: the repository's paths and a free loopback port."""

from __future__ import annotations

import socket
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
