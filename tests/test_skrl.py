"""skrl (torch PPO) through train.py: one process with resume, 2 gloo ranks through the launcher, bad input."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import PYTHON, REPO, free_port, kill_group, loopback_env, run

import skrl  # noqa: F401  (a dev dependency: a missing one must fail, not skip)

TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
LAUNCHER = str(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py")
DIGEST = re.compile(r"^\[INFO\] rank (\d+)/(\d+): parameter digest ([0-9a-f]{64})$", re.M)
SYNC = re.compile(r"^\[INFO\] rank (\d+)/(\d+): parameters synchronized$", re.M)
TIME = re.compile(r"^\[INFO\] training time: [0-9.]+ s$", re.M)
THROUGHPUT = re.compile(r"^\[INFO\] throughput: (\d+) env-steps/s over (\d+) rank\(s\)$", re.M)
TASK = "Toy-Cartpole-v0"


def single_env() -> dict[str, str]:
    env = loopback_env()
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE"):
        env.pop(name, None)
    return env


def skrl_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("checkpoints/agent_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def assert_skrl_checkpoint(path: Path) -> dict:
    data = torch.load(path, map_location="cpu", weights_only=False)
    assert {"policy", "value", "optimizer"} <= set(data), sorted(data)
    return data


def test_one_process_trains_saves_and_resumes(tmp_path):
    common = [PYTHON, TRAIN, "--rl_library", "skrl", "--task", TASK, "--device", "cpu", "--num_envs", "8",
              "--seed", "3", "--log_root", str(tmp_path)]
    proc = run([*common, "--max_iterations", "2", "--save_interval", "1", "--run_name", "first"],
               timeout=400, env=single_env())
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert SYNC.findall(out) == [("0", "1")]
    assert TIME.search(out) and THROUGHPUT.search(out).group(2) == "1"
    assert len(DIGEST.findall(out)) == 1

    run_dirs = list((tmp_path / "skrl" / TASK).iterdir())
    assert len(run_dirs) == 1 and run_dirs[0].name.endswith("_first")
    saved = skrl_checkpoints(run_dirs[0])
    assert [p.name for p in saved] == ["agent_16.pt", "agent_32.pt"]  # 16 rollout steps per iteration
    for path in saved:
        assert_skrl_checkpoint(path)
    assert not list(run_dirs[0].rglob(".*.tmp")), "temp files left behind"
    assert list(run_dirs[0].glob("events.out.tfevents.*")), "no TensorBoard log on rank 0"

    proc = run([*common, "--max_iterations", "1", "--checkpoint", str(saved[-1]), "--run_name", "again"],
               timeout=400, env=single_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"[INFO] resumed from {saved[-1]}" in proc.stdout
    resumed = next(d for d in (tmp_path / "skrl" / TASK).iterdir() if d.name.endswith("_again"))
    assert [p.name for p in skrl_checkpoints(resumed)] == ["agent_16.pt"]
    assert_skrl_checkpoint(skrl_checkpoints(resumed)[0])


def test_two_gloo_ranks_through_the_launcher(tmp_path):
    cmd = [PYTHON, LAUNCHER, "--rl_library", "skrl", "--num_gpus", "2", "--log_all_ranks",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "--task", TASK, "--device", "cpu", "--num_envs", "8", "--max_iterations", "2", "--seed", "5",
           "--log_root", str(tmp_path)]
    proc = run(cmd, timeout=500, env=single_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert sorted(SYNC.findall(out)) == [("0", "2"), ("1", "2")], out[-4000:]
    assert len(TIME.findall(out)) == 1
    throughput = THROUGHPUT.findall(out)
    assert len(throughput) == 1 and throughput[0][1] == "2"
    digests = dict((rank, digest) for rank, _, digest in DIGEST.findall(out))
    assert set(digests) == {"0", "1"}, out[-4000:]
    assert digests["0"] == digests["1"], "ranks ended with different parameters"
    run_dirs = list((tmp_path / "skrl" / TASK).iterdir())
    assert len(run_dirs) == 1, "only rank 0 may write logs"
    assert [p.name for p in skrl_checkpoints(run_dirs[0])][-1] == "agent_32.pt"


def test_checkpoint_of_another_library_is_one_line(tmp_path):
    other = tmp_path / "model_3.pt"
    torch.save({"actor_state_dict": {}, "critic_state_dict": {}, "iter": 3}, other)
    proc = run([PYTHON, TRAIN, "--rl_library", "skrl", "--device", "cpu", "--num_envs", "4",
                "--max_iterations", "1", "--checkpoint", str(other), "--log_root", str(tmp_path)],
               timeout=300, env=single_env())
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a skrl PPO checkpoint" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("library", "framework", "blocked", "expected"), [
    ("skrl", "torch", "skrl", "skrl is not installed: uv sync --extra skrl"),
    ("skrl", "jax", "flax", "uv sync --extra jax"),
    ("rl_games", "torch", "rl_games", "rl_games is not installed: uv sync --extra rl-games"),
])
def test_missing_library_names_the_extra(tmp_path, library, framework, blocked, expected):
    # a module set to None in sys.modules is "not installed" for importlib's finders and for import
    code = (f"import runpy, sys; sys.modules[{blocked!r}] = None; "
            f"sys.argv = [{TRAIN!r}, '--rl_library', {library!r}, '--ml_framework', {framework!r}, "
            f"'--device', 'cpu', '--num_envs', '2', '--max_iterations', '1', '--log_root', {str(tmp_path)!r}]; "
            f"runpy.run_path({TRAIN!r}, run_name='__main__')")
    proc = run([PYTHON, "-c", code], timeout=300, env=single_env())
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert not (tmp_path / library).exists()


def test_sigkill_while_saving_every_iteration_leaves_loadable_checkpoints(tmp_path):
    cmd = [PYTHON, TRAIN, "--rl_library", "skrl", "--device", "cpu", "--num_envs", "8", "--max_iterations",
           "100000", "--save_interval", "1", "--log_root", str(tmp_path)]
    log = open(tmp_path / "stderr.log", "w+")  # a file, not a pipe: a chatty run cannot block on it
    proc = subprocess.Popen(cmd, cwd=REPO, env=single_env(), stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and len(list(tmp_path.rglob("agent_*.pt"))) < 3:
            time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "stderr.log").read_text()[-3000:]
        assert len(list(tmp_path.rglob("agent_*.pt"))) >= 3, "no checkpoints within the deadline"
        time.sleep(0.31)  # land somewhere inside the save cycle
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        kill_group(proc)
        log.close()
    saved = list(tmp_path.rglob("*.pt"))
    assert len(saved) >= 3
    for path in saved:
        assert_skrl_checkpoint(path)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q"]))
