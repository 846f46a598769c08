"""The checker's writes and caches under fault and concurrency (issue 38 item 7, issue 40 item 2): ``--fix``
stages every rewrite and renames only when all were written; one fixer per tree (a lock beside the tree's
cache); a cache entry of the wrong shape is re-parsed; ``/`` and pseudo filesystems are refused as roots."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mgpu_testing.checker import CLI, MGPU, REF, make_tree
from skills_check import cli, fix
from skills_check.caches.parse import cache_dir

SHM_ROW = (
    "   * - ``Error while creating shared memory segment`` in a container\n"
    "     - ``docker run --shm-size=1g`` or ``--ipc=host``\n     - Docker\n     - None\n"
)


def main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links as their target text), by relative path."""
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[p.relative_to(root).as_posix()] = os.readlink(p).encode()
        elif p.is_file():
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A tree where --fix rewrites two files: a row missing from the NCCL mirror table in reference.md and
    an options-table default in the RST page."""
    root = make_tree(tmp_path / "repo")
    _break(root)
    return root


def _break(root: Path) -> None:
    mgpu = root / MGPU
    text = mgpu.read_text(encoding="utf-8")
    text = text.replace("   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently", 1)
    text = text.replace("   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``", 1)
    mgpu.write_text(text, encoding="utf-8")


def test_a_write_failing_on_the_second_file_leaves_every_file_as_it_was(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = fix.write_temp
    calls: list[Path] = []

    def fail_second(path: Path, data: bytes) -> str:  # fault injection: the disk fills on the second file
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_write(path, data)

    monkeypatch.setattr(fix, "write_temp", fail_second)
    before = snapshot(tree)
    rc, _, err = main("check", "--root", str(tree), "--fix", "--no-cache")
    assert len(calls) == 2 and rc == 2 and err.count("\n") == 1, err
    assert "No space left on device" in err and "no file was rewritten" in err
    assert snapshot(tree) == before  # byte-identical, and no temp file left beside any file


def test_a_rename_failing_part_way_puts_back_what_was_renamed(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_replace = os.replace
    calls: list[str] = []

    def fail_second(src: str, dst: Path) -> None:  # the second rename into place fails
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(fix.os, "replace", fail_second)
    before = snapshot(tree)
    rc, _, err = main("check", "--root", str(tree), "--fix", "--no-cache")
    monkeypatch.undo()
    assert len(calls) >= 2 and rc == 2 and err.count("\n") == 1, err
    assert snapshot(tree) == before


FIX_CODES = ("--select", "DR105,DR204")  # the rules whose fixes this tree needs (the others only slow each run)


def _fork_fix(root: Path, cache: Path | None = None) -> int:
    """A child process running ``check --fix`` on ``root`` (forked: the checker is already imported), with its
    own cache folder when ``cache`` is given; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        rc = 1
        try:
            if cache is not None:
                os.environ["SKILLS_CHECK_CACHE_DIR"] = str(cache)
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                rc = cli.main(["check", "--root", str(root), "--fix", *FIX_CODES])
        finally:
            os._exit(rc)
    return pid


def test_two_concurrent_fixes_give_the_files_of_one(tree: Path, tmp_path: Path) -> None:
    once = make_tree(tmp_path / "once")
    _break(once)
    assert main("check", "--root", str(once), "--fix", *FIX_CODES)[0] == 0
    expected = snapshot(once)
    broken = {rel: (tree / rel).read_bytes() for rel in (MGPU, REF)}
    assert expected[REF] != broken[REF]  # the mirror table gains the row: there is something to fix
    for round_ in range(20):
        for rel, data in broken.items():
            (tree / rel).write_bytes(data)
        pids = [_fork_fix(tree), _fork_fix(tree)]
        statuses = [os.waitpid(pid, 0)[1] for pid in pids]
        assert [os.waitstatus_to_exitcode(s) for s in statuses] == [0, 0], round_
        assert snapshot(tree) == expected, f"round {round_}: the files differ from those of one --fix"


def test_two_fixes_with_different_cache_folders_give_the_files_of_one(tree: Path, tmp_path: Path) -> None:
    once = make_tree(tmp_path / "once")
    _break(once)
    assert main("check", "--root", str(once), "--fix", *FIX_CODES)[0] == 0
    expected = snapshot(once)
    broken = {rel: (tree / rel).read_bytes() for rel in (MGPU, REF)}
    for round_ in range(4):  # two users, or one shell with XDG_CACHE_HOME set: the lock is the tree's
        for rel, data in broken.items():
            (tree / rel).write_bytes(data)
        pids = [_fork_fix(tree, tmp_path / f"cache-a{round_}"), _fork_fix(tree, tmp_path / f"cache-b{round_}")]
        statuses = [os.waitpid(pid, 0)[1] for pid in pids]
        assert [os.waitstatus_to_exitcode(s) for s in statuses] == [0, 0], round_
        assert snapshot(tree) == expected, f"round {round_}: the files differ from those of one --fix"


def test_a_fix_waits_for_the_lock_then_gives_up_in_one_line(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fix, "LOCK_WAIT_S", 0.3)
    before = snapshot(tree)
    with fix.fix_lock(tree):  # another fixer holds the tree (flock: another open file, so it conflicts)
        started = time.monotonic()
        rc, out, err = main("check", "--root", str(tree), "--fix", "--no-cache")
    assert rc == 2 and 0.3 <= time.monotonic() - started < 10
    assert err.splitlines() == [
        f"--fix: waiting up to 0.3 s for another --fix of {os.path.realpath(tree)} to end",
        f"error: another --fix of {os.path.realpath(tree)} held its lock for 0.3 s; run again when it has ended",
    ]
    assert not list(cache_dir().glob("*.lock"))  # the lock is the tree's own folder: nothing written to hold it
    assert snapshot(tree) == before and "Traceback" not in err + out
    assert main("check", "--root", str(tree), "--fix", "--no-cache")[0] == 0  # released: the next fixer runs


def _entries(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "shape",
    [
        {"$": "Loc", "v": {"path": "x", "line": 1, "col": 1}},  # another class
        "a string",
        {"$": "MarkdownDoc", "v": {"path": "x", "text": "", "n_lines": "three", "headings": "oops"}},
        [1, 2, 3],
    ],
)
def test_a_parse_cache_entry_of_the_wrong_shape_is_parsed_again(tree: Path, shape: object) -> None:
    args = ("check", "--root", str(tree), "--format", "json")
    rc, out, _ = main(*args, "--no-cache")
    expected = json.loads(out)["findings"]
    assert main(*args)[0] == rc  # writes the parse cache
    files = [p for p in cache_dir().glob("*.json") if not p.name.endswith(".results.json")]
    changed = 0
    for path in files:
        data = _entries(path)
        if not isinstance(data.get("entries"), list):
            continue
        for entry in data["entries"]:
            entry[3] = shape
            changed += 1
        path.write_text(json.dumps(data), encoding="utf-8")
    for path in cache_dir().glob("*.results.json"):
        path.unlink()  # so the check runs rather than replays
    assert changed
    rc2, out2, err2 = main(*args)
    assert rc2 == rc and json.loads(out2)["findings"] == expected and "Traceback" not in err2


def test_a_result_cache_entry_of_the_wrong_shape_is_ignored(tree: Path) -> None:
    args = ("check", "--root", str(tree), "--format", "json")
    rc, out, _ = main(*args)
    main(*args)  # stores the report (a racily clean tree may need the second run)
    for path in cache_dir().glob("*.results.json"):
        data = _entries(path)
        for key in list(data.get("entries", {})):
            data["entries"][key] = {"checker": "x", "dirs": [], "files": "y", "stdout": 3, "rc": "0"}
        data["entries"]["junk"] = [1, 2]
        path.write_text(json.dumps(data), encoding="utf-8")
    for bad in ({"entries": [1]}, {"root": 3, "entries": {"a": None}}, [1, 2]):
        rc2, out2, err2 = main(*args)
        assert rc2 == rc and json.loads(out2)["findings"] == json.loads(out)["findings"] and "Traceback" not in err2
        for path in cache_dir().glob("*.results.json"):
            path.write_text(json.dumps(bad), encoding="utf-8")


def test_a_stored_exit_status_outside_0_to_255_is_a_miss(tree: Path) -> None:
    args = ("check", "--root", str(tree), "--format", "json")
    settled = time.time() - 60  # every input a minute old: the report is stored (no racily clean file)
    for path in [tree, *tree.rglob("*")]:
        os.utime(path, (settled, settled), follow_symlinks=False)
    rc, out, _ = main(*args)
    stored = {p: _entries(p) for p in cache_dir().glob("*.results.json")}
    stored = {p: d for p, d in stored.items() if isinstance(d, dict) and d.get("root") == os.path.realpath(tree)}
    assert stored

    def replay_with(status: object) -> tuple[int, str, str]:
        for path, data in stored.items():
            for entry in data["entries"].values():
                entry.update(rc=status, stdout="REPLAYED\n")
            path.write_text(json.dumps(data), encoding="utf-8")
        return main(*args)

    assert replay_with(3)[:2] == (3, "REPLAYED\n")  # an entry in range is replayed as it was stored
    for status in (2**40, 256, -1, True, 1.0):
        rc2, out2, err2 = replay_with(status)
        assert rc2 == rc and out2 == out and "Traceback" not in err2, status  # the check ran


@pytest.mark.parametrize("root", ["/", "/proc", "/sys", "/proc/self", "/sys/kernel"])
@pytest.mark.parametrize("command", ["check", "route"])
def test_a_filesystem_root_or_pseudo_filesystem_is_refused_in_one_line(root: str, command: str) -> None:
    if not os.path.isdir(root):
        pytest.skip(f"{root} is not here")
    argv = ["check", "--root", root] if command == "check" else ["route", "train on two GPUs", "--root", root]
    started = time.monotonic()
    rc, out, err = main(*argv)
    assert rc == 2 and out == "" and err.count("\n") == 1 and time.monotonic() - started < 5
    assert err.startswith(f"error: --root {root} ") and ("filesystem root" in err or "pseudo filesystem" in err)


def test_an_ordinary_folder_is_not_refused(tree: Path) -> None:
    from skills_check.inputs import refused_root

    assert refused_root(tree) is None
    assert refused_root(Path("/proc"), mounts="/nonexistent") is not None  # without a mount table: the usual places


def test_fix_without_a_cache_needs_no_cache_folder(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("not a folder\n", encoding="utf-8")
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "a-file" / "cache"))  # cannot be made
    _break(tree)
    rc, _, err = main("check", "--root", str(tree), "--fix", "--no-cache", *FIX_CODES)
    assert rc == 0 and "Traceback" not in err, err


def test_the_filesystem_root_under_another_name_is_refused_in_one_line(tmp_path: Path) -> None:
    """A bind mount of / (made in a mount namespace of its own, so it ends with the process) has another path
    and the same device and inode: refused before anything is walked."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here to make a private bind mount")
    where = tmp_path / "elsewhere"
    where.mkdir()
    script = 'mount --rbind / "$1" || exit 99; exec "$2" "$3" check --root "$1" --no-cache'
    res = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", str(where), sys.executable, str(CLI)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if res.returncode == 99:
        pytest.skip(f"this machine allows no private bind mount: {res.stderr.strip()}")
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr[-2000:]
    assert res.stderr.startswith(f"error: --root {where} is the filesystem root under another name")
