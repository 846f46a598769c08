"""Benchmark the checker's language server through a real stdio client (prints figures; never asserted in
tests). The server is ``cli.py lsp`` as a subprocess, with its default debounce; the client is pygls'.

- *first diagnostics*: a fresh server on this repository, as an editor starts one: the process starts, the
  client initializes and opens ``SKILL.md``; the time from the process start to that file's diagnostics
  (median of ``--starts`` fresh processes, the caches on disk filled by the first, as an editor reopening a
  repository finds them: parsed files, and the last session's findings of the unchanged tree). Target: 1 s.
  The first start, with empty caches, is printed beside it.
- *one-character edit*: in an open file, a character typed then deleted, at five places of the file in
  turn (a tenth of the way in, three tenths, ...); the time from
  each ``didChange`` to the ``publishDiagnostics`` for that version (median and p90 of ``--repeat``), in
  this repository's SKILL.md, reference.md and multi_gpu.rst (target 200 ms) and in a generated skill of
  an 80-skill tree (target 400 ms). Every generated skill has a finding (a broken link in its
  reference.md), so a server that republished every file with findings would send 80 messages an edit.
- *messages of one edit*: on the 80-skill tree, an edit that renames the skill (its name no longer the
  folder's): the publishDiagnostics notifications it caused, against the files whose findings changed,
  counted independently by ``cli.py check --format json`` on a copy before and after the edit is saved.
  The two must be equal.
- *a burst*: ten edits 50 ms apart in multi_gpu.rst: how many publishes came for them, and the time from
  the last edit to its diagnostics.

The cache goes to a temporary folder (never the user's home); the trees are only read (the 80-skill tree
and its copy are generated in a temporary folder).

    uv run --frozen python benchmarks/bench_lsp.py [--repeat 15] [--starts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_checker import make_tree
from lsprotocol import types
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "tools" / "skills" / "cli.py"
SKILL = "skills/user/train-multi-gpu/SKILL.md"
FILES = (
    (SKILL, "markdown"),
    ("skills/user/train-multi-gpu/reference.md", "markdown"),
    ("docs/source/features/multi_gpu.rst", "restructuredtext"),
)
BIG_SKILLS = 80
BIG_FILE = "skills/user/bench-skill-3/SKILL.md"
DEADLINE_S = 120.0
BURST, KEYSTROKE_S = 10, 0.05  # a burst of typing: 10 edits, 50 ms apart
TARGETS = {"repo": 0.2, "big": 0.4, "first": 1.0}


class Session:
    """A server on stdio, the arrival time of each (uri, version) it publishes, and every message."""

    def __init__(self) -> None:
        self.client = LanguageClient("bench-lsp", "1")
        self.arrived: dict[tuple[str, int | None], float] = {}
        self.messages: list[types.PublishDiagnosticsParams] = []
        self.event = asyncio.Event()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def publish(params: types.PublishDiagnosticsParams) -> None:
            self.arrived.setdefault((params.uri, params.version), time.perf_counter())
            self.messages.append(params)
            self.event.set()

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def shown(params: types.ShowMessageParams) -> None:  # (this client watches no files: the server says so)
            pass

    def cpu(self) -> float:
        """The server process's CPU time so far (user + system, seconds; Linux /proc): under a shared machine's
        load, wall time stretches while this does not much."""
        pid = self.client._server.pid if self.client._server else None  # (pygls keeps the process)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def start(self, root: Path, env: dict[str, str]) -> float:
        """Start the server on ``root``; the time the process was started."""
        t0 = time.perf_counter()
        await self.client.start_io(sys.executable, str(CLI), "lsp", env=env)
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(), root_uri=root.as_uri(), process_id=os.getpid()
            )
        )
        self.client.initialized(types.InitializedParams())
        return t0

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), DEADLINE_S)
            self.client.exit(None)
        finally:
            await self.client.stop()

    async def wait(self, uri: str, version: int | None) -> float:
        async with asyncio.timeout(DEADLINE_S):
            while (uri, version) not in self.arrived:
                self.event.clear()
                await self.event.wait()
        return self.arrived[(uri, version)]

    async def settle(self, uri: str) -> None:
        """Every notification sent before now has arrived: a request's answer comes after them (stdio is
        ordered)."""
        await self.client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(0, 0))
        )

    def open(self, uri: str, language: str, text: str) -> None:
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text))
        )

    def change(self, uri: str, version: int, text: str) -> float:
        t0 = time.perf_counter()
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        return t0


SPOTS = (0.1, 0.3, 0.5, 0.7, 0.9)  # where in a file the edits are typed (fractions of its lines), in turn


def one_char(text: str, version: int) -> str:
    """Consecutive versions differ by one character: an even version has an ``x`` typed at the end of a
    non-blank line (at each of ``SPOTS`` of the file in turn), the next odd one has it deleted."""
    if version % 2:
        return text
    lines = text.split("\n")
    spot = int(SPOTS[(version // 2) % len(SPOTS)] * len(lines))
    at = next(i for i in [*range(spot, len(lines)), *range(spot, -1, -1)] if lines[i].strip())
    lines[at] += "x"
    return "\n".join(lines)


async def first_diagnostics(root: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall time from the process start to SKILL.md's diagnostics, the server's CPU time by then)."""
    s = Session()
    t0 = await s.start(root, env)
    try:
        uri = (root / SKILL).as_uri()
        s.open(uri, "markdown", (root / SKILL).read_text(encoding="utf-8"))
        return await s.wait(uri, 1) - t0, s.cpu()
    finally:
        await s.stop()


async def edits(root: Path, files: tuple[tuple[str, str], ...], repeat: int, env: dict[str, str]) -> dict:
    """Per file, the latency of ``repeat`` one-character edits; for multi_gpu.rst a burst too."""
    s = Session()
    await s.start(root, env)
    out: dict[str, list[float]] = {}
    try:
        for rel, language in files:
            uri = (root / rel).as_uri()
            text = (root / rel).read_text(encoding="utf-8")
            s.open(uri, language, text)
            await s.wait(uri, 1)
            times, cpu = [], []
            for version in range(2, repeat + 2):
                c0 = s.cpu()
                t0 = s.change(uri, version, one_char(text, version))
                times.append(await s.wait(uri, version) - t0)
                cpu.append(s.cpu() - c0)
            out[rel] = times
            out[f"cpu:{rel}"] = cpu
            if rel.endswith(".rst"):
                first = version + 1
                for version in range(first, first + BURST):
                    t0 = s.change(uri, version, one_char(text, version) + " " * version)
                    await asyncio.sleep(KEYSTROKE_S)
                await s.wait(uri, version)
                count = sum(1 for (u, v) in s.arrived if u == uri and first <= v <= version)
                out["burst"] = [s.arrived[(uri, version)] - t0, count]
            s.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))
            await s.wait(uri, None)
    finally:
        await s.stop()
    return out


def findings_by_path(root: Path, env: dict[str, str]) -> dict[str, list]:
    proc = subprocess.run(
        [sys.executable, str(CLI), "check", "--root", str(root), "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out: dict[str, list] = {}
    for f in json.loads(proc.stdout)["findings"]:
        out.setdefault(f["path"], []).append((f["line"], f["col"], f["code"], f["message"]))
    return {path: sorted(items) for path, items in out.items()}


async def messages_of_one_edit(root: Path, copy: Path, env: dict[str, str]) -> tuple[int, int, int]:
    """(messages sent for one edit, files whose findings it changed, files with findings before)."""
    rel = BIG_FILE
    text = (root / rel).read_text(encoding="utf-8")
    edited = text.replace("name: bench-skill-3\n", "name: bench-skill-3x\n", 1)
    assert edited != text
    before = findings_by_path(copy, env)
    (copy / rel).write_text(edited, encoding="utf-8")
    after = findings_by_path(copy, env)
    (copy / rel).write_text(text, encoding="utf-8")
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    s = Session()
    await s.start(root, env)
    try:
        uri = (root / rel).as_uri()
        s.open(uri, "markdown", text)
        await s.wait(uri, 1)
        await s.settle(uri)
        sent = len(s.messages)
        s.change(uri, 2, edited)
        await s.wait(uri, 2)
        await s.settle(uri)
        got = s.messages[sent:]
    finally:
        await s.stop()
    published = {m.uri for m in got}
    expected = {(root / p).as_uri() for p in changed}
    if published != expected or len(got) != len(published):
        extra, missing = sorted(published - expected), sorted(expected - published)
        more = " ..." if len(extra) > 3 else ""
        print(f"  {len(extra)} message(s) for files that did not change ({', '.join(extra[:3])}{more})")
        print(f"  none for {len(missing)} file(s) that did ({', '.join(missing[:3])})")
    return len(got), len(changed), len(before)


def big_tree(tmp: Path) -> Path:
    """``BIG_SKILLS`` generated skills beside this repository's, each with a broken link (a finding)."""
    root = make_tree(tmp, BIG_SKILLS)
    for i in range(BIG_SKILLS):
        ref = root / "skills" / "user" / f"bench-skill-{i}" / "reference.md"
        ref.write_text(ref.read_text(encoding="utf-8") + f"\nSee [the notes](notes-{i}.md).\n", encoding="utf-8")
    return root


def line(label: str, times: list[float], target: float) -> str:
    med = statistics.median(times)
    p90 = sorted(times)[max(0, int(0.9 * len(times)) - 1)]
    verdict = "within" if med <= target else "OVER"
    return (
        f"{label}: median {med * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms, min {min(times) * 1000:.0f}, "
        f"max {max(times) * 1000:.0f} (n={len(times)}; target {target * 1000:.0f} ms: {verdict})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="edits per file (default 15)")
    parser.add_argument("--starts", type=int, default=5, help="fresh servers timed to first diagnostics (default 5)")
    args = parser.parse_args()
    if args.repeat < 1 or args.starts < 1:
        parser.error("--repeat and --starts must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench_lsp_") as tmp:
        env = dict(os.environ, SKILLS_CHECK_CACHE_DIR=str(Path(tmp) / "cache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        cold, *firsts = [asyncio.run(first_diagnostics(REPO, env)) for _ in range(args.starts + 1)]  # 1st fills caches
        label = "first diagnostics on opening this repository (process start -> SKILL.md)"
        print(line(label, [wall for wall, _ in firsts], TARGETS["first"]))
        print(f"  the server's CPU time by then: median {statistics.median(c for _, c in firsts) * 1000:.0f} ms")
        print(f"  the first start, every cache empty: {cold[0] * 1000:.0f} ms ({cold[1] * 1000:.0f} ms of CPU)")
        for rel, times in asyncio.run(edits(REPO, FILES, args.repeat, env)).items():
            if rel.startswith("cpu:"):
                print(f"  the server's CPU time per edit there: median {statistics.median(times) * 1000:.0f} ms")
            elif rel == "burst":
                print(
                    f"a burst of {BURST} edits {KEYSTROKE_S * 1000:.0f} ms apart in multi_gpu.rst: {int(times[1])} "
                    f"publish(es) for its versions, the last {times[0] * 1000:.0f} ms after the last edit"
                )
            else:
                print(line(f"one-character edit -> diagnostics, {rel}", times, TARGETS["repo"]))
        big = big_tree(Path(tmp))
        copy = Path(tmp) / "copy"
        shutil.copytree(big, copy, symlinks=True)
        runs = asyncio.run(edits(big, ((BIG_FILE, "markdown"),), args.repeat, env))
        print(
            line(
                f"one-character edit -> diagnostics, {BIG_SKILLS}-skill tree, {BIG_FILE}",
                runs[BIG_FILE],
                TARGETS["big"],
            )
        )
        print(
            f"  the server's CPU time per edit there: median {statistics.median(runs['cpu:' + BIG_FILE]) * 1000:.0f} ms"
        )
        sent, changed, with_findings = asyncio.run(messages_of_one_edit(big, copy, env))
        print(
            f"one edit on the {BIG_SKILLS}-skill tree ({with_findings} files with findings): {sent} publishDiagnostics "
            f"message(s); {changed} file(s) whose findings changed ({'equal' if sent == changed else 'NOT equal'})"
        )
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
