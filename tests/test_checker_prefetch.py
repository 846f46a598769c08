"""The worker process that parses a tree's RST pages and scripts and loads its skills while the check loads the
rest (``loader/prefetch.py``): the project it helps load equals the one loaded in one process, a file is taken
from it only when its text is the one the check read, and a worker that dies, stalls or answers with anything else
costs only its help. Also the positional form its values travel in (``codec.pack``/``unpack``)."""

from __future__ import annotations

import json
import marshal
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from mgpu_testing import PYTHON, REPO
from mgpu_testing.checker import append, misbehave
from skills_check import forked as forked_module
from skills_check.caches import codec
from skills_check.cli import main
from skills_check.loader import begin_load, load_project, prefetch
from skills_check.loader.prefetch import Prefetched
from skills_check.parsers.argspec import parse_argparse
from skills_check.parsers.markdown import parse_markdown
from skills_check.parsers.rst import parse_rst
from skills_check.rules import load as load_rules
from skills_check.runner import SHARED_RULES_CHARS, run_rules

SKILL = """---
name: {name}
description: Trains agents on several GPUs for task {i}. Use when a run needs more than one GPU.
---

# Task {i}

Run `python scripts/run_{i}.py --steps 10` first, then read [the guide](references/guide.md#steps).
"""

GUIDE = "# Guide\n\n## Steps\n\nRun `python scripts/run_{i}.py --stepz 5` to see the drift rule at work.\n"

SCRIPT = """import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1)
parser.add_argument("--mode", choices=["fast", "slow"])
args = parser.parse_args()
"""

PAGE = """Page {k}
=======

.. _page-{k}:

Section
-------

Run ``python skills/task-{k}/scripts/run_{k}.py --steps 3``.

.. list-table:: Settings
   :header-rows: 1

   * - Name
     - Value
   * - ``NCCL_P2P_DISABLE``
     - ``1``
"""


def _tree(root: Path, skills: int = 6, pages: int = 3) -> Path:
    """Skills with a reference and an argparse script each, and a Sphinx source with RST pages."""
    for i in range(skills):
        folder = root / "skills" / f"task-{i}"
        (folder / "references").mkdir(parents=True)
        (folder / "scripts").mkdir()
        (folder / "SKILL.md").write_text(SKILL.format(name=f"task-{i}", i=i), encoding="utf-8")
        (folder / "references" / "guide.md").write_text(GUIDE.format(i=i), encoding="utf-8")
        (folder / "scripts" / f"run_{i}.py").write_text(SCRIPT, encoding="utf-8")
    docs = root / "docs"
    docs.mkdir()
    (docs / "conf.py").write_text("project = 'x'\n", encoding="utf-8")
    for k in range(pages):
        (docs / f"page_{k}.rst").write_text(PAGE.format(k=k), encoding="utf-8")
    return root


@pytest.fixture(autouse=True)
def _single_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker forks only from a single-threaded process; this pytest process may hold threads that earlier
    tests in it started (torch's, JAX's), so the count the guard reads is the one a ``check`` process has (the
    guard itself: ``test_a_process_with_threads_forks_nothing``)."""
    monkeypatch.setattr(forked_module, "threads", lambda: 1)


# Forking this pytest process past the guard (above) makes JAX, where an earlier test imported it, warn that its
# threads do not survive a fork: the children here never touch JAX.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


def _load(
    root: Path,
    jobs: int,
    taken: list[Any] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
    finish: bool = False,
) -> Any:
    """The project with ``jobs``; ``taken`` gets the cache ``prefetch.start`` returned; ``finish``: the loader
    starts once the worker has sent everything (so which process parses what does not depend on speed)."""
    if monkeypatch is not None and taken is not None:
        real = prefetch.start

        def start(*args: Any, **kwargs: Any) -> Any:
            taken.append(real(*args, **kwargs))
            while finish and isinstance(taken[-1], Prefetched) and taken[-1].worker is not None:
                taken[-1]._read(taken[-1].worker, wait=True)
            return taken[-1]

        monkeypatch.setattr(prefetch, "start", start)
    return load_project(root, {}, use_cache=False, jobs=jobs)


def _recording(real: Any, taken: list[Any]) -> Any:
    """``prefetch.start`` keeping what it returned in ``taken``."""

    def start(*args: Any, **kwargs: Any) -> Any:
        taken.append(real(*args, **kwargs))
        return taken[-1]

    return start


def _findings(project: Any) -> list[tuple[str, str, str]]:
    return [(f.code, str(f.loc), f.message) for f in run_rules(project, load_rules(None))]


def test_a_worker_parses_the_pages_and_scripts_and_the_project_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    alone = _load(root, 1)
    taken: list[Any] = []
    shared = _load(root, 2, taken, monkeypatch, finish=True)
    assert isinstance(taken[0], Prefetched)
    assert taken[0].received == 3 + 6  # every page and every script came from the worker
    assert taken[0].worker is None  # stopped and reaped
    assert shared == alone
    found = _findings(shared)
    assert found == _findings(alone)
    assert any(code == "DR301" and "--stepz" in message for code, _, message in found)  # a script's spec was used


def test_the_check_takes_the_pages_from_the_worker_and_meets_it_in_the_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    alone = _load(root, 1)
    taken: list[Any] = []
    assert _load(root, 2, taken, monkeypatch) == alone  # both at their own speed
    assert taken[0].received >= 3  # the pages are waited for; the scripts are parsed by whichever gets there first
    assert taken[0].worker is None


def test_one_job_or_a_few_skills_without_rst_pages_fork_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path, skills=prefetch.MIN_SHARED_SKILLS - 1, pages=0)  # scripts alone do not pay for a worker
    for jobs in (1, 2):
        taken: list[Any] = []
        with monkeypatch.context() as m:
            _load(root, jobs, taken, m)
        assert not isinstance(taken[0], Prefetched)


def _odd_skills(root: Path) -> None:
    """What a skill's loading adds to the project's problems, in a few of the skills: an evals.json that does
    not parse, an agents/openai.yaml that is binary; and a reference starting with a byte-order mark."""
    (root / "skills" / "task-3" / "evals").mkdir()
    (root / "skills" / "task-3" / "evals" / "evals.json").write_text("{not json", encoding="utf-8")
    guide = root / "skills" / "task-7" / "references" / "guide.md"
    guide.write_bytes(b"\xef\xbb\xbf" + guide.read_bytes())
    (root / "skills" / "task-11" / "agents").mkdir()
    (root / "skills" / "task-11" / "agents" / "openai.yaml").write_bytes(b"name: x\0\n")


def test_many_skills_are_loaded_whole_by_the_worker_and_the_project_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path, skills=40, pages=0)
    _odd_skills(root)
    alone = _load(root, 1)
    assert {p.code for p in alone.problems} >= {"IN040", "IN002"}
    taken: list[Any] = []
    shared = _load(root, 2, taken, monkeypatch, finish=True)
    assert isinstance(taken[0], Prefetched)
    assert taken[0].received == 40 + 40  # every skill and every script came from the worker
    assert shared == alone
    assert _findings(shared) == _findings(alone)


def test_a_skill_from_the_worker_fills_the_parse_cache_as_one_loaded_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tree").mkdir()
    root = _tree(tmp_path / "tree", skills=20, pages=0)
    _odd_skills(root)
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    entries = []
    for jobs in (1, 2):
        for file in (tmp_path / "cache").glob("*.json"):
            file.unlink()
        taken: list[Any] = []
        with monkeypatch.context() as m:
            m.setattr(prefetch, "start", _recording(prefetch.start, taken))
            cold = load_project(root, {}, use_cache=True, jobs=jobs)
        assert isinstance(taken[0], Prefetched) == (jobs == 2)
        (file,) = (tmp_path / "cache").glob("*.json")
        entries.append(file.read_text(encoding="utf-8"))
        assert load_project(root, {}, use_cache=True) == cold  # a warm load from that cache
    assert entries[0] == entries[1]


def test_a_process_with_threads_forks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path)
    monkeypatch.undo()  # the real thread count
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        taken: list[Any] = []
        _load(root, 2, taken, monkeypatch)
    finally:
        stop.set()
        thread.join()
    assert not isinstance(taken[0], Prefetched)


def _worker_parser(action: str) -> Any:
    """A worker's parser that misbehaves on the first file it takes."""

    def parser(kind: str, path: str, text: str) -> Any:
        wrong = misbehave(action)
        return wrong if wrong is not None else prefetch.parse(kind, path, text)

    return parser


@pytest.mark.parametrize("action", ["die", "stall", "unpackable"])
def test_a_worker_that_fails_costs_only_its_help(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    root = _tree(tmp_path)
    alone = _load(root, 1)
    real = prefetch.start
    monkeypatch.setattr(prefetch, "DEADLINE", 1.0 if action == "stall" else prefetch.DEADLINE)
    monkeypatch.setattr(prefetch, "start", lambda *a, **k: real(*a, **{**k, "parser": _worker_parser(action)}))
    assert load_project(root, {}, use_cache=False, jobs=2) == alone


def test_garbled_replies_and_changed_texts_are_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path)
    alone = _load(root, 1)
    real_send = prefetch._send

    def garble(fd: int, record: tuple) -> None:
        if len(record) == 4:
            os.write(fd, forked_module.LENGTH.pack(3) + b"\xff\xfe\xfd")  # not a marshal record
        else:
            real_send(fd, record)

    refused: list[bool] = []  # the check read the garbage (the worker was not stopped by anything else)
    real_records = prefetch.records

    def records(buffer: bytearray) -> Any:
        entries = real_records(buffer)
        refused.append(entries is None)
        return entries

    with monkeypatch.context() as m:
        m.setattr(prefetch, "_send", garble)
        m.setattr(prefetch, "records", records)
        assert _load(root, 2) == alone
    assert any(refused)

    real_read = prefetch.read_text

    def edited(root_: Path, path: str) -> tuple[str | None, list]:  # the file as it was before an edit
        text, problems = real_read(root_, path)
        return (None if text is None else text + "\n.. an older text\n"), problems

    taken: list[Any] = []
    monkeypatch.setattr(prefetch, "read_text", edited)
    assert _load(root, 2, taken, monkeypatch, finish=True) == alone
    assert taken[0].received == 0


def test_jobs_must_be_a_whole_number(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit) as stop:
            main(["check", "--root", str(tmp_path), "--jobs", bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--jobs" in err[0] and "whole number" in err[0]


def _parsed_repository() -> list[Any]:
    out = []
    for path in sorted(REPO.glob("skills/**/*.md")) + sorted(REPO.glob("docs/**/*.rst")):
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(REPO))
        out.append(parse_markdown(rel, text) if path.suffix == ".md" else parse_rst(rel, text))
    for path in (REPO / "scripts" / "reinforcement_learning").glob("*.py"):
        out.append(parse_argparse(str(path.relative_to(REPO)), path.read_text(encoding="utf-8"), []))
    return out


def test_pack_and_unpack_give_back_every_parse_of_the_repository() -> None:
    values = _parsed_repository()
    assert len(values) > 10
    assert [codec.unpack(marshal.loads(marshal.dumps(codec.pack(v)))) for v in values] == values


@pytest.mark.parametrize("data", [(99, "x"), ("Code", "x"), (-9,), (1.5, 2), ()])
def test_unpack_refuses_what_pack_never_writes(data: tuple) -> None:
    with pytest.raises(codec.CodecError):
        codec.unpack(data)


def test_pack_refuses_what_is_not_the_model() -> None:
    with pytest.raises(codec.CodecError):
        codec.pack({"x": object()})


@pytest.fixture()
def forked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the workers forked during the test."""
    pids: list[int] = []
    real = prefetch._fork

    def fork(*args: Any) -> Any:
        worker = real(*args)
        if worker is not None:
            pids.append(worker.pid)
        return worker

    monkeypatch.setattr(prefetch, "_fork", fork)
    return pids


def _reaped(pids: list[int]) -> bool:
    """Every one of ``pids`` has ended and been reaped by this process (none left running or as a zombie), once
    ``forked.reap`` has waited for those still exiting (a check does not wait for them)."""
    forked_module.reap()
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


def test_an_early_worker_walks_the_tree_itself_and_the_project_is_the_same(tmp_path: Path, forked: list[int]) -> None:
    root = _tree(tmp_path)
    alone = _load(root, 1)
    early = begin_load(root, {}, False, 2)
    assert isinstance(early, Prefetched)
    assert load_project(root, {}, use_cache=False, jobs=2, early=early) == alone
    assert early.received >= 3 and early.worker is None
    assert len(forked) == 1 and _reaped(forked)


def test_an_early_worker_with_nothing_to_parse_stops(tmp_path: Path, forked: list[int]) -> None:
    root = _tree(tmp_path, skills=3, pages=0)
    alone = _load(root, 1)
    early = begin_load(root, {}, False, 2)
    assert early is not None
    assert load_project(root, {}, use_cache=False, jobs=2, early=early) == alone
    assert early.received == 1 and len(forked) == 1 and _reaped(forked)  # its walk of the tree only


def test_a_check_that_stops_before_loading_ends_its_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], forked: list[int]
) -> None:
    root = _tree(tmp_path)
    assert main(["check", "--root", str(root), "--no-cache", "--jobs", "2", "--select", "XX999"]) == 2
    assert "unknown rule code" in capsys.readouterr().err
    assert len(forked) == 1 and _reaped(forked)  # started before the codes were read, ended when the check stopped


def test_a_warm_tree_starts_no_early_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: list[int]) -> None:
    root = _tree(tmp_path)
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    load_project(root, {}, use_cache=True)  # writes the parse cache
    assert begin_load(root, {}, True, 2) is None
    cold = begin_load(root, {}, False, 2)  # --no-cache: parsed afresh, so a worker helps
    assert isinstance(cold, Prefetched)
    cold.close()
    assert len(forked) == 1 and _reaped(forked)


def test_an_early_worker_on_a_small_tree_without_docs_stops_and_reads_nothing_outside_the_root(
    tmp_path: Path, forked: list[int]
) -> None:
    for folder in ("tree", "elsewhere"):
        (tmp_path / folder).mkdir()
    root = _tree(tmp_path / "tree", skills=3, pages=0)
    (root / "docs" / "conf.py").unlink()
    (root / "docs").rmdir()
    _tree(tmp_path / "elsewhere", skills=0, pages=2)  # RST pages beside the root, never parsed
    assert begin_load(root, {}, False, 1) is None and not forked
    for docs in ("docs", "../elsewhere/docs"):
        early = begin_load(root, {"docs": docs}, False, 2)
        assert isinstance(early, Prefetched)  # it walks the tree, finds too little to share and stops
        assert load_project(root, {"docs": docs}, use_cache=False, jobs=2, early=early) == _load_with(root, docs)
        assert early.received == 1 and early.worker is None  # its walk of the tree only
    assert len(forked) == 2 and _reaped(forked)


def _load_with(root: Path, docs: str) -> Any:
    return load_project(root, {"docs": docs}, use_cache=False, jobs=1)


def test_the_command_reports_the_same_with_its_worker_as_without(tmp_path: Path) -> None:
    """``check`` as a process of its own (where its worker starts by default) against ``--jobs 1``, on a tree
    where every helper starts: RST pages and scripts for the worker, skills enough to share, and documents enough
    for the rules' child (``runner.SHARED_RULES_CHARS``)."""
    skills = prefetch.MIN_SHARED_SKILLS + 4
    root = _tree(tmp_path, skills=skills)
    _odd_skills(root)
    filler = "".join(f"\nNote {k}: the run keeps its checkpoints in the log folder.\n" for k in range(300))
    for i in range(skills):  # plain prose: cheap to parse, and it counts towards the rules' share
        append(
            root, f"skills/task-{i}/references/guide.md", filler * (SHARED_RULES_CHARS // (len(filler) * skills) + 1)
        )
    cli = [PYTHON, str(REPO / "tools" / "skills" / "cli.py"), "check", "--no-cache", "--format", "json"]
    runs = [
        subprocess.run([*cli, "--root", str(root), *extra], capture_output=True, text=True, check=False, timeout=120)
        for extra in ([], ["--jobs", "2"], ["--jobs", "1"])
    ]
    assert [r.returncode for r in runs] == [1, 1, 1], runs[0].stderr
    assert runs[0].stdout == runs[1].stdout == runs[2].stdout
    codes = {f["code"] for f in json.loads(runs[0].stdout)["findings"]}
    assert {"DR301", "IN040", "IN002"} <= codes  # a script's argparse, and what skills' loading found, all shared


def test_a_page_the_worker_cannot_read_is_read_here_while_the_worker_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    alone = _load(root, 1)
    real_read = prefetch.read_text

    def unreadable(root_: Path, path: str) -> tuple[str | None, list]:  # in the worker only (it is forked after)
        return (None, []) if path.endswith("page_1.rst") else real_read(root_, path)

    def stall_on_the_last_page(kind: str, path: str, text: str) -> Any:
        if path.endswith("page_2.rst"):
            signal.pause()  # the worker stays on it until the check gives up (DEADLINE) and ends it
        return prefetch.parse(kind, path, text)

    asked: dict[str, bool] = {}  # page -> whether the worker was still at work when the check had its answer
    real_get = Prefetched.get

    def get(self: Prefetched, kind: str, path: str, text: str, expect: Any = Any) -> Any:
        value = real_get(self, kind, path, text, expect)
        asked.setdefault(path, self.worker is not None)
        return value

    real = prefetch.start
    monkeypatch.setattr(prefetch, "DEADLINE", 3.0)
    monkeypatch.setattr(prefetch, "read_text", unreadable)
    monkeypatch.setattr(prefetch, "start", lambda *a, **k: real(*a, **{**k, "parser": stall_on_the_last_page}))
    monkeypatch.setattr(Prefetched, "get", get)
    assert load_project(root, {}, use_cache=False, jobs=2) == alone
    assert asked["docs/page_1.rst"]  # read here at once: the worker had said it went past it
    assert not asked["docs/page_2.rst"]  # waited for while the worker was on it, until its deadline
