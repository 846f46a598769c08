"""Hostile input to the launcher (issues 13 and 16): every bad value is one line on stderr and exit 2, before
anything starts or is written. In-process: the launcher's ``main`` runs with the entry script's parser in an
empty folder, and the runner is replaced by a trap, so a bad value that slipped through fails the test
instead of starting a job."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from mgpu_testing import REPO
from mgpu_testing.docs import load_script

from mgpu_lab.job.config import LaunchConfig
from mgpu_lab.launch import launcher

CPU2 = ["--num_gpus", "2", "--device", "cpu"]
SCRIPT = load_script(REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py", "_mgpu_launcher_hostile")
TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")


def reject(
    args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, **env: str
) -> str:
    """Run the launcher (no --dry_run) in an empty folder; check exit 2, one line, no traceback, nothing written."""

    def trap(config: LaunchConfig, cmd: list[str]) -> int:
        raise AssertionError(f"the job would have started: {cmd}")

    monkeypatch.setattr(launcher, "run", trap)
    monkeypatch.chdir(cwd)
    environ = {"CUDA_VISIBLE_DEVICES": "", **env}
    before = sorted(os.listdir(cwd))
    try:
        code = launcher.main(SCRIPT.build_parser(), args, train_script=TRAIN, environ=environ)
    except SystemExit as exc:  # argparse's own errors, through the script's one-line hook
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, (code, out[-2000:], err[-2000:])
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mgpu-lab train_multigpu: error: "), lines[0]
    assert sorted(os.listdir(cwd)) == before, os.listdir(cwd)  # nothing was written
    return lines[0]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--monitor_interval", "nan"], "--monitor_interval nan"),
        (["--monitor_interval", "inf"], "--monitor_interval inf"),
        (["--monitor_interval", "-1"], "--monitor_interval -1"),
        (["--rdzv_endpoint", "host:notaport"], "--rdzv_endpoint host:notaport"),
        (["--rdzv_endpoint", "host:99999"], "--rdzv_endpoint host:99999"),
        (["--rdzv_endpoint", ""], "--rdzv_endpoint"),
        (["--rdzv_backend", "bogus"], "--rdzv_backend"),
        (["--rdzv_backend", ""], "--rdzv_backend"),
        (["--rdzv_timeout", "nan"], "--rdzv_timeout nan"),
        (["--rdzv_timeout", "0"], "--rdzv_timeout 0"),
        (["--hang_timeout", "-1"], "--hang_timeout -1"),
        (["--hang_timeout", "abc"], "--hang_timeout"),
        (["--hang_timeout", "inf"], "--hang_timeout inf"),
        (["--hang_timeout", "0.05"], "below the monitor interval"),
        (["--hang_timeout", "1", "--monitor_interval", "2"], "below the monitor interval"),
        (["--max_restarts", "-1"], "--max_restarts -1"),
        (["--num_gpus", "1e9"], "--num_gpus 1e9"),
        (["--num_gpus", str(10**30)], "--num_gpus 1000000000"),
        (["--num_gpus", "9" * 5000], "--num_gpus 9999"),
        (["--num_gpus", str(4 * (os.cpu_count() or 1) + 1)], f"at most {4 * (os.cpu_count() or 1)} CPU ranks"),
        (["--nun_gpus", "2"], "train.py: unrecognized arguments: --nun_gpus 2"),
        (["--task", "Nope-v0"], "--task Nope-v0: unknown task 'Nope-v0'"),
        (["--num_envs", "lots"], "train.py: argument --num_envs"),
        (["--", "--help"], "mgpu-lab train --help"),
    ],
)
def test_bad_values_are_one_line(tmp_path: Path, args: list[str], names: str, monkeypatch, capsys) -> None:
    device = ["--device", "cpu"] if "--num_gpus" in args else CPU2
    line = reject([*device, *args], tmp_path, monkeypatch, capsys)
    assert names in line, line


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "-1", "soon"])
def test_bad_kill_grace_is_refused_before_the_job_starts(tmp_path: Path, value: str, monkeypatch, capsys) -> None:
    line = reject(CPU2, tmp_path, monkeypatch, capsys, MGPU_LAB_KILL_GRACE_S=value)
    assert "MGPU_LAB_KILL_GRACE_S" in line


def test_master_port_in_use_on_the_store_host(tmp_path: Path, monkeypatch, capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        line = reject([*CPU2, "--master_port", str(port)], tmp_path, monkeypatch, capsys)
    assert f"--master_port {port}: already in use on this host" in line


def test_log_dir_that_is_a_file(tmp_path: Path, monkeypatch, capsys) -> None:
    work = tmp_path / "work"
    work.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "exists and is not a folder" in reject([*CPU2, "--log_dir", str(afile)], work, monkeypatch, capsys)
    assert "is not a folder" in reject([*CPU2, "--log_dir", str(afile / "sub")], work, monkeypatch, capsys)
    assert afile.read_text() == "x"


def test_log_dir_that_cannot_be_written(tmp_path: Path, monkeypatch, capsys) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if os.geteuid() == 0:  # root ignores permission bits; /proc refuses new folders to everyone
        target = "/proc/mgpu_lab_no_such_dir/logs"
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        target = str(ro / "logs")
    line = reject([*CPU2, "--log_dir", target], work, monkeypatch, capsys)
    assert f"--log_dir {target}: cannot be created" in line
    assert not Path(target).exists()


# ---------------------------------------------------------------------------------------------- issue 16
# What the ranks used to refuse one by one (after torchrun had started them) is refused here, once.


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--seed", "-1"], "--seed must be between 0 and 4294967294 (rank R seeds with seed + R, and 2 ranks"),
        (["--seed", str(2**64)], f"got {2**64}"),
        (
            ["--seed", str(2**32 - 1)],
            "between 0 and 4294967294 (rank R seeds with seed + R, and 2 ranks",
        ),  # fine alone, not with rank 1's offset
        (
            ["--num_gpus", "4", "--seed", str(2**32 - 3)],
            "between 0 and 4294967292 (rank R seeds with seed + R, and 4 ranks",
        ),
        (
            ["--nnodes", "2", "--node_rank", "0", "--master_addr", "127.0.0.1", "--seed", str(2**32 - 3)],
            "between 0 and 4294967292 (rank R seeds with seed + R, and 4 ranks",
        ),  # 2 nodes x 2 ranks
        (["--run_name", "a/b"], "--run_name 'a/b': not a plain folder name"),
        (["--run_name", "x" * 300], "--run_name is 300 bytes long"),
        (["--num_envs", "0"], "--num_envs must be >= 1, got 0"),
        (["--max_iterations", "-3"], "--max_iterations must be >= 1"),
        (["--save_interval", "0"], "--save_interval must be >= 1"),
        (["--ml_framework", "jax"], "--ml_framework jax is for skrl only"),
        (["--checkpoint", "missing.pt"], "--checkpoint missing.pt: no such file"),
    ],
)
def test_what_every_rank_would_refuse_is_refused_by_the_launcher(
    tmp_path: Path, args: list[str], names: str, monkeypatch, capsys
) -> None:
    device = ["--device", "cpu"] if "--num_gpus" in args else CPU2
    line = reject([*device, *args], tmp_path, monkeypatch, capsys)
    assert names in line, line


def test_log_root_that_is_a_file(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "afile").write_text("x")
    line = reject([*CPU2, "--log_root", "afile"], tmp_path, monkeypatch, capsys)
    assert "--log_root afile: afile is a file; logs need a folder there" in line


@pytest.mark.parametrize("gpus", ["5,6", "0,x,1", ""])
def test_devices_that_do_not_exist_are_refused(tmp_path: Path, gpus: str, monkeypatch, capsys) -> None:
    """On this machine (no GPU, or fewer than named): one line, with or without --dry_run."""
    from mgpu_lab.launch.devices import discover

    if len(discover({}).gpus) > 6:
        pytest.skip("this machine has the devices named")
    for dry in ([], ["--dry_run"]):
        line = reject(
            [*dry, "--num_gpus", "2", "--task", "Toy-Cartpole-v0"],
            tmp_path,
            monkeypatch,
            capsys,
            CUDA_VISIBLE_DEVICES=gpus,
        )
        assert "CUDA_VISIBLE_DEVICES=" in line, line


def _checkpoint(path: Path, data: object) -> Path:
    import torch

    torch.save(data, path)
    return path


@pytest.mark.parametrize(
    ("library", "written", "names"),
    [
        (
            "rsl_rl",
            {"model": {"w": [1.0]}, "epoch": 3},
            "not an rsl_rl checkpoint: rl_games wrote it; give --rl_library rl_games",
        ),
        ("rl_games", {"policy": {}, "value": {}}, "not an rl_games checkpoint: skrl wrote it"),
        (
            "skrl",
            {"actor_state_dict": {}, "critic_state_dict": {}, "iter": 4},
            "not a skrl PPO checkpoint: rsl_rl wrote it",
        ),
        ("rsl_rl", {"weights": [1, 2]}, "not an rsl_rl checkpoint (expected 'actor_state_dict' and"),
    ],
)
def test_a_checkpoint_of_another_library_is_refused(
    tmp_path: Path, library: str, written: dict, names: str, monkeypatch, capsys
) -> None:
    _checkpoint(tmp_path / "ck.pt", written)
    line = reject([*CPU2, "--rl_library", library, "--checkpoint", "ck.pt"], tmp_path, monkeypatch, capsys)
    assert f"--checkpoint ck.pt: {names}" in line, line


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda p: p.write_bytes(b""), "an empty file, not a checkpoint"),
        (lambda p: p.write_text("hello, not a checkpoint\n"), "not a checkpoint (torch.load cannot read it"),
        (lambda p: p.mkdir(), "not a file"),
    ],
)
def test_a_file_that_is_no_checkpoint_is_refused(tmp_path: Path, make, names: str, monkeypatch, capsys) -> None:
    make(tmp_path / "ck")
    line = reject([*CPU2, "--checkpoint", "ck"], tmp_path, monkeypatch, capsys)
    assert f"--checkpoint ck: {names}" in line, line


@pytest.mark.parametrize(
    ("library", "policy"),
    [
        (
            "rsl_rl",
            {
                "actor_state_dict": {"obs_normalizer._mean": [[0.0] * 3], "mlp.0.weight": [[0.0] * 3] * 32},
                "critic_state_dict": {},
                "iter": 4,
            },
        ),
        (
            "rl_games",
            {
                "model": {
                    "running_mean_std.running_mean": [0.0] * 3,
                    "a2c_network.actor_mlp.0.weight": [[0.0] * 3] * 64,
                },
                "epoch": 3,
            },
        ),
        ("skrl", {"policy": {"log_std_parameter": [0.0], "net_container.0.weight": [[0.0] * 3] * 64}, "value": {}}),
    ],
)
def test_a_checkpoint_of_another_task_is_refused(
    tmp_path: Path, library: str, policy: dict, monkeypatch, capsys
) -> None:
    """The libraries' own layouts (the policy's first weight matrix) of a 3-observation task (the pendulum),
    given for the 4-observation cart-pole."""
    import torch

    def tensors(value):
        if isinstance(value, dict):
            return {k: tensors(v) for k, v in value.items()}
        return torch.tensor(value) if isinstance(value, list) else value

    _checkpoint(tmp_path / "ck.pt", tensors(policy))
    line = reject(
        [*CPU2, "--rl_library", library, "--task", "Toy-Cartpole-v0", "--checkpoint", "ck.pt"],
        tmp_path,
        monkeypatch,
        capsys,
    )
    assert (
        "--checkpoint ck.pt: its policy takes 3 observations and Toy-Cartpole-v0 gives 4: a checkpoint of another task"
    ) in line, line
    # the same file fits the pendulum: no refusal there (a dry run, so nothing starts)
    cfg = launcher.make_config(
        SCRIPT.build_parser(),
        ["--dry_run", *CPU2, "--rl_library", library, "--task", "Toy-Pendulum-SwingUp-v0", "--checkpoint", "ck.pt"],
        train_script=TRAIN,
        environ={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert cfg.dry_run


# ---------------------------------------------------------------------------------------------- issue 38
# A node rank at or past the node count: --nnodes given, torchrun's PET_NNODES, or one node implied.


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        (["--node_rank", "1"], {}, "--node_rank 1: out of range for one node (no --nnodes given); give --nnodes N"),
        (["--node_rank", "5", "--dry_run"], {}, "--node_rank 5: out of range for one node"),
        (["--node_rank", "1", "--nnodes", "1"], {}, "--node_rank 1: out of range for --nnodes 1; use 0 to 0"),
        (["--node_rank", "2", "--nnodes", "2"], {}, "--node_rank 2: out of range for --nnodes 2; use 0 to 1"),
        (["--node_rank", "4", "--nnodes", "1:4"], {}, "--node_rank 4: out of range for --nnodes 1:4; use 0 to 3"),
        (["--node_rank", "2"], {"PET_NNODES": "2"}, "--node_rank 2: out of range for PET_NNODES=2; use 0 to 1"),
        (["--node_rank", "-1"], {}, "--node_rank -1: give a node rank from 0 to nnodes-1"),
    ],
)
def test_node_rank_past_the_node_count_is_refused(
    tmp_path: Path, args: list[str], env: dict[str, str], names: str, monkeypatch, capsys
) -> None:
    line = reject([*CPU2, *args], tmp_path, monkeypatch, capsys, **env)
    assert names in line, line


def test_node_rank_within_the_node_count_is_accepted(tmp_path: Path) -> None:
    for args, env in ((["--node_rank", "0"], {}), (["--node_rank", "1"], {"PET_NNODES": "2"})):
        cfg = launcher.make_config(
            SCRIPT.build_parser(),
            [*CPU2, "--dry_run", "--master_addr", "127.0.0.1", *args],
            train_script=TRAIN,
            environ={"CUDA_VISIBLE_DEVICES": "", **env},
        )
        assert cfg.node_rank == int(args[1])
