"""The watchdog's report: which limit fired, where each rank is, the culprit, and the files that keep it.

Stdlib only. :func:`write_report` never raises: a folder that cannot take the report (a full disk, a path that is a
file) is named in :attr:`Report.unwritten` and the next one is tried; the caller prints the summary whatever happened.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mgpu_lab.health.culprit import RankState, world_of

#: The launcher options that set the two limits (named in the report, so a user knows which one to raise).
HANG_OPTION, STARTUP_OPTION = "--hang_timeout", "--startup_timeout"


@dataclass(frozen=True)
class Limit:
    """One stall limit: the stage it covers ("start-up" or "training"), its length, and the option that set it."""

    stage: str
    seconds: float
    option: str


def limits(hang_timeout_s: float, startup_timeout_s: float) -> tuple[Limit | None, Limit | None]:
    """(training limit, start-up limit); None where that stage is not watched.

    ``hang_timeout_s`` 0 turns the watchdog off; ``startup_timeout_s`` 0 leaves start-up unwatched. The
    start-up limit is never shorter than the training limit: where ``--hang_timeout`` is the longer, it is
    the start-up limit too (and the report names it)."""
    if hang_timeout_s <= 0:
        return None, None
    training = Limit("training", hang_timeout_s, HANG_OPTION)
    if startup_timeout_s <= 0:
        return training, None
    if startup_timeout_s >= hang_timeout_s:
        return training, Limit("start-up", startup_timeout_s, STARTUP_OPTION)
    return training, Limit("start-up", hang_timeout_s, HANG_OPTION)


@dataclass
class Report:
    """The watchdog's findings: each rank's state, the likely culprits and why, and where files went."""

    stalled_s: float
    ranks: list[RankState]
    culprits: list[int]
    reason: str
    limit: Limit | None = None  # the limit that fired
    starting: list[int] = field(default_factory=list)  # ranks that had not begun training
    folder: Path | None = None
    files: list[Path] = field(default_factory=list)
    unwritten: list[str] = field(default_factory=list)  # the folders that could not take the report, and why

    def summary_lines(self) -> list[str]:
        lines = [
            f"[ERROR] watchdog: no rank made progress for {self.stalled_s:.0f} s"
            f"{stall_words(self.limit, self.starting)}; where each rank is:"
        ]
        world = world_of(self.ranks)
        lines += [
            f"[ERROR] watchdog:   rank {st.rank} {st.place()} (pid {st.silent_pid})"
            if st.silent_pid is not None
            else f"[ERROR] watchdog:   {st.heading(world)}: {st.place()}"
            for st in self.ranks
        ]
        if self.culprits:
            names = ", ".join(str(r) for r in self.culprits)
            lines.append(f"[ERROR] watchdog: likely culprit: rank {names} ({self.reason})")
        else:
            lines.append(f"[ERROR] watchdog: no single culprit ({self.reason})")
        return lines


def stall_words(limit: Limit | None, starting: list[int]) -> str:
    """Which limit fired, in words for the report: " in start-up (...)" or " in training (...)"."""
    if limit is None:
        return ""
    if limit.stage == "start-up":
        who = ", ".join(str(r) for r in starting)
        return (
            f" in start-up (rank {who} had not begun training; start-up limit {limit.seconds:g} s, "
            f"{limit.option}: raise it if a healthy start-up takes longer)"
        )
    return f" in training (training limit {limit.seconds:g} s, {limit.option})"


def write_report(report: Report, run_dir: Path | None) -> Path | None:
    """Write ``stack_rank<R>.txt`` and ``summary.txt`` under ``<run_dir>/watchdog/``, else under a fresh temp folder
    (no run folder known, or it cannot be written: a full disk, a path that is a file); return the folder, or None
    when no folder took every file. Never raises: :attr:`Report.unwritten` says what failed, and the caller prints
    the summary whatever happened here."""
    files = [(f"stack_rank{st.rank}.txt", st.stack_text()) for st in report.ranks]
    files.append(("summary.txt", "\n".join(report.summary_lines()) + "\n"))
    for folder in _report_folders(run_dir):
        try:
            written = []
            for name, text in files:
                path = folder / name
                path.write_text(text, encoding="utf-8")
                written.append(path)
        except OSError as exc:
            report.unwritten.append(f"{folder}: {exc.strerror or exc}")
            continue
        report.files, report.folder = written, folder
        return folder
    return None


def _report_folders(run_dir: Path | None) -> Iterator[Path]:
    """Where the report may go, in order: ``<run_dir>/watchdog``, then a fresh temp folder (each made on demand)."""
    if run_dir is not None:
        try:
            folder = run_dir / "watchdog"
            folder.mkdir(parents=True, exist_ok=True)
            yield folder
        except OSError:
            pass
    try:
        yield Path(tempfile.mkdtemp(prefix="mgpu_lab_watchdog_"))
    except OSError:
        return
