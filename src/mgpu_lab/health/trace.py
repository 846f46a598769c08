"""``mgpu-lab trace``: read every rank's flight recorder dump and name the first collective the ranks disagree on.

The dumps (:mod:`mgpu_lab.health.flight_recorder` writes them into ``<run>/flight_recorder/``; NCCL's own, named
``<prefix><rank>``, are read the same way) are in torch's format: a pickle of builtin containers and primitives
(``version``, ``pg_config``, ``entries``: one dict per collective with its process group, its
``collective_seq_id``, the operation, the tensor sizes and the Python frames that posted it). torch's own reader
(``torch.distributed.flight_recorder``) loads them with ``pickle.load``, which runs whatever code a file names, and
stops at the first gloo dump it does not expect (``KeyError``). Here nothing is run: :func:`load` unpickles with
an unpickler that refuses every global (only dicts, lists, tuples, strings, numbers, booleans and None can be
built), or reads torch's JSON dump (``_dump_fr_trace_json``), both bounded in size. A file that cannot be used (not
a dump, truncated, a global named, a field missing or of the wrong type) is one line, never a traceback.

The ranks are lined up per backend and per process group by ``collective_seq_id`` (every member of a group posts
its collectives in the same order, so the n-th of each must be the same collective). From the first sequence number
every rank still holds (the ring buffer forgets the oldest), the first one where a member of the group has no entry,
or an entry with another operation or input size, is the mismatch; across groups, the one posted first. Point to
point entries (``send``/``recv``) are not compared.

Exit statuses (:func:`main`): 0 every rank agrees, 1 a mismatch (named), 2 unusable input.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from mgpu_lab.core.names import LATEST
from mgpu_lab.core.safe_read import read_regular
from mgpu_lab.health.flight_recorder import FOLDER

#: The major version of torch's dump format this reader knows (torch 2.5-2.15 write "2.x"; fields it adds are ignored).
FORMAT_MAJOR = "2"
#: The most of one dump that is read (2000 entries with their frames are about 2 MiB).
MAX_DUMP_BYTES = 64 << 20
#: A dump's file name: any prefix, then the rank (``gloo_rank_1``, NCCL's ``nccl_trace_rank_1``).
_NAME = re.compile(r"^(?P<prefix>[A-Za-z][\w.-]*?)(?P<rank>\d+)$")
#: Frames that are the machinery, not the caller: torch itself (torch.distributed, DDP, autograd running DDP's
#: gradient hooks), functools' wrappers, this package's collective tracker.
_MACHINERY = ("/torch/", "/functools.py", "/mgpu_lab/health/")
#: Operations whose input sizes every rank must give alike (gather/scatter roots differ from the others).
_SAME_SIZES = {"all_reduce", "allreduce", "broadcast", "reduce", "all_gather", "_allgather_base", "barrier"}


class Unusable(Exception):
    """A dump that cannot be used; the message says which file and why, in one line."""


class BadEntry(Exception):
    """An entry of a dump that is not what torch writes; the message says what is wrong."""


class _Refusing(pickle.Unpickler):
    """An unpickler that builds builtin containers and primitives only: every global is refused."""

    def find_class(self, module: str, name: str) -> type:
        raise pickle.UnpicklingError(f"names the Python global {module}.{name} (loading it would run code; refused)")

    def persistent_load(self, pid: object) -> object:
        raise pickle.UnpicklingError("holds a persistent id (refused)")


def load(path: Path) -> object:
    """The object a dump holds, built without running code. Unusable when it is not a readable dump."""
    try:
        data, more = read_regular(path, MAX_DUMP_BYTES)
    except OSError as exc:
        raise Unusable(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if more:
        raise Unusable(f"{path}: larger than {MAX_DUMP_BYTES >> 20} MiB: not a flight recorder dump")
    if not data:
        raise Unusable(f"{path}: empty (the rank was stopped while writing it?)")
    if data.lstrip()[:1] == b"{":
        try:
            return json.loads(data)
        except ValueError as exc:
            raise Unusable(f"{path}: not valid JSON ({exc})") from None
    try:
        return _Refusing(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        if "truncated" in str(exc):
            raise Unusable(f"{path}: truncated (the pickle ends early)") from None
        raise Unusable(f"{path}: {exc}") from None
    except EOFError:
        raise Unusable(f"{path}: truncated (the pickle ends early)") from None
    except Exception as exc:  # noqa: BLE001 (the unpickler's errors on garbage are of many types)
        raise Unusable(f"{path}: not a flight recorder dump ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class Entry:
    """One collective as one rank posted it."""

    group: str  # the process group's name
    desc: str  # its description (``default_pg``)
    seq: int  # collective_seq_id within the group
    op: str  # the operation, without the backend's prefix
    sizes: str  # the input sizes, as written
    dtypes: str
    state: str  # scheduled / started / completed, as the backend knows it
    frame: str | None  # the caller that posted it, where the dump holds frames
    created_ns: int

    def what(self) -> str:
        return f"{self.op} {self.sizes} {self.dtypes}".rstrip()


@dataclass
class RankDump:
    rank: int
    path: Path
    entries: list[Entry]
    members: dict[str, list[int]]  # process group name -> its ranks, where the dump says


def caller(frames: object) -> str | None:
    """The innermost frame outside torch and this package's wrappers: ``file:line in function``."""
    if not isinstance(frames, list):
        return None
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        file = str(frame.get("filename", "")).replace("\\", "/")
        if file and not any(part in file for part in _MACHINERY):
            return f"{file}:{frame.get('line', '?')} in {frame.get('name', '?')}"
    return None


def _completed(status: object) -> dict[str, int]:
    """process group name -> the last collective it completed, from a dump's ``pg_status`` (where readable)."""
    found: dict[str, int] = {}
    for name, group in status.items() if isinstance(status, dict) else ():
        value = group.get("last_completed_collective") if isinstance(group, dict) else None
        if isinstance(value, (int, str)) and str(value).lstrip("-").isdigit():
            found[str(name)] = int(value)
    return found


def _entry(raw: object, completed: dict[str, int]) -> Entry | None:
    """An entry of a dump (None for point-to-point ones); BadEntry says what is wrong with it."""
    if not isinstance(raw, dict):
        raise BadEntry("an entry is not a mapping")
    if raw.get("is_p2p"):
        return None
    seq, name, group = raw.get("collective_seq_id"), raw.get("profiling_name"), raw.get("process_group")
    if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(name, str):
        raise BadEntry("an entry has no collective_seq_id or profiling_name")
    if not (isinstance(group, (list, tuple)) and len(group) == 2 and all(isinstance(g, str) for g in group)):
        raise BadEntry("an entry has no process_group (name, description)")
    created = raw.get("time_created_ns")
    return Entry(
        group=group[0],
        desc=group[1],
        seq=seq,
        op=name.rpartition(":")[2],
        sizes=str(raw.get("input_sizes", "")),
        dtypes=",".join(map(str, raw.get("input_dtypes") or [])),
        state=_state(raw, seq, completed.get(group[0])),
        frame=caller(raw.get("frames")),
        created_ns=created if isinstance(created, int) else 0,
    )


def _state(raw: dict, seq: int, last_completed: int | None) -> str:
    """``completed`` or ``not completed``: by the entry's own state where that says ``completed`` (NCCL's, read from
    its events at dump time), else by its ``retired`` flag where the dump has one (the backend retires an entry once
    its work finished; gloo leaves every entry ``scheduled``), else by the group's last completed collective.

    The flag comes before the group's number: each of gloo's worker threads writes that number after its own work,
    so it can stay one behind (the thread that finished #156 writing after the one that finished #157), or run
    ahead of an earlier collective still in flight."""
    if raw.get("state") == "completed":
        return "completed"
    retired = raw.get("retired")
    if isinstance(retired, bool):
        return "completed" if retired else "not completed"
    if last_completed is not None and seq <= last_completed:
        return "completed"
    return "not completed"


def _members(config: object) -> dict[str, list[int]]:
    """process group name -> its ranks, from a dump's ``pg_config`` (groups it cannot read are left out)."""
    found: dict[str, list[int]] = {}
    if not isinstance(config, dict):
        return found
    for name, group in config.items():
        ranks = group.get("ranks") if isinstance(group, dict) else None
        try:
            parsed = json.loads(ranks) if isinstance(ranks, str) else ranks
        except ValueError:
            continue
        if isinstance(parsed, list) and all(isinstance(r, int) for r in parsed) and name:
            found[str(name)] = parsed
    return found


def read_dump(path: Path, rank: int) -> RankDump:
    """One rank's dump, checked; Unusable names the file and what is wrong."""
    record = load(path)
    if not isinstance(record, dict) or not isinstance(record.get("entries", []), list):
        raise Unusable(f"{path}: not a flight recorder dump (no list of entries)")
    version = str(record.get("version", ""))
    if version.partition(".")[0] != FORMAT_MAJOR:
        raise Unusable(f"{path}: flight recorder format {version or 'unknown'}; this reader knows {FORMAT_MAJOR}.x")
    try:
        completed = _completed(record.get("pg_status"))
        entries = [e for raw in record.get("entries", []) if (e := _entry(raw, completed)) is not None]
    except BadEntry as exc:
        raise Unusable(f"{path}: {exc}") from None
    return RankDump(rank, path, entries, _members(record.get("pg_config")))


# --------------------------------------------------------------------------------------------------
# lining the ranks up
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """The first collective of a group that the members do not all post alike."""

    group: str
    desc: str
    seq: int
    posted: dict[int, Entry]  # rank -> what it posted at this sequence number
    missing: list[int]  # members that posted nothing there
    last: dict[int, Entry | None]  # a missing rank -> its last entry in the group
    culprits: list[int]  # the ranks that differ from the others

    def first_posted_ns(self) -> int:
        return min((e.created_ns for e in self.posted.values()), default=0)


@dataclass(frozen=True)
class Agreement:
    """What every rank agrees on: how many collectives in how many groups, and the last of each group."""

    compared: int
    last: dict[str, dict[int, Entry]]  # group -> rank -> its entry at the group's last sequence number


def _key(entry: Entry) -> tuple[str, str]:
    return (entry.op, entry.sizes if entry.op in _SAME_SIZES else "")


def _group_mismatch(group: str, by_rank: dict[int, dict[int, Entry]], members: list[int]) -> Mismatch | None:
    """The first sequence number of one group where its members disagree (None when they agree)."""
    held = [min(seqs) for r, seqs in by_rank.items() if r in members and seqs]
    if not held:
        return None
    lo = max(held)
    hi = max(max(seqs) for r, seqs in by_rank.items() if r in members and seqs)
    for seq in range(lo, hi + 1):
        posted = {r: by_rank[r][seq] for r in members if seq in by_rank.get(r, {})}
        missing = [r for r in members if r not in posted]
        keys = [_key(e) for e in posted.values()]
        if not missing and len(set(keys)) <= 1:
            continue
        common = max(set(keys), key=lambda k: (keys.count(k), -min(r for r, e in posted.items() if _key(e) == k)))
        odd = sorted([r for r, e in posted.items() if _key(e) != common] + missing)
        last = {
            r: max((e for s, e in by_rank.get(r, {}).items() if s < seq), key=lambda e: e.seq, default=None)
            for r in missing
        }
        desc = next(iter(posted.values())).desc if posted else ""
        return Mismatch(group, desc, seq, posted, missing, last, odd)
    return None


def compare(dumps: dict[int, RankDump]) -> Mismatch | Agreement:
    """Line the ranks' dumps up by process group and sequence number: the first mismatch, or what they agree on."""
    groups: dict[str, dict[int, dict[int, Entry]]] = defaultdict(lambda: defaultdict(dict))
    members: dict[str, set[int]] = defaultdict(set)
    for rank, dump in dumps.items():
        for entry in dump.entries:
            groups[entry.group][rank][entry.seq] = entry
            members[entry.group].add(rank)
        for name, listed in dump.members.items():
            members[name].update(r for r in listed if r in dumps)  # only ranks whose dump is here can be compared
    for name, known in members.items():
        if known and any(r in groups[name] for r in known) and _is_default(name, groups[name]):
            known.update(dumps)  # every rank is in the default group
    found = [m for name in sorted(groups) if (m := _group_mismatch(name, groups[name], sorted(members[name])))]
    if found:
        return min(found, key=Mismatch.first_posted_ns)
    last = {name: {r: seqs[max(seqs)] for r, seqs in by_rank.items() if seqs} for name, by_rank in groups.items()}
    compared = sum(len(set().union(*(set(s) for s in by_rank.values()))) for by_rank in groups.values())
    return Agreement(compared, last)


def _is_default(name: str, by_rank: dict[int, dict[int, Entry]]) -> bool:
    return any(e.desc == "default_pg" for seqs in by_rank.values() for e in seqs.values()) or name == "0"


# --------------------------------------------------------------------------------------------------
# the folder, the report, the command
# --------------------------------------------------------------------------------------------------

PREFIX = "mgpu-lab trace:"


def find_run(target: str, log_root: str) -> Path | None:
    """The folder to read: ``target`` itself, or for ``latest`` the newest run under ``log_root`` with dumps."""
    if target != LATEST:
        return Path(target) if Path(target).is_dir() else None
    runs = []
    for p in Path(log_root).glob(f"*/*/*/{FOLDER}"):
        try:
            if p.is_dir():
                runs.append((p.stat().st_mtime, p.parent))
        except OSError:
            continue
    return max(runs)[1] if runs else None


def dump_files(run: Path) -> tuple[Path, dict[str, dict[int, Path]]]:
    """(the folder read, prefix -> rank -> file): ``run/flight_recorder/`` when there is one, else ``run`` itself."""
    folder = run / FOLDER if (run / FOLDER).is_dir() else run
    sets: dict[str, dict[int, Path]] = defaultdict(dict)
    try:
        paths = sorted(folder.iterdir())
    except OSError:
        return folder, {}
    for path in paths:
        m = _NAME.match(path.name)
        if m and not path.name.startswith(".") and not path.is_dir():
            sets[m["prefix"]][int(m["rank"])] = path
    return folder, dict(sets)


def _entry_words(entry: Entry) -> str:
    where = f", from {entry.frame}" if entry.frame else ""
    return f"#{entry.seq} {entry.what()} ({entry.state}){where}"


def mismatch_lines(m: Mismatch) -> list[str]:
    lines = [f"{PREFIX} first mismatch: process group {m.group} ({m.desc or 'no description'}), collective #{m.seq}"]
    for rank, entry in sorted(m.posted.items()):
        lines.append(f"{PREFIX}   rank {rank} posted {_entry_words(entry)}")
    for rank in m.missing:
        before = m.last.get(rank)
        after = f"; its last in this group: {_entry_words(before)}" if before else "; it posted none in this group"
        lines.append(f"{PREFIX}   rank {rank} never posted it{after}")
    names = ", ".join(map(str, m.culprits))
    if m.missing and set(m.missing) == set(m.culprits):
        what = next(iter(m.posted.values())).what() if m.posted else "it"
        lines.append(f"{PREFIX} rank {names} never posted collective #{m.seq} ({what}) of process group {m.group}")
    else:
        lines.append(f"{PREFIX} rank {names} posted a different collective #{m.seq} from the others")
    return lines


def agreement_lines(a: Agreement, ranks: list[int]) -> list[str]:
    lines = [
        f"{PREFIX} all {len(ranks)} ranks agree: {a.compared} collective(s) in {len(a.last)} process group(s), "
        "posted alike"
    ]
    for group, entries in sorted(a.last.items()):
        open_on = sorted(r for r, e in entries.items() if e.state != "completed")
        if open_on:
            first = entries[open_on[0]]
            lines.append(
                f"{PREFIX} process group {group}: #{first.seq} {first.op} not completed on rank "
                f"{', '.join(map(str, open_on))} (every rank posted it: a slow or lost peer, not a mismatch)"
            )
    return lines


def report(run: Path) -> tuple[int, list[str], list[str]]:
    """(exit status, lines for stdout, lines for stderr) of ``mgpu-lab trace RUN``."""
    folder, sets = dump_files(run)
    if not sets:
        return (
            2,
            [],
            [
                f"{PREFIX} error: no flight recorder dumps in {folder} (the launcher has every rank write one "
                f"into <run>/{FOLDER}/ when a job hangs or fails)"
            ],
        )
    status, out, err = 0, list[str](), list[str]()
    for prefix, files in sorted(sets.items()):
        code, o, e = _report_set(folder, prefix, files)
        status, out, err = max(status, code), out + o, err + e
    return status, out, err


def _report_set(folder: Path, prefix: str, files: dict[int, Path]) -> tuple[int, list[str], list[str]]:
    dumps, problems = {}, []
    for rank, path in sorted(files.items()):
        try:
            dumps[rank] = read_dump(path, rank)
        except Unusable as exc:
            problems.append(str(exc))
    world = set(files) | set(range(max(files) + 1)) | {r for d in dumps.values() for g in d.members.values() for r in g}
    problems += [
        f"{folder}/{prefix}{r}: missing (rank {r} was gone or did not answer)" for r in sorted(world - set(files))
    ]
    verdict = compare(dumps) if len(dumps) >= 2 else None
    if not isinstance(verdict, Mismatch) and problems:
        return 2, [], [f"{PREFIX} error: {p}" for p in problems]
    head = [f"{PREFIX} {prefix}* dumps of rank {', '.join(map(str, sorted(dumps)))} in {folder}"]
    warnings = [f"{PREFIX} warning: {p}" for p in problems]
    if isinstance(verdict, Mismatch):
        return 1, head + mismatch_lines(verdict), warnings
    if verdict is None:
        return 2, [], [f"{PREFIX} error: {folder}/{prefix}*: one rank's dump only; nothing to compare it with"]
    return 0, head + agreement_lines(verdict, sorted(dumps)), warnings
