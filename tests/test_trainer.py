"""train.py's command line: every bad input is one line on stderr and exit 2; helpers in mgpu_lab.train.dist."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from mgpu_testing import PYTHON, REPO, SEAMS_DIR, loopback_env
from mgpu_testing.training import train_in_process

from mgpu_lab.train import dist
from mgpu_lab.train.config import UsageError

TRAIN = str(REPO / "scripts" / "reinforcement_learning" / "train.py")
LAUNCHER_VARS = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE")


def clean_env(**extra: str) -> dict[str, str]:
    env = loopback_env(**extra)
    for name in LAUNCHER_VARS:
        if name not in extra:
            env.pop(name, None)
    return env


def assert_usage_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def train(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """train.py in-process (its parser and mgpu_lab.train.trainer.main): these cases end before any training."""
    return train_in_process(list(args), env)


# --- bad input --------------------------------------------------------------------------------------


def test_help_documents_every_option_and_the_contract_flags(capsys):
    """The contract's flags are options of train.py's parser, and --help shows every option with its help."""
    import re

    from mgpu_testing.docs import load_script

    parser = load_script(Path(TRAIN), "_mgpu_train_help").build_parser()
    options = {flag for action in parser._actions for flag in action.option_strings}
    contract = {
        "--rl_library",
        "--task",
        "--num_envs",
        "--max_iterations",
        "--seed",
        "--device",
        "--distributed",
        "--ml_framework",
        "--checkpoint",
        "--run_name",
        "--log_root",
        "--continue_run",
    }
    assert contract <= options, contract - options
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert options - {"-h"} <= set(re.findall(r"(?<![\w-])(--[a-z][a-z_]*)", out))
    flat = " ".join(out.split())
    for action in parser._actions:
        if action.help and action.option_strings != ["-h", "--help"]:
            assert " ".join(action.help.split()[:3]).replace("%%", "%") in flat, action.option_strings


def test_unknown_task_lists_known_tasks():
    err = assert_usage_error(train("--task", "Isaac-Cartpole-v0", "--device", "cpu"), "Isaac-Cartpole-v0")
    assert "Toy-Cartpole-v0" in err and "Toy-Pendulum-SwingUp-v0" in err


def test_distributed_without_torchrun_env_points_to_the_launcher():
    assert_usage_error(train("--distributed", "--device", "cpu"), "mgpu-lab train_multigpu", "LOCAL_RANK")


def test_cuda_device_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert_usage_error(train("--device", "cuda:0"), "CUDA is not available")


def test_malformed_device():
    assert_usage_error(train("--device", "tpu"), "cpu, cuda or cuda:N")


@pytest.mark.parametrize("flag,value", [("--num_envs", "0"), ("--max_iterations", "-1"), ("--save_interval", "0")])
def test_non_positive_counts(flag, value):
    assert_usage_error(train(flag, value, "--device", "cpu"), flag)


def test_jax_is_for_skrl_only():
    assert_usage_error(train("--ml_framework", "jax", "--rl_library", "rsl_rl", "--device", "cpu"), "skrl")


def test_missing_checkpoint(tmp_path):
    assert_usage_error(train("--checkpoint", str(tmp_path / "nope.pt"), "--device", "cpu"), "no such file")
    assert_usage_error(train("--checkpoint", str(tmp_path), "--device", "cpu"), "not a file")


@pytest.mark.parametrize("head", [b"", b"\x80\x09"], ids=["random", "pickle-protocol-9-header"])
def test_checkpoint_that_is_not_a_checkpoint(tmp_path, head):
    """Random bytes, or random bytes after a pickle header of a protocol torch never writes (torch warns about it:
    the warning must not add lines to the one-line refusal)."""
    junk = tmp_path / "junk.pt"
    junk.write_bytes(head + os.urandom(4096))
    assert_usage_error(
        train("--checkpoint", str(junk), "--device", "cpu", "--log_root", str(tmp_path)), "not a checkpoint"
    )


def test_torch_file_of_the_wrong_kind(tmp_path):
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, other)
    assert_usage_error(
        train(
            "--checkpoint",
            str(other),
            "--device",
            "cpu",
            "--log_root",
            str(tmp_path),
            "--max_iterations",
            "1",
            "--num_envs",
            "4",
        ),
        "not an rsl_rl checkpoint",
    )


@pytest.mark.parametrize("library,extra", [("rsl_rl", "rsl-rl"), ("rl_games", "rl-games"), ("skrl", "skrl")])
def test_library_not_installed_names_the_extra(library, extra, tmp_path):
    """Hide the installed library from the import system for the call (sys.modules[name] = None)."""
    proc = train_in_process(
        ["--rl_library", library, "--device", "cpu", "--log_root", str(tmp_path)], clean_env(), hide=(library,)
    )
    assert_usage_error(proc, f"{library} is not installed", f"uv sync --extra {extra}")
    assert not (tmp_path / library).exists(), "a refused run writes nothing"


def test_unknown_library_is_an_argparse_error():
    proc = train("--rl_library", "sb3")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr and "Traceback" not in proc.stderr


# --- mgpu_lab.train.dist ------------------------------------------------------------------------------------


def test_context_single_process(monkeypatch):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    ctx = dist.context_from_env("cpu", False)
    assert (ctx.rank, ctx.world_size, ctx.device, ctx.backend, ctx.distributed) == (0, 1, "cpu", "gloo", False)
    assert dist.is_rank0(ctx) and dist.rank_seed(7, ctx) == 7


def test_context_from_torchrun_env(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    ctx = dist.context_from_env("cpu", True)
    assert (ctx.local_rank, ctx.rank, ctx.world_size, ctx.backend, ctx.device) == (1, 3, 4, "gloo", "cpu")
    assert not dist.is_rank0(ctx) and dist.rank_seed(10, ctx) == 13


def test_context_from_skrl_jax_env(monkeypatch):
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JAX_LOCAL_RANK", "0")
    monkeypatch.setenv("JAX_RANK", "1")
    monkeypatch.setenv("JAX_WORLD_SIZE", "2")
    ctx = dist.context_from_env("cpu", True)
    assert (ctx.rank, ctx.world_size) == (1, 2)


def test_context_rejects_inconsistent_env(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError):
        dist.context_from_env("cpu", True)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(UsageError):
        dist.context_from_env("cpu", True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_context_cuda_uses_local_rank_and_nccl(monkeypatch):  # pragma: no cover - GPU machines only
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    ctx = dist.context_from_env("cuda", True)
    assert ctx.device == "cuda:0" and ctx.backend == "nccl"


def test_param_digest_is_sensitive_to_values_shapes_and_order():
    a, b = torch.arange(6.0), torch.tensor(3)
    base = dist.param_digest([a, b])
    assert base == dist.param_digest([a.clone(), b.clone()])
    assert len(base) == 64
    assert base != dist.param_digest([b, a])
    assert base != dist.param_digest([a.reshape(2, 3), b])
    c = a.clone()
    c[5] = torch.nextafter(c[5], torch.tensor(100.0))  # one ulp
    assert base != dist.param_digest([c, b])


def test_atomic_save_replaces_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "sub" / "ckpt.pt"
    dist.atomic_torch_save({"x": torch.ones(3)}, path)
    dist.atomic_torch_save({"x": torch.zeros(3)}, path)
    assert torch.equal(torch.load(path)["x"], torch.zeros(3))
    assert [p.name for p in path.parent.iterdir()] == ["ckpt.pt"]


def test_atomic_save_cleans_up_after_a_failing_writer(tmp_path):
    path = tmp_path / "ckpt.pt"
    dist.atomic_torch_save({"x": 1}, path)

    def boom(f):
        f.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        dist.atomic_write(path, boom)
    assert torch.load(path) == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


WRITER = """
import sys, torch
from mgpu_lab.train.dist import atomic_torch_save
sys.path.insert(0, {seams!r})
import sitecustomize  # the suite's seams (not installed: no MGPU_TESTING_SEAMS in this process's environment)
for i in (1, 2, 3):
    if i == 3:  # the seam: stop inside the third save, between the complete temp file and os.replace
        sitecustomize.install({{"stop_in_save": {marker!r}}})
    atomic_torch_save({{"i": i, "w": torch.full((1_500_000,), float(i))}}, {path!r})
"""


def test_sigkill_between_temp_write_and_replace_keeps_the_old_checkpoint(tmp_path):
    """Stop a writer inside its third save (the suite's seam), SIGKILL it there: the file is still the second one."""
    import json

    from mgpu_testing.training import is_stopped, wait_for_file

    path, marker = tmp_path / "ckpt.pt", tmp_path / "marker.json"
    code = WRITER.format(path=str(path), marker=str(marker), seams=str(SEAMS_DIR))
    proc = subprocess.Popen([PYTHON, "-c", code], start_new_session=True, env=clean_env())
    try:
        wait_for_file(marker, proc, 120)
        end = time.monotonic() + 30
        while not is_stopped(proc.pid) and time.monotonic() < end:
            time.sleep(0.01)
        assert is_stopped(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    info = json.loads(marker.read_text())
    assert info["target"] == str(path)
    loaded = torch.load(path, weights_only=True)
    assert loaded["i"] == 2 and torch.all(loaded["w"] == 2.0)  # the old file, whole
    tmp = Path(info["tmp"])
    assert tmp.parent == tmp_path and tmp.name.startswith(".ckpt.pt.") and tmp.suffix == ".tmp"
    assert torch.load(tmp, weights_only=True)["i"] == 3  # the interrupted save was complete, only not renamed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt.pt", "marker.json", tmp.name])


def test_run_dir_layout_and_exclusive_create(tmp_path, monkeypatch):
    import functools

    from mgpu_lab.runs import run_dir

    # the stamp given, as the seam: both runs want the same name
    monkeypatch.setattr(run_dir, "folder_name", functools.partial(run_dir.folder_name, stamp="2026-01-01_00-00-00"))
    first = run_dir.create(str(tmp_path), "rsl_rl", "Toy-Cartpole-v0", "demo")
    assert first == (tmp_path / "rsl_rl" / "Toy-Cartpole-v0" / "2026-01-01_00-00-00_demo").resolve()
    assert first.is_dir() and not any(first.iterdir())
    second = run_dir.create(str(tmp_path), "rsl_rl", "Toy-Cartpole-v0", "demo")
    assert second.name == "2026-01-01_00-00-00_demo_1"  # a new folder, never a shared one
    assert run_dir.planned(str(tmp_path), "rsl_rl", "Toy-Cartpole-v0", None).name == "2026-01-01_00-00-00"


def test_every_adapter_satisfies_the_one_adapter_interface():
    """Each adapter module defines the Protocol's functions with its parameters (read with ast: importing the
    adapters would import every RL library)."""
    import ast
    import inspect

    from mgpu_lab.train import adapters

    wanted = {
        name: list(inspect.signature(getattr(adapters.Adapter, name)).parameters)[1:]
        for name in ("train", "checkpoints", "checkpoint_iteration")
    }
    for library, module in adapters.LIBRARIES.items():
        path = Path(adapters.__file__).parent / f"{module.rsplit('.', 1)[1]}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {
            node.name: [a.arg for a in node.args.args] for node in tree.body if isinstance(node, ast.FunctionDef)
        }
        for name, params in wanted.items():
            assert defined.get(name) == params, f"{library}: {name}{tuple(defined.get(name) or ())} != {params}"
