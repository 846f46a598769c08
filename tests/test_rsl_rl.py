"""rsl_rl through train.py: one process, resume, learning, 2 gloo ranks through the launcher, SIGKILL safety."""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from conftest import PYTHON, REPO, free_port, kill_group, loopback_env, run

import rsl_rl  # noqa: F401  (a dev dependency: a missing one must fail, not skip)

TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
LAUNCHER = str(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py")
# Not anchored at line start: another rank's unterminated output may precede a line in the shared pipe.
DIGEST = re.compile(r"\[INFO\] rank (\d+)/(\d+): parameter digest ([0-9a-f]{64})$", re.M)
SYNC = re.compile(r"\[INFO\] rank (\d+)/(\d+): parameters synchronized$", re.M)
TIME = re.compile(r"^\[INFO\] training time: [0-9.]+ s$", re.M)
THROUGHPUT = re.compile(r"^\[INFO\] throughput: (\d+) env-steps/s over (\d+) rank\(s\)$", re.M)


def single_env() -> dict[str, str]:
    env = loopback_env()
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE"):
        env.pop(name, None)
    return env


def checkpoints(root: Path) -> list[Path]:
    return sorted(root.rglob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def assert_rsl_rl_checkpoint(path: Path) -> dict:
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    assert {"actor_state_dict", "critic_state_dict", "optimizer_state_dict", "iter"} <= set(loaded)
    return loaded


def test_one_process_trains_saves_and_resumes(tmp_path):
    common = ["--rl_library", "rsl_rl", "--task", "Toy-Cartpole-v0", "--device", "cpu", "--num_envs", "16",
              "--log_root", str(tmp_path), "--seed", "3"]
    proc = run([PYTHON, TRAIN, *common, "--max_iterations", "3", "--save_interval", "1", "--run_name", "first"],
               timeout=300, env=single_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert SYNC.findall(out) == [("0", "1")]
    assert TIME.search(out) and THROUGHPUT.search(out)
    assert THROUGHPUT.search(out).group(2) == "1" and int(THROUGHPUT.search(out).group(1)) > 0
    assert len(DIGEST.findall(out)) == 1

    run_dirs = list((tmp_path / "rsl_rl" / "Toy-Cartpole-v0").iterdir())
    assert len(run_dirs) == 1 and run_dirs[0].name.endswith("_first")
    saved = checkpoints(run_dirs[0])
    assert [p.name for p in saved] == ["model_0.pt", "model_1.pt", "model_2.pt"]
    for path in saved:
        assert_rsl_rl_checkpoint(path)
    assert not list(run_dirs[0].glob(".*.tmp")), "temp files left behind"
    assert (run_dirs[0] / "params" / "config.json").is_file()

    proc = run([PYTHON, TRAIN, *common, "--max_iterations", "2", "--checkpoint", str(saved[-1])],
               timeout=300, env=single_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stdout and "at iteration 2" in proc.stdout
    resumed = [d for d in (tmp_path / "rsl_rl" / "Toy-Cartpole-v0").iterdir() if d != run_dirs[0]]
    assert len(resumed) == 1
    # iterations continue from the checkpoint's: 2 more after iteration 2 end at iteration 3
    assert assert_rsl_rl_checkpoint(checkpoints(resumed[0])[-1])["iter"] == 3


def test_rsl_rl_learns_cartpole():
    """Fixed seed, 15 PPO iterations in this process: late episodes clearly outlast the first ones."""
    from mgpu_lab.adapters import rsl_rl as adapter
    from mgpu_lab.dist import DistContext
    from mgpu_lab.train_config import TrainConfig

    cfg = TrainConfig(rl_library="rsl_rl", task="Toy-Cartpole-v0", num_envs=64, max_iterations=15, seed=1,
                      device="cpu", log_dir="")
    with contextlib.redirect_stdout(io.StringIO()):
        result = adapter.train(cfg, DistContext())
    rewards = [r for r in result.mean_rewards if not math.isnan(r)]
    assert len(rewards) >= 8, result.mean_rewards
    first, late = rewards[0], sum(rewards[-3:]) / 3
    # a random policy drops the pole in ~20 steps (return ~15); a trained one lasts most of 250 steps
    assert late > max(3 * first, first + 60), (first, late, result.mean_rewards)
    assert result.env_steps == 15 * 24 * 64
    assert result.checkpoint is None  # no log_dir: nothing written


def test_two_gloo_ranks_through_the_launcher(tmp_path):
    port = free_port()
    cmd = [PYTHON, LAUNCHER, "--rl_library", "rsl_rl", "--num_gpus", "2", "--log_all_ranks",
           "--master_addr", "127.0.0.1", "--master_port", str(port),
           "--task", "Toy-Cartpole-v0", "--device", "cpu", "--num_envs", "16", "--max_iterations", "3",
           "--seed", "5", "--log_root", str(tmp_path)]
    proc = run(cmd, timeout=420, env=single_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert sorted(SYNC.findall(out)) == [("0", "2"), ("1", "2")], out[-4000:]
    assert len(TIME.findall(out)) == 1
    throughput = THROUGHPUT.findall(out)
    assert len(throughput) == 1 and throughput[0][1] == "2"
    digests = {rank: digest for rank, world, digest in DIGEST.findall(out)}
    assert set(digests) == {"0", "1"}, out[-4000:]
    assert digests["0"] == digests["1"], "ranks ended with different parameters"
    # only rank 0 wrote: one run folder
    run_dirs = list((tmp_path / "rsl_rl" / "Toy-Cartpole-v0").iterdir())
    assert len(run_dirs) == 1
    for path in checkpoints(run_dirs[0]):
        assert_rsl_rl_checkpoint(path)


def test_sigkill_while_saving_every_iteration_leaves_loadable_checkpoints(tmp_path):
    cmd = [PYTHON, TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--num_envs", "8", "--max_iterations",
           "100000", "--save_interval", "1", "--log_root", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=single_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if len(checkpoints(tmp_path)) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert len(checkpoints(tmp_path)) >= 3, "no checkpoints within the deadline"
        time.sleep(0.37)  # land somewhere inside the save cycle
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        kill_group(proc)
        proc.stderr.close()
    saved = checkpoints(tmp_path)
    assert len(saved) >= 3
    for path in saved:
        assert_rsl_rl_checkpoint(path)
