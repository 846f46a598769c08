"""Benchmark the checker's language server (prints figures; never asserted in tests).

On this repository, warm (the server has checked the tree once, the parse cache is filled): the time
from a ``textDocument/didChange`` to the ``publishDiagnostics`` for that version, median over N edits,
for a markdown file (reference.md) and an RST page (multi_gpu.rst), each edit changing the text (so the
edited file is parsed again, the rest comes from the cache). Measured with the server's default
debounce and with ``--debounce 0`` (the check alone), and compared with a warm ``cli.py check`` run as a
fresh process in the same run (median of N), both as it replays an unchanged tree and after the same edit
(on a copy of the tree): the like-for-like baseline, since an edit always changes an input. Targets:
median under 0.3 s, and at most the warm check after the edit.
Then a burst of typing (edits 50 ms apart): how many checks were published for it, and the time from
the last edit to its diagnostics.

The cache goes to a temporary folder (never the user's home); the tree is only read.

    uv run --frozen python benchmarks/bench_lsp.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "tools" / "skills" / "cli.py"
FILES = (
    ("skills/user/train-multi-gpu/reference.md", "markdown"),
    ("docs/source/features/multi_gpu.rst", "restructuredtext"),
)
DEADLINE_S = 60.0
DEFAULT_DEBOUNCE = "0.1"  # cli.py lsp's default (shown in its --help)
BURST, KEYSTROKE_S = 10, 0.05  # a burst of typing: 10 edits, 50 ms apart


class Session:
    """A server on stdio and the arrival time of each (uri, version) it publishes."""

    def __init__(self) -> None:
        self.client = LanguageClient("bench-lsp", "1")
        self.arrived: dict[tuple[str, int | None], float] = {}
        self.event = asyncio.Event()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def publish(params: types.PublishDiagnosticsParams) -> None:
            self.arrived.setdefault((params.uri, params.version), time.perf_counter())
            self.event.set()

    async def wait(self, uri: str, version: int | None) -> float:
        async with asyncio.timeout(DEADLINE_S):
            while (uri, version) not in self.arrived:
                self.event.clear()
                await self.event.wait()
        return self.arrived[(uri, version)]


async def latencies(debounce: str, repeat: int, env: dict[str, str]) -> dict[str, list[float]]:
    s = Session()
    await s.client.start_io(sys.executable, str(CLI), "lsp", "--debounce", debounce, env=env)
    try:
        await s.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(), root_uri=REPO.as_uri(), process_id=os.getpid()
            )
        )
        s.client.initialized(types.InitializedParams())
        out: dict[str, list[float]] = {}
        for rel, language in FILES:
            uri = (REPO / rel).as_uri()
            text = (REPO / rel).read_text(encoding="utf-8")
            s.client.text_document_did_open(
                types.DidOpenTextDocumentParams(
                    types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
                )
            )
            await s.wait(uri, 1)
            times = []
            for version in range(2, repeat + 2):
                edited = text + "\n" * (version % 2)  # a new text each time: this file is parsed again
                t0 = time.perf_counter()
                s.client.text_document_did_change(
                    types.DidChangeTextDocumentParams(
                        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                        content_changes=[types.TextDocumentContentChangeWholeDocument(text=edited)],
                    )
                )
                times.append(await s.wait(uri, version) - t0)
            out[rel] = times
            # typing: BURST edits KEYSTROKE_S apart; checks published meanwhile, and the last one's latency
            first = version + 1
            for version in range(first, first + BURST):
                s.client.text_document_did_change(
                    types.DidChangeTextDocumentParams(
                        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text + " " * version)],
                    )
                )
                t0 = time.perf_counter()
                await asyncio.sleep(KEYSTROKE_S)
            await s.wait(uri, version)
            out[f"burst:{rel}"] = [
                s.arrived[(uri, version)] - t0,
                sum(1 for (u, v) in s.arrived if u == uri and first <= v <= version),
            ]
            s.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))
            await s.wait(uri, None)
        await s.client.shutdown_async(None)
        s.client.exit(None)
    finally:
        await s.client.stop()
    return out


def warm_check(repeat: int, env: dict[str, str]) -> list[float]:
    cmd = [sys.executable, str(CLI), "check", "--root", str(REPO)]
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)  # fill
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        times.append(time.perf_counter() - t0)
    return times


#: what a copy of the tree needs for the checker to see what it sees here
TREE = ("skills", "docs", "scripts", "src", "tests", "tools", ".agents", ".claude", "pyproject.toml", "README.md")


def edited_check(repeat: int, env: dict[str, str], tmp: Path) -> dict[str, list[float]]:
    """A warm ``cli.py check`` after one file changed (the like-for-like baseline for an edit: a check of an
    unchanged tree replays its last report, which an edit never can), on a copy of the tree."""
    copy = tmp / "tree"
    for name in TREE:
        src = REPO / name
        if src.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).symlink_to(src.readlink())
        elif src.is_dir():
            shutil.copytree(src, copy / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "_build"))
        elif src.exists():
            shutil.copy2(src, copy / name)
    cmd = [sys.executable, str(CLI), "check", "--root", str(copy)]
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)  # fill
    out: dict[str, list[float]] = {}
    for rel, _ in FILES:
        path = copy / rel
        text = path.read_text(encoding="utf-8")
        times = []
        for version in range(1, repeat + 1):
            path.write_text(text + "\n" * (version % 2), encoding="utf-8")
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
            times.append(time.perf_counter() - t0)
        path.write_text(text, encoding="utf-8")
        out[rel] = times
    return out


def in_process(repeat: int) -> dict[str, list[float]]:
    """The check alone, in this process, as the server runs it (overlay, a kept parse cache): the floor
    under the server's latency; the rest is the protocol, the scheduling and the conversion."""
    sys.path.insert(0, str(CLI.parent))
    from skills_check.caches.parse import ParseCache
    from skills_check.loader import load_project
    from skills_check.runner import load_rules, run_rules

    rules = load_rules()
    cache = ParseCache(REPO)
    out: dict[str, list[float]] = {}
    for rel, _ in FILES:
        text = (REPO / rel).read_text(encoding="utf-8")
        times = []
        for version in range(1, repeat + 2):
            t0 = time.perf_counter()
            run_rules(load_project(REPO, None, overlay={rel: text + "\n" * (version % 2)}, cache=cache), rules)
            times.append(time.perf_counter() - t0)
        out[rel] = times[1:]  # the first fills the cache
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="edits per file and check runs (default 15)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench_lsp_") as tmp:
        env = dict(os.environ, SKILLS_CHECK_CACHE_DIR=str(Path(tmp) / "cache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        check = statistics.median(warm_check(args.repeat, env))
        print(f"warm `cli.py check` (fresh process, median of {args.repeat}): {check:.3f} s")
        after_edit = {rel: statistics.median(times) for rel, times in edited_check(args.repeat, env, Path(tmp)).items()}
        for rel, med in after_edit.items():
            print(
                f"warm `cli.py check` after an edit to {Path(rel).name} (fresh process, on a copy): median {med:.3f} s"
            )
        os.environ["SKILLS_CHECK_CACHE_DIR"] = env["SKILLS_CHECK_CACHE_DIR"]
        for rel, times in in_process(args.repeat).items():
            med = statistics.median(times)
            print(
                f"the check alone (in process, overlay + kept cache), {Path(rel).name}: median {med:.3f} s; "
                f"{med / check:.2f}x the warm check"
            )
        for debounce in (DEFAULT_DEBOUNCE, "0"):
            runs = asyncio.run(latencies(debounce, args.repeat, env))
            for rel, times in runs.items():
                if rel.startswith("burst:"):
                    print(
                        f"  a burst of {BURST} edits {KEYSTROKE_S * 1000:.0f} ms apart in {Path(rel).name}: "
                        f"{int(times[1])} publish(es) for its versions, the last {times[0]:.3f} s after the last "
                        "edit"
                    )
                    continue
                med = statistics.median(times)
                print(
                    f"didChange -> publishDiagnostics, --debounce {debounce}, {Path(rel).name}: median {med:.3f} s "
                    f"(min {min(times):.3f}, max {max(times):.3f}); {med / check:.2f}x the warm check, "
                    f"{med / after_edit[rel]:.2f}x the warm check after the same edit"
                    f"{'' if med < 0.3 else '  [over the 0.3 s target]'}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
