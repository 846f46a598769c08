"""The launcher's resolved commands (``--dry_run``), its rejections and its device counting, in-process.

Each case calls :mod:`mgpu_lab.launch.launcher` with the entry script's own parser, a clean environment and a
made-up GPU inventory (so GPU launches are rehearsed without a GPU). Only import-lightness needs a process;
the ``mgpu-lab`` CLI passing its arguments through is tests/test_cli.py's.
"""

from __future__ import annotations

import argparse
import re
import shlex

import pytest
from mgpu_testing import PYTHON, REPO, loopback_env, run
from mgpu_testing.docs import load_script

from mgpu_lab.job.config import LaunchConfig, SchedulerEnv, read_scheduler_env
from mgpu_lab.launch import launcher
from mgpu_lab.launch.devices import Inventory, made_up_uuid

LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"
TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]
JAX = [PYTHON, "-m", "skrl.utils.distributed.jax"]
SCRIPT = load_script(LAUNCHER, "_mgpu_launcher_under_test")
#: the machine these tests pretend to be on: eight GPUs
EIGHT = Inventory([made_up_uuid(i) for i in range(8)], ["MIG-aaaa-1111", "MIG-bbbb-2222"], "test inventory")


def env_with(gpus: str | None = "", **extra: str) -> dict[str, str]:
    """A clean environment: ``CUDA_VISIBLE_DEVICES=gpus`` (unset for None) and ``extra``, nothing inherited."""
    env = {"CUDA_VISIBLE_DEVICES": gpus} if gpus is not None else {}
    env.update(extra)
    return env


def config(*args: str, gpus: str | None = "", inventory: Inventory = EIGHT, **extra: str) -> LaunchConfig:
    return launcher.make_config(
        SCRIPT.build_parser(), list(args), train_script=TRAIN, environ=env_with(gpus, **extra), inventory=inventory
    )


def dry(*args: str, gpus: str | None = "", **extra: str) -> list[str]:
    """The command the launcher resolves for ``args`` (nothing inferred from a scheduler)."""
    cfg = config("--dry_run", *args, gpus=gpus, **extra)
    assert set(cfg.inferred) <= {launcher.OMP_LINE}  # CPU ranks: the thread cap is said, nothing else
    assert cfg.dry_run
    return launcher.build_command(cfg)


def reject(
    *args: str, gpus: str | None = "", inventory: Inventory = EIGHT, capsys: pytest.CaptureFixture, **extra: str
) -> str:
    """Run the launcher's main on a bad command line: exit 2, one line on stderr, nothing on stdout."""
    try:
        code = launcher.main(
            SCRIPT.build_parser(), list(args), train_script=TRAIN, environ=env_with(gpus, **extra), inventory=inventory
        )
    except SystemExit as exc:  # argparse's own errors (through the script's one-line hook)
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mgpu-lab train_multigpu: error: "), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------- commands


def test_defaults_use_every_gpu_and_filter_to_local_rank_0() -> None:
    assert dry("--task", "Toy-Cartpole-v0", gpus="0,1") == [
        *TORCHRUN,
        "--nproc_per_node",
        "gpu",
        "--standalone",
        "--local_ranks_filter",
        "0",
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--task",
        "Toy-Cartpole-v0",
        "--distributed",
    ]


def test_integer_ranks_on_gpus_and_the_nproc_per_node_alias() -> None:
    expected = [
        *TORCHRUN,
        "--nproc_per_node",
        "2",
        "--standalone",
        "--local_ranks_filter",
        "0",
        TRAIN,
        "--rl_library",
        "skrl",
        "--max_iterations",
        "5",
        "--distributed",
    ]
    assert dry("--num_gpus", "2", "--rl_library", "skrl", "--max_iterations", "5", gpus="0,1,2") == expected
    assert dry("--nproc_per_node", "2", "--rl_library", "skrl", "--max_iterations", "5", gpus="0,1,2") == expected


def test_integer_ranks_on_cpu_need_no_gpu() -> None:
    assert dry("--num_gpus", "3", "--device", "cpu", "--num_envs", "16") == [
        *TORCHRUN,
        "--nproc_per_node",
        "3",
        "--standalone",
        "--local_ranks_filter",
        "0",
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--num_envs",
        "16",
        "--distributed",
    ]


def test_cpu_keyword_means_one_rank_per_core() -> None:
    cmd = dry("--num_gpus", "cpu", "--device=cpu")
    assert cmd[cmd.index("--nproc_per_node") + 1] == "cpu"
    assert cmd[-2:] == ["--device=cpu", "--distributed"]


def test_log_all_ranks_drops_the_filter() -> None:
    assert dry("--num_gpus", "2", "--device", "cpu", "--log_all_ranks") == [
        *TORCHRUN,
        "--nproc_per_node",
        "2",
        "--standalone",
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--distributed",
    ]


def test_explicit_filter_replaces_the_default() -> None:
    assert dry("--num_gpus", "2", "--device", "cpu", "--local_ranks_filter", "0,1") == [
        *TORCHRUN,
        "--nproc_per_node",
        "2",
        "--standalone",
        "--local_ranks_filter",
        "0,1",
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--distributed",
    ]


def test_tee_redirects_and_log_dir_pass_through() -> None:
    assert dry("--num_gpus", "2", "--device", "cpu", "--tee", "3", "--log_dir", "/tmp/my logs") == [
        *TORCHRUN,
        "--nproc_per_node",
        "2",
        "--standalone",
        "--tee",
        "3",
        "--log_dir",
        "/tmp/my logs",
        "--local_ranks_filter",
        "0",
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--distributed",
    ]
    cmd = dry("--num_gpus", "2", "--device", "cpu", "--redirects", "0:1,1:3")
    assert cmd[cmd.index("--redirects") + 1] == "0:1,1:3"


def test_static_two_node() -> None:
    assert dry(
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--num_gpus",
        "4",
        "--master_addr",
        "10.0.0.1",
        "--master_port",
        "29555",
        "--task",
        "Toy-Cartpole-v0",
        gpus="0,1,2,3",
    ) == [
        *TORCHRUN,
        "--nnodes",
        "2",
        "--nproc_per_node",
        "4",
        "--node_rank",
        "1",
        "--master_addr",
        "10.0.0.1",
        "--master_port",
        "29555",
        "--local_ranks_filter",
        "0",
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--task",
        "Toy-Cartpole-v0",
        "--distributed",
    ]


def test_c10d_rendezvous_and_supervision_options() -> None:
    assert dry(
        "--nnodes",
        "1:2",
        "--num_gpus",
        "2",
        "--device",
        "cpu",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "127.0.0.1:29400",
        "--rdzv_id",
        "job42",
        "--max_restarts",
        "3",
        "--monitor_interval",
        "0.5",
        "--start_method",
        "fork",
        "--role",
        "trainer",
    ) == [
        *TORCHRUN,
        "--nnodes",
        "1:2",
        "--nproc_per_node",
        "2",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "127.0.0.1:29400",
        "--rdzv_id",
        "job42",
        "--max_restarts",
        "3",
        "--monitor_interval",
        "0.5",
        "--start_method",
        "fork",
        "--role",
        "trainer",
        "--local_ranks_filter",
        "0",
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--distributed",
    ]


def test_skrl_jax_uses_skrls_launcher() -> None:
    assert dry(
        "--rl_library",
        "skrl",
        "--ml_framework",
        "jax",
        "--num_gpus",
        "2",
        "--task",
        "Toy-Cartpole-v0",
        "--coordinator_address",
        "10.0.0.1:6000",
        gpus="0,1",
    ) == [
        *JAX,
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        "--node_rank",
        "0",
        "--coordinator_address",
        "10.0.0.1:6000",
        TRAIN,
        "--rl_library",
        "skrl",
        "--ml_framework",
        "jax",
        "--task",
        "Toy-Cartpole-v0",
        "--distributed",
    ]
    # two nodes on CPU, skrl's default coordinator written out when not given on one node
    assert dry("--rl_library", "skrl", "--ml_framework=jax", "--num_gpus", "1", "--device", "cpu") == [
        *JAX,
        "--nnodes",
        "1",
        "--nproc_per_node",
        "1",
        "--node_rank",
        "0",
        "--coordinator_address",
        "127.0.0.1:5000",
        TRAIN,
        "--rl_library",
        "skrl",
        "--ml_framework=jax",
        "--device",
        "cpu",
        "--distributed",
    ]


def test_skrl_with_torch_stays_on_torchrun() -> None:
    cmd = dry("--rl_library", "skrl", "--ml_framework", "torch", "--num_gpus", "2", "--device", "cpu")
    assert cmd[:3] == TORCHRUN


def test_distributed_is_added_once() -> None:
    cmd = dry("--num_gpus", "2", "--device", "cpu", "--distributed", "--seed", "7")
    assert cmd.count("--distributed") == 1
    assert cmd[cmd.index(TRAIN) :] == [
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--distributed",
        "--seed",
        "7",
    ]


def test_leading_double_dash_is_dropped() -> None:
    cmd = dry("--num_gpus", "2", "--", "--device", "cpu", "--seed", "3")
    assert "--" not in cmd
    assert cmd[cmd.index(TRAIN) :] == [
        TRAIN,
        "--rl_library",
        "rsl_rl",
        "--device",
        "cpu",
        "--seed",
        "3",
        "--distributed",
    ]


# ---------------------------------------------------------------------------------------------- rejections


@pytest.mark.parametrize(
    ("args", "gpus", "names"),
    [
        (["--rl_library", "foo"], "", "--rl_library"),
        (["--num_gpus", "abc"], "", "--num_gpus abc"),
        (["--num_gpus", "0", "--device", "cpu"], "", "--num_gpus 0"),
        (["--num_gpus", "-2", "--device", "cpu"], "", "--num_gpus -2"),
        (["--num_gpus", "4"], "0,1", "--num_gpus 4"),
        (["--num_gpus", "2"], "", "--device cpu"),
        (["--num_gpus", "2", "--device", "cuda"], "", "--device cpu"),
        (["--task", "Toy-Cartpole-v0"], "", "--device cpu --num_gpus N"),
        (["--num_gpus", "gpu", "--device", "cpu"], "", "--num_gpus"),
        (["--rl_library", "skrl", "--ml_framework", "jax"], "0,1", "--num_gpus gpu"),
        (
            ["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "cpu", "--device", "cpu"],
            "",
            "--num_gpus cpu",
        ),
        (
            ["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--master_port", "29500"],
            "0,1",
            "--master_port",
        ),
        (
            [
                "--rl_library",
                "skrl",
                "--ml_framework",
                "jax",
                "--num_gpus",
                "2",
                "--rdzv_backend",
                "c10d",
                "--log_all_ranks",
            ],
            "0,1",
            "--rdzv_backend, --log_all_ranks",
        ),
        (
            ["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--max_restarts", "0"],
            "0,1",
            "--max_restarts",
        ),
        (
            ["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--nnodes", "2"],
            "0,1",
            "--coordinator_address",
        ),
        (
            ["--coordinator_address", "127.0.0.1:5000", "--num_gpus", "2", "--device", "cpu"],
            "",
            "--coordinator_address",
        ),
        (
            [
                "--rl_library",
                "rsl_rl",
                "--ml_framework",
                "jax",
                "--coordinator_address",
                "h:1",
                "--num_gpus",
                "1",
                "--device",
                "cpu",
            ],
            "",
            "--coordinator_address",
        ),
        (["--nnodes", "0"], "0", "--nnodes 0"),
        (["--nnodes", "3:2"], "0", "--nnodes 3:2"),
        (["--nnodes", "2", "--node_rank", "2"], "0", "--node_rank 2"),
        (["--node_rank", "x"], "0", "--node_rank"),
        (["--master_port", "70000"], "0", "--master_port 70000"),
        (["--tee", "9"], "0", "--tee 9"),
        (["--redirects", "x"], "0", "--redirects x"),
        (["--local_ranks_filter", "a"], "0", "--local_ranks_filter a"),
        (["--local_ranks_filter", "0", "--log_all_ranks"], "0", "--log_all_ranks"),
        (["--start_method", "thread"], "0", "--start_method"),
        (["--max_restarts", "-1"], "0", "--max_restarts -1"),
        (["--monitor_interval", "0"], "0", "--monitor_interval 0"),
        (["--startup_timeout", "-1"], "0", "--startup_timeout -1"),
        (["--startup_timeout", "nan"], "0", "--startup_timeout nan"),
        (["--startup_timeout", "soon"], "0", "--startup_timeout"),
        (["--startup_timeout", "0.05"], "0", "--startup_timeout 0.05: below the monitor interval"),
        (["--startup_timeout", "1", "--monitor_interval", "2"], "0", "--startup_timeout 1: below the monitor interval"),
        (["--num_gpus"], "0", "--num_gpus"),
    ],
)
def test_rejections_are_one_line_exit_2(args: list[str], gpus: str, names: str, capsys) -> None:
    line = reject("--dry_run", *args, gpus=gpus, capsys=capsys)
    assert names in line, line


def test_rejection_without_dry_run_starts_nothing(capsys) -> None:
    line = reject("--num_gpus", "2", "--task", "Toy-Cartpole-v0", capsys=capsys)
    assert "--device cpu" in line


def test_bad_grace_period_is_a_usage_error(capsys) -> None:
    line = reject("--num_gpus", "1", "--device", "cpu", MGPU_LAB_KILL_GRACE_S="soon", capsys=capsys)
    assert "MGPU_LAB_KILL_GRACE_S" in line


#: the launcher options DESIGN.md's contract names (train.py's own flags are forwarded, not listed here)
CONTRACT_FLAGS = (
    "--rl_library",
    "--num_gpus",
    "--nproc_per_node",
    "--nnodes",
    "--node_rank",
    "--master_addr",
    "--master_port",
    "--rdzv_backend",
    "--rdzv_endpoint",
    "--rdzv_id",
    "--max_restarts",
    "--monitor_interval",
    "--start_method",
    "--role",
    "--tee",
    "--redirects",
    "--local_ranks_filter",
    "--log_dir",
    "--log_all_ranks",
    "--coordinator_address",
    "--dry_run",
)


def test_help_documents_every_option_the_parser_accepts(capsys) -> None:
    """Every contract flag is an option of the parser, and --help shows every option the parser has, each with
    its help text, and the epilog's examples."""
    parser = SCRIPT.build_parser()
    options = {flag: action for action in parser._actions for flag in action.option_strings}
    assert set(CONTRACT_FLAGS) <= set(options), set(CONTRACT_FLAGS) - set(options)
    assert options["--nproc_per_node"] is options["--num_gpus"]  # an alias, not a second option
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z_]*)", out))
    assert {o for o in options if o.startswith("--")} <= shown, set(options) - shown
    assert {o for o in options if not o.startswith("--")} == {"-h", "-m"} and "-m MODULE, --train_module MODULE" in out
    for action in parser._actions:
        if action.help and action.help != argparse.SUPPRESS:
            first_words = " ".join(action.help.split()[:3]).replace("%%", "%")
            assert first_words in " ".join(out.split()), (action.option_strings, first_words)
    assert out.rstrip().split("\n")[-1].strip() and "examples:" in out


def test_abbreviations_are_not_accepted(capsys) -> None:
    # allow_abbrev=False: '--num_gpu' is not '--num_gpus'; forwarded, it is checked against train.py's parser
    line = reject("--dry_run", "--num_gpus", "1", "--device", "cpu", "--num_gpu", "7", capsys=capsys)
    assert "train.py: unrecognized arguments: --num_gpu 7" in line


def test_forwarded_training_arguments_reach_train_py_unchanged() -> None:
    args = [
        "--task",
        "Toy-Pendulum-SwingUp-v0",
        "--num_envs",
        "8",
        "--max_iterations",
        "3",
        "--seed",
        "5",
        "--run_name",
        "a b",
        "--log_root",
        "/tmp/x",
    ]
    cmd = dry("--num_gpus", "2", "--device", "cpu", *args)
    assert cmd[cmd.index(TRAIN) :] == [TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", *args, "--distributed"]


def test_no_torchrun_option_the_user_did_not_give() -> None:
    """torchrun reads PET_* for every option not on its command line (a Kubernetes PyTorchJob sets them)."""
    cmd = dry("--num_gpus", "2", "--device", "cpu")
    assert cmd[: cmd.index(TRAIN)] == [*TORCHRUN, "--nproc_per_node", "2", "--standalone", "--local_ranks_filter", "0"]
    cfg = config(
        "--dry_run",
        "--device",
        "cpu",
        PET_NPROC_PER_NODE="2",
        PET_NNODES="2",
        PET_NODE_RANK="1",
        PET_RDZV_BACKEND="c10d",
        PET_RDZV_ENDPOINT="127.0.0.1:29400",
    )
    cmd = launcher.build_command(cfg)
    assert cmd[: cmd.index(TRAIN)] == [*TORCHRUN, "--local_ranks_filter", "0"]
    # read once, at parse time, into typed fields: the job layer never reads PET_* again
    assert cfg.scheduler == SchedulerEnv(
        nproc_per_node="2", nnodes="2", rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:29400"
    )
    assert (cfg.scheduler.nodes, cfg.scheduler.backend, cfg.scheduler.port) == ("2", "c10d", "29500")


def test_the_scheduler_environment_has_one_default_each() -> None:
    """Nothing set (or blank): torchrun's own defaults, each from one place."""
    env = read_scheduler_env({"PET_NNODES": " ", "SLURM_JOBID": "42", "MGPU_LAB_JOB_KEY": "k"})
    assert env == SchedulerEnv(slurm_job_id="42", job_key="k")
    assert (env.ranks_per_node, env.nodes, env.backend, env.address, env.port) == (
        "1",
        "1",
        "static",
        "127.0.0.1",
        "29500",
    )


def test_virtual_local_rank_maps_onto_torchruns_own_option() -> None:
    cmd = dry("--num_gpus", "2", "--virtual_local_rank", gpus="0,1")
    assert "--virtual_local_rank" in cmd[: cmd.index(TRAIN)]
    import torch.distributed.run as torchrun  # the installed torch must know the spelling we pass

    ns = torchrun.get_args_parser().parse_args(cmd[3 : cmd.index(TRAIN)] + ["x.py"])
    assert ns.virtual_local_rank is True


@pytest.mark.parametrize(("backend", "key"), [(None, "join_timeout"), ("static", "timeout"), ("c10d", "join_timeout")])
def test_rdzv_timeout_maps_onto_torchruns_join_timeout(backend: str | None, key: str) -> None:
    """No backend named on one node: torchrun's --standalone, a c10d store (join_timeout)."""
    extra = ["--rdzv_backend", backend] if backend else []
    if backend == "c10d":
        extra += ["--rdzv_endpoint", "127.0.0.1:29400"]
    cmd = dry("--num_gpus", "2", "--device", "cpu", "--rdzv_timeout", "30", *extra)
    conf = cmd[cmd.index("--rdzv_conf") + 1]
    assert conf == f"{key}=35"  # the launcher's own deadline (30 s) reports first; torchrun's is the backstop


def test_option_groups_say_what_goes_to_torchrun() -> None:
    """The torchrun-only and pass-through sets come from the parser's argument groups."""
    parser = SCRIPT.build_parser()
    passthrough = launcher.group_dests(parser, launcher.TORCHRUN_GROUP)
    interpreted = launcher.group_dests(parser, launcher.LAUNCHER_TORCHRUN_GROUP)
    assert {"master_port", "rdzv_backend", "max_restarts", "virtual_local_rank", "log_dir"} <= set(passthrough)
    assert {"log_all_ranks", "rdzv_timeout"} <= set(interpreted)
    assert not {"rl_library", "num_gpus", "nnodes", "hang_timeout", "startup_timeout", "coordinator_address"} & set(
        passthrough + interpreted
    )


# ---------------------------------------------------------------------------------------------- import-light

PROBE = """
import runpy, sys
sys.argv = [{launcher!r}, "--num_gpus", "2", "--device", "cpu", "--rl_library", "skrl", "--dry_run"]
try:
    runpy.run_path({launcher!r}, run_name="__main__")
except SystemExit as exc:
    assert exc.code == 0, exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy", "skrl", "jax"))
print("HEAVY", heavy)
"""


def test_dry_run_imports_nothing_heavy() -> None:
    """``--dry_run`` prints the command without importing torch, numpy or a library (its module list at exit)."""
    proc = run([PYTHON, "-c", PROBE.format(launcher=str(LAUNCHER))], timeout=60, env=loopback_env())
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout
    printed = [line for line in proc.stdout.splitlines() if "torch.distributed.run" in line]
    assert len(printed) == 1 and shlex.split(printed[0])[1:3] == ["-m", "torch.distributed.run"], proc.stdout


# ---------------------------------------------------------------------------------------------- GPU counting


@pytest.mark.parametrize(
    ("gpus", "visible"),
    [
        ("0,1", 2),
        (f"{made_up_uuid(3)},GPU-00000000-0000-0000-0000-000000000001,MIG-bbbb", 3),
        ("0,-1,1", 1),
        ("-1", 0),
        ("", 0),
        (" 2 , 3 ", 2),
        (None, 8),
    ],
)
def test_visible_gpus_are_the_named_devices_that_exist(gpus: str | None, visible: int, capsys) -> None:
    """An integer --num_gpus is accepted up to the GPUs CUDA would see (unset: every GPU of the machine)."""
    if visible:
        cmd = dry("--num_gpus", str(visible), gpus=gpus)
        assert cmd[cmd.index("--nproc_per_node") + 1] == str(visible)
    line = reject("--dry_run", "--num_gpus", str(visible + 1), gpus=gpus, capsys=capsys)
    assert f"--num_gpus {visible + 1}" in line
    assert (f"only {visible} GPU(s) visible" if visible else "no GPU is visible") in line


@pytest.mark.parametrize(
    ("gpus", "names"),
    [
        ("7,8", "device 8 does not exist (test inventory lists devices 0 to 7)"),
        ("0,x,1", "entry 'x' is neither a device index nor a GPU-/MIG- UUID"),
        ("0,0", "names one device twice"),
        ("1,GPU-00000000-0000-0000-0000-000000000001", "names one device twice"),
        ("GPU-ffff", "no device GPU-ffff here"),
        ("GPU-0000", "no device GPU-0000 here"),  # a prefix of every UUID: not one device
        ("MIG-cccc", "no device MIG-cccc here"),
    ],
)
def test_cuda_visible_devices_naming_what_is_not_there_is_refused(gpus: str, names: str, capsys) -> None:
    for dry_run in (["--dry_run"], []):
        line = reject(*dry_run, "--num_gpus", "2", gpus=gpus, capsys=capsys)
        assert f"CUDA_VISIBLE_DEVICES='{gpus}'" in line and names in line, line


def test_no_driver_and_devices_named_is_refused(capsys) -> None:
    """The issue's first trap: CUDA_VISIBLE_DEVICES=5,6 on a machine without a GPU."""
    line = reject(
        "--num_gpus",
        "2",
        "--task",
        "Toy-Cartpole-v0",
        gpus="5,6",
        inventory=Inventory([], [], "no NVIDIA driver found"),
        capsys=capsys,
    )
    assert "device 5 does not exist (this machine has no NVIDIA GPU: no NVIDIA driver found)" in line
    assert "--device cpu" in line


def test_cpu_ranks_never_look_at_the_gpus() -> None:
    """--device cpu: CUDA_VISIBLE_DEVICES does not matter (the ranks are CPU processes)."""
    assert dry("--num_gpus", "2", "--device", "cpu", gpus="0,x")[3:5] == ["--nproc_per_node", "2"]


def test_nvidia_smi_listing_is_read_with_mig_devices() -> None:
    from mgpu_lab.launch.devices import parse_smi

    listing = (
        "GPU 0: NVIDIA H200 (UUID: GPU-1a2b3c4d-0000-1111-2222-333344445555)\n"
        "  MIG 1g.18gb     Device  0: (UUID: MIG-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff)\n"
        "GPU 1: NVIDIA H200 (UUID: GPU-5e6f7a8b-0000-1111-2222-333344445555)\n"
    )
    inv = parse_smi(listing)
    assert inv.gpus == ["GPU-1a2b3c4d-0000-1111-2222-333344445555", "GPU-5e6f7a8b-0000-1111-2222-333344445555"]
    assert inv.migs == ["MIG-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"]
    from mgpu_lab.launch.devices import visible

    assert visible({"CUDA_VISIBLE_DEVICES": "MIG-9f8e,GPU-5e6f"}, inv) == (
        2,
        "CUDA_VISIBLE_DEVICES='MIG-9f8e,GPU-5e6f'",
    )


def test_a_given_inventory_stands_in_for_the_driver() -> None:
    """The seam the tests use (no environment switch in the product): an inventory passed in is the machine's."""
    from mgpu_lab.launch.devices import Inventory, visible

    inv = Inventory([made_up_uuid(i) for i in range(3)], [], "three made-up GPUs")
    assert visible({}, inv) == (3, "three made-up GPUs")
    assert visible({"CUDA_VISIBLE_DEVICES": "0,2"}, inv)[0] == 2


def test_a_malformed_rehearsed_fault_is_refused_before_any_rank(capsys: pytest.CaptureFixture) -> None:
    """--rehearse_fault goes to train.py; its grammar is checked by the launcher before torchrun starts."""
    line = reject("--num_gpus", "2", "--device", "cpu", "--rehearse_fault", "slow:one:2", capsys=capsys)
    assert line.startswith("mgpu-lab train_multigpu: error: --rehearse_fault: fault: bad entry 'slow:one:2'"), line


def test_a_dry_run_without_a_rehearsed_fault_leaves_the_fault_grammar_unimported() -> None:
    """The fault grammar (mgpu_lab.health.rank_progress, with typing and socket) stays off --dry_run's path."""
    code = (
        "import sys, runpy; sys.argv = ['x', '--num_gpus', '2', '--device', 'cpu', '--dry_run']\n"
        f"try: runpy.run_path({str(LAUNCHER)!r}, run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print('mgpu_lab.health.rank_progress' in sys.modules)"
    )
    out = run([PYTHON, "-c", code], timeout=60)  # a fresh interpreter: what the dry run alone imports
    assert out.stdout.strip().splitlines()[-1] == "False", out
