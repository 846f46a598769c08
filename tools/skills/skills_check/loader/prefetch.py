"""Loading shared with a worker process: on a tree with RST pages or many skills, a forked worker parses the
pages, loads whole skills and parses the skills' scripts while this process loads the tree in order. The worker
takes the RST pages first (docutils, the slowest parser to import, is then imported by the worker alone), then
each lane (the skills, then the scripts) from its last item back, while this process takes it from the first.
The two meet wherever their speeds take them, so no estimate of the work is needed: this process writes where it
has got to in each lane into memory the two share (``forked.Frontier``), and the worker ends a lane there. The
worker's results wait in a ``ParseCache`` stand-in (``Prefetched``) until the loader asks for them; an item is
made once, here or in the worker (at most one twice: the one both started at the meeting point).

The worker says which item it starts before it makes it. So when the loader asks for one, this process knows
whether it has arrived, is being made there or is an RST page still to come (this process waits for it), or is
neither (this process makes it itself, and says so in the lane).

Why a process: the check is CPU-bound Python, and one interpreter runs on one core. The forked worker starts
with this process's imports and state (nothing is imported twice), reads the files through the same guards
(``inputs.read_text``) and parses them with the same parsers and loader. It sends back plain values
(``codec.pack``, written by ``marshal``, in length-prefixed records) over a pipe only it and this process hold;
only ``codec.unpack``'s fixed table of the model's classes turns them into objects, so nothing received can run
code. A parsed file is used only for the text this process read itself; a skill (``Plan.load_skill``: its
documents, scripts' texts and the problems its loading found) is taken whole, its files read once, by the
worker, as this process would have read them. A worker that dies, stalls past ``DEADLINE`` or answers with
anything else is stopped, and this process makes what it had not sent.

The ``check`` command forks its worker first thing (``begin``, through ``project.begin_load``, once it has
read the settings): the worker walks the tree itself and stops at once where too little would be shared
(``worth_a_worker``); the loader then puts it in front of its cache (``Prefetched.attach``). A loader that was
given no worker starts one itself after walking the tree (``start``).

Only a single-threaded process forks (the ``check`` command; never the language server), with ``fork``
available and a cold parse cache.
"""

from __future__ import annotations

import copy
import os
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..caches.codec import CodecError, pack, unpack
from ..caches.parse import ParseCache
from ..forked import DEADLINE, Frontier, drain, end, records, spawn
from ..forked import may_fork as _may_fork
from ..forked import send as _send
from ..inputs import read_text
from ..model import Project, paths_under

Item = tuple[str, str]  # (kind, path): ("md" | "rst" | "py", a file's path), a ParseCache key; ("skill", its folder)

# What the worker makes (``plan``): RST pages and Python files cost far more to parse than to send back; a
# skill's markdown costs about four times what unpacking its parse costs here, too little to share file by file,
# but a whole skill (its documents read, walked and parsed) costs about five times what unpacking it costs, and
# this process then reads none of its files.
LANES = ("skill", "py")  # the kinds both processes take from opposite ends (``forked.Frontier``)
MIN_SHARED_SKILLS = 16  # fewer skills are loaded here: a worker's start would cost more than it saves


def parse(kind: str, path: str, text: str) -> Any:
    """What the loader parses ``text`` into for ``kind`` on a cache miss (``load_markdown``, ``load_rst``,
    ``load_argspec``: a script's argparse read without helper modules)."""
    if kind == "md":
        from ..parsers.markdown import parse_markdown  # the loader's own import: a tree without markdown skips it

        return parse_markdown(path, text)
    if kind == "rst":
        from .documents import import_parse_rst  # docutils: imported by whichever process parses an RST page

        return import_parse_rst().parse_rst(path, text)
    from ..parsers.argspec import parse_argparse

    return parse_argparse(path, text, [])


def plan(project: Project, folders: list[str], docs: str, drift: bool) -> list[Item]:
    """What the loader will ask for, in its order: the skills (whole, where there are ``MIN_SHARED_SKILLS``), the
    RST pages under ``docs``, and (``drift``: the scripts' argparse is read) the skills' Python files. An estimate
    only: a file missing here is parsed by the loader, one extra is parsed for nothing."""
    ordered = sorted(project.files)
    items: list[Item] = [("skill", f) for f in folders] if len(folders) >= MIN_SHARED_SKILLS else []
    py: list[Item] = []
    for folder in folders if drift else ():
        prefix = f"{folder}/" if folder not in ("", ".") else ""
        py += [("py", p) for p in paths_under(ordered, prefix) if p.endswith(".py")]
    docs = posixpath.normpath(docs)
    pages = paths_under(ordered, f"{docs}/" if docs != "." else "")
    items += [("rst", p) for p in sorted(pages, key=_walk_order) if p.endswith(".rst")]
    return list(dict.fromkeys([*items, *py]))


def _walk_order(path: str) -> list[str]:
    return path.split("/")


def _order(items: list[Item]) -> list[Item]:
    """The worker's order: the RST pages (the loader waits for them), then each lane (the skills, the scripts)
    from its last item back: the loader takes a lane from its first item, and the two meet (``forked.Frontier``)."""
    return [i for i in items if i[0] == "rst"] + [i for kind in LANES for i in reversed(items) if i[0] == kind]


def _lane_index(items: list[Item]) -> dict[Item, int]:
    """Each lane item's place in its lane (in the loader's order): what the ``forked.Frontier`` holds."""
    out: dict[Item, int] = {}
    for kind in LANES:
        out.update((item, n) for n, item in enumerate(i for i in items if i[0] == kind))
    return out


@dataclass
class Plan:
    """What a worker does: ``items`` in ``_order``; ``load_skill(folder)`` makes the value sent for a
    ``("skill", folder)`` item (a forked worker holds the walked tree it needs)."""

    items: list[Item]
    load_skill: Callable[[str], Any] | None = None


Send = Callable[[Item, Any], None]  # sends a value the worker has made before its plan (its walk of the tree)


def _serve(
    root: Path,
    given: Plan | Callable[[Send], Plan],
    fd: int,
    parser: Callable[[str, str, str], Any],
    frontier: Frontier,
) -> None:
    """In the worker: the plan's items (``given``, or what calling it gives: a worker started before the tree was
    walked walks it itself, and sends its walk on the way as a value record) as a ``([item, ...],)`` record; then
    for each item (in ``_order``, a lane ended where ``frontier`` says this process has got to) a ``(kind, path)``
    record as it starts and a ``(kind, path, text, packed value)`` record (none when it cannot be read or parsed:
    the loader then reads and parses it and reports why; a skill's text is ""); ``()`` at the end. Each record
    ``marshal``'d after its length."""
    plan = given(lambda item, value: _send(fd, (*item, "", pack(value)))) if callable(given) else given
    _send(fd, (plan.items,))
    places = _lane_index(plan.items)
    for kind, path in _order(plan.items):
        if kind in LANES and places[(kind, path)] <= frontier.get(LANES.index(kind)):
            continue  # this process has taken the lane this far: the rest of it is its own
        _send(fd, (kind, path))
        try:
            if kind == "skill":
                text, value = "", plan.load_skill(path)  # type: ignore[misc]
            else:
                read, _ = read_text(root, path)
                if read is None:
                    continue
                text, value = read, parser(kind, path, read)
            packed = pack(value)
        except Exception:  # noqa: S112 (the loader parses it again and reports what failed)
            continue
        _send(fd, (kind, path, text, packed))
    _send(fd, ())  # done: nothing more is coming


@dataclass
class _Worker:
    pid: int
    fd: int  # the pipe's read end (non-blocking)
    started: float  # time.monotonic() at the fork
    frontier: Frontier  # where this process has got in each lane, shared with the worker
    buffer: bytearray = field(default_factory=bytearray)
    current: Item | None = None  # the file it said it started, until its value arrives
    done: bool = False  # it said nothing more is coming
    plan: frozenset[Item] | None = None  # the files it will parse, once it has said so
    places: dict[Item, int] = field(default_factory=dict)  # each lane item's place (``_lane_index``)
    begun: set[Item] = field(default_factory=set)  # the files it has started (one it then skipped never comes)


def _fork(root: Path, plan: Plan | Callable[[Send], Plan], parser: Callable[[str, str, str], Any]) -> _Worker | None:
    try:
        frontier = Frontier(len(LANES))  # where this process has got in each lane (``LANES`` order)
    except OSError:
        return None
    started = spawn(lambda fd: _serve(root, plan, fd, parser, frontier))
    if started is None:
        frontier.close()
        return None
    return _Worker(*started, time.monotonic(), frontier)


class Prefetched(ParseCache):
    """The loader's parse cache with the worker's parses in front of it (see the module's doc); a value taken
    from the worker is also ``put`` into the real cache, as a parse here would be."""

    def __init__(self, inner: ParseCache, worker: _Worker) -> None:
        super().__init__(inner.root, enabled=False)
        self.inner = inner
        self.worker: _Worker | None = worker
        self.ready: dict[Item, tuple[str, Any]] = {}
        self.received = 0  # values taken from the worker (what the tests read)

    def attach(self, cache: ParseCache) -> ParseCache:
        """This worker (started before the loader had its cache) in front of ``cache``; just ``cache`` when it
        holds parses already (a warm check has nothing for the worker to do)."""
        if cache.entries:
            self.close()
            return cache
        self.inner, self.root = cache, cache.root
        return self

    def get(self, kind: str, path: str, text: str, expect: Any = Any) -> Any | None:
        hit = self._arrived((kind, path))
        if hit is not None:
            value = self._value(hit, text, expect)
            if value is not None:
                self.inner.put(kind, path, text, value)
                self.received += 1
                return value
        return self.inner.get(kind, path, text, expect)

    def take(self, kind: str, path: str, expect: type) -> Any | None:
        """The value the worker made for ``(kind, path)`` from files this process never reads (a whole skill:
        ``Plan.load_skill``), or None: the caller makes it itself."""
        hit = self._arrived((kind, path))
        value = None if hit is None else self._value(hit, hit[0], expect)
        self.received += value is not None
        return value

    def _arrived(self, key: Item) -> tuple[str, Any] | None:
        """The worker's (text, packed value) for ``key``; it is waited for when the worker is on it or it is an
        RST page still to come. None: this process makes it itself (and says so in the worker's lane)."""
        worker = self.worker
        if worker is not None and key not in self.ready:
            self._read(worker)
            while self.worker is not None and worker.plan is None and key not in self.ready:
                self._read(worker, wait=True)
            if key not in self.ready and self.worker is not None and key in worker.places:
                worker.frontier.reach(LANES.index(key[0]), worker.places[key])
                self._read(worker)  # a start the worker sent before it saw the frontier
            while key not in self.ready and self.worker is not None and self._waits(worker, key):
                self._read(worker, wait=True)
        return self.ready.pop(key, None)

    @staticmethod
    def _waits(worker: _Worker, key: Item) -> bool:
        """Whether the loader waits for ``key`` rather than parse it here: an RST page the worker has yet to start
        (it parses those first), or the file it is parsing now."""
        if worker.current == key:
            return True
        return key[0] == "rst" and worker.plan is not None and key in worker.plan and key not in worker.begun

    @staticmethod
    def _value(hit: tuple[str, Any], text: str, expect: Any) -> Any | None:
        if hit[0] != text:
            return None  # parsed from another text (the file changed between the two reads)
        try:
            value = unpack(hit[1])
        except (CodecError, TypeError, ValueError, IndexError, RecursionError):
            return None
        return value if not isinstance(expect, type) or isinstance(value, expect) else None

    def put(self, kind: str, path: str, text: str, value: Any) -> None:
        self.inner.put(kind, path, text, value)

    def save(self) -> None:
        self.inner.save()

    def _read(self, worker: _Worker, wait: bool = False) -> None:
        """Take the records that have arrived (``wait``: block until more arrive, at most until ``DEADLINE``
        after the worker's start); a worker that is done, gone, late or garbled is stopped."""
        open_ = not (wait and worker.done) and drain(worker.fd, worker.buffer, worker.started + DEADLINE, wait)
        entries = records(worker.buffer)
        if entries is None or not self._take(worker, entries) or not open_ or worker.done:
            self.close()

    def _take(self, worker: _Worker, entries: list[Any]) -> bool:
        """Note the worker's records (``_serve`` says which) and keep its values in ``ready``; False for one that
        is not of these."""
        for entry in entries:
            if type(entry) is not tuple or len(entry) not in (0, 1, 2, 4):
                return False
            if not entry:
                worker.done = True
            elif len(entry) == 1:
                if type(entry[0]) is not list or not all(type(i) is tuple and len(i) == 2 for i in entry[0]):
                    return False
                worker.plan = frozenset(entry[0])
                worker.places = _lane_index(entry[0])
            elif len(entry) == 2:
                worker.current = entry
                worker.begun.add(entry)
            elif type(entry[2]) is str:
                self.ready[(entry[0], entry[1])] = (entry[2], entry[3])
                worker.current = None
        return True

    def close(self) -> None:
        """Stop the worker (what it has not sent is parsed here when asked for; ``forked.end`` reaps it)."""
        worker, self.worker = self.worker, None
        if worker is None:
            return
        os.close(worker.fd)
        worker.frontier.close()
        end(worker.pid)


class Recorder(ParseCache):
    """A worker's stand-in for the loader's cache: nothing cached to get; with ``keep`` (the check keeps a parse
    cache), each ``put`` is kept (a copy: the loader then adds read problems to the value it got) for the
    check to put in its own."""

    def __init__(self, root: Path, keep: bool) -> None:
        super().__init__(root, enabled=False)
        self.keep = keep
        self.puts: list[tuple[str, str, str, Any]] = []

    def put(self, kind: str, path: str, text: str, value: Any) -> None:
        if self.keep:
            self.puts.append((kind, path, text, copy.copy(value)))


def worth_a_worker(items: list[Item]) -> bool:
    """Whether a plan pays for a worker's start: an RST page, or skills enough to share (a plan of scripts
    alone saved 0.01 s and cost 0.03 s of CPU on a collection of 80 skills)."""
    return any(kind in ("rst", "skill") for kind, _ in items)


def start(
    project: Project,
    folders: list[str],
    docs: str,
    cache: ParseCache,
    jobs: int,
    drift: bool,
    load_skill: Callable[[str], Any] | None = None,
    parser: Callable[[str, str, str], Any] | None = None,
) -> ParseCache:
    """``cache``, or (``jobs`` > 1, a cold cache, a plan ``worth_a_worker``, a process that may fork) a
    ``Prefetched`` in front of it whose worker has started. ``load_skill``: ``Plan.load_skill`` (without it no
    skill is shared); ``parser``: what the worker runs for each file (default ``parse``)."""
    if cache.entries or not _may_fork(jobs):
        return cache
    items = plan(project, folders, docs, drift)
    if load_skill is None:
        items = [i for i in items if i[0] != "skill"]
    if not worth_a_worker(items):
        return cache
    worker = _fork(project.root, Plan(items, load_skill), parser or parse)
    return Prefetched(cache, worker) if worker is not None else cache


def begin(root: Path, make_plan: Callable[[Send], Plan], jobs: int) -> Prefetched | None:
    """A worker started before the tree is walked (a check forks it first thing, so it parses while the check
    reads its settings and rules): it runs ``make_plan`` itself, which may send values it makes on the way (its
    walk of the tree, ``Prefetched.take`` gets it at once); an empty plan: it stops then.
    ``Prefetched.attach`` puts it in front of the loader's cache; None where a process may not fork."""
    if not _may_fork(jobs):
        return None
    worker = _fork(root, make_plan, parse)
    return Prefetched(ParseCache(root, enabled=False), worker) if worker is not None else None
