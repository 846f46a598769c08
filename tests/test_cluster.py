"""mgpu_lab.launch.cluster against synthetic cluster environments: SLURM inference, precedence, provenance,
Kubernetes (PET_*) notes, every bad input, and the /dev/shm check (driven by its testing aids)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.cluster import srun_env

from mgpu_lab.launch import cluster
from mgpu_lab.launch.cluster import ClusterError, infer_nodes
from mgpu_lab.launch.shm_ranks import shm_warning

HINT = "or --no_slurm to ignore SLURM's environment"


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


# --------------------------------------------------------------------------------------------------- SLURM


def test_srun_step_fills_nodes_and_a_c10d_rendezvous_on_the_first_node() -> None:
    plan = infer_nodes(srun_env(node=1), {}, use_slurm=True, jax=False)
    port = 20000 + 4242
    assert plan.scheduler == "slurm"
    assert plan.argv() == [
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        f"gpu07:{port}",
        "--rdzv_id",
        "4242.0",
    ]
    assert plan.lines() == [
        "[INFO] launcher: --nnodes 2 (from SLURM_STEP_NUM_NODES=2)",
        "[INFO] launcher: --node_rank 1 (from SLURM_NODEID=1)",
        "[INFO] launcher: --rdzv_backend c10d (from SLURM_STEP_ID=0)",
        f"[INFO] launcher: --rdzv_endpoint gpu07:{port} (from SLURM_STEP_NODELIST=gpu[07-08], SLURM_JOB_ID=4242)",
        "[INFO] launcher: --rdzv_id 4242.0 (from SLURM_JOB_ID=4242, SLURM_STEP_ID=0)",
    ]


def test_every_node_derives_the_same_rendezvous() -> None:
    plans = [infer_nodes(srun_env(node=n), {}) for n in (0, 1)]
    for dest in ("nnodes", "rdzv_backend", "rdzv_endpoint", "rdzv_id"):
        assert plans[0].values()[dest] == plans[1].values()[dest]
    assert [p.values()["node_rank"] for p in plans] == ["0", "1"]


def test_job_variables_are_used_when_the_step_ones_are_absent() -> None:
    env = without(
        srun_env(), "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST"
    )
    plan = infer_nodes(env, {})
    assert plan.values()["nnodes"] == "2"
    assert plan.values()["rdzv_endpoint"] == "gpu07:24242"
    assert "[INFO] launcher: --nnodes 2 (from SLURM_NNODES=2)" in plan.lines()


def test_the_step_node_list_wins_over_the_job_one() -> None:
    """srun -N2 inside a 4-node allocation: the step's first node hosts the rendezvous."""
    env = srun_env(SLURM_JOB_NUM_NODES="4", SLURM_JOB_NODELIST="gpu[01-04]", SLURM_STEP_NODELIST="gpu[03-04]")
    assert infer_nodes(env, {}).values()["rdzv_endpoint"] == "gpu03:24242"
    assert infer_nodes(env, {}).values()["nnodes"] == "2"


def test_node_list_expansion_keeps_slurm_padding_and_ranges() -> None:
    assert cluster.expand_nodelist("gpu[07-08,11]") == ["gpu07", "gpu08", "gpu11"]
    assert cluster.expand_nodelist("node-a,node-b") == ["node-a", "node-b"]
    assert cluster.expand_nodelist("127.0.0.[1-2]") == ["127.0.0.1", "127.0.0.2"]
    # SLURM's order between items is kept: the first node is the one SLURM lists first (node 0)
    assert cluster.expand_nodelist("node-b[1-2],node-a7") == ["node-b1", "node-b2", "node-a7"]


def test_jax_gets_a_coordinator_on_the_first_node_and_no_rendezvous() -> None:
    plan = infer_nodes(srun_env(node=0), {}, jax=True)
    assert plan.argv() == ["--nnodes", "2", "--node_rank", "0", "--coordinator_address", "gpu07:24242"]
    assert (
        "[INFO] launcher: --coordinator_address gpu07:24242 (from SLURM_STEP_NODELIST=gpu[07-08], SLURM_JOB_ID=4242)"
    ) in plan.lines()


def test_port_is_derived_from_the_job_id_in_a_fixed_range() -> None:
    assert cluster.rendezvous_port("4242") == 24242
    assert cluster.rendezvous_port("1234567") == 24567
    assert cluster.rendezvous_port("99999") == 29999
    weird = cluster.rendezvous_port("job-x")
    assert 20000 <= weird < 30000 and weird == cluster.rendezvous_port("job-x")


# ------------------------------------------------------------------------------------------ precedence


@pytest.mark.parametrize(
    ("given", "dest", "value"),
    [
        ({"nnodes": "2"}, "nnodes", None),  # the same value: given, so not inferred
        ({"nnodes": "1:4"}, "nnodes", None),  # an elastic range containing SLURM's count
        ({"node_rank": 0}, "node_rank", None),
        ({"rdzv_endpoint": "10.0.0.5:1234"}, "rdzv_endpoint", None),
        ({"rdzv_id": "mine"}, "rdzv_id", None),
        ({"rdzv_backend": "c10d"}, "rdzv_backend", None),
    ],
)
def test_explicit_flags_win_over_each_inferred_one(given: dict, dest: str, value: None) -> None:
    plan = infer_nodes(srun_env(node=1), given)
    assert dest not in plan.values()
    assert f"--{dest}" not in plan.argv()
    others = {"nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id"} - {dest}
    assert set(plan.values()) == others  # everything else is still inferred


def test_an_overridden_value_is_named_with_what_slurm_implied() -> None:
    plan = infer_nodes(srun_env(node=1), {"node_rank": 0, "rdzv_id": "mine"})
    assert "[INFO] launcher: --node_rank 0 given (SLURM implies 1, from SLURM_NODEID=1)" in plan.notes
    assert (
        "[INFO] launcher: --rdzv_id mine given (SLURM implies 4242.0, from SLURM_JOB_ID=4242, SLURM_STEP_ID=0)"
        in plan.notes
    )


def test_master_addr_or_port_selects_a_static_rendezvous() -> None:
    plan = infer_nodes(srun_env(node=1), {"master_port": 29555})
    assert plan.argv() == ["--nnodes", "2", "--node_rank", "1", "--master_addr", "gpu07"]
    plan = infer_nodes(srun_env(node=1), {"rdzv_backend": "static"})
    assert plan.argv() == ["--nnodes", "2", "--node_rank", "1", "--master_addr", "gpu07", "--master_port", "24242"]
    plan = infer_nodes(srun_env(node=1), {"master_addr": "10.1.1.1"})
    assert plan.argv() == ["--nnodes", "2", "--node_rank", "1", "--master_port", "24242"]


def test_another_rendezvous_backend_keeps_its_own_endpoint() -> None:
    plan = infer_nodes(srun_env(node=1), {"rdzv_backend": "etcd-v2", "rdzv_endpoint": "etcd:2379"})
    assert plan.argv() == ["--nnodes", "2", "--node_rank", "1", "--rdzv_id", "4242.0"]


def test_explicit_coordinator_wins_for_jax_and_then_no_node_list_is_needed() -> None:
    env = without(srun_env(node=1), "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    plan = infer_nodes(env, {"coordinator_address": "10.0.0.1:5000"}, jax=True)
    assert plan.argv() == ["--nnodes", "2", "--node_rank", "1"]


def test_explicit_endpoint_means_a_broken_node_list_is_never_read() -> None:
    env = srun_env(SLURM_STEP_NODELIST="gpu[07-")
    plan = infer_nodes(env, {"rdzv_endpoint": "10.0.0.5:1234"})
    assert "rdzv_endpoint" not in plan.values()


def test_no_slurm_turns_detection_off_and_says_so() -> None:
    plan = infer_nodes(srun_env(), {}, use_slurm=False)
    assert plan.argv() == [] and plan.scheduler is None
    assert plan.lines() == ["[INFO] launcher: SLURM detection off (--no_slurm); SLURM_JOB_ID=4242 not used"]


def test_no_slurm_also_skips_every_slurm_check() -> None:
    env = srun_env(SLURM_STEP_TASKS_PER_NODE="4(x2)", SLURM_STEP_NODELIST="gpu[07-")
    assert infer_nodes(env, {"nnodes": "3"}, use_slurm=False).argv() == []


def test_no_cluster_environment_infers_nothing() -> None:
    plan = infer_nodes({"PATH": "/usr/bin", "HOME": "/nonexistent"}, {})
    assert plan.argv() == [] and plan.lines() == [] and plan.scheduler is None


# --------------------------------------------------------------------------------- outside an srun step


def test_a_multi_node_batch_script_without_srun_warns_and_infers_nothing() -> None:
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NODEID": "0"}
    plan = infer_nodes(env, {})
    assert plan.argv() == []
    assert plan.warnings == (
        "[WARN] launcher: SLURM job 77 has 2 nodes (SLURM_JOB_NUM_NODES=2) but this launcher is not in an srun "
        "step, so it trains on this node only; start it on every node with srun --ntasks-per-node=1 (see the "
        "Clusters section of the multi-GPU docs)",
    )


def test_a_single_node_allocation_without_srun_is_left_to_torchrun() -> None:
    plan = infer_nodes({"SLURM_JOB_ID": "78", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "gpu01"}, {})
    assert plan.argv() == [] and plan.warnings == ()
    assert plan.notes == ("[INFO] launcher: SLURM job 78 outside an srun step: a single node, nothing inferred",)


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("env", "given", "message"),
    [
        pytest.param(
            {"SLURM_NODEID": "1"},
            {},
            f"a partial SLURM environment: SLURM_NODEID=1 but no SLURM_JOB_ID; give the node flags yourself, {HINT}",
            id="node-id-alone",
        ),
        pytest.param(
            without(srun_env(), "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
            {},
            "a partial SLURM environment: SLURM_JOB_ID=4242, SLURM_JOBID=4242, SLURM_STEP_ID=0, SLURM_STEPID=0, "
            "SLURM_NODEID=1, SLURM_JOB_NUM_NODES=2, SLURM_NNODES=2, SLURM_STEP_NUM_NODES=2 but no SLURM_JOB_NODELIST; "
            f"give the node flags yourself, {HINT}",
            id="node-id-without-node-list",
        ),
        pytest.param(
            without(srun_env(), "SLURM_NODEID"),
            {},
            "a partial SLURM environment: SLURM_JOB_ID=4242, SLURM_JOBID=4242, SLURM_STEP_ID=0, SLURM_STEPID=0, "
            "SLURM_JOB_NODELIST=gpu[07-08], SLURM_NODELIST=gpu[07-08], SLURM_STEP_NODELIST=gpu[07-08], "
            "SLURM_JOB_NUM_NODES=2, SLURM_NNODES=2, SLURM_STEP_NUM_NODES=2 but no SLURM_NODEID; "
            f"give the node flags yourself, {HINT}",
            id="no-node-id",
        ),
        pytest.param(
            srun_env(SLURM_STEP_NODELIST="gpu[07-"),
            {},
            "SLURM_STEP_NODELIST: node list 'gpu[07-' does not expand (missing bracket: \"gpu[07-\"); give the "
            f"rendezvous host yourself (--rdzv_endpoint or --master_addr), {HINT}",
            id="unbalanced-node-list",
        ),
        pytest.param(srun_env(SLURM_STEP_NODELIST="gpu[9-7]"), {}, None, id="backwards-range"),
        pytest.param(
            srun_env(SLURM_STEP_NODELIST="gpu 07,gpu08"),
            {},
            "SLURM_STEP_NODELIST: node list 'gpu 07,gpu08' does not expand to host names ('gpu 07' is not a host "
            f"name); give the rendezvous host yourself (--rdzv_endpoint or --master_addr), {HINT}",
            id="not-host-names",
        ),
        pytest.param(
            srun_env(SLURM_STEP_NODELIST="gpu[07-09]"),
            {},
            f"SLURM_STEP_NODELIST=gpu[07-09] names 3 node(s) but SLURM_STEP_NUM_NODES=2; {HINT}",
            id="list-and-count-disagree",
        ),
        pytest.param(
            srun_env(),
            {"nnodes": "3"},
            "--nnodes 3 disagrees with SLURM_STEP_NUM_NODES=2: this SLURM step runs on 2 node(s); give --nnodes 2 or "
            f"leave it out, {HINT}",
            id="nnodes-disagrees",
        ),
        pytest.param(srun_env(), {"nnodes": "3:4"}, None, id="nnodes-range-excludes-slurm"),
        pytest.param(
            srun_env(SLURM_STEP_TASKS_PER_NODE="4(x2)"),
            {},
            "SLURM started more than one task per node (SLURM_STEP_TASKS_PER_NODE=4(x2)); the launcher starts one "
            f"rank per GPU itself, so run one launcher per node: srun --ntasks-per-node=1 ..., {HINT}",
            id="four-tasks-per-node",
        ),
        pytest.param(
            srun_env(SLURM_STEP_TASKS_PER_NODE=None, SLURM_LOCALID="2"),
            {},
            "SLURM started more than one task per node (SLURM_LOCALID=2); the launcher starts one rank per GPU "
            f"itself, so run one launcher per node: srun --ntasks-per-node=1 ..., {HINT}",
            id="second-task-on-a-node",
        ),
        pytest.param(
            srun_env(SLURM_STEP_NUM_NODES="two"),
            {},
            f"SLURM_STEP_NUM_NODES=two: not a node count; {HINT}",
            id="bad-count",
        ),
        pytest.param(
            srun_env(SLURM_NODEID="2"), {}, f"SLURM_NODEID=2: not a node index below 2; {HINT}", id="node-id-too-big"
        ),
    ],
)
def test_bad_slurm_environments_are_one_line_errors(env: dict, given: dict, message: str | None) -> None:
    with pytest.raises(ClusterError) as info:
        infer_nodes(env, given)
    text = str(info.value)
    assert "\n" not in text and text.endswith(HINT)
    if message is not None:
        assert text == message


def test_a_partial_environment_is_fine_when_the_missing_part_is_given() -> None:
    env = without(srun_env(), "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    plan = infer_nodes(env, {"rdzv_endpoint": "10.0.0.5:29400"})
    assert plan.values()["node_rank"] == "1"


# ----------------------------------------------------------------------------------------- Kubernetes


PET = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_RDZV_ENDPOINT": "127.0.0.1:29400", "PET_RDZV_BACKEND": "c10d"}


def test_pet_variables_are_reported_and_nothing_is_inferred() -> None:
    plan = infer_nodes(PET, {})
    assert plan.scheduler == "kubernetes" and plan.argv() == []
    assert plan.lines() == [
        "[INFO] launcher: torchrun reads PET_NNODES=2, PET_NODE_RANK=1, PET_RDZV_BACKEND=c10d, "
        "PET_RDZV_ENDPOINT=127.0.0.1:29400 from the environment (Kubernetes PyTorchJob)",
    ]


def test_a_given_flag_says_which_pet_variable_it_shadows() -> None:
    plan = infer_nodes(PET, {"nnodes": "2", "rdzv_endpoint": "10.0.0.1:1"})
    assert "[INFO] launcher: --nnodes 2 given; torchrun ignores PET_NNODES=2" in plan.notes
    assert (
        "[INFO] launcher: --rdzv_endpoint 10.0.0.1:1 given; torchrun ignores PET_RDZV_ENDPOINT=127.0.0.1:29400"
        in plan.notes
    )


def test_slurm_inference_over_pet_variables_is_named() -> None:
    plan = infer_nodes({**srun_env(), **PET}, {})
    assert plan.scheduler == "slurm"
    assert "[INFO] launcher: --nnodes from SLURM; torchrun ignores PET_NNODES=2" in plan.notes


def test_jax_warns_that_pet_variables_are_not_read() -> None:
    plan = infer_nodes(PET, {"nnodes": "2"}, jax=True)
    assert plan.warnings == (
        "[WARN] launcher: PET_NNODES=2, PET_NODE_RANK=1, PET_RDZV_BACKEND=c10d, PET_RDZV_ENDPOINT=127.0.0.1:29400 "
        "set (Kubernetes PyTorchJob?) but skrl's JAX launcher does not read PET_* variables; give --node_rank, "
        "--coordinator_address",
    )
    given = {"nnodes": "2", "node_rank": 1, "coordinator_address": "h:1"}
    assert infer_nodes(PET, given, jax=True).warnings == ()


# ------------------------------------------------------------------------------------------- /dev/shm


FIX = (
    "docker run --shm-size=1g (or --ipc=host), or on Kubernetes mount an emptyDir with medium: Memory at "
    "/dev/shm; NCCL_SHM_DISABLE=1 is a slower workaround, not the fix"
)


def test_dockers_default_shm_is_too_small_for_four_ranks(tmp_path: Path) -> None:
    assert shm_warning(4, path=str(tmp_path), free_bytes=64 << 20) == (
        f"[WARN] launcher: {tmp_path} has 64 MiB free, less than the 74 MiB NCCL needs for 4 rank(s) on this "
        f"node; enlarge it: {FIX}"
    )


def test_two_ranks_fit_in_dockers_default_shm(tmp_path: Path) -> None:
    """NCCL issue 1518: 2 ranks start in 64 MiB, 4 do not."""
    assert shm_warning(2, path=str(tmp_path), free_bytes=64 << 20) is None


def test_the_suggested_size_grows_past_nccls_one_gigabyte(tmp_path: Path) -> None:
    warning = shm_warning(64, path=str(tmp_path), free_bytes=64 << 20)
    assert warning is not None and "docker run --shm-size=2g" in warning


def test_a_missing_shm_folder_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-shm"
    assert shm_warning(2, path=str(missing)) == (
        f"[WARN] launcher: {missing} does not exist; NCCL keeps its shared-memory segments there and fails to "
        f"start without it: {FIX}"
    )


def test_a_large_folder_gives_no_warning(tmp_path: Path) -> None:
    assert shm_warning(8, path=str(tmp_path), free_bytes=1 << 30) is None


def test_the_real_free_space_is_read_when_not_given(tmp_path: Path) -> None:
    """tmp_path sits on a disk with more than 18 MiB free; one rank fits."""
    assert shm_warning(1, path=str(tmp_path)) is None


def test_the_default_folder_is_dev_shm() -> None:
    import inspect

    assert inspect.signature(shm_warning).parameters["path"].default == "/dev/shm"


# ------------------------------------------------------------------------------------------- module


def test_the_module_imports_neither_torch_nor_typing() -> None:
    """The launcher imports it before answering --dry_run: no torch, no heavy start-up imports. What counts is
    what importing it adds (a tool that loads first, such as coverage's subprocess hook, may bring typing)."""
    code = (
        "import sys; before = set(sys.modules); import mgpu_lab.launch.cluster; added = set(sys.modules) - before; "
        "print(sorted(m for m in ('torch', 'typing', 'dataclasses', 'ClusterShell') if m in added))"
    )
    proc = run([PYTHON, "-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_module_keeps_no_mutable_state() -> None:
    """Module-level names are constants: no list, dict or set that a call could change."""
    tree = ast.parse((REPO / "src" / "mgpu_lab" / "launch" / "cluster.py").read_text())
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            assert not isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp)), ast.unparse(node)[
                :80
            ]
    assert sys.modules["mgpu_lab.launch.cluster"] is cluster


# ------------------------------------------------------------------------------------------- doc examples


def test_every_cluster_example_is_shown_in_the_docs_and_has_a_launcher_command() -> None:
    from mgpu_testing.cluster import EXAMPLES, example_commands

    rst = (REPO / "docs" / "source" / "features" / "multi_gpu.rst").read_text(encoding="utf-8")
    examples = sorted(p.name for p in EXAMPLES.iterdir())
    assert examples == ["pytorchjob.yaml", "slurm_jax.sbatch", "slurm_torchrun.sbatch"]
    for name in examples:
        assert f".. literalinclude:: examples/{name}" in rst, name
        assert example_commands(EXAMPLES / name), f"no `mgpu-lab train_multigpu` command in {name}"


@pytest.mark.parametrize("name", ["slurm_torchrun.sbatch", "slurm_jax.sbatch"])
def test_sbatch_examples_run_one_launcher_per_node_on_two_nodes_of_four_gpus(name: str) -> None:
    from mgpu_testing.cluster import EXAMPLES, example_commands, sbatch_options

    options = sbatch_options(EXAMPLES / name)
    assert options["--nodes"] == "2" and options["--ntasks-per-node"] == "1" and options["--gpus-per-node"] == "4"
    text = (EXAMPLES / name).read_text(encoding="utf-8")
    assert "srun --ntasks-per-node=1" in text
    (args,) = example_commands(EXAMPLES / name)
    assert args[args.index("--num_gpus") + 1] == options["--gpus-per-node"]
    for node_flag in ("--nnodes", "--node_rank", "--rdzv_endpoint", "--master_addr", "--coordinator_address"):
        assert node_flag not in args, f"{name}: {node_flag} is SLURM's to fill"


def test_the_pytorchjob_mounts_a_memory_shm_and_matches_gpus_to_ranks() -> None:
    import yaml
    from mgpu_testing.cluster import EXAMPLES

    job = yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text(encoding="utf-8"))
    assert job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert sum(spec["replicas"] for spec in specs.values()) == 2
    for role, spec in specs.items():
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == job["spec"]["nprocPerNode"], role
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        (shm,) = [name for name, path in mounts.items() if path == "/dev/shm"]
        assert volumes[shm]["emptyDir"]["medium"] == "Memory", role
