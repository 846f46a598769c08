"""Bisection mode of the probe: verdicts per world size, with the fault tied to an environment setting."""

from __future__ import annotations

import re
from pathlib import Path

from mgpu_testing import PYTHON, run
from mgpu_testing.probe import PROBE, assert_nothing_left, tagged_env

FAST = ["--backend", "gloo", "-b", "8", "-e", "64", "--iters", "1", "--warmup", "0", "--timeout", "60",
        "--run_limit", "240"]


def verdicts(out: str) -> dict[int, str]:
    return {int(w): v for w, v in re.findall(r"^\[bisect\]   world size (\d+): (.+)$", out, re.M)}


def test_confirmed_and_not_the_cause(tmp_path: Path) -> None:
    # the stand-in defect corrupts rank 1's contribution unless PROBE_DEFECT_FIXED=1 is set:
    # world size 1 has no rank 1 (passes either way), world size 2 fails without the setting
    env, tag = tagged_env()
    env.pop("PROBE_DEFECT_FIXED", None)
    cmd = [PYTHON, str(PROBE), "--bisect", "--world_sizes", "1,2", "--candidate", "PROBE_DEFECT_FIXED=1",
           "--fault", "corrupt:1", "--fault_unless", "PROBE_DEFECT_FIXED=1", "--log_dir", str(tmp_path), *FAST]
    proc = run(cmd, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {
        1: "passes either way: not the cause",
        2: "fails without, passes with: workaround confirmed",
    }, out
    assert proc.returncode == 0, out
    # progress lines as it goes, one per run, with the failing run's reason
    assert len(re.findall(r"^\[bisect\] world size \d+, with(out)? PROBE_DEFECT_FIXED=1: running$",
                          proc.stdout, re.M)) == 5
    assert "world size 2, without PROBE_DEFECT_FIXED=1: FAILED (exit 1: wrong results" in proc.stdout
    assert "# fault: corrupt:1@0 (disarmed by --fault_unless)" in (tmp_path / "world2_with.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "world1_with.log", "world1_without.log", "world2_with.log", "world2_without.log", "world2_without_rerun.log"]
    assert_nothing_left(tag)


def test_not_a_fix(tmp_path: Path) -> None:
    # the candidate is the wrong setting: the defect stays (one rank keeps this test cheap)
    env, tag = tagged_env(NCCL_P2P_DISABLE="1")  # set in the shell: "without" runs must drop it
    env.pop("PROBE_DEFECT_FIXED", None)
    cmd = [PYTHON, str(PROBE), "--bisect", "--world_sizes", "1", "--candidate", "NCCL_P2P_DISABLE=1",
           "--fault", "corrupt:0", "--fault_unless", "PROBE_DEFECT_FIXED=1", "--log_dir", str(tmp_path), *FAST]
    proc = run(cmd, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == {1: "fails either way: not a fix"}, out
    assert proc.returncode == 1, out
    assert "# settings: (none)" in (tmp_path / "world1_without.log").read_text()
    assert "# settings: NCCL_P2P_DISABLE=1" in (tmp_path / "world1_with.log").read_text()
    assert_nothing_left(tag)
