"""Helpers for the doc and command tests: the entry scripts' paths, importing them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from mgpu_testing import REPO

LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"
TRAINER = REPO / "scripts" / "reinforcement_learning" / "train.py"
PROBE = REPO / "skills" / "user" / "train-multi-gpu" / "scripts" / "nccl_probe.py"


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def load_script(path: Path, name: str) -> ModuleType:
    """Import an entry script by path (not as ``__main__``), to reach its ``build_parser()``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_sphinx(source: Path, html: Path, doctrees: Path, *, timeout: float = 300):
    """``sphinx-build -W --keep-going -q -b html`` of ``source`` with this interpreter: warnings are errors."""
    from mgpu_testing import run

    return run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(doctrees),
            str(source),
            str(html),
        ],
        timeout=timeout,
    )
