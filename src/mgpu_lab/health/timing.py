"""Per-rank timing: compute time and time waiting in collectives, per window, and the straggler verdict.

Each rank appends one JSON line per *window* to ``<run folder>/timing/rank<R>.jsonl`` (:class:`TimingLog`):
a training iteration for the built-in trainer, a fixed stretch of wall time (:data:`WINDOW_S`) for a script
launched with ``--train_script``. A line holds the window's wall time, the time spent waiting in collectives
(:class:`mgpu_lab.health.collectives.CollectiveTracker`) and the rest, which is compute (and anything else the
rank does outside collectives). Ranks learn the run folder from the supervision folder
(:func:`mgpu_lab.health.heartbeat.read_run_dir`); lines from before it is known are kept and written then.

Ranks run in lockstep, so a slow rank does not look slow in a stack: the others wait for it, in a
collective. Timing shows it: the slow rank computes most of each window and waits little, its peers
wait. :func:`verdict` names a rank whose compute share is clearly above the others' in most of its
windows; ``mgpu-lab timing`` prints the table and the verdict (:func:`report_lines`). Stdlib only.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from mgpu_lab.core import records
from mgpu_lab.core.safe_read import OutsideFolder, read_regular, resolved_inside
from mgpu_lab.health import heartbeat
from mgpu_lab.runs.resume import LATEST

TIMING_DIR = "timing"
#: Window length for scripts without iterations the launcher knows of (seconds of wall time).
WINDOW_S = 1.0
#: A rank is slower when its compute share beats the others' median by this much (absolute) ...
MARGIN = 0.15
#: ... in at least this share of its windows.
PERSISTENT = 0.75
#: Windows a rank needs (after its first, which holds the start-up) before anything is said about it.
MIN_WINDOWS = 3
_MAX_BUFFERED = 10000
PREFIX = "[INFO] timing:"


@dataclass(frozen=True)
class Window:
    rank: int
    node: str
    window: int
    iteration: int | None  # the training iteration (built-in trainer), None for time windows
    start: float  # time.time() at the window's start
    wall_s: float
    wait_s: float
    compute_s: float
    collectives: int

    @property
    def compute_share(self) -> float:
        return self.compute_s / self.wall_s if self.wall_s > 0 else 0.0


#: the version of a timing line (field ``v``); a line written before lines carried one is version 0, whose fields
#: are the same: read as it is
VERSION = 1
#: the one schema of a timing line, shared by the ranks that write it and ``mgpu-lab timing`` that reads it
CODEC = records.Codec(
    "timing line",
    VERSION,
    {
        "rank": records.count,
        "node": records.text,
        "window": records.count,
        "iteration": records.optional(records.count),
        "start": records.seconds,
        "wall_s": records.seconds,
        "wait_s": records.seconds,
        "compute_s": records.seconds,
        "collectives": records.count,
    },
    Window,
    older={0: None},
    unversioned=True,
)


def rank_file(run_dir: str | os.PathLike, rank: int) -> Path:
    return Path(run_dir) / TIMING_DIR / f"rank{rank}.jsonl"


class TimingLog:
    """One rank's writer: :meth:`close_window` ends the current window and appends its line."""

    def __init__(self, tracker, rank: int, node: str, supervise_dir: str | None, clock=time.perf_counter) -> None:
        self.tracker = tracker
        self.rank, self.node = rank, node
        self.supervise_dir = supervise_dir
        self.clock = clock
        self.count = 0
        self._began, self._began_wall = clock(), time.time()
        self._wait0, self._done0 = tracker.wait_seconds(), tracker.completed
        self._buffer: list[str] = []
        self._target: Path | None = None

    def close_window(self, iteration: int | None = None) -> Window:
        now, wait, done = self.clock(), self.tracker.wait_seconds(), self.tracker.completed
        wall = max(now - self._began, 0.0)
        waited = min(max(wait - self._wait0, 0.0), wall)
        window = Window(
            self.rank,
            self.node,
            self.count,
            iteration,
            self._began_wall,
            round(wall, 6),
            round(waited, 6),
            round(wall - waited, 6),
            done - self._done0,
        )
        self.count += 1
        self._began, self._began_wall, self._wait0, self._done0 = now, time.time(), wait, done
        self._buffer.append(CODEC.encode(window).decode("utf-8"))
        del self._buffer[:-_MAX_BUFFERED]
        self._flush()
        return window

    def _flush(self) -> None:
        if self._target is None and self.supervise_dir is not None:
            run_dir = heartbeat.read_run_dir(self.supervise_dir)
            if run_dir is not None and run_dir.is_dir():
                self._target = rank_file(run_dir, self.rank)
        if self._target is None or not self._buffer:
            return
        try:
            self._target.parent.mkdir(exist_ok=True)
            with open(self._target, "a", encoding="utf-8") as fh:
                fh.write("\n".join(self._buffer) + "\n")
            self._buffer.clear()
        except OSError:
            pass  # a full or read-only disk: timing is an aid, never the reason a rank fails


# --- reading and the verdict --------------------------------------------------------------------------


#: what ``mgpu-lab timing`` reads of one rank's file at most (the newest windows are at the end: a longer file
#: is read from its last ``MAX_FILE_BYTES``), and the longest line it parses
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class FileNote:
    """What reading one file under ``timing/`` left out: lines it could not use, or the whole file."""

    path: Path
    usable: int
    skipped: int
    problem: str | None = None  # the whole file unusable: "a FIFO, not a regular file", "empty" ...
    cut: bool = False  # longer than MAX_FILE_BYTES: only its end was read
    other: int = 0  # lines of a version this reader does not take (a newer mgpu-lab's) ...
    other_reason: str = ""  # ... and the versions, in words (the first such line's)

    def line(self) -> str:
        if self.problem is not None:
            return f"[WARN] timing: {self.path}: {self.problem}; skipped"
        said = f"{self.skipped} unusable line(s) skipped, {self.usable} used"
        if self.cut:  # the file is longer than the bound: its older windows are not in the table
            said = f"cut: only its last {_amount(MAX_FILE_BYTES)} read, older windows left out; " + (
                said if self.skipped else f"{self.usable} used"
            )
        elif self.other and not self.skipped:
            said = f"{self.usable} used"
        if self.other:
            said += f"; {self.other} line(s) of another version skipped ({self.other_reason})"
        return f"[WARN] timing: {self.path}: {said}"

    def summary(self) -> str:
        """Why the file gave nothing, in a few words (for the one line when no file did)."""
        if self.problem is not None:
            return self.problem
        parts = [f"{self.skipped} unusable line(s)"] if self.skipped else []
        if self.other:
            parts.append(f"{self.other} line(s) of {self.other_reason}")
        return ", ".join(parts) or "no window"

    @property
    def worth_saying(self) -> bool:
        return self.problem is not None or self.skipped > 0 or self.cut or self.other > 0


def _amount(size: int) -> str:
    return f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size} bytes"


def parse_window(line: str) -> Window:
    """One line's window (fields a newer writer added are ignored); :class:`~mgpu_lab.core.records.Unreadable` when
    the line is not one (wrong types, truncated, too deep, not JSON, binary), ``OtherVersion`` when of a version
    this reader does not take."""
    if "\0" in line:
        raise records.Unreadable("binary")
    return CODEC.decode(line)


def read_file(path: Path, run_dir: str | os.PathLike | None = None) -> tuple[list[Window], FileNote]:
    """One rank file's windows and what was left out (a regular file only, at most :data:`MAX_FILE_BYTES`; given
    ``run_dir``, only when its path resolves inside that folder: a link out of it is never opened)."""
    try:  # the newest windows: the file's end
        data, more = read_regular(path, MAX_FILE_BYTES, tail=True, within=run_dir)
    except OSError as exc:
        return [], FileNote(path, 0, 0, exc.strerror or str(exc))
    if more:  # the first line read may be the end of one
        data = data.split(b"\n", 1)[-1]
    if not data.strip():
        return [], FileNote(path, 0, 0, f"no whole line in its last {_amount(MAX_FILE_BYTES)}" if more else "empty")
    windows, skipped, other, reason = [], 0, 0, ""
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            if len(raw) > MAX_LINE_BYTES:
                raise records.Unreadable(f"longer than {MAX_LINE_BYTES} bytes")
            windows.append(parse_window(raw.decode("utf-8", "replace")))
        except records.OtherVersion as exc:
            other, reason = other + 1, reason or str(exc)
        except records.Unreadable:
            skipped += 1
    return windows, FileNote(path, len(windows), skipped, cut=more, other=other, other_reason=reason)


def scan(run_dir: str | os.PathLike) -> tuple[dict[int, list[Window]], list[FileNote]]:
    """Every rank's windows under ``run_dir/timing``, and a note for each file that had something unusable or was
    cut; a file (or a ``timing`` folder) that leads out of ``run_dir`` is a note, never read."""
    found: dict[int, list[Window]] = {}
    notes: list[FileNote] = []
    folder = Path(run_dir) / TIMING_DIR
    try:
        resolved_inside(run_dir, folder)
    except OutsideFolder as exc:  # the whole folder leads elsewhere: one note, nothing in it listed or read
        return found, [FileNote(folder, 0, 0, exc.strerror)]
    try:
        paths = sorted(folder.glob("rank*.jsonl")) if folder.is_dir() else []
    except OSError:
        paths = []
    for path in paths:
        windows, note = read_file(path, run_dir)
        for w in windows:
            found.setdefault(w.rank, []).append(w)
        if note.worth_saying:
            notes.append(note)
    return found, notes


def read(run_dir: str | os.PathLike) -> dict[int, list[Window]]:
    """Every rank's windows under ``run_dir/timing`` (unusable lines and files left out: :func:`scan` says which)."""
    return scan(run_dir)[0]


@dataclass(frozen=True)
class Verdict:
    slow: int | None  # the rank named, or None
    share: float  # its median compute share
    others: float  # the others' median compute share
    persistent: float  # share of its windows in which it was clearly slower
    reason: str


def verdict(windows: dict[int, list[Window]]) -> Verdict:
    """Name the rank that is persistently slower than the others, if one is."""
    usable = {r: [w for w in ws[1:] if w.collectives] for r, ws in windows.items()}  # a window without any
    usable = {r: ws for r, ws in usable.items() if len(ws) >= MIN_WINDOWS}  # collective says nothing of pace
    if len(usable) < 2:
        return Verdict(
            None,
            0.0,
            0.0,
            0.0,
            f"too little to compare: it takes two ranks with "
            f"{MIN_WINDOWS} windows each that made collectives (run longer)",
        )
    medians = {r: statistics.median(w.compute_share for w in ws) for r, ws in usable.items()}
    slow = max(medians, key=lambda r: medians[r])
    others = statistics.median(m for r, m in medians.items() if r != slow)
    clear = sum(1 for w in usable[slow] if w.compute_share >= others + MARGIN) / len(usable[slow])
    if medians[slow] >= others + MARGIN and clear >= PERSISTENT:
        return Verdict(slow, medians[slow], others, clear, "slower in most windows")
    return Verdict(None, medians[slow], others, clear, "no rank computes clearly longer than the others")


ADVICE = (
    "what to check on its node: GPU clocks and throttling (nvidia-smi -q -d CLOCK,PERFORMANCE: power, thermal or "
    "HW slowdown), other processes on its GPU (nvidia-smi), its PCIe link and NUMA placement (nvidia-smi topo -m; "
    "a GPU on the far socket from its CPU cores, or a link trained below its width), CPU contention (top)",
    "what to do: fix or drain that GPU or node (cooling, power cap, clocks), pin each rank next to its GPU "
    "(numactl --cpunodebind), or leave that GPU out (CUDA_VISIBLE_DEVICES) and run one rank fewer",
)


def table_lines(windows: dict[int, list[Window]]) -> list[str]:
    lines = [f"{PREFIX} rank  node              windows  compute s   wait s  compute share (median)"]
    for rank, ws in sorted(windows.items()):
        body = ws[1:] or ws
        lines.append(
            f"{PREFIX} {rank:>4}  {ws[0].node[:16]:<16}  {len(ws):>7}  {sum(w.compute_s for w in body):>9.2f}"
            f"  {sum(w.wait_s for w in body):>7.2f}  {statistics.median(w.compute_share for w in body):>6.0%}"
        )
    return lines


class Unusable(Exception):
    """Timing files were there, but not one window could be used (one line, exit 2)."""


def report_lines(run_dir: str | os.PathLike) -> list[str]:
    """The per-rank table and the verdict for one run folder, after a line per file with something unusable
    (empty when it holds no timing file; :class:`Unusable` when it holds only unusable ones)."""
    windows, notes = scan(run_dir)
    if not windows:
        if notes:
            said = "; ".join(f"{n.path.name}: {n.summary()}" for n in notes[:4]) + (
                f"; and {len(notes) - 4} more file(s)" if len(notes) > 4 else ""
            )
            raise Unusable(f"no usable timing in {Path(run_dir) / TIMING_DIR} ({said})")
        return []
    lines = [note.line() for note in notes] + table_lines(windows)
    v = verdict(windows)
    if v.slow is None and not v.share:
        lines.append(f"{PREFIX} no verdict: {v.reason}")
        return lines
    if v.slow is None:
        lines.append(
            f"{PREFIX} no straggler: {v.reason} (highest median compute share {v.share:.0%}, the others "
            f"{v.others:.0%}; each rank's first window (start-up) and windows without a collective are left out)"
        )
        return lines
    lines.append(
        f"[WARN] timing: rank {v.slow} is persistently slower than the others: it computes {v.share:.0%} "
        f"of each window where the others compute {v.others:.0%} and wait for it in collectives "
        f"(in {v.persistent:.0%} of its windows)"
    )
    lines += [f"[WARN] timing: {line}" for line in ADVICE]
    return lines


def find_run(target: str, log_root: str) -> Path | None:
    """A run folder: ``target`` itself, or for ``latest`` the newest under ``log_root`` that holds timing."""
    if target != LATEST:
        return Path(target) if Path(target).is_dir() else None
    runs = []
    for p in Path(log_root).glob(f"*/*/*/{TIMING_DIR}"):
        try:
            if p.is_dir():
                runs.append((p.stat().st_mtime, p.parent))
        except OSError:  # gone since the glob, or not ours to read
            continue
    return max(runs)[1] if runs else None
