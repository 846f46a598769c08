"""``check --fix``: reference.md's NCCL table rewritten from the RST list, minimal diff, idempotent."""

from __future__ import annotations

import difflib
import textwrap
from pathlib import Path
from types import SimpleNamespace

RST = """\
Multi-GPU training
==================

NCCL workarounds
----------------

.. list-table:: NCCL workarounds
   :header-rows: 1

   * - Symptom
     - Settings
     - Hardware
     - Cost
   * - Hang at world size 2
     - ``NCCL_P2P_DISABLE=1``
     - 2 GPUs on PCIe
     - slower transfers
   * - Illegal memory access in ProcessGroupNCCL
     - ``NCCL_SHM_DISABLE=1``, then ``NCCL_IB_DISABLE=1``
     - 5x RTX PRO 6000
     - slower
   * - Timeouts with rendering across NUMA nodes
     - ``NCCL_CUMEM_HOST_ENABLE=0``, then ``NCCL_CUMEM_ENABLE=0``
     - dual-socket hosts
     - more host memory
"""

REFERENCE = """\
# Reference

Intro text that must not change.

## NCCL workarounds

| Symptom | Settings | Hardware | Cost |
|---|---|---|---|
| Hang at world size 2 | `NCCL_P2P_DISABLE=1` | 2 GPUs on PCIe | slower transfers |
| Illegal memory access in ProcessGroupNCCL | `NCCL_SHM_DISABLE=0` | 5x RTX PRO 6000 | slower |
| Something made up | `NCCL_MADE_UP=1` | nowhere | none |

Text after the table, with `NCCL_DEBUG=INFO` mentioned.

| Other | Table |
| --- | --- |
| a | b |
"""

UPSTREAM = """\
# Reference

| Symptom | Try |
| --- | --- |
| Two GPUs hang at world size 2 | Set `NCCL_P2P_DISABLE=1` and rerun the probe. |
| Illegal memory access | Try `NCCL_SHM_DISABLE=1` first. |
"""


def tree(root: Path, reference: str) -> Path:
    files = {
        "docs/source/features/multi_gpu.rst": RST,
        "skills/user/train-multi-gpu/SKILL.md": "---\nname: demo\ndescription: Demo. Use when x.\n---\n# Demo\n",
        "skills/user/train-multi-gpu/reference.md": reference,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def fix(root: Path) -> SimpleNamespace:
    """``check --fix --select DR1`` in-process: exit status, stdout and stderr."""
    import contextlib
    import io

    from skills_check import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["check", "--root", str(root), "--fix", "--no-cache", "--select", "DR1"])
    return SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def test_fix_rewrites_only_the_drifted_rows_and_is_idempotent(tmp_path: Path) -> None:
    root = tree(tmp_path, REFERENCE)
    ref = root / "skills/user/train-multi-gpu/reference.md"
    before = ref.read_text()
    res = fix(root)
    assert res.returncode == 0, res.stdout + res.stderr
    after = ref.read_text()
    diff = [
        l
        for l in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if l[:1] in "+-" and not l.startswith(("+++", "---"))
    ]
    assert diff == [
        "-| Illegal memory access in ProcessGroupNCCL | `NCCL_SHM_DISABLE=0` | 5x RTX PRO 6000 | slower |",
        "-| Something made up | `NCCL_MADE_UP=1` | nowhere | none |",
        "+| Illegal memory access in ProcessGroupNCCL | `NCCL_SHM_DISABLE=1`, then `NCCL_IB_DISABLE=1` "
        "| 5x RTX PRO 6000 | slower |",
        "+| Timeouts with rendering across NUMA nodes | `NCCL_CUMEM_HOST_ENABLE=0`, then "
        "`NCCL_CUMEM_ENABLE=0` | dual-socket hosts | more host memory |",
    ]
    assert "fixed:" in res.stdout and "NCCL_MADE_UP=1" in res.stdout and "added row" in res.stdout
    again = fix(root)
    assert ref.read_text() == after
    assert "fixed:" not in again.stdout
    assert not list(ref.parent.glob(".reference.md.*"))  # no temp files left


def test_fix_handles_the_upstream_symptom_try_layout(tmp_path: Path) -> None:
    root = tree(tmp_path, UPSTREAM)
    ref = root / "skills/user/train-multi-gpu/reference.md"
    res = fix(root)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = ref.read_text().splitlines()
    assert lines[4] == "| Two GPUs hang at world size 2 | Set `NCCL_P2P_DISABLE=1` and rerun the probe. |"
    assert lines[5] == "| Illegal memory access | `NCCL_SHM_DISABLE=1`, then `NCCL_IB_DISABLE=1` |"
    assert lines[6].startswith("| Timeouts with rendering across NUMA nodes | `NCCL_CUMEM_HOST_ENABLE=0`")
    text = ref.read_text()
    fix(root)
    assert ref.read_text() == text


def test_fix_keeps_crlf_newlines(tmp_path: Path) -> None:
    root = tree(tmp_path, "x")
    ref = root / "skills/user/train-multi-gpu/reference.md"
    ref.write_bytes(REFERENCE.replace("\n", "\r\n").encode())
    fix(root)
    data = ref.read_bytes()
    assert b"NCCL_CUMEM_ENABLE=0" in data and data.count(b"\r\n") == data.count(b"\n")
