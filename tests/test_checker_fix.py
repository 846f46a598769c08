"""Generic ``check --fix``: the fixes findings carry (NCCL mirror rows, options-table rows and defaults
from argparse) are applied atomically, inside the root only, never over a link, and reported."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path

import pytest
from mgpu_testing.checker import DEMO, MGPU, REF, check, edit
from skills_check import cli, fix

SHM_ROW = (
    "   * - ``Error while creating shared memory segment`` in a container\n"
    "     - ``docker run --shm-size=1g`` or ``--ipc=host``\n     - Docker\n     - None\n"
)


def run_fix(root: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["check", "--root", str(root), "--fix", "--no-cache", *extra])
    return rc, out.getvalue(), err.getvalue()


def test_options_table_rows_and_defaults_come_from_argparse(tree: Path) -> None:
    clean = (tree / MGPU).read_text(encoding="utf-8")
    edit(tree, MGPU, "   * - ``--log_dir``\n     - ``None``\n     - Folder for per-rank logs.\n", "")
    edit(tree, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")
    _, findings = check(tree)
    assert {f["code"] for f in findings} == {"DR201", "DR204"}
    assert all(f["fix"] for f in findings)
    rc, out, _ = run_fix(tree)
    assert rc == 0, out
    assert "added a row for --log_dir" in out and "--nnodes: default -> 1" in out
    assert check(tree) == (0, [])
    fixed = (tree / MGPU).read_text(encoding="utf-8")
    # the page as it was, but the restored row describes --log_dir with argparse's help, which has none
    assert fixed == clean.replace("     - Folder for per-rank logs.\n", "     - (describe this option)\n")
    again = run_fix(tree)
    assert "fixed:" not in again[1] and (tree / MGPU).read_text(encoding="utf-8") == fixed


def test_fix_applies_only_the_selected_rules(tree: Path) -> None:
    edit(tree, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")
    edit(tree, MGPU, "   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently")
    _, out, _ = run_fix(tree, "--select", "DR105")
    assert "added row" in out and "--nnodes" not in out
    assert [f["code"] for f in check(tree)[1]] == ["DR204"]


def test_fix_never_writes_outside_the_root(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside_skill"
    shutil.copytree(tree / DEMO, outside)
    shutil.rmtree(tree / DEMO)
    os.symlink(outside, tree / DEMO)  # the skill folder is a link leaving the root
    before = (outside / "reference.md").read_bytes()
    edit(tree, MGPU, "   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently")
    _, out, _ = run_fix(tree)
    assert (outside / "reference.md").read_bytes() == before
    assert "fixed:" not in out


def test_fix_never_replaces_a_link(tree: Path) -> None:
    real = tree / DEMO / "reference_real.md"
    os.replace(tree / REF, real)
    os.symlink("reference_real.md", tree / REF)
    edit(tree, MGPU, "   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently")
    rc, _, err = run_fix(tree)
    assert (tree / REF).is_symlink() and os.readlink(tree / REF) == "reference_real.md"
    assert f"{REF} is a symlink" in err  # the link is not replaced by a file ...
    assert "Error while creating shared memory segment" in real.read_text(encoding="utf-8")  # its target is
    assert rc == 0  # a regular file in the skill, fixed in place


def test_a_failed_write_names_the_file_and_rewrites_none(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edit(tree, MGPU, "   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently")
    edit(tree, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")
    real_write = fix.write_temp
    calls: list[Path] = []

    def fail_second(path: Path, data: bytes) -> str:  # fault injection: the disk fills on the second file
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_write(path, data)

    monkeypatch.setattr(fix, "write_temp", fail_second)
    before = {p: (tree / p).read_bytes() for p in (MGPU, REF)}
    rc, _, err = run_fix(tree)
    assert rc == 2 and err.count("\n") == 1
    first, second = (p.relative_to(tree).as_posix() for p in calls)
    assert f"could not write {second}" in err and "no file was rewritten" in err
    for rel in (first, second):  # untouched (the first was staged, never renamed), no temp file left
        assert (tree / rel).read_bytes() == before[rel]
        assert not list((tree / rel).parent.glob(f".{Path(rel).name}.*"))
