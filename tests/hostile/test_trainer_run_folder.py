"""Run folders: no two runs share one, and a refused run leaves nothing behind.

Threats covered here:

- two trainers started together with the same ``--log_root`` both wanting the same folder name (the
  suite's seam ``run_stamp`` forces the same time stamp in both processes, so the collision is certain,
  not a matter of luck): each gets its own folder (exclusive ``mkdir``, then ``_1``), with its own
  checkpoint and TensorBoard file;
- a checkpoint from another library (refused from its keys) or another task (refused when its
  tensors do not fit the models): one line, exit 2, and no file under the log root.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from mgpu_testing import REPO, kill_group, seams_env
from mgpu_testing.training import TASK, assert_one_line_error, single_env, train_args, train_cmd, train_in_process

STAMP = "2030-01-01_00-00-00"


@pytest.mark.e2e
def test_two_trainers_started_together_never_share_a_run_folder(tmp_path):
    """skrl: the library with the cheapest start-up (the run folder is the trainer's, not the library's)."""
    cmd = train_cmd("skrl", tmp_path, "--num_envs", "4", "--max_iterations", "1")
    env = seams_env(single_env(), run_stamp=STAMP)
    procs = [
        subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        for _ in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=400)[0] for p in procs]
    finally:
        for p in procs:
            kill_group(p)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    runs = sorted(p.name for p in (tmp_path / "skrl" / TASK).iterdir())
    assert runs == [STAMP, f"{STAMP}_1"]
    logged = sorted(line.split("logging to ")[1] for o in outputs for line in o.splitlines() if "logging to " in line)
    assert [Path(p).name for p in logged] == runs  # each trainer wrote where it said, to a folder of its own
    for name in runs:
        folder = tmp_path / "skrl" / TASK / name
        assert [p.name for p in folder.glob("checkpoints/agent_*.pt")] == ["agent_16.pt"]
        assert len(list(folder.glob("events.out.tfevents.*"))) == 1


def another_library(path: Path) -> None:
    torch.save({"policy": {}, "value": {}, "optimizer": {}}, path)  # skrl's layout


def another_task(path: Path) -> None:
    # rsl_rl's layout for a task with 7 observations: found before the library is imported
    torch.save(
        {
            "actor_state_dict": {"mlp.0.weight": torch.zeros(5, 7)},
            "critic_state_dict": {},
            "optimizer_state_dict": {},
            "iter": 4,
            "infos": None,
        },
        path,
    )


def misfit(path: Path) -> None:
    # rsl_rl's layout, the cartpole's 4 observations, but tensors no cartpole model has: found when the models load
    torch.save(
        {
            "actor_state_dict": {"mlp.0.weight": torch.zeros(5, 4)},
            "critic_state_dict": {},
            "optimizer_state_dict": {},
            "iter": 4,
            "infos": None,
        },
        path,
    )


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (another_library, "not an rsl_rl checkpoint"),
        (another_task, "a checkpoint of another task"),
        (misfit, f"does not fit {TASK}"),  # refused once rsl_rl built its models: after the run folder was made
    ],
)
def test_refused_checkpoint_leaves_no_file(tmp_path, make, expected):
    """train.py's parser and the trainer in this process (mgpu_testing.training.train_in_process)."""
    ckpt = tmp_path / "model_4.pt"
    make(ckpt)
    logs = tmp_path / "logs"
    proc = train_in_process(
        train_args("rsl_rl", logs, "--num_envs", "4", "--max_iterations", "9", "--checkpoint", str(ckpt)), single_env()
    )
    assert_one_line_error(proc, expected)
    assert not [p for p in logs.rglob("*") if p.is_file()]
