"""The launcher with the real Isaac Lab's trainer (``-m isaaclab_rl.entrypoints.multigpu`` or a script inside an
``isaaclab*`` package), in-process and torch-free: what it refuses in one line before any rank starts (several CPU
ranks, GPU ranks without ``--distributed``, ``--device cpu`` with rsl_rl's agent left on ``cuda:0``) and what it
passes (every argument unchanged, its own ``--rl_library`` when given). The real trainer under the launcher:
tests/test_isaaclab_real_e2e.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mgpu_testing import REPO, loopback_env
from mgpu_testing.docs import load_script

from mgpu_lab.launch import any_script, launcher
from mgpu_lab.launch.devices import Inventory, made_up_uuid

LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"
TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
SCRIPT = load_script(LAUNCHER, "_mgpu_launcher_isaaclab_trainer")
MODULE = "isaaclab_rl.entrypoints.multigpu"
CARTPOLE = ["--task", "Isaac-Cartpole-Direct", "--num_envs", "16", "presets=newton_mjwarp", "--max_iterations", "3"]
TWO_GPUS = Inventory([made_up_uuid(0), made_up_uuid(1)], [], "a made-up inventory")


#: a stand-in of Isaac Lab's trainer module on the ranks' path (the launcher finds -m modules before any rank starts;
#: this environment has no Isaac Lab): set by :func:`stand_in_trainer`
STAND_IN: list[str] = []


@pytest.fixture(autouse=True)
def stand_in_trainer(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not STAND_IN:
        root = tmp_path_factory.mktemp("stand_in")
        folder = root / "isaaclab_rl" / "entrypoints"
        folder.mkdir(parents=True)
        for init in (folder.parent / "__init__.py", folder / "__init__.py"):
            init.write_text("")
        (folder / "multigpu.py").write_text("raise SystemExit('a stand-in: only the launcher reads this path')\n")
        STAND_IN.append(str(root))


def env(**extra: str) -> dict[str, str]:
    out = loopback_env(PYTHONPATH=STAND_IN[0], **extra)
    if "CUDA_VISIBLE_DEVICES" not in extra:
        out.pop("CUDA_VISIBLE_DEVICES")  # the made-up inventory decides
    return out


def command(*args: str, gpus: Inventory = TWO_GPUS) -> list[str]:
    cfg = launcher.make_config(
        SCRIPT.build_parser(), ["--dry_run", *args], train_script=TRAIN, environ=env(), inventory=gpus
    )
    return launcher.build_command(cfg)


def refusal(capsys: pytest.CaptureFixture, *args: str, gpus: Inventory = TWO_GPUS) -> str:
    code = launcher.main(SCRIPT.build_parser(), list(args), train_script=TRAIN, environ=env(), inventory=gpus)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert err.startswith(f"{launcher.PROG}: error: "), err
    return err.strip()[len(f"{launcher.PROG}: error: ") :]


def tail(cmd: list[str]) -> list[str]:
    """What the rank entry runs: ``-m MODULE ARGS`` (after the entry's ``--job_root DIR``)."""
    return cmd[cmd.index(any_script.ENTRY) + 3 :]


@pytest.fixture
def packaged(tmp_path: Path) -> Path:
    """A trainer script inside a package named like Isaac Lab's (``isaaclab_rl/entrypoints/multigpu.py``)."""
    folder = tmp_path / "site-packages" / "isaaclab_rl" / "entrypoints"
    folder.mkdir(parents=True)
    for init in (folder.parent / "__init__.py", folder / "__init__.py"):
        init.write_text("")
    script = folder / "multigpu.py"
    script.write_text("raise SystemExit(0)\n")
    return script


def test_the_real_trainer_gets_every_argument_unchanged_and_its_rl_library() -> None:
    args = ["--num_gpus", "1", "--device", "cpu", "-m", MODULE, "--rl_library", "rsl_rl", *CARTPOLE, "agent.device=cpu"]
    assert tail(command(*args)) == [
        "-m",
        MODULE,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        *CARTPOLE,
        "agent.device=cpu",
    ]


def test_without_rl_library_the_trainer_picks_the_tasks_own() -> None:
    cmd = command("--num_gpus", "1", "--device", "cpu", "-m", MODULE, *CARTPOLE)
    assert "--rl_library" not in tail(cmd)


def test_another_script_never_gets_the_launchers_rl_library(tmp_path: Path) -> None:
    other = tmp_path / "isaaclab_rl" / "train.py"  # named like Isaac Lab's package, but no package
    other.parent.mkdir()
    other.write_text("")
    cmd = command("--num_gpus", "1", "--device", "cpu", "--train_script", str(other), "--rl_library", "skrl")
    assert "--rl_library" not in tail(cmd)


@pytest.mark.parametrize(
    "ranks",
    [
        ["--num_gpus", "2", "--device", "cpu"],
        ["--num_gpus", "cpu", "--device", "cpu"],
        ["--num_gpus", "1", "--device", "cpu", "--nnodes", "2", "--node_rank", "0", "--master_addr", "127.0.0.1"],
    ],
    ids=["two", "one-per-core", "two-nodes"],
)
def test_several_cpu_ranks_are_refused_with_the_reason_and_the_way_out(capsys, monkeypatch, ranks) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    err = refusal(capsys, *ranks, "-m", MODULE, "--rl_library", "rsl_rl", *CARTPOLE, "agent.device=cpu")
    assert err.startswith("2 CPU ranks" if "cpu" not in ranks[1] else "4 CPU ranks"), err
    assert f"with Isaac Lab's trainer ({MODULE}): Isaac Lab refuses distributed training on the CPU" in err
    assert "run one CPU rank (--num_gpus 1 --device cpu) or one rank per CUDA GPU" in err


def test_a_script_inside_isaac_labs_packages_is_its_trainer(capsys, packaged: Path) -> None:
    err = refusal(capsys, "--num_gpus", "2", "--device", "cpu", "--train_script", str(packaged), "agent.device=cpu")
    assert err.startswith("2 CPU ranks with Isaac Lab's trainer (multigpu.py): Isaac Lab refuses"), err


def test_several_cpu_ranks_of_another_script_still_run() -> None:
    ddp = REPO / "tests" / "fixtures" / "any_script" / "ddp_train.py"
    cmd = command("--num_gpus", "2", "--device", "cpu", "--train_script", str(ddp))
    assert cmd[cmd.index(any_script.ENTRY) + 3 :] == [str(ddp), "--device", "cpu"]


def test_gpu_ranks_without_distributed_are_refused(capsys) -> None:
    err = refusal(capsys, "--num_gpus", "2", "-m", MODULE, "--rl_library", "rsl_rl", *CARTPOLE)
    assert err == (
        f"2 ranks of Isaac Lab's trainer ({MODULE}) without --distributed: every rank would simulate on cuda:0 "
        "(Isaac Lab gives each rank cuda:LOCAL_RANK only with --distributed); add --distributed (Isaac Lab's own "
        "train_multigpu adds it to every rank)"
    )
    cmd = command("--num_gpus", "2", "-m", MODULE, "--rl_library", "rsl_rl", *CARTPOLE, "--distributed")
    assert tail(cmd)[-2] == "--distributed"


def test_several_ranks_share_one_run_folder_name() -> None:
    """Isaac Lab's trainer names its run folder after the time, per rank: several ranks get one
    ``--run_timestamp`` from the launcher (as from Isaac Lab's own), unless the command line gives one."""
    import re

    cmd = command("--num_gpus", "2", "-m", MODULE, *CARTPOLE, "--distributed")
    assert tail(cmd)[:-1] == ["-m", MODULE, *CARTPOLE, "--distributed"]
    assert re.fullmatch(r"--run_timestamp=\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", tail(cmd)[-1]), tail(cmd)
    given = command("--num_gpus", "2", "-m", MODULE, *CARTPOLE, "--distributed", "--run_timestamp", "mine")
    assert tail(given) == ["-m", MODULE, *CARTPOLE, "--distributed", "--run_timestamp", "mine"]


def test_one_gpu_rank_needs_no_distributed() -> None:
    assert tail(command("--num_gpus", "1", "-m", MODULE, *CARTPOLE)) == ["-m", MODULE, *CARTPOLE]


def test_cpu_with_rsl_rls_agent_left_on_cuda_is_refused(capsys) -> None:
    err = refusal(capsys, "--num_gpus", "1", "--device", "cpu", "-m", MODULE, "--rl_library", "rsl_rl", *CARTPOLE)
    assert err == (
        f"--device cpu with Isaac Lab's trainer ({MODULE}): the simulation runs on the CPU but rsl_rl's agent "
        "stays on cuda:0 (its default); add agent.device=cpu (or agent.device=cuda:0 to keep the agent on a GPU)"
    )
    for agent in ("agent.device=cpu", "agent.device=cuda:0"):
        cmd = command("--num_gpus", "1", "--device", "cpu", "-m", MODULE, "--rl_library", "rsl_rl", *CARTPOLE, agent)
        assert tail(cmd)[-1] == agent


def test_missing_gpus_suggest_only_what_isaac_lab_accepts(capsys) -> None:
    """Issue 47: without GPUs, a refusal for Isaac Lab's trainer points at one CPU rank (which Isaac Lab trains),
    never at several CPU ranks on gloo (which it refuses); this project's trainer keeps its gloo way out."""
    none = Inventory([], [], "no GPU in a made-up inventory")
    way_out = (
        "Isaac Lab's trainer trains several ranks on CUDA GPUs only: run it where the GPUs are visible, or rehearse "
        "one CPU rank (--num_gpus 1 --device cpu, with agent.device=cpu for rsl_rl)"
    )
    for count in ("4", "gpu"):
        err = refusal(
            capsys, "--num_gpus", count, "-m", MODULE, "--rl_library", "rsl_rl", *CARTPOLE, "--distributed", gpus=none
        )
        assert err.startswith(f"--num_gpus {count}: no GPU is visible (") and err.endswith(f"); {way_out}"), err
    err = refusal(capsys, "--num_gpus", "4", "-m", MODULE, *CARTPOLE, "--distributed")
    assert err.endswith("use --num_gpus 2 or fewer") and "--device cpu" not in err, err
    err = refusal(capsys, "--num_gpus", "4", *CARTPOLE[:2], gpus=none)
    assert err.endswith("to run 4 CPU ranks on gloo add --device cpu"), err
