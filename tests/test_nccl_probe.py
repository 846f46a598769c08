"""The standalone all_reduce probe: real torchrun, gloo on CPU, loopback, hard timeouts."""

from __future__ import annotations

import ast
import os
import re
import time
from pathlib import Path

import pytest

from mgpu_testing import PYTHON, REPO, free_port, loopback_env, run
from mgpu_testing.probe import PROBE, SMALL, ROW, assert_nothing_left, leftovers, tagged_env


def check_passing_output(out: str, world: int) -> None:
    assert "busbw(GB/s)" in out and "#wrong" in out
    rows = ROW.findall(out)
    sizes = [int(r[0]) for r in rows]
    assert sizes == [8 * 2**i for i in range(14)]  # 8 B .. 64 KiB, doubling
    assert all(int(r[5]) == 0 for r in rows)
    for r in rows:  # busbw = algbw * 2(n-1)/n
        assert float(r[4]) == pytest.approx(float(r[3]) * 2 * (world - 1) / world, abs=2e-3)
    assert f"world size {world}" in out
    assert "# result: OK" in out
    for rank in range(world):
        assert re.search(rf"^rank {rank} ok$", out, re.M), f"rank {rank} did not report ok"


def test_world_size_2_under_plain_torchrun() -> None:
    env, tag = tagged_env()
    cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(PROBE), *SMALL, "--timeout", "60"]
    proc = run(cmd, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_passing_output(proc.stdout, 2)
    assert_nothing_left(tag)


@pytest.mark.parametrize("world", [3, 4])
def test_world_sizes_3_and_4_pass(world: int) -> None:
    env, tag = tagged_env()
    proc = run([PYTHON, str(PROBE), "--nproc_per_node", str(world), *SMALL, "--timeout", "60"], timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_passing_output(proc.stdout, world)
    assert f"world size {world}, backend gloo: OK" in proc.stdout
    assert_nothing_left(tag)


def test_skipped_collective_exits_3_naming_the_rank() -> None:
    env, tag = tagged_env()
    timeout = 5
    cmd = [PYTHON, str(PROBE), "--nproc_per_node", "3", "--backend", "gloo", "-b", "8", "-e", "64",
           "--iters", "2", "--warmup", "1", "--timeout", str(timeout), "--fault", "skip:1@4"]
    proc = run(cmd, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "DEADLINE MISSED" in out
    assert re.search(r"ranks that never entered it: 1 \(rank 1 last finished all_reduce #3\)", out), out
    assert "ranks waiting inside it: 0,2" in out
    assert "FAILED (exit 3: deadline missed): all_reduce #4 not finished by rank(s) 0,1,2; " \
           "never entered by rank(s) 1" in out
    # the deadline of the stuck collective, then the exit: within --timeout + 10 s of its start
    after = float(re.search(r"the run ended ([\d.]+) s after the first missed deadline", out).group(1))
    assert after <= 10.0, out
    assert_nothing_left(tag)


def test_corrupted_contribution_is_wrong_results() -> None:
    env, tag = tagged_env()
    cmd = [PYTHON, str(PROBE), "--nproc_per_node", "2", "--backend", "gloo", "-b", "8", "-e", "1K",
           "--iters", "2", "--warmup", "1", "--timeout", "60", "--fault", "corrupt:1"]
    proc = run(cmd, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    rows = ROW.findall(proc.stdout)
    assert int(rows[0][5]) > 0 and all(int(r[5]) == 0 for r in rows[1:])
    assert "# result: FAILED: wrong results" in proc.stdout
    assert re.search(r"^rank 1 FAILED: \d+ wrong element", proc.stdout, re.M)
    assert "FAILED (exit 1: wrong results)" in proc.stdout
    assert_nothing_left(tag)


def test_hard_run_limit_kills_every_process() -> None:
    env, tag = tagged_env()
    cmd = [PYTHON, str(PROBE), "--nproc_per_node", "2", "--backend", "gloo", "-e", "64", "--run_limit", "3"]
    proc = run(cmd, timeout=120, env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "hard limit of 3 s reached" in proc.stdout
    assert_nothing_left(tag)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nproc_per_node", "2", "-b", "1M", "-e", "1K"], "empty size range"),
        (["--nproc_per_node", "2", "-e", "2"], "empty size range"),
        (["--nproc_per_node", "2", "-e", "12Q"], "not a size"),
        (["--nproc_per_node", "2", "-b", "-8"], "not a size"),
        (["--nproc_per_node", "2", "-f", "1"], "step_factor must be at least 2"),
        (["--nproc_per_node", "2", "--iters", "0"], "--iters must be at least 1"),
        (["--nproc_per_node", "2", "--timeout", "0"], "--timeout must be a positive"),
        (["--nproc_per_node", "2", "--backend", "mpi"], "invalid choice"),
        (["--nproc_per_node", "2", "--fault", "hang:1"], "bad fault"),
        (["--nproc_per_node", "2", "--fault", "skip:1", "--fault_unless", "FIXED"], "malformed setting"),
        (["--bisect", "--candidate", "NCCL_P2P_DISABLE"], "malformed setting"),
        (["--bisect", "--candidate", "=1"], "malformed setting"),
        (["--bisect", "--candidate", "1NCCL=1"], "malformed setting"),
        (["--bisect", "--world_sizes", "2,x", "--candidate", "A=1"], "bad world sizes"),
        (["--bisect"], "--bisect needs --candidate"),
        (["--nproc_per_node", "2", "--candidate", "A=1"], "--candidate needs --bisect"),
        (["--fault_unless", "A=1", "--nproc_per_node", "2"], "--fault_unless needs --fault"),
        ([], "not started by torchrun"),
        (["--nproc_per_node", "2", "--backend", "nccl"], "backend nccl needs CUDA"),
        (["--bisect", "--world_sizes", "2,3", "--candidate", "A=1", "--backend", "nccl"], "backend nccl needs CUDA"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    env = loopback_env()
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(var, None)
    proc = run([PYTHON, str(PROBE), *args], timeout=120, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nccl_probe.py: error: "), proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_parser_is_one_literal_build_parser() -> None:
    """The skill checker reads the options statically: one build_parser() with literal flag names."""
    tree = ast.parse(PROBE.read_text())
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_parser"]
    assert len(funcs) == 1
    flags = []
    for node in ast.walk(funcs[0]):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            assert all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)
            flags += [a.value for a in node.args]
    for flag in ("--backend", "-b", "--min_bytes", "-e", "--max_bytes", "-f", "--step_factor", "--iters",
                 "--warmup", "--timeout", "--fault", "--fault_unless", "--nproc_per_node", "--bisect",
                 "--world_sizes", "--candidate", "--run_limit", "--log_dir"):
        assert flag in flags
    top_level = [a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                 for a in n.names] + [n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert not any(name.split(".")[0] == "torch" for name in top_level)  # torch only on the rank's path
