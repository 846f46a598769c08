"""A rank killed by the kernel's OOM killer (issue 37 item 4): the launcher's report gives the kernel's reason where
it can read it (the kernel log, the job's memory cgroup's ``oom_kill`` count), and names the node as every other
line does.

The real case runs a real launcher inside a memory cgroup with a limit, made here below this test's own memory
cgroup where the machine allows it (root, or a delegated subtree), with ``--rehearse_fault oom:1:2``: rank 1
allocates until the kernel kills it. Elsewhere that test is skipped and the reading of the kernel's records is
tested on real files of the same format."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mgpu_testing import REPO, kill_group, loopback_env
from mgpu_testing.launcher import CPU2, finish, launcher_cmd, start

from mgpu_lab.core import memcg, procs
from mgpu_lab.health import failures
from mgpu_lab.health.rank_progress import allocate_until_killed, parse_faults
from mgpu_lab.job import oom

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux cgroups and kernel log")

#: The job's memory limit in the real case: the launcher and two CPU ranks fit, one rank's hoarding does not.
LIMIT = 2 << 30
REFERENCE = REPO / "skills" / "user" / "train-multi-gpu" / "reference.md"
FEATURE = REPO / "docs" / "source" / "features" / "multi_gpu.rst"
KILLED_LINE = (
    "Memory cgroup out of memory: Killed process 5141 (python3) total-vm:65404kB, anon-rss:48384kB, "
    "file-rss:6656kB, shmem-rss:0kB, UID:0 pgtables:152kB oom_score_adj:0"
)


@contextlib.contextmanager
def memory_limited(limit: int) -> Iterator[str]:
    """A new memory cgroup below this process's own with ``limit`` bytes; its ``cgroup.procs`` path."""
    mine = memcg.own()
    if not mine:
        pytest.skip("no memory cgroup to make a limited one in")
    kind, parent = mine[0]
    folder = os.path.join(parent, f"mgpu_lab_oom_test_{os.getpid()}")
    try:
        os.mkdir(folder)
        with open(os.path.join(folder, memcg.LIMITS[kind]), "w", encoding="ascii") as fh:
            fh.write(str(limit))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        pytest.skip(f"this machine does not allow a memory-limited cgroup here ({exc.strerror})")
    try:
        yield os.path.join(folder, "cgroup.procs")
    finally:
        for _ in range(200):  # the killed processes leave the cgroup once reaped
            try:
                os.rmdir(folder)
                break
            except OSError:
                os.sched_yield()


def documented_rehearsal() -> list[str]:
    """The launcher's arguments in reference.md's OOM rehearsal (``systemd-run --scope -p MemoryMax=2G`` gives its
    limit there; the test makes its own memory cgroup of the same size, as systemd may not run here)."""
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    (line,) = [ln for ln in lines if "systemd-run" in ln and "--rehearse_fault oom:" in ln]
    words = shlex.split(line.strip().strip("`;"))
    assert words[: words.index("uv")] == ["sudo", "systemd-run", "--scope", "-p", f"MemoryMax={LIMIT >> 30}G"], words
    args = words[words.index("train_multigpu") + 1 :]
    assert args[:4] == CPU2 and "oom:1:2" in args, args
    return args


@pytest.mark.e2e
def test_a_rank_the_oom_killer_ends_is_reported_with_the_kernels_reason(tmp_path: Path) -> None:
    with memory_limited(LIMIT) as procs_file:
        cmd = launcher_cmd(*documented_rehearsal(), "--log_root", str(tmp_path))
        # the launcher starts inside the limited cgroup: every rank it starts is born there
        wrapper = ["sh", "-c", f'echo $$ > "{procs_file}" && exec "$@"', "sh", *cmd]
        proc = start(wrapper, loopback_env())
        try:
            _, err = finish(proc, timeout=400)
        finally:
            kill_group(proc)
    print(err)  # the real output the skill and docs quote
    assert proc.returncode == 1, err[-3000:]
    node = procs.node_name()
    killed = re.search(
        r"^\[ERROR\] launcher: rank 1 \(pid (\d+)\) was (killed|most likely killed) by the kernel's OOM killer.*$",
        err,
        re.M,
    )
    assert killed, err[-3000:]
    if oom.kernel_log() is not None:  # the kernel log is readable here: it names the pid
        assert f"Killed process {killed.group(1)} (" in killed.group(0), killed.group(0)
    assert f"[ERROR] launcher: out of memory: {oom.FIXES}" in err
    first = [line for line in err.splitlines() if line.startswith(failures.FIRST_FAILURE)]
    assert first == [
        f"{failures.FIRST_FAILURE} rank 1/2 on node {node} (pid {killed.group(1)}): killed by SIGKILL "
        "(no Python exception)"
    ], err[-3000:]
    nodes = set(re.findall(r"\bnode (\S+?)[ ,)]", err))
    assert nodes == {node}, nodes  # one name for this node in every line
    for quote in quoted_reports():  # the skill and the docs quote this run: every quoted line is in it
        for line in quote:
            assert any(shape(line).fullmatch(got) for got in err.splitlines()), f"not in the real output: {line}"


def quoted_reports() -> list[list[str]]:
    """The OOM report lines quoted in reference.md (the block after its marker) and multi_gpu.rst (its literal
    block of launcher lines under "Out of memory")."""
    md = REFERENCE.read_text(encoding="utf-8").split("<!-- quoted from tests/test_oom.py", 1)[1]
    block = md.split("```text\n", 1)[1].split("```", 1)[0]
    rst = FEATURE.read_text(encoding="utf-8").split("**Out of memory.**", 1)[1].split("::\n\n", 1)[1]
    lines = [x.strip() for x in rst.split("\n\n", 1)[0].splitlines()]
    return [block.strip().splitlines(), lines]


def shape(line: str) -> re.Pattern[str]:
    """A quoted line as a pattern: its numbers (pids, ports, sizes) and node name stand for any, "..." for any text."""
    parts = re.split(r"(\.\.\.|\d+|node vm)", line)
    pattern = "".join(
        ".*" if p == "..." else r"\d+" if p.isdigit() else r"node \S+" if p == "node vm" else re.escape(p)
        for p in parts
    )
    return re.compile(pattern)


# ---------------------------------------------------------------------------------------------- the records, read


def test_the_kernels_oom_line_names_its_victim(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(
        "6,420,10899409000,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=5141,uid=0\n"
        " SUBSYSTEM=memory\n"
        f"3,421,10899409581,-;{KILLED_LINE}\n"
        "3,422,10899500000,-;Out of memory: Killed process 77 (trainer) total-vm:1kB\n"
    )
    last, text = oom.kernel_log(str(log), after=420)
    assert last == 422
    assert oom.oom_victims(text) == {5141: KILLED_LINE, 77: "Out of memory: Killed process 77 (trainer) total-vm:1kB"}
    assert oom.kernel_log(str(log), after=422) == (422, "")  # what the log held before the job is not its
    assert oom.kernel_log(str(tmp_path / "none")) is None


def fake_cgroup(tmp_path: Path, kind: str, count: int) -> Path:
    folder = tmp_path / kind
    folder.mkdir(exist_ok=True)
    if kind == "v2":
        text = f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {count}\noom_group_kill 0\n"
    else:
        text = f"oom_kill_disable 0\nunder_oom 0\noom_kill {count}\n"
    (folder / memcg.EVENTS[kind]).write_text(text)
    return folder


@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_a_rising_oom_kill_count_names_the_cgroup(tmp_path: Path, kind: str, monkeypatch) -> None:
    """No readable kernel log; the job's memory cgroup counted an OOM kill while it ran (a real file of the kernel's
    format, its count raised as the kernel would)."""
    folder = fake_cgroup(tmp_path, kind, 0)
    monkeypatch.setattr(memcg, "own", lambda pid="self": [(kind, str(folder))])
    watch = oom.OomWatch(kmsg=str(tmp_path / "unreadable"))
    fake_cgroup(tmp_path, kind, 1)
    lines = watch.lines({1: 4242})
    assert lines == [
        "[ERROR] launcher: rank 1 (pid 4242) was most likely killed by the kernel's OOM killer: the job's memory "
        f"cgroup counted an OOM kill while it ran (oom_kill 0 -> 1 in {folder / memcg.EVENTS[kind]})",
        f"[ERROR] launcher: out of memory: {oom.FIXES}",
    ]


def test_a_sigkill_with_no_oom_record_is_said_to_come_from_elsewhere(tmp_path: Path, monkeypatch) -> None:
    folder = fake_cgroup(tmp_path, "v2", 3)
    monkeypatch.setattr(memcg, "own", lambda pid="self": [("v2", str(folder))])
    log = tmp_path / "kmsg"
    log.write_text(f"3,421,1,-;{KILLED_LINE}\n")
    watch = oom.OomWatch(kmsg=str(log))
    (line,) = watch.lines({1: 5141})  # the log's victim came before the job: not this rank
    assert line.startswith("[INFO] launcher: the SIGKILL was not the kernel's OOM killer"), line
    monkeypatch.setattr(memcg, "own", lambda pid="self": [])
    (line,) = oom.OomWatch(kmsg=str(tmp_path / "unreadable")).lines({1: 5141})
    assert line.endswith(f"check with {oom.CHECK_BY_HAND}"), line
    assert oom.OomWatch().lines({}) == []


def test_the_oom_fault_refuses_to_run_without_a_memory_limit(monkeypatch) -> None:
    assert parse_faults("oom:1:2")[0].kind == "oom"
    monkeypatch.setattr(memcg, "limited", lambda: None)
    with pytest.raises(RuntimeError, match="memory cgroup has no limit"):
        allocate_until_killed(1, 2)


def test_torchruns_fully_qualified_host_is_not_the_nodes_name() -> None:
    summary = "  host      : localhost\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 77)\n"
    exits, _ = failures.parse_torchrun_summary(summary)
    assert exits[1].node == procs.node_name()


def test_what_the_memory_cgroups_still_allow_is_the_tightest_limit_less_its_use(tmp_path: Path, monkeypatch) -> None:
    """play's free-memory check counts the process's memory cgroups (v1 and v2, wherever they are mounted)."""
    v1, v2 = fake_cgroup(tmp_path, "v1", 0), fake_cgroup(tmp_path, "v2", 0)
    (v1 / memcg.LIMITS["v1"]).write_text(f"{memcg.NO_LIMIT + 4096}\n")  # v1's "no limit"
    (v1 / memcg.USAGE["v1"]).write_text("5000\n")
    (v2 / memcg.LIMITS["v2"]).write_text("max\n")
    (v2 / memcg.USAGE["v2"]).write_text("300\n")
    monkeypatch.setattr(memcg, "own", lambda pid="self": [("v1", str(v1)), ("v2", str(v2))])
    assert memcg.left() is None  # neither is limited
    (v2 / memcg.LIMITS["v2"]).write_text("1000\n")
    assert memcg.left() == 700
    (v1 / memcg.LIMITS["v1"]).write_text("4000\n")  # over its limit already: nothing left
    assert memcg.left() == 0
