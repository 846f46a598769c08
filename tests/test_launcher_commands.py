"""The launcher's resolved commands (``--dry_run``), its rejections, and its import-lightness.

Every case runs the real script in a subprocess; no torch is imported on these paths, so they are quick.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from mgpu_testing import PYTHON, REPO, loopback_env, run

LAUNCHER = REPO / "scripts" / "reinforcement_learning" / "train_multigpu.py"
TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]
JAX = [PYTHON, "-m", "skrl.utils.distributed.jax"]


def env_with(gpus: str = "", **extra: str) -> dict[str, str]:
    """Loopback env with ``CUDA_VISIBLE_DEVICES=gpus`` (the launcher counts GPUs from it) and no script override."""
    env = loopback_env(CUDA_VISIBLE_DEVICES=gpus, **extra)
    env.pop("MGPU_LAB_TRAIN_SCRIPT", None)
    return env


def dry(*args: str, gpus: str = "") -> list[str]:
    """The command the launcher resolves for ``args``, split back into its words."""
    proc = run([PYTHON, str(LAUNCHER), "--dry_run", *args], timeout=60, env=env_with(gpus))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    return shlex.split(lines[0])


def reject(*args: str, gpus: str = "") -> str:
    """Run a bad command line; check exit 2, one line on stderr, no traceback; return that line."""
    proc = run([PYTHON, str(LAUNCHER), *args], timeout=60, env=env_with(gpus))
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------- commands

def test_defaults_use_every_gpu_and_filter_to_local_rank_0() -> None:
    assert dry("--task", "Toy-Cartpole-v0", gpus="0,1") == [
        *TORCHRUN, "--nproc_per_node", "gpu", "--local_ranks_filter", "0",
        TRAIN, "--rl_library", "rsl_rl", "--task", "Toy-Cartpole-v0", "--distributed",
    ]


def test_integer_ranks_on_gpus_and_the_nproc_per_node_alias() -> None:
    expected = [
        *TORCHRUN, "--nproc_per_node", "2", "--local_ranks_filter", "0",
        TRAIN, "--rl_library", "skrl", "--max_iterations", "5", "--distributed",
    ]
    assert dry("--num_gpus", "2", "--rl_library", "skrl", "--max_iterations", "5", gpus="0,1,2") == expected
    assert dry("--nproc_per_node", "2", "--rl_library", "skrl", "--max_iterations", "5", gpus="0,1,2") == expected


def test_integer_ranks_on_cpu_need_no_gpu() -> None:
    assert dry("--num_gpus", "3", "--device", "cpu", "--num_envs", "16") == [
        *TORCHRUN, "--nproc_per_node", "3", "--local_ranks_filter", "0",
        TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--num_envs", "16", "--distributed",
    ]


def test_cpu_keyword_means_one_rank_per_core() -> None:
    cmd = dry("--num_gpus", "cpu", "--device=cpu")
    assert cmd[cmd.index("--nproc_per_node") + 1] == "cpu"
    assert cmd[-2:] == ["--device=cpu", "--distributed"]


def test_log_all_ranks_drops_the_filter() -> None:
    assert dry("--num_gpus", "2", "--device", "cpu", "--log_all_ranks") == [
        *TORCHRUN, "--nproc_per_node", "2",
        TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--distributed",
    ]


def test_explicit_filter_replaces_the_default() -> None:
    assert dry("--num_gpus", "2", "--device", "cpu", "--local_ranks_filter", "0,1") == [
        *TORCHRUN, "--nproc_per_node", "2", "--local_ranks_filter", "0,1",
        TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--distributed",
    ]


def test_tee_redirects_and_log_dir_pass_through() -> None:
    assert dry("--num_gpus", "2", "--device", "cpu", "--tee", "3", "--log_dir", "/tmp/my logs") == [
        *TORCHRUN, "--nproc_per_node", "2", "--tee", "3", "--log_dir", "/tmp/my logs",
        "--local_ranks_filter", "0", TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--distributed",
    ]
    cmd = dry("--num_gpus", "2", "--device", "cpu", "--redirects", "0:1,1:3")
    assert cmd[cmd.index("--redirects") + 1] == "0:1,1:3"


def test_static_two_node() -> None:
    assert dry("--nnodes", "2", "--node_rank", "1", "--num_gpus", "4", "--master_addr", "10.0.0.1",
               "--master_port", "29555", "--task", "Toy-Cartpole-v0", gpus="0,1,2,3") == [
        *TORCHRUN, "--nnodes", "2", "--nproc_per_node", "4", "--node_rank", "1",
        "--master_addr", "10.0.0.1", "--master_port", "29555", "--local_ranks_filter", "0",
        TRAIN, "--rl_library", "rsl_rl", "--task", "Toy-Cartpole-v0", "--distributed",
    ]


def test_c10d_rendezvous_and_supervision_options() -> None:
    assert dry("--nnodes", "1:2", "--num_gpus", "2", "--device", "cpu", "--rdzv_backend", "c10d",
               "--rdzv_endpoint", "127.0.0.1:29400", "--rdzv_id", "job42", "--max_restarts", "3",
               "--monitor_interval", "0.5", "--start_method", "fork", "--role", "trainer") == [
        *TORCHRUN, "--nnodes", "1:2", "--nproc_per_node", "2",
        "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:29400", "--rdzv_id", "job42",
        "--max_restarts", "3", "--monitor_interval", "0.5", "--start_method", "fork", "--role", "trainer",
        "--local_ranks_filter", "0", TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--distributed",
    ]


def test_skrl_jax_uses_skrls_launcher() -> None:
    assert dry("--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--task", "Toy-Cartpole-v0",
               "--coordinator_address", "10.0.0.1:6000", gpus="0,1") == [
        *JAX, "--nnodes", "1", "--nproc_per_node", "2", "--node_rank", "0", "--coordinator_address", "10.0.0.1:6000",
        TRAIN, "--rl_library", "skrl", "--ml_framework", "jax", "--task", "Toy-Cartpole-v0", "--distributed",
    ]
    # two nodes on CPU, skrl's default coordinator written out when not given on one node
    assert dry("--rl_library", "skrl", "--ml_framework=jax", "--num_gpus", "1", "--device", "cpu") == [
        *JAX, "--nnodes", "1", "--nproc_per_node", "1", "--node_rank", "0", "--coordinator_address", "127.0.0.1:5000",
        TRAIN, "--rl_library", "skrl", "--ml_framework=jax", "--device", "cpu", "--distributed",
    ]


def test_skrl_with_torch_stays_on_torchrun() -> None:
    cmd = dry("--rl_library", "skrl", "--ml_framework", "torch", "--num_gpus", "2", "--device", "cpu")
    assert cmd[:3] == TORCHRUN


def test_distributed_is_added_once() -> None:
    cmd = dry("--num_gpus", "2", "--device", "cpu", "--distributed", "--seed", "7")
    assert cmd.count("--distributed") == 1
    assert cmd[cmd.index(TRAIN):] == [TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--distributed", "--seed", "7"]


def test_leading_double_dash_is_dropped() -> None:
    cmd = dry("--num_gpus", "2", "--", "--device", "cpu", "--seed", "3")
    assert "--" not in cmd
    assert cmd[cmd.index(TRAIN):] == [TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", "--seed", "3", "--distributed"]


def test_train_script_override_for_tests() -> None:
    fixture = REPO / "tests" / "fixtures" / "launcher" / "print_rank.py"
    proc = run([PYTHON, str(LAUNCHER), "--num_gpus", "2", "--device", "cpu", "--dry_run"], timeout=60,
               env=loopback_env(MGPU_LAB_TRAIN_SCRIPT=str(fixture)))
    assert proc.returncode == 0, proc.stderr
    assert str(fixture) in shlex.split(proc.stdout)


def test_isaaclab_cli_passes_arguments_through() -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    args = ["--num_gpus", "2", "--device", "cpu", "--task", "Toy-Cartpole-v0", "--dry_run"]
    proc = run([uv, "run", "--quiet", "isaaclab", "train_multigpu", *args], timeout=120, env=env_with())
    assert proc.returncode == 0, proc.stderr
    assert shlex.split(proc.stdout)[3:] == dry(*args[:-1])[3:]  # same command (the venv python may be spelled differently)


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
        (["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "cpu", "--device", "cpu"], "", "--num_gpus cpu"),
        (["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--master_port", "29500"], "0,1",
         "--master_port"),
        (["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--rdzv_backend", "c10d",
          "--log_all_ranks"], "0,1", "--rdzv_backend, --log_all_ranks"),
        (["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--max_restarts", "0"], "0,1",
         "--max_restarts"),
        (["--rl_library", "skrl", "--ml_framework", "jax", "--num_gpus", "2", "--nnodes", "2"], "0,1",
         "--coordinator_address"),
        (["--coordinator_address", "127.0.0.1:5000", "--num_gpus", "2", "--device", "cpu"], "", "--coordinator_address"),
        (["--rl_library", "rsl_rl", "--ml_framework", "jax", "--coordinator_address", "h:1", "--num_gpus", "1",
          "--device", "cpu"], "", "--coordinator_address"),
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
        (["--num_gpus"], "0", "--num_gpus"),
    ],
)
def test_rejections_are_one_line_exit_2(args: list[str], gpus: str, names: str) -> None:
    line = reject("--dry_run", *args, gpus=gpus)
    assert line.startswith("isaaclab train_multigpu: error: "), line
    assert names in line, line


def test_rejection_without_dry_run_starts_nothing() -> None:
    line = reject("--num_gpus", "2", "--task", "Toy-Cartpole-v0")
    assert "--device cpu" in line


def test_bad_grace_period_is_a_usage_error() -> None:
    proc = run([PYTHON, str(LAUNCHER), "--num_gpus", "1", "--device", "cpu"], timeout=60,
               env=env_with(MGPU_LAB_KILL_GRACE_S="soon"))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "MGPU_LAB_KILL_GRACE_S" in proc.stderr and "Traceback" not in proc.stderr


def test_help_lists_every_contract_flag() -> None:
    proc = run([PYTHON, str(LAUNCHER), "--help"], timeout=60, env=env_with())
    assert proc.returncode == 0
    for flag in ("--rl_library", "--num_gpus", "--nproc_per_node", "--nnodes", "--node_rank", "--master_addr",
                 "--master_port", "--rdzv_backend", "--rdzv_endpoint", "--rdzv_id", "--max_restarts",
                 "--monitor_interval", "--start_method", "--role", "--tee", "--redirects", "--local_ranks_filter",
                 "--log_dir", "--log_all_ranks", "--coordinator_address", "--dry_run", "examples:"):
        assert flag in proc.stdout, flag


def test_abbreviations_are_not_accepted() -> None:
    # allow_abbrev=False: '--num_gpu' is not '--num_gpus'; forwarded, it is checked against train.py's parser
    line = reject("--dry_run", "--num_gpus", "1", "--device", "cpu", "--num_gpu", "7")
    assert "train.py: unrecognized arguments: --num_gpu 7" in line


def test_forwarded_training_arguments_reach_train_py_unchanged() -> None:
    args = ["--task", "Toy-Pendulum-SwingUp-v0", "--num_envs", "8", "--max_iterations", "3", "--seed", "5",
            "--run_name", "a b", "--log_root", "/tmp/x"]
    cmd = dry("--num_gpus", "2", "--device", "cpu", *args)
    assert cmd[cmd.index(TRAIN):] == [TRAIN, "--rl_library", "rsl_rl", "--device", "cpu", *args, "--distributed"]


def test_no_torchrun_option_the_user_did_not_give() -> None:
    """torchrun reads PET_* for every option not on its command line (a Kubernetes PyTorchJob sets them)."""
    cmd = dry("--num_gpus", "2", "--device", "cpu")
    assert cmd[:cmd.index(TRAIN)] == [*TORCHRUN, "--nproc_per_node", "2", "--local_ranks_filter", "0"]
    proc = run([PYTHON, str(LAUNCHER), "--dry_run", "--device", "cpu"], timeout=60,
               env=env_with(PET_NPROC_PER_NODE="2", PET_NNODES="2", PET_NODE_RANK="1", PET_RDZV_BACKEND="c10d",
                            PET_RDZV_ENDPOINT="127.0.0.1:29400"))
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout)
    assert cmd[:cmd.index(TRAIN)] == [*TORCHRUN, "--local_ranks_filter", "0"]


def test_virtual_local_rank_maps_onto_torchruns_own_option() -> None:
    cmd = dry("--num_gpus", "2", "--virtual_local_rank", gpus="0,1")
    assert "--virtual_local_rank" in cmd[:cmd.index(TRAIN)]
    import torch.distributed.run as torchrun  # the installed torch must know the spelling we pass

    ns = torchrun.get_args_parser().parse_args(cmd[3:cmd.index(TRAIN)] + ["x.py"])
    assert ns.virtual_local_rank is True


@pytest.mark.parametrize(("backend", "key"), [(None, "timeout"), ("static", "timeout"), ("c10d", "join_timeout")])
def test_rdzv_timeout_maps_onto_torchruns_join_timeout(backend: str | None, key: str) -> None:
    extra = ["--rdzv_backend", backend] if backend else []
    if backend == "c10d":
        extra += ["--rdzv_endpoint", "127.0.0.1:29400"]
    cmd = dry("--num_gpus", "2", "--device", "cpu", "--rdzv_timeout", "30", *extra)
    conf = cmd[cmd.index("--rdzv_conf") + 1]
    assert conf == f"{key}=35"  # the launcher's own deadline (30 s) reports first; torchrun's is the backstop


def test_option_groups_say_what_goes_to_torchrun() -> None:
    """The torchrun-only and pass-through sets come from the parser's argument groups."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("launcher_under_test", LAUNCHER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = module.build_parser()
    passthrough = module.group_dests(parser, module.TORCHRUN_GROUP)
    interpreted = module.group_dests(parser, module.LAUNCHER_TORCHRUN_GROUP)
    assert {"master_port", "rdzv_backend", "max_restarts", "virtual_local_rank", "log_dir"} <= set(passthrough)
    assert {"log_all_ranks", "rdzv_timeout"} <= set(interpreted)
    assert not {"rl_library", "num_gpus", "nnodes", "hang_timeout", "coordinator_address"} & set(passthrough + interpreted)


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


def test_dry_run_does_not_import_torch() -> None:
    proc = run([PYTHON, "-c", PROBE.format(launcher=str(LAUNCHER))], timeout=60, env=env_with())
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout
    assert "torch.distributed.run" in proc.stdout  # it did print the command


def test_dry_run_importtime_has_no_torch() -> None:
    proc = subprocess.run([PYTHON, "-X", "importtime", str(LAUNCHER), "--num_gpus", "2", "--device", "cpu", "--dry_run"],
                          capture_output=True, text=True, timeout=60, env=env_with(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert imported and not [m for m in imported if m.split(".")[0] == "torch"]


# ---------------------------------------------------------------------------------------------- GPU counting

@pytest.mark.parametrize(
    ("gpus", "visible"),
    [("0,1", 2), ("GPU-8f2c,GPU-11aa,MIG-3b", 3), ("0,-1,1", 1), ("-1", 0), ("", 0), (" 2 , 3 ", 2)],
)
def test_visible_gpus_follow_cuda_visible_devices(gpus: str, visible: int) -> None:
    """An integer --num_gpus is accepted up to the GPUs CUDA would see (it stops at the first invalid entry)."""
    if visible:
        cmd = dry("--num_gpus", str(visible), gpus=gpus)
        assert cmd[cmd.index("--nproc_per_node") + 1] == str(visible)
    line = reject("--dry_run", "--num_gpus", str(visible + 1), gpus=gpus)
    assert f"--num_gpus {visible + 1}" in line
    assert (f"only {visible} GPU(s) visible" if visible else "no GPU is visible") in line
