"""Test support for the real Isaac Lab 3.0 (tests/test_isaaclab_real_e2e.py): its venv, offline assets, environment.

The venv is made by ``bash tests/isaaclab_real/setup_env.sh`` (``.isaaclab-venv/``, or ``MGPU_ISAACLAB_VENV``):
Isaac Lab needs Python 3.12 and pins its own torch, so it never shares the project's ``.venv``. Without it the
tests skip, saying how to make it, except under ``CI=true``, where its absence is a failure (.ci/run makes it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mgpu_testing import REPO, loopback_env, run
from mgpu_testing.once import shared_root

SETUP = REPO / "tests" / "isaaclab_real" / "setup_env.sh"
BUILD_ASSETS = REPO / "tests" / "isaaclab_real" / "build_assets.py"
ROBOT = "Isaac/IsaacLab/Robots/Classic/Cartpole/cartpole.usd"
#: Isaac Lab 3.0's per-rank trainer (what its own train_multigpu runs on each rank)
TRAINER = "isaaclab_rl.entrypoints.multigpu"
#: the real Cartpole on the CPU: Warp's CPU backend through Newton's MuJoCo-Warp solver, 16 environments
CARTPOLE = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "presets=newton_mjwarp"]


def venv() -> Path:
    return Path(os.environ.get("MGPU_ISAACLAB_VENV") or REPO / ".isaaclab-venv")


def warm_cache() -> Path:
    """Warp's kernel cache setup_env.sh fills once per venv (the tests' Cartpole compiled ahead, minutes of CPU)."""
    return venv() / "warp-cache"


def python_or_skip() -> Path:
    """The Isaac Lab venv's Python; skips without it (fails under CI=true, where .ci/run must have made it)."""
    python = venv() / "bin" / "python"
    if not python.is_file() or not (venv() / "bin" / "isaaclab").is_file():
        message = f"no Isaac Lab 3.0 venv at {venv()}: run `bash {SETUP.relative_to(REPO)}` (about 7 GB, minutes)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {message}", pytrace=False)
        pytest.skip(message)
    return python


def build_assets(python: Path, root: Path) -> Path:
    """The offline asset root (``ISAACSIM_ASSET_ROOT``) built under ``root`` from the installed wheel."""
    proc = subprocess.run([str(python), str(BUILD_ASSETS), str(root)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def isaaclab_env(assets: Path, warp_cache: Path, **extra: str) -> dict[str, str]:
    """The environment of an Isaac Lab process here: loopback, one CPU thread, no GPU, the offline asset root,
    Warp's kernel cache in this session's folder (never the user's ~/.cache/warp), nothing of the project's venv."""
    env = loopback_env(ISAACSIM_ASSET_ROOT=str(assets), WARP_CACHE_PATH=str(warp_cache), **extra)
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT"):
        env.pop(name, None)
    return env


def start(cmd: list[str], cwd: Path, env: dict[str, str], out: Path) -> subprocess.Popen:
    """Start ``cmd`` in its own session; stdout to the file ``out`` (read while it runs), stderr piped."""
    with open(out, "w") as stdout:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )


def interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C at a terminal: SIGINT to the launcher's process group."""
    os.killpg(proc.pid, signal.SIGINT)


#: a job's deadline. The first job of each command compiles Warp's CPU kernels: about 70 s of one idle core for the
#: per-rank trainer's, more for `isaaclab train`'s (backward kernels too); 420 s ran out on 2 cores at a load of 17
DEADLINE_S = 900


@dataclass
class Real:
    """The Isaac Lab venv's Python, an offline asset root, a Warp kernel cache and a scratch folder."""

    python: Path
    assets: Path
    warp_cache: Path
    base: Path

    def env(self, assets: Path | None = None) -> dict[str, str]:
        return isaaclab_env(assets or self.assets, self.warp_cache)


@dataclass
class Job:
    """What a finished command left: its status, output, working folder and time (and, for a live job, more)."""

    rc: int
    out: str
    err: str
    cwd: Path
    seconds: float
    tree: list[int] = field(default_factory=list)
    tagged: list[int] = field(default_factory=list)
    stacks: str = ""
    stack_files: str = ""
    limit: float = 0.0  # the --startup_timeout and --hang_timeout it ran under (0: the defaults)


def make_real(tmp_path_factory: pytest.TempPathFactory, name: str) -> Real:
    """A test file's Isaac Lab set-up (skips without the venv). ``name`` keys its Warp kernel cache in the session's
    shared folder (never ~/.cache/warp): one cache per file, so two workers never compile into one at once. It starts
    as a copy of the kernels setup_env.sh compiled into the venv (:func:`warm_cache`), where they are."""
    python = python_or_skip()
    base = tmp_path_factory.mktemp(f"isaaclab_{name}")
    warp_cache = shared_root(tmp_path_factory) / f"warp-cache-{name}"
    if warm_cache().is_dir() and not warp_cache.exists():
        shutil.copytree(warm_cache(), warp_cache)
    warp_cache.mkdir(exist_ok=True)
    return Real(python, build_assets(python, base / "assets"), warp_cache, base)


def job(real: Real, name: str, cmd: list[str], assets: Path | None = None) -> Job:
    """Run ``cmd`` to its end in a working folder of its own under ``real.base``."""
    cwd = real.base / name
    cwd.mkdir()
    began = time.monotonic()
    proc = run(cmd, timeout=DEADLINE_S, env=real.env(assets), cwd=cwd)
    return Job(proc.returncode, proc.stdout, proc.stderr, cwd, time.monotonic() - began)
