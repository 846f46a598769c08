"""Bisection mode of the probe: verdicts per world size, with the fault tied to an environment setting,
and what a signal to the bisecting probe leaves behind (nothing)."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from mgpu_testing import PYTHON, REPO, kill_group, run
from mgpu_testing.probe import PROBE, assert_nothing_left, leftovers, probe_module, tagged_env
from mgpu_testing.training import wait_for


FAST = ["--backend", "gloo", "-b", "8", "-e", "64", "--iters", "1", "--warmup", "0", "--timeout", "60",
        "--run_limit", "240"]


def verdicts(out: str) -> dict[int, str]:
    return {int(w): v for w, v in re.findall(r"^\[bisect\]   world size (\d+): (.+)$", out, re.M)}


@pytest.mark.e2e
def test_confirmed_and_not_the_cause(tmp_path: Path) -> None:
    # the stand-in defect corrupts rank 1's contribution unless PROBE_DEFECT_FIXED=1 is set:
    # world size 1 has no rank 1 (passes either way), world size 2 fails without the setting
    env, tag = tagged_env()
    env.pop("PROBE_DEFECT_FIXED", None)
    cmd = [PYTHON, str(PROBE), "--bisect", "--world_sizes", "1,2", "--candidate", "PROBE_DEFECT_FIXED=1",
           "--fault", "corrupt:1", "--fault_unless", "PROBE_DEFECT_FIXED=1", "--log_dir", str(tmp_path), *FAST]
    proc = run(cmd, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    rehearsal = " (rehearsal: stand-in defect --fault corrupt:1@0 unless PROBE_DEFECT_FIXED=1; says nothing about NCCL)"
    assert verdicts(proc.stdout) == {
        1: "passes either way: not the cause" + rehearsal,
        2: "fails without, passes with: workaround confirmed" + rehearsal,
    }, out
    assert proc.returncode == 0, out
    assert "warning" not in proc.stderr  # the verdicts themselves say it is a rehearsal
    # progress lines as it goes, one per run, with the failing run's reason
    assert len(re.findall(r"^\[bisect\] world size \d+, with(out)? PROBE_DEFECT_FIXED=1: running$",
                          proc.stdout, re.M)) == 5
    assert "world size 2, without PROBE_DEFECT_FIXED=1: FAILED (exit 1: wrong results" in proc.stdout
    assert "# fault: corrupt:1@0 (disarmed by --fault_unless)" in (tmp_path / "world2_with.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "world1_with.log", "world1_without.log", "world2_with.log", "world2_without.log", "world2_without_rerun.log"]
    assert_nothing_left(tag)


@pytest.mark.e2e
def test_not_a_fix(tmp_path: Path) -> None:
    # the candidate is the wrong setting: the defect stays (one rank keeps this test cheap)
    env, tag = tagged_env(NCCL_P2P_DISABLE="1")  # set in the shell: "without" runs must drop it
    env.pop("PROBE_DEFECT_FIXED", None)
    cmd = [PYTHON, str(PROBE), "--bisect", "--world_sizes", "1", "--candidate", "NCCL_P2P_DISABLE=1",
           "--fault", "corrupt:0", "--fault_unless", "PROBE_DEFECT_FIXED=1", "--log_dir", str(tmp_path), *FAST]
    proc = run(cmd, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {1: "fails either way: not a fix (rehearsal: stand-in defect --fault "
                                        "corrupt:0@0 unless PROBE_DEFECT_FIXED=1; says nothing about NCCL)"}, out
    assert proc.returncode == 1, out
    # the NCCL candidate does nothing on gloo: said once, by the bisector, not again by the ranks
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        "nccl_probe.py: warning: backend gloo ignores NCCL_* settings: NCCL_P2P_DISABLE=1 (--candidate) has no "
        "effect here; test NCCL settings with --backend nccl on GPUs"], out
    assert "# settings: (none)" in (tmp_path / "world1_without.log").read_text()
    assert "# settings: NCCL_P2P_DISABLE=1" in (tmp_path / "world1_with.log").read_text()
    assert_nothing_left(tag)


@pytest.mark.e2e
def test_on_gloo_without_fault_unless_the_verdict_cannot_apply_to_nccl(tmp_path: Path) -> None:
    env, tag = tagged_env(NCCL_DEBUG="INFO")
    cmd = [PYTHON, str(PROBE), "--bisect", "--world_sizes", "1", "--candidate", "NCCL_SHM_DISABLE=1",
           "--log_dir", str(tmp_path), *FAST]
    proc = run(cmd, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {1: "passes either way: not the cause (gloo run: cannot apply to NCCL)"}, out
    assert proc.returncode == 0, out
    assert proc.stderr.splitlines() == [
        "nccl_probe.py: warning: backend gloo ignores NCCL_* settings: NCCL_SHM_DISABLE=1 (--candidate), "
        "NCCL_DEBUG=INFO (environment) have no effect here; test NCCL settings with --backend nccl on GPUs",
        "nccl_probe.py: warning: --bisect on backend gloo without --fault_unless runs no NCCL, so its verdicts "
        "cannot apply to NCCL; rehearse with --fault and --fault_unless, or bisect on GPUs with --backend nccl",
    ], out
    assert "warning" not in (tmp_path / "world1_with.log").read_text()  # the ranks do not repeat it
    assert_nothing_left(tag)


@pytest.mark.e2e
def test_sigterm_during_a_world_size_4_bisection_leaves_nothing_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM reaches the probe while its world-size-4 run hangs in a collective (rank 1 skips it and the
    deadline is 600 s away): the probe stops the run (SIGTERM, SIGKILL after its documented grace), and by
    the time it exits nothing of the run is left. The awaited event is rank 1's own fault line in the run's log."""
    env, tag = tagged_env()
    env.pop("PROBE_DEFECT_FIXED", None)
    cmd = [PYTHON, str(PROBE), "--bisect", "--world_sizes", "4", "--candidate", "PROBE_DEFECT_FIXED=1",
           "--fault", "skip:1", "--fault_unless", "PROBE_DEFECT_FIXED=1", "--log_dir", str(tmp_path),
           "--backend", "gloo", "-b", "8", "-e", "64", "--iters", "1", "--warmup", "0", "--timeout", "600",
           "--run_limit", "900"]
    log = tmp_path / "world4_without.log"
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for(lambda: log.exists() and "leaving all_reduce #0 out" in log.read_text(errors="replace"), 400,
                 "rank 1 of the world-size-4 run skipping all_reduce #0", proc, log)
        assert len(leftovers(tag)) >= 5  # the probe, torchrun and 4 ranks: the run is really there
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        gone = leftovers(tag)  # read at once: the probe waits for its run to end before it exits
    finally:
        kill_group(proc)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert err.splitlines()[-1] == "[nccl_probe] interrupted by SIGTERM; runs stopped", err
    assert gone == [], f"left behind: {gone}"
    assert "verdicts for" not in out  # an interrupted bisection gives no verdict


def test_verdict_notes_say_what_a_verdict_is_about() -> None:
    probe = probe_module()
    fault = probe.Fault("skip", 1, 0)
    assert probe.verdict_note("gloo", fault, ("NCCL_P2P_DISABLE", "1")) == (
        " (rehearsal: stand-in defect --fault skip:1@0 unless NCCL_P2P_DISABLE=1; says nothing about NCCL)")
    assert probe.verdict_note("nccl", fault, None) == (
        " (rehearsal: stand-in defect --fault skip:1@0; says nothing about NCCL)")
    assert probe.verdict_note("gloo", None, None) == " (gloo run: cannot apply to NCCL)"
    assert probe.verdict_note("nccl", None, None) == ""  # a real NCCL run: its verdict stands alone
