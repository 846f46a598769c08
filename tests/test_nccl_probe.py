"""The standalone all_reduce probe: real torchrun, gloo on CPU, loopback, hard timeouts."""

from __future__ import annotations

import ast
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, REPO, free_port, kill_group, loopback_env, run
from mgpu_testing.probe import (
    PROBE,
    SMALL,
    assert_nothing_left,
    beyond_host_memory,
    check_passing_output,
    probe_module,
    tagged_env,
)

GLOO_WARNING = "nccl_probe.py: warning: backend gloo ignores NCCL_* settings: "


@pytest.mark.e2e
def test_world_size_2_under_plain_torchrun() -> None:
    # the largest --timeout accepted (one day) works end to end; an NCCL setting meets gloo: one warning
    env, tag = tagged_env(NCCL_SHM_DISABLE="1")
    cmd = [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(PROBE),
        *SMALL,
        "--timeout",
        "86400",
    ]
    proc = run(cmd, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_passing_output(proc.stdout, 2)
    assert "deadline 86400 s per collective" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert warnings == [
        GLOO_WARNING + "NCCL_SHM_DISABLE=1 (environment) has no effect here; "
        "test NCCL settings with --backend nccl on GPUs"
    ], proc.stderr
    assert_nothing_left(tag)


@pytest.mark.e2e
def test_world_size_4_passes_with_the_probes_own_launcher() -> None:
    # world sizes 1 and 3 pass in the bisection rehearsal (test_nccl_probe_bisect.py), 2 under plain torchrun
    env, tag = tagged_env()
    proc = run([PYTHON, str(PROBE), "--nproc_per_node", "4", *SMALL, "--timeout", "60"], timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_passing_output(proc.stdout, 4)
    assert re.search(
        r"^\[nccl_probe\] world size 4, backend gloo: OK: 0 wrong elements; avg busbw [\d.]+ GB/s$", proc.stdout, re.M
    ), proc.stdout
    assert_nothing_left(tag)


@pytest.mark.e2e
def test_skipped_collective_exits_3_naming_the_rank() -> None:
    env, tag = tagged_env()
    timeout = 5
    cmd = [
        PYTHON,
        str(PROBE),
        "--nproc_per_node",
        "3",
        "--backend",
        "gloo",
        "-b",
        "8",
        "-e",
        "64",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--timeout",
        str(timeout),
        "--run_limit",
        "600",
        "--fault",
        "skip:1@4",
    ]
    proc = run(cmd, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "DEADLINE MISSED" in out
    assert re.search(r"ranks that never entered it: 1 \(rank 1 last finished all_reduce #3\)", out), out
    assert "ranks waiting inside it: 0,2" in out
    assert (
        "FAILED (exit 3: deadline missed): all_reduce #4 not finished by rank(s) 0,1,2; "
        "never entered by rank(s) 1" in out
    )
    # the missed deadline ended the run, not the hard limit (600 s) that would otherwise have
    assert re.search(r"the run ended [\d.]+ s after the first missed deadline", out), out
    assert "hard limit" not in out
    assert_nothing_left(tag)


@pytest.mark.e2e
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
        (["--nproc_per_node", "2", "--timeout", "inf"], "up to 86400 (one day), got inf"),
        (["--nproc_per_node", "2", "--timeout", "nan"], "up to 86400 (one day), got nan"),
        (["--nproc_per_node", "2", "--timeout", "1e10"], "up to 86400 (one day), got 1e+10"),
        (["--nproc_per_node", "2", "--timeout", "86400.5"], "up to 86400 (one day)"),
        (["--nproc_per_node", "2", "--run_limit", "inf"], "--run_limit must be a positive number of seconds up to"),
        (["--nproc_per_node", "2", "--fault", "kill:x"], "bad fault"),
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
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe's own ``main(argv)``, in this process: every refusal comes before any run starts. The script as
    a process, from ``sys.exit(main())`` on, is :func:`test_a_refusal_as_a_process_is_one_line_and_exit_2`'s."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    code = probe_module().main(args)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nccl_probe.py: error: "), err
    assert needle in lines[0]
    assert "Traceback" not in err and out == ""


def test_a_refusal_as_a_process_is_one_line_and_exit_2() -> None:
    env = loopback_env()
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(var, None)
    proc = run([PYTHON, str(PROBE), "--nproc_per_node", "2", "-e", "12Q"], timeout=120, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "nccl_probe.py: error: argument -e/--max_bytes: not a size: '12Q' (use a byte count such as 8, 1K, 64K, 128M, 1G)"
    ], proc.stderr
    assert proc.stdout == ""


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
    for flag in (
        "--backend",
        "-b",
        "--min_bytes",
        "-e",
        "--max_bytes",
        "-f",
        "--step_factor",
        "--iters",
        "--warmup",
        "--timeout",
        "--fault",
        "--fault_unless",
        "--nproc_per_node",
        "--bisect",
        "--world_sizes",
        "--candidate",
        "--run_limit",
        "--log_dir",
    ):
        assert flag in flags
    top_level = [a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names] + [
        n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom)
    ]
    assert not any(name.split(".")[0] == "torch" for name in top_level)  # torch only on the rank's path


@pytest.mark.e2e
def test_killed_rank_is_named_not_the_rank_that_lost_it() -> None:
    env, tag = tagged_env()
    cmd = [
        PYTHON,
        str(PROBE),
        "--nproc_per_node",
        "2",
        "--backend",
        "gloo",
        "-b",
        "8",
        "-e",
        "64",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "60",
        "--fault",
        "kill:1",
    ]
    proc = run(cmd, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    assert "rank 1: fault injected (--fault kill:1): SIGKILL before all_reduce #0" in proc.stderr
    summary = re.findall(
        r"^\[nccl_probe\] world size 2, backend gloo: FAILED \(exit 4: a rank failed\): (.+)$", proc.stdout, re.M
    )
    assert summary == [
        ("rank(s) 1 died without a result (killed by a signal, or crashed); rank(s) 0 only lost their peer")
    ], out
    # rank 0 reported the broken collective itself, or torchrun stopped it first: either way not blamed
    assert re.search(
        r"^\[nccl_probe\] per rank: 0 (exit 4 \(a rank failed\)|stopped by SIGTERM), "
        r"1 died without a result$",
        proc.stdout,
        re.M,
    ), out
    assert_nothing_left(tag)


@pytest.mark.e2e
def test_sigterm_to_a_waiting_rank_is_recorded_as_stopped(tmp_path: Path) -> None:
    """A rank blocked inside a collective still records that it was stopped, and exits 128+15 at once
    (the deadline is 600 s away): this is what tells a stopped rank from one that died."""
    env, tag = tagged_env(NCCLPROBE_STATUS_DIR=str(tmp_path))
    cmd = [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(PROBE),
        "--backend",
        "gloo",
        "-e",
        "64",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "600",
        "--fault",
        "skip:1",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        seen, end = "", time.monotonic() + 240
        while "leaving all_reduce #0 out" not in seen:  # rank 1 is skipping: rank 0 waits in all_reduce #0
            assert time.monotonic() < end and proc.poll() is None, seen
            if select.select([proc.stderr], [], [], 1.0)[0]:
                seen += proc.stderr.readline()
        os.kill(int((tmp_path / "pid.0").read_text()), signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_group(proc)
    status = json.loads((tmp_path / "status.0.json").read_text())
    assert status["stopped"] == "SIGTERM" and status["code"] == 143, status
    assert "rank 0 stopped by SIGTERM before it had a result" in err
    assert re.search(r"exitcode\s*: 143", err), err
    assert_nothing_left(tag)


def test_sizes_beyond_host_memory_are_refused_before_any_rank_starts() -> None:
    env, tag = tagged_env()
    big = beyond_host_memory()
    proc = run([PYTHON, str(PROBE), "--nproc_per_node", "2", "--backend", "gloo", "-e", big], timeout=120, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.fullmatch(
        rf"nccl_probe.py: error: not enough memory for -e {big}: each rank needs [\d.]+ GiB "
        rf"\(3 buffers of {big[:-1]} GiB\), but each of the 2 ranks on this host has only [\d.]+ "
        r"[KMG]iB \(a share of [\d.]+ [KMG]iB available\); the largest -e that fits is \d+[KMG]?",
        lines[0],
    ), lines[0]
    assert proc.stdout == ""  # torchrun never started
    assert_nothing_left(tag)


@pytest.mark.e2e
def test_ranks_refuse_sizes_beyond_memory_under_plain_torchrun() -> None:
    """Without the probe's own launcher the ranks check: every rank measures before any allocates,
    and rank 0 says it once."""
    env, tag = tagged_env()
    big = beyond_host_memory()
    cmd = [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(PROBE),
        "--backend",
        "gloo",
        "-e",
        big,
        "--timeout",
        "60",
    ]
    proc = run(cmd, timeout=300, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # torchrun's own status for any failing rank
    refusals = [line for line in proc.stderr.splitlines() if line.startswith("nccl_probe.py: error:")]
    assert len(refusals) == 1, proc.stderr
    assert re.fullmatch(
        rf"nccl_probe.py: error: not enough memory for -e {big}: .*, but ranks 0,1 have only "
        r"[\d.]+ [KMG]iB each \(their share of the host's available memory, split among 2 local "
        r"rank\(s\)\); the largest -e that fits is \d+[KMG]?",
        refusals[0],
    ), refusals[0]
    assert re.search(r"exitcode\s*: 2 ", proc.stderr), proc.stderr
    assert 'nccl_probe.py", line' not in proc.stderr  # no traceback from a rank
    assert "# nccl_probe:" not in proc.stdout  # refused before the sweep
    assert_nothing_left(tag)


def test_buffers_take_three_times_the_largest_message() -> None:
    """Peak memory of the sweep's buffers, measured: three float32 buffers, no int64 index (which
    made it four to five times the largest message before)."""
    script = f"""
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("probe", {str(PROBE)!r})
probe = sys.modules["probe"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
largest = 128 * 1024 * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak to the current resident size
before = hwm()
src, expected, buf = probe.sweep_buffers(torch, 1, 3, largest, torch.device("cpu"))
buf.zero_()  # touch every page
print((hwm() - before) / largest, probe.buffer_bytes(largest) / largest, src.numel() * 4 == largest)
"""
    proc = run([PYTHON, "-c", script], timeout=120)
    assert proc.returncode == 0, proc.stderr
    peak, planned, sized = proc.stdout.split()
    assert sized == "True"
    assert float(planned) == pytest.approx(3.0, abs=1e-6)
    assert 2.9 <= float(peak) <= 3.25, proc.stdout


def test_memory_refusal_says_what_fits() -> None:
    probe = probe_module()
    gib = 1024**3
    text = probe.memory_refusal(8 * gib, 10 * gib, "this host has", " available")
    assert text == (
        "not enough memory for -e 8G: each rank needs 24.0 GiB (3 buffers of 8 GiB), but this host has "
        "only 10.0 GiB available; the largest -e that fits is 2G"
    )
    assert probe.memory_refusal(8 * gib, probe.buffer_bytes(8 * gib), "x", "") is None
    assert probe.memory_refusal(64, 11, "x", "").endswith("; not even -e 4 fits")
    assert probe.memory_refusal(1024, 3 * 1024 - 1, "x", "").endswith("; the largest -e that fits is 512")


def test_nccl_settings_that_gloo_ignores() -> None:
    probe = probe_module()
    env = {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "0", "TORCH_NCCL_BLOCKING_WAIT": "1", "PATH": "/bin"}
    assert probe.nccl_settings_on_gloo(env, ("NCCL_P2P_DISABLE", "1"), None) == [
        "NCCL_P2P_DISABLE=1 (--candidate)",
        "NCCL_DEBUG=INFO (environment)",
    ]
    # the --fault_unless variable acts (it disarms the stand-in defect): not reported
    assert probe.nccl_settings_on_gloo(env, ("NCCL_P2P_DISABLE", "1"), ("NCCL_P2P_DISABLE", "1")) == [
        "NCCL_DEBUG=INFO (environment)"
    ]
    assert probe.nccl_settings_on_gloo({"PATH": "/bin"}, ("GLOO_SOCKET_IFNAME", "lo"), None) == []


def test_versions_line_names_torch_its_cuda_its_nccl_and_the_driver(tmp_path: Path) -> None:
    """The header's versions come from the torch that runs the probe, and the driver from the kernel module's
    record (two real formats: the open and the proprietary module); n/a where a machine has no driver."""
    import torch

    probe = probe_module()
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - a torch built without NCCL
        nccl = "n/a"
    missing = str(tmp_path / "no-driver")
    assert probe.versions_line(torch, missing) == (
        f"versions: torch {torch.__version__}, CUDA {torch.version.cuda or 'n/a'}, NCCL {nccl}, driver n/a"
    )
    record = tmp_path / "version"
    record.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
        "(dvs-builder@U16-I3-B09-2-1)  Thu Jan 23 2025\nGCC version:  gcc version 12.2.0\n"
    )
    assert probe.driver_version(str(record)) == "570.86.15"
    record.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024\n")
    assert probe.versions_line(torch, str(record)).endswith(", driver 535.161.07")
    record.write_text("something else\n")
    assert probe.driver_version(str(record)) == "n/a"
