"""Honest runs: a distributed rank without CUDA and without --device refuses to start; every rank reports its
device and the env-steps it really stepped; the throughput line sums every rank's steps through a collective."""

from __future__ import annotations

import re
import socket

import pytest
from mgpu_testing import PYTHON, REPO, free_port, run
from mgpu_testing.runs import NUM_ENVS
from mgpu_testing.training import THROUGHPUT, TIME, TRAIN, assert_one_line_error, single_env

pytestmark = pytest.mark.e2e

RANK_LINE = re.compile(r"\[INFO\] rank (\d+)/(\d+): device (\S+), backend (\S+), node (\S+)$", re.M)
STEPPED = re.compile(r"\[INFO\] rank (\d+)/(\d+): stepped (\d+) env-steps$", re.M)


def test_distributed_without_cuda_and_without_device_refuses(tmp_path):
    """Today's trap: CUDA_VISIBLE_DEVICES names GPUs this machine does not have, and the rank silently used the CPU."""
    env = single_env(CUDA_VISIBLE_DEVICES="0,1", LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", MASTER_PORT=str(free_port()))
    proc = run(
        [PYTHON, TRAIN, "--rl_library", "rsl_rl", "--distributed", "--log_root", str(tmp_path / "logs")],
        timeout=300,
        env=env,
    )
    assert_one_line_error(
        proc,
        "--distributed: no CUDA device is usable here (CUDA_VISIBLE_DEVICES=0,1); "
        "ranks train on the CPU only with --device cpu",
    )
    assert not (tmp_path / "logs").exists()


SUM_SCRIPT = """
import os, sys
sys.path.insert(0, {src!r})
import torch.distributed as tdist
from mgpu_lab.train.dist import DistContext, sum_over_ranks
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
tdist.init_process_group("gloo")
total = sum_over_ranks(10 ** 10 * (rank + 1) + rank, DistContext(True, rank, rank, world, "cpu", "gloo"))
sys.stdout.write(f"rank {{rank}} total {{total}}\\n")
tdist.destroy_process_group()
"""


def test_sum_over_ranks_is_a_real_collective(tmp_path):
    script = tmp_path / "sum.py"
    script.write_text(SUM_SCRIPT.format(src=str(REPO / "src")))
    proc = run(
        [
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--rdzv_backend",
            "c10d",
            "--rdzv_endpoint",
            f"127.0.0.1:{free_port()}",
            str(script),
        ],
        timeout=180,
        env=single_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = 10**10 * 3 + 1  # beyond int32: the sum travels as int64
    assert sorted(re.findall(r"^rank (\d) total (\d+)$", proc.stdout, re.M)) == [
        ("0", str(expected)),
        ("1", str(expected)),
    ]


def test_every_rank_reports_and_the_throughput_sums_them(healthy_run):
    """The session's healthy 2-rank rsl_rl job (the launcher, gloo): per-rank device and step lines, and the
    throughput line is the sum over ranks divided by rank 0's time."""
    run = healthy_run("rsl_rl")
    out = run.out
    host = socket.gethostname()
    assert sorted(RANK_LINE.findall(out)) == [("0", "2", "cpu", "gloo", host), ("1", "2", "cpu", "gloo", host)]
    steps = run.iterations * 24 * NUM_ENVS  # rsl_rl: 24 steps per environment per iteration
    stepped = {rank: int(steps_) for rank, _, steps_ in STEPPED.findall(out)}
    assert stepped == {"0": steps, "1": steps}
    rate = int(THROUGHPUT.search(out).group(1))
    seconds = float(re.search(r"\[INFO\] training time: ([0-9.]+) s", out).group(1))
    assert TIME.search(out)
    # the printed rate is the sum over ranks divided by rank 0's time (both rounded for printing)
    assert abs(rate * seconds - sum(stepped.values())) <= 0.01 * sum(stepped.values()) + rate * 0.005 + 1
