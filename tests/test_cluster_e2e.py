"""The launcher on clusters, end to end: two launchers on this machine play two nodes.

SLURM: every launcher gets what srun gives the one task on its node. The node list is ``127.0.0.[1-2]``:
SLURM's own bracket grammar, two distinct node names, and both addresses reach this machine (all of
127.0.0.0/8 is loopback on Linux), so no hosts file or resolver needs changing. The first node,
127.0.0.1, hosts the c10d rendezvous on the port derived from the job id; both torchrun agents see that
address as their own, one binds the store and the other joins it as a client (torch's c10d backend
retries as a client when the port is taken). The job id is picked so that its derived port is free.

Kubernetes: the launchers get only torchrun's ``PET_*`` variables, as a PyTorchJob's pods do, and no node
flags, so the world forms only if the launcher passes none of its own.

Every run: ``--device cpu --num_gpus 1`` per node, gloo on loopback, hard timeouts, and no process left
behind. What is under test is the world the launchers' inferred flags form, so the ranks are the fixture
``tests/fixtures/launcher/print_rank.py --all_reduce`` (a gloo all-reduce over the whole world), not a
trainer: the real train.py across two nodes is tests/test_skill_commands.py's (the documented two-node
c10d and static commands, in their CPU forms).
"""

from __future__ import annotations

import re
import shlex
import tempfile
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, free_port, run, seams_env
from mgpu_testing.cluster import (
    EXAMPLES,
    example_commands,
    free_job_id,
    option,
    run_together,
    sbatch_options,
    srun_env,
    without_cluster,
)
from mgpu_testing.probe import assert_nothing_left, tagged_env
from mgpu_testing.training import LAUNCHER, TASK

from mgpu_lab.launch.cluster import rendezvous_port

pytestmark = pytest.mark.e2e

LOOPBACK_NODES = "127.0.0.[1-2]"
#: one rank per node; the fixture all-reduces over the world and prints the sum (1 + 2 when both ranks joined)
TINY = ["--task", TASK, "--device", "cpu", "--num_gpus", "1", "--log_all_ranks", "--all_reduce"]
WORLD_FIXTURE = str(REPO / "tests" / "fixtures" / "launcher" / "print_rank.py")
#: the launcher starting the world fixture instead of train.py, its records in the temp folder
WORLD = ["--train_script", WORLD_FIXTURE, "--job_log_root", str(Path(tempfile.gettempdir()) / "mgpu_lab_cluster_jobs")]
DRY = ["--dry_run", "--task", TASK, "--device", "cpu", "--num_gpus", "1"]
HINT = "or --no_slurm to ignore SLURM's environment"


def node_env(tag_env: dict[str, str], **cluster_vars: str) -> dict[str, str]:
    env = without_cluster(tag_env)
    env.update(cluster_vars)
    return env


def stderr_lines(proc) -> list[str]:
    return proc.stderr.splitlines()


def assert_one_world_of_two(results) -> None:
    """Both launchers exit 0, one holds rank 0/2 and the other 1/2, and each rank's all-reduce summed both."""
    for proc in results:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
    ranks = [re.findall(r"\[fixture\] rank (\d)/2 all_reduce sum 3\b", p.stdout) for p in results]
    assert sorted(r for found in ranks for r in found) == ["0", "1"] and all(len(f) == 1 for f in ranks), [
        p.stdout[-2000:] for p in results
    ]


def assert_one_line_error(proc, expected: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [f"mgpu-lab train_multigpu: error: {expected}"], proc.stderr
    assert proc.stdout == ""


# --------------------------------------------------------------------------------------------------- SLURM


def test_slurm_two_launchers_form_one_world() -> None:
    job_id = free_job_id()
    base, tag = tagged_env()
    runs = []
    for node in (0, 1):
        env = node_env(base, **srun_env(node, job_id=job_id, nodelist=LOOPBACK_NODES))
        runs.append(([PYTHON, LAUNCHER, *WORLD, *TINY], env))
    results = run_together(runs, timeout=300)
    assert_one_world_of_two(results)
    port = rendezvous_port(job_id)
    for node, proc in enumerate(results):
        assert f"[INFO] launcher: --node_rank {node} (from SLURM_NODEID={node})" in stderr_lines(proc)
        assert (
            f"[INFO] launcher: --rdzv_endpoint 127.0.0.1:{port} (from SLURM_STEP_NODELIST={LOOPBACK_NODES}, "
            f"SLURM_JOB_ID={job_id})"
        ) in stderr_lines(proc)
    assert_nothing_left(tag)


def test_slurm_dry_run_shows_the_inferred_flags_and_their_variables() -> None:
    job_id = free_job_id()
    port = rendezvous_port(job_id)
    env = node_env(tagged_env()[0], **srun_env(1, job_id=job_id, nodelist=LOOPBACK_NODES))
    proc = run([PYTHON, LAUNCHER, *DRY], timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    assert option(command, "--nnodes") == "2"
    assert option(command, "--node_rank") == "1"
    assert option(command, "--rdzv_backend") == "c10d"
    assert option(command, "--rdzv_endpoint") == f"127.0.0.1:{port}"
    assert option(command, "--rdzv_id") == f"{job_id}.0"
    lines = stderr_lines(proc)
    for expected in (
        "[INFO] launcher: --nnodes 2 (from SLURM_STEP_NUM_NODES=2)",
        "[INFO] launcher: --node_rank 1 (from SLURM_NODEID=1)",
        "[INFO] launcher: --rdzv_backend c10d (from SLURM_STEP_ID=0)",
        f"[INFO] launcher: --rdzv_endpoint 127.0.0.1:{port} (from SLURM_STEP_NODELIST={LOOPBACK_NODES}, "
        f"SLURM_JOB_ID={job_id})",
        f"[INFO] launcher: --rdzv_id {job_id}.0 (from SLURM_JOB_ID={job_id}, SLURM_STEP_ID=0)",
    ):
        assert expected in lines, proc.stderr


@pytest.mark.parametrize(
    ("flags", "expected", "inferred_also"),
    [
        (["--nnodes", "1:2"], {"--nnodes": "1:2"}, {"--rdzv_backend": "c10d", "--node_rank": "1"}),
        (["--node_rank", "0"], {"--node_rank": "0"}, {"--nnodes": "2", "--rdzv_backend": "c10d"}),
        (["--rdzv_endpoint", "127.0.0.9:29999"], {"--rdzv_endpoint": "127.0.0.9:29999"}, {"--rdzv_backend": "c10d"}),
        (["--rdzv_id", "my-run"], {"--rdzv_id": "my-run"}, {"--nnodes": "2"}),
        (["--rdzv_backend", "c10d"], {"--rdzv_backend": "c10d"}, {"--nnodes": "2"}),
        (
            ["--master_port", "29777"],
            {"--master_port": "29777", "--master_addr": "127.0.0.1"},
            {"--node_rank": "1", "--rdzv_backend": None, "--rdzv_endpoint": None},
        ),
        (["--master_addr", "127.0.0.5"], {"--master_addr": "127.0.0.5"}, {"--nnodes": "2", "--rdzv_backend": None}),
    ],
)
def test_slurm_explicit_flags_override_each_inferred_one(flags: list[str], expected: dict, inferred_also: dict) -> None:
    job_id = free_job_id()
    env = node_env(tagged_env()[0], **srun_env(1, job_id=job_id, nodelist=LOOPBACK_NODES))
    proc = run([PYTHON, LAUNCHER, *DRY, *flags], timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    for flag, value in {**expected, **inferred_also}.items():
        assert option(command, flag) == value, (flag, command)
    given = flags[0]
    assert not any(line.startswith(f"[INFO] launcher: {given} ") and "(from " in line for line in stderr_lines(proc)), (
        proc.stderr
    )


def test_slurm_jax_gets_its_coordinator_from_the_first_node() -> None:
    job_id = free_job_id()
    env = node_env(tagged_env()[0], **srun_env(1, job_id=job_id, nodelist=LOOPBACK_NODES))
    proc = run([PYTHON, LAUNCHER, "--rl_library", "skrl", "--ml_framework", "jax", *DRY], timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    assert "skrl.utils.distributed.jax" in command
    assert option(command, "--coordinator_address") == f"127.0.0.1:{rendezvous_port(job_id)}"
    assert option(command, "--nnodes") == "2" and option(command, "--node_rank") == "1"
    assert option(command, "--rdzv_endpoint") is None


def test_no_slurm_ignores_the_slurm_environment() -> None:
    env = node_env(tagged_env()[0], **srun_env(1, job_id="4242", nodelist=LOOPBACK_NODES))
    proc = run([PYTHON, LAUNCHER, *DRY, "--no_slurm"], timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    for flag in ("--nnodes", "--node_rank", "--rdzv_backend", "--rdzv_endpoint", "--rdzv_id"):
        assert option(command, flag) is None, (flag, command)
    assert "[INFO] launcher: SLURM detection off (--no_slurm); SLURM_JOB_ID=4242 not used" in stderr_lines(proc)


@pytest.mark.parametrize(
    ("cluster_vars", "flags", "expected"),
    [
        pytest.param(
            {"SLURM_NODEID": "1"},
            [],
            f"a partial SLURM environment: SLURM_NODEID=1 but no SLURM_JOB_ID; give the node flags yourself, {HINT}",
            id="partial",
        ),
        pytest.param(
            srun_env(1, nodelist="gpu[07-"),
            [],
            "SLURM_STEP_NODELIST: node list 'gpu[07-' does not expand (missing bracket: \"gpu[07-\"); give the "
            f"rendezvous host yourself (--rdzv_endpoint or --master_addr), {HINT}",
            id="node-list",
        ),
        pytest.param(
            srun_env(1),
            ["--nnodes", "3"],
            "--nnodes 3 disagrees with SLURM_STEP_NUM_NODES=2: this SLURM step runs on 2 node(s); give "
            f"--nnodes 2 or leave it out, {HINT}",
            id="nnodes-disagrees",
        ),
        pytest.param(
            srun_env(1, SLURM_STEP_TASKS_PER_NODE="4(x2)"),
            [],
            "SLURM started more than one task per node (SLURM_STEP_TASKS_PER_NODE=4(x2)); the launcher starts "
            f"one rank per GPU itself, so run one launcher per node: srun --ntasks-per-node=1 ..., {HINT}",
            id="tasks-per-node",
        ),
    ],
)
def test_bad_slurm_environments_stop_the_launcher_in_one_line(
    cluster_vars: dict, flags: list[str], expected: str, tmp_path: Path
) -> None:
    env = node_env(tagged_env()[0], **cluster_vars)
    log_root = tmp_path / "logs"
    proc = run(
        [PYTHON, LAUNCHER, "--task", TASK, "--device", "cpu", "--num_gpus", "1", *flags, "--log_root", str(log_root)],
        timeout=60,
        env=env,
    )
    assert_one_line_error(proc, expected)
    assert not log_root.exists()  # nothing started, nothing written


# ----------------------------------------------------------------------------------------------- Kubernetes


def pet_env(base: dict[str, str], node: int, port: int, env=node_env) -> dict[str, str]:
    return env(
        base, PET_NNODES="2", PET_NODE_RANK=str(node), PET_RDZV_ENDPOINT=f"127.0.0.1:{port}", PET_RDZV_BACKEND="c10d"
    )


def test_kubernetes_pet_variables_alone_form_one_world() -> None:
    port = free_port()
    base, tag = tagged_env()
    runs = [([PYTHON, LAUNCHER, *WORLD, *TINY], pet_env(base, node, port)) for node in (0, 1)]
    results = run_together(runs, timeout=300)
    assert_one_world_of_two(results)
    assert_nothing_left(tag)


def test_kubernetes_dry_run_passes_no_node_flag_and_names_the_pet_variables() -> None:
    port = free_port()
    proc = run([PYTHON, LAUNCHER, *DRY], timeout=60, env=pet_env(tagged_env()[0], 1, port))
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    for flag in (
        "--nnodes",
        "--node_rank",
        "--master_addr",
        "--master_port",
        "--rdzv_backend",
        "--rdzv_endpoint",
        "--rdzv_id",
        "--standalone",
    ):
        assert option(command, flag) is None, (flag, command)
    assert (
        f"[INFO] launcher: torchrun reads PET_NNODES=2, PET_NODE_RANK=1, PET_RDZV_BACKEND=c10d, "
        f"PET_RDZV_ENDPOINT=127.0.0.1:{port} from the environment (Kubernetes PyTorchJob)"
    ) in stderr_lines(proc)


# ---------------------------------------------------------------------------------------------- /dev/shm


FIX = (
    "docker run --shm-size=1g (or --ipc=host), or on Kubernetes mount an emptyDir with medium: Memory at "
    "/dev/shm; NCCL_SHM_DISABLE=1 is a slower workaround, not the fix"
)


def shm_env(folder: Path, free: int | None = None) -> dict[str, str]:
    """Four made-up GPUs (the launcher only counts them) and ``folder`` standing for /dev/shm (the suite's seams)."""
    return seams_env(
        node_env(tagged_env()[0], CUDA_VISIBLE_DEVICES="0,1,2,3"), gpus=4, shm_path=str(folder), shm_free=free
    )


def test_a_small_shm_warns_before_a_cuda_launch(tmp_path: Path) -> None:
    env = shm_env(tmp_path, free=64 << 20)
    proc = run([PYTHON, LAUNCHER, "--dry_run", "--num_gpus", "4", "--task", TASK], timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    expected = (
        f"[WARN] launcher: {tmp_path} has 64 MiB free, less than the 74 MiB NCCL needs for 4 rank(s) on "
        f"this node; enlarge it: {FIX}"
    )
    assert [line for line in stderr_lines(proc) if "MiB" in line] == [expected], proc.stderr


def test_a_missing_shm_warns_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    proc = run([PYTHON, LAUNCHER, "--dry_run", "--num_gpus", "2", "--task", TASK], timeout=60, env=shm_env(missing))
    assert proc.returncode == 0, proc.stderr
    expected = (
        f"[WARN] launcher: {missing} does not exist; NCCL keeps its shared-memory segments there and "
        f"fails to start without it: {FIX}"
    )
    assert [line for line in stderr_lines(proc) if str(missing) in line] == [expected], proc.stderr


def test_cpu_ranks_get_no_shm_warning(tmp_path: Path) -> None:
    env = shm_env(tmp_path / "absent", free=0)
    proc = run(
        [PYTHON, LAUNCHER, "--dry_run", "--num_gpus", "4", "--device", "cpu", "--task", TASK], timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert "shm" not in proc.stderr.lower() and "NCCL_SHM_DISABLE" not in proc.stderr, proc.stderr
    assert re.search(r"train\.py", proc.stdout)
    assert shlex.split(proc.stdout)  # a well-formed command


# ------------------------------------------------------------------------------------------- doc examples
# The commands in docs/source/features/examples/ are shown through literalinclude, which the generic
# command tests (tests/test_skill_commands.py) do not read; here each one is dry-run where it would run.


@pytest.mark.parametrize("name", ["slurm_torchrun.sbatch", "slurm_jax.sbatch"])
def test_sbatch_example_commands_dry_run_on_every_node(name: str) -> None:
    options = sbatch_options(EXAMPLES / name)
    nodes, gpus = int(options["--nodes"]), int(options["--gpus-per-node"])
    job_id = free_job_id()
    (args,) = example_commands(EXAMPLES / name)
    for node in range(nodes):
        env = seams_env(
            node_env(
                tagged_env()[0],
                **srun_env(node, job_id=job_id, nodelist=f"gpu[01-{nodes:02d}]", nodes=nodes),
                CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(gpus)),
                SLURM_CPUS_PER_TASK="32",
            ),
            gpus=gpus,
        )
        proc = run([PYTHON, LAUNCHER, "--dry_run", *args], timeout=60, env=env)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        command = proc.stdout.strip()
        assert option(command, "--nnodes") == str(nodes) and option(command, "--node_rank") == str(node)
        assert option(command, "--nproc_per_node") == str(gpus)
        host = f"gpu01:{rendezvous_port(job_id)}"
        flag = "--coordinator_address" if "jax" in name else "--rdzv_endpoint"
        assert option(command, flag) == host, command


def test_pytorchjob_example_command_dry_runs_in_each_pod() -> None:
    import yaml

    job = yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text(encoding="utf-8"))
    nprocs = job["spec"]["nprocPerNode"]
    commands = example_commands(EXAMPLES / "pytorchjob.yaml")
    assert len(commands) == len(job["spec"]["pytorchReplicaSpecs"])
    for node_rank, args in enumerate(commands):
        env = node_env(
            tagged_env()[0],
            PET_NNODES="2",
            PET_NODE_RANK=str(node_rank),
            PET_NPROC_PER_NODE=nprocs,
            PET_MASTER_ADDR="127.0.0.1",
            PET_MASTER_PORT="23456",
            CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(int(nprocs))),
        )
        env = seams_env(env, gpus=int(nprocs))
        proc = run([PYTHON, LAUNCHER, "--dry_run", *args], timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        command = proc.stdout.strip()
        for flag in ("--nnodes", "--node_rank", "--master_addr", "--master_port", "--rdzv_endpoint"):
            assert option(command, flag) is None, (flag, command)
        assert option(command, "--nproc_per_node") in (None, nprocs), command
