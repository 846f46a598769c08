"""``cli.py lsp``: the checker as a Language Server Protocol server on stdio (pygls).

One code path with ``check``: every check is ``load_project`` (with the editor's unsaved buffers as an
overlay over the disk, under the same guards and through the parse cache, kept decoded in memory: an edit
parses the edited file, an RST page by its changed sections) then the check session's run (session.py:
the rules its settings choose, then the suppressions). Its findings go to every
file of the tree that has some, so drift caused by an edit in one file shows in the file that drifted,
with a related location at the truth; after a check, only the files whose diagnostics changed are sent
(and the open document whose version moved). A session's first diagnostics may come from the findings the
last one stored for an unchanged tree (lsp/replay.py), before its own first check. Code actions carry the text edits
``check --fix`` applies; hover gives a finding's ``explain`` text, or the rules a frontmatter key answers to;
completion offers frontmatter keys and values, rule codes in suppressions and tools' flags (complete.py).

Checks run one at a time in a worker thread, and requests made during one share the next: on open and
save at once; on change at once after a quiet spell, and during a burst of edits once it pauses
(``--debounce``). However fast the edits come, at most one check runs and one waits. A check that fails
is logged to the client and the server goes on; a request that fails gets an error response (pygls).
Only the workspace root is read; documents outside it get nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import PositionCodec

from ..caches.parse import digest
from ..inputs import overlaid, read_text
from ..loader import SetupError
from ..model import Finding, Project
from ..rules.registry import Rule
from ..runner import load_rules
from ..session import check_buffers
from . import convert as conv
from . import queries
from .memo import MemoParseCache
from .replay import Recorder, buffers_match_disk, recall

NAME = "skills-check"
VERSION = "0.1.0"
DEBOUNCE_S = 0.1  # quiet time after the last keystroke before a check (open and save check at once)
# Files whose change on disk can change the findings: skills and docs, scripts whose argparse is read, the
# configuration and what decides discovery (.gitignore). Folders appear and vanish with their files.
WATCHED = ("**/*.md", "**/*.rst", "**/*.py", "**/*.json", "**/pyproject.toml", "**/.gitignore", "**/conf.py")
CONFIG_ERROR_RE = re.compile(r"^pyproject\.toml:(?:(\d+):)?\s*(.*)$", re.DOTALL)
TOML_AT_RE = re.compile(r"\(at line (\d+), column \d+\)")


def config_error_at(message: str) -> tuple[int, str] | None:
    """(line, message) of a setup error that is about pyproject.toml (None for other setup errors)."""
    m = CONFIG_ERROR_RE.match(message)
    if m is None:
        return None
    at = TOML_AT_RE.search(m.group(2))
    line = int(m.group(1) or (at.group(1) if at else 1))
    return line, m.group(2)


@dataclass
class Snapshot:
    """The open documents inside the root at one moment: their text and version, by path."""

    texts: dict[str, str] = field(default_factory=dict)
    versions: dict[str, int | None] = field(default_factory=dict)


@dataclass
class Result:
    """One check: the project as read, its findings, and what was published from it."""

    snapshot: Snapshot
    project: Project
    findings: list[Finding]
    diagnostics: dict[str, list[types.Diagnostic]]  # by path, every path with findings
    pairs: dict[str, list[tuple[Finding, types.Diagnostic]]]  # the same, with the findings
    lines_of: Callable[[str], list[str] | None]  # a file's lines as this check read them


class CheckerServer(LanguageServer):
    """The session: the root, the rules, the last check, and the debounce timer."""

    def __init__(self, root: Path | None = None, debounce: float = DEBOUNCE_S) -> None:
        super().__init__(NAME, VERSION)
        self.fixed_root = root
        self.root: Path | None = None
        self.debounce = debounce
        self.rules: list[Rule] = []
        self.last: Result | None = None
        # what each file's last publishDiagnostics said: (the document version, its diagnostics); a file is
        # published again only when that changes (a file that became clean gets one empty list, then none)
        self.published: dict[str, tuple[int | None, list[types.Diagnostic]]] = {}
        self.lines_kept: dict[str, tuple[object, list[str] | None]] = {}  # a file's lines by what they were read from
        self.waiting: list[asyncio.Future[Result | None]] = []  # asked for the next check
        self.runner: asyncio.Task[None] | None = None  # the task running checks while some are asked for
        self.timer: asyncio.TimerHandle | None = None
        self.last_edit = float("-inf")  # event-loop time of the last didChange
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="skills-check")
        self.cache: MemoParseCache | None = None  # kept across checks (used by the worker only); saved at shutdown
        self.sent = 0  # publishDiagnostics notifications sent (what the benchmark counts)
        self.preparing: list[str] = []  # RST pages opened, to parse by sections once the checks are done
        self.closing = False  # shutdown was asked: no more checks
        self.shown: str | None = None  # the error last shown to the user (not shown again while it lasts)
        self.recorder: Recorder | None = None  # stores the findings for the next session's first diagnostics
        self.replayed = False  # the last session's findings were offered (once, before the first check)

    # -- the session ----------------------------------------------------------------------------------

    def start(self, params: types.InitializeParams) -> None:
        """The root: ``--root``, else the editor's workspace folder. An editor that names none (Neovim in a
        folder without its ``root_markers``) gets the root of the first document it opens (``root_of``), never
        the server's working folder, which ``uv run --directory`` makes the checker's checkout."""
        self.rules = load_rules()
        root = self.fixed_root
        if root is None:
            uri = params.root_uri or (params.workspace_folders[0].uri if params.workspace_folders else None)
            fs = to_fs_path(uri) if uri else (params.root_path or None)
            if not fs:
                return  # found at the first didOpen
            root = Path(fs)
        self.set_root(root)

    def set_root(self, root: Path) -> None:
        if not root.is_dir():
            raise SetupError(
                f"{root}: the workspace root is not a folder: open a folder in the editor, or start "
                "the server with --root DIR"
            )
        self.root = root.resolve()
        self.cache = MemoParseCache(self.root)
        self.recorder = Recorder(self.root)

    def opened(self, uri: str) -> None:
        """A document was opened: without a root yet, the tree it belongs to becomes the root."""
        if self.root is None and uri.startswith("file:"):
            path = to_fs_path(uri)
            if path:
                self.set_root(root_of(Path(path)))
        rel = conv.rel_path(self.root, uri) if self.root else None
        if rel is not None and rel.endswith(".rst"):
            self.preparing.append(uri)
        self.schedule(0)

    async def watch_files(self) -> None:
        """Ask the editor to report files changed on disk (``git pull``, a generator), where it can register
        watchers dynamically: each report re-checks the tree (``workspace/didChangeWatchedFiles``)."""
        workspace = self.client_capabilities.workspace if self.client_capabilities else None
        watched = workspace.did_change_watched_files if workspace else None
        if not (watched and watched.dynamic_registration):  # said once: edits still check, a pull does not
            self.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Info,
                    message=f"{NAME}: this editor does not let the server watch files (no dynamic registration of "
                    "workspace/didChangeWatchedFiles), so files changed on disk are checked again only when a "
                    "document is opened, edited or saved; tools/skills/LSP.md says what your editor needs",
                )
            )
            return
        watchers = [types.FileSystemWatcher(glob_pattern=g) for g in WATCHED]
        try:
            await self.client_register_capability_async(
                types.RegistrationParams(
                    registrations=[
                        types.Registration(
                            id=f"{NAME}-watched-files",
                            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
                        )
                    ]
                )
            )
        except Exception as exc:  # the editor refused: checks still run on open, change and save
            self.window_log_message(
                types.LogMessageParams(
                    type=types.MessageType.Warning, message=f"{NAME}: file watchers not registered: {exc}"
                )
            )

    def codec(self) -> PositionCodec:
        return self.workspace.position_codec

    def snapshot(self) -> Snapshot:
        snap = Snapshot()
        for doc in list(self.workspace.text_documents.values()):
            rel = conv.rel_path(self.root, doc.uri) if self.root else None
            if rel is not None:
                snap.texts[rel] = doc.source
                snap.versions[rel] = doc.version
        return snap

    # -- checking (in the worker thread) -----------------------------------------------------------------

    def check(self, snap: Snapshot) -> Result:
        """``check`` on the root with the open documents' text: findings and their diagnostics."""
        root = self.root
        assert root is not None and self.recorder is not None
        stored = self.recorder.start()  # before the check: an input changed while it ran is not stored
        project, findings = check_buffers(root, self.rules, snap.texts, self.cache)
        self.recorder.store(stored, project, findings, snap.texts)
        codec = self.codec()
        cache: dict[str, list[str] | None] = {}

        def lines_of(path: str) -> list[str] | None:
            if path not in cache:
                cache[path] = self.lines_read(project, snap, path)
            return cache[path]

        pairs: dict[str, list[tuple[Finding, types.Diagnostic]]] = {}
        for f in findings:  # every finding, on its path (a folder, a missing file: at its line, text unread)
            pairs.setdefault(f.loc.path, []).append((f, conv.diagnostic(root, f, lines_of, codec)))
        diagnostics = {path: [d for _, d in items] for path, items in pairs.items()}
        return Result(snap, project, findings, diagnostics, pairs, lines_of)

    def lines_read(self, project: Project, snap: Snapshot, path: str) -> list[str] | None:
        """A file's lines as this check sees them (None: not a file of the tree), read again only when the
        open document's text or the file on disk (its size, time and inode) changed since the last read."""
        assert self.root is not None
        if not self.is_file(project, snap, path):
            return None
        stamp: object = None
        if path in snap.texts:
            stamp = ("open", digest(snap.texts[path]))
        else:
            try:
                st = os.stat(self.root / path)
                stamp = ("disk", st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                stamp = None
        kept = self.lines_kept.get(path)
        if stamp is not None and kept is not None and kept[0] == stamp:
            return kept[1]
        with overlaid(snap.texts):
            text, _ = read_text(self.root, path)
        lines = conv.split_lines(text) if text is not None else None
        if stamp is not None:
            self.lines_kept[path] = (stamp, lines)
        return lines

    @staticmethod
    def is_file(project: Project, snap: Snapshot, path: str) -> bool:
        """A path whose text may be read for ranges: a file of the tree, or an open document."""
        return path in project.files or path in snap.texts

    # -- scheduling (on the event loop) -----------------------------------------------------------------

    def schedule(self, delay: float) -> None:
        """Ask for a check after ``delay`` seconds of quiet (a later call restarts the wait)."""
        if self.timer is not None:
            self.timer.cancel()

        def fire() -> None:
            self.timer = None
            self.request()

        self.timer = asyncio.get_running_loop().call_later(delay, fire)

    def edited(self) -> None:
        """An edit: the first after a quiet spell is checked at once; the rest of a burst once it pauses for
        ``debounce`` seconds."""
        now = asyncio.get_running_loop().time()
        quiet = now - self.last_edit >= self.debounce
        self.last_edit = now
        self.schedule(0 if quiet and self.timer is None else self.debounce)

    def request(self) -> asyncio.Future[Result | None]:
        """A check of the documents as they are now; the future gets its result (None when it failed).

        One check runs at a time, and the requests made while it runs share the next one: however fast the
        edits come, at most one check runs and one waits."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result | None] = loop.create_future()
        self.waiting.append(future)
        if self.runner is None or self.runner.done():
            self.runner = loop.create_task(self.checks())
        return future

    async def checks(self) -> None:
        """Run checks while some are asked for; publish each result unless a newer check is already due."""
        if not self.replayed and self.last is None:
            self.replayed = True
            await self.replay()
        while self.waiting and not self.closing:
            waiting, self.waiting = self.waiting, []
            result = await self.check_now()
            if result is not None and not self.waiting:
                self.publish(result)
                self.no_skill(result)
            for future in waiting:
                if not future.done():
                    future.set_result(result)
            if not self.waiting:
                await self.prepare()
        for future in self.waiting:  # shutting down
            if not future.done():
                future.set_result(None)
        self.waiting = []

    async def check_now(self) -> Result | None:
        """One check in the worker thread; a failure is told to the user and gives None. A pyproject.toml
        that does not parse, or whose [tool.skills-check] is wrong, is a diagnostic on that file instead."""
        if self.root is None:  # no workspace folder and no document yet
            return None
        snap = self.snapshot()
        try:
            result = await asyncio.get_running_loop().run_in_executor(self.worker, self.check, snap)
        except SetupError as exc:
            at = config_error_at(str(exc))
            if at is None:
                self.tell(types.MessageType.Error, f"{NAME}: {exc}")
            else:
                self.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=f"{NAME}: {exc}"))
                self.publish_config_error(*at, snap)
            return None
        except Exception as exc:  # a checker bug must not end the session: say so, keep serving
            self.tell(
                types.MessageType.Error,
                f"{NAME}: the check failed: {type(exc).__name__}: {exc}",
                "".join(traceback.format_exception(exc)),
            )
            return None
        if result.project.skills:
            self.shown = None
        return result

    async def replay(self) -> None:
        """Before the session's first check: the findings the last session stored, published when the tree is
        as that check read it (lsp/replay.py); the check that follows sends only what differs."""
        if self.root is None:
            return
        root, snap, codec = self.root, self.snapshot(), self.codec()
        known = {r.code for r in self.rules}

        def diagnostics() -> dict[str, list[types.Diagnostic]] | None:
            kept: dict[str, conv.Lines | None] = {}

            def lines_of(path: str) -> conv.Lines | None:
                if path not in kept:
                    text = snap.texts.get(path)
                    if text is None:
                        text, _ = read_text(root, path)
                    kept[path] = conv.split_lines(text) if text is not None else None
                return kept[path]

            findings = recall(root, snap.texts, known, lines_of)  # every entry checked as a fresh one, or none
            if findings is None:
                return None
            out: dict[str, list[types.Diagnostic]] = {}
            for f in findings:
                out.setdefault(f.loc.path, []).append(conv.diagnostic(root, f, lines_of, codec))
            return out

        loop = asyncio.get_running_loop()
        try:
            found = await loop.run_in_executor(self.worker, diagnostics)
            if found is None:
                return
            now = self.snapshot()  # documents opened meanwhile (the editor's first) join when they hold their files
            opened = {path: text for path, text in now.texts.items() if snap.texts.get(path) != text}
            if opened and not await loop.run_in_executor(self.worker, buffers_match_disk, root, opened):
                return  # an unsaved buffer is not the tree those findings are of: wait for the check
            snap = now
        except Exception:  # only a head start: the check that follows says what is wrong
            logging.getLogger(__name__).debug("no replay of the last findings", exc_info=True)
            return
        self.publish_diagnostics(snap, found)

    async def prepare(self) -> None:
        """Parse the RST pages opened since by sections (the worker is idle), so their first edit is quick."""
        while self.preparing and not self.waiting and not self.closing and self.cache is not None:
            uri = self.preparing.pop(0)
            doc = self.workspace.text_documents.get(uri)
            rel = conv.rel_path(self.root, uri) if self.root else None
            if doc is not None and rel is not None:
                await asyncio.get_running_loop().run_in_executor(self.worker, self.cache.prepare, rel, doc.source)

    def publish_config_error(self, line: int, message: str, snap: Snapshot) -> None:
        """The configuration error as the one diagnostic of pyproject.toml (cleared by the next good check)."""
        assert self.root is not None
        diag = types.Diagnostic(
            range=types.Range(types.Position(max(0, line - 1), 0), types.Position(max(0, line - 1), 0)),
            message=message,
            severity=types.DiagnosticSeverity.Error,
            source=NAME,
        )
        version = snap.versions.get("pyproject.toml")
        if self.published.get("pyproject.toml") != (version, [diag]):
            self.send("pyproject.toml", [diag], version)
        self.published["pyproject.toml"] = (version, [diag])

    def no_skill(self, result: Result) -> None:
        """A workspace with no skill says so once (a message), rather than showing nothing."""
        from ..discover import no_skill_line

        line = no_skill_line(result.project).removeprefix("error: ")
        if not result.project.skills and self.shown != line:
            self.shown = line
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"{NAME}: {line}"))
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=f"{NAME}: {line}"))

    def tell(self, kind: types.MessageType, message: str, detail: str = "") -> None:
        """Log a message; an error is also shown, once until the checks succeed again or it changes (a
        broken pyproject.toml being edited must not pop up at every keystroke)."""
        if kind == types.MessageType.Error and message != self.shown:
            self.shown = message
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))
        self.window_log_message(types.LogMessageParams(type=kind, message=f"{message}\n{detail}".rstrip()))

    def publish(self, result: Result) -> None:
        """Diagnostics for the files whose diagnostics changed since they were last published, an empty list
        for a file that became clean, and the current list for an open document whose version moved (the
        editor learns its new version is checked; a document closed since gets its disk's, version None).
        Nothing for a file whose diagnostics stayed the same: an edit sends one message per file it changed."""
        self.last = result
        self.publish_diagnostics(result.snapshot, result.diagnostics)

    def publish_diagnostics(self, snap: Snapshot, diagnostics: dict[str, list[types.Diagnostic]]) -> None:
        """``publish``'s sending: each file whose (version, diagnostics) differ from what it last got."""
        now = {path: (snap.versions.get(path), diags) for path, diags in diagnostics.items()}
        for path in snap.texts:
            now.setdefault(path, (snap.versions.get(path), []))
        for path in sorted(set(now) | set(self.published)):
            version, diags = now.get(path, (None, []))
            before = self.published.get(path)
            if before is None and not diags and path not in snap.texts:
                continue
            if before == (version, diags):
                continue
            self.send(path, diags, version)
        self.published = {path: entry for path, entry in now.items() if entry[1] or path in snap.texts}

    def send(self, path: str, diagnostics: list[types.Diagnostic], version: int | None) -> None:
        assert self.root is not None
        self.sent += 1
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=conv.uri_of(self.root, path), diagnostics=diagnostics, version=version)
        )

    async def current(self) -> Result | None:
        """A result for the documents as they are now: the last one, or a fresh check when they changed."""
        if self.last is not None and self.last.snapshot.versions == self.snapshot().versions:
            return self.last
        return await self.request()

    # -- requests (queries.py answers them; the methods are the seam a test replaces) -----------------------

    async def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        return await queries.code_actions(self, params)

    async def hover(self, params: types.HoverParams) -> types.Hover | None:
        return await queries.hover(self, params)

    async def completion(self, params: types.CompletionParams) -> types.CompletionList | None:
        return await queries.completion(self, params)


ROOT_MARKERS = ("pyproject.toml", ".git")


def root_of(path: Path) -> Path:
    """The tree a document belongs to: the nearest folder above it with ``pyproject.toml`` or ``.git``; else the
    highest folder above it holding a ``SKILL.md`` (a lone skill folder, from any of its files); else its own
    folder."""
    folders = list(path.parents)
    for folder in folders:
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
    skills = [folder for folder in folders if (folder / "SKILL.md").is_file()]
    return skills[-1] if skills else path.parent
