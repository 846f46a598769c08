"""The language server checks incrementally: an edit sends diagnostics only for the files whose diagnostics
it changed (over stdio, a real client), parses only the edited file again (in process, counted), and an
RST page edited is parsed by sections into the same ``RstDoc`` as parsing it whole."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from mgpu_testing import PYTHON, REPO
from mgpu_testing.checker import CLI, LAUNCHER, MGPU, REF, make_tree
from pygls.workspace import PositionCodec
from pytest_lsp import ClientServerConfig, LanguageClient
from skills_check.caches.codec import encode
from skills_check.lsp import replay
from skills_check.lsp import server as lsp
from skills_check.lsp.rstchunks import ChunkedRst, cut
from skills_check.model import Fix, Loc, TextEdit
from skills_check.parsers.rst import parse_rst
from test_lsp import DRIFT, Editor, _client, _drifted, _initialize, published

ASYNC = pytest.mark.asyncio(loop_scope="function")
DEADLINE_S = 30.0
PAGE = REPO / "docs" / "source" / "features" / "multi_gpu.rst"


# -- messages: one per file whose diagnostics changed -----------------------------------------------------------


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[PYTHON, str(CLI), "lsp"], client_factory=_client))
async def fresh(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


def _with_findings(root: Path, n: int) -> list[str]:
    """``n`` markdown files of the tree given a broken link each (a finding that no edit here touches)."""
    paths = []
    for i in range(n):
        rel = f"skills/user/demo/notes-{i}.md"
        (root / rel).write_text(f"# Notes {i}\n\nSee [missing](missing-{i}.md).\n", encoding="utf-8")
        paths.append(rel)
    return paths


async def _settled(client: LanguageClient, uri: str) -> None:
    """Every notification sent before now has arrived (a request's answer comes after them on stdio)."""
    async with asyncio.timeout(DEADLINE_S):
        await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(0, 0))
        )


@ASYNC
async def test_an_edit_sends_diagnostics_only_for_the_files_it_changed(fresh: LanguageClient, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "repo")
    noted = _with_findings(root, 3)
    await _initialize(fresh, root)
    ref = Editor(fresh, root, REF, "markdown")
    await ref.open(ref.text)
    for rel in noted:  # the first check published each file with findings
        assert (await published(fresh, (root / rel).as_uri(), None)).diagnostics
    await _settled(fresh, ref.uri)
    since = len(fresh.published)  # type: ignore[attr-defined]
    assert [d.code for d in await ref.change(_drifted(root, REF, DRIFT))] == ["DR301"]
    await _settled(fresh, ref.uri)
    assert [p.uri for p in fresh.published[since:]] == [ref.uri]  # type: ignore[attr-defined]  # not the 3 others
    since = len(fresh.published)  # type: ignore[attr-defined]
    assert [d.code for d in await ref.change(_drifted(root, REF, DRIFT) + " ")] == ["DR301"]  # same findings
    await _settled(fresh, ref.uri)
    assert [p.uri for p in fresh.published[since:]] == [ref.uri]  # type: ignore[attr-defined]  # its new version only
    # an edit to the truth: the page that drifted (not open) gets its findings, the page's clean twin nothing
    launcher = Editor(fresh, root, LAUNCHER, "python")
    since = len(fresh.published)  # type: ignore[attr-defined]
    await launcher.open(launcher.text.replace('"--log_dir"', '"--logs_dir"'))
    page = (await published(fresh, (root / MGPU).as_uri(), None, since)).diagnostics
    assert sorted(d.code for d in page) == ["DR201", "DR202"]
    await _settled(fresh, ref.uri)
    assert sorted(p.uri for p in fresh.published[since:]) == sorted([launcher.uri, (root / MGPU).as_uri()])  # type: ignore[attr-defined]
    since = len(fresh.published)  # type: ignore[attr-defined]
    await launcher.close()  # back to the disk: the page is clean again, once
    await _settled(fresh, ref.uri)
    cleared = [p for p in fresh.published[since:] if p.uri == (root / MGPU).as_uri()]  # type: ignore[attr-defined]
    assert [list(p.diagnostics) for p in cleared] == [[]]
    assert {p.uri for p in fresh.published[since:]} == {launcher.uri, (root / MGPU).as_uri()}  # type: ignore[attr-defined]


# -- parses: only the edited file -------------------------------------------------------------------------------


def test_an_edit_parses_only_the_edited_file_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "repo")
    server = lsp.CheckerServer()
    server.codec = lambda: PositionCodec()  # type: ignore[method-assign]
    server.start(types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=root.as_uri()))
    cache = server.cache
    assert cache is not None
    first = server.check(lsp.Snapshot())
    parsed = cache.parsed
    assert parsed > 3  # the first check parsed the tree
    again = server.check(lsp.Snapshot())
    assert cache.parsed == parsed and again.findings == first.findings  # nothing changed: nothing parsed
    text = (root / REF).read_text(encoding="utf-8")
    edited = server.check(lsp.Snapshot({REF: _drifted(root, REF, DRIFT)}, {REF: 2}))
    assert cache.parsed == parsed + 1  # the edited file, and no other
    assert [f.code for f in edited.findings] == ["DR301"]
    server.check(lsp.Snapshot({REF: text}, {REF: 3}))
    assert cache.parsed == parsed + 2  # the edit undone: that file again (one text is kept per file)
    page = (root / MGPU).read_text(encoding="utf-8")
    server.check(lsp.Snapshot({MGPU: page + "\nA new paragraph.\n"}, {MGPU: 2}))
    assert cache.parsed == parsed + 2 + (cache.rst.parses == 0)  # an RST page: by sections where it can be


# -- RST by sections ----------------------------------------------------------------------------------------------


def _pages() -> list[Path]:
    found = sorted({*REPO.glob("docs/**/*.rst"), *(REPO / "tests" / "fixtures").glob("**/*.rst")})
    return [p for p in found if p.is_file()]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_an_rst_page_parsed_by_sections_is_the_page_parsed_whole(page: Path) -> None:
    text = page.read_text(encoding="utf-8", errors="replace")
    by_sections = ChunkedRst().parse("page.rst", text)
    assert by_sections is None or by_sections == parse_rst("page.rst", text)


def _edits(text: str) -> list[str]:
    """Texts an editor passes through: characters typed and deleted, lines added and removed, a title's
    underline changed, a section title and a label written twice."""
    lines = text.split("\n")
    n = len(lines)
    out = []
    for k, at in enumerate(range(3, n, max(1, n // 11))):  # (the first in the preamble: every section again)
        edited = list(lines)
        if k % 4 == 0:
            edited[at] += "x"
        elif k % 4 == 1:
            edited.insert(at, "")
        elif k % 4 == 2:
            del edited[at]
        else:
            edited[at] = edited[at][:-1]
        out.append("\n".join(edited))
    titles = [i for i in range(1, n) if lines[i].startswith("---") and lines[i - 1].strip()]
    underline = list(lines)
    underline[titles[2]] = "~" * len(underline[titles[2]])  # a second-level title made third-level
    twice = [*lines, "", lines[titles[1] - 1], lines[titles[1]], "", "Again.", ""]  # a section title written twice
    label = [*lines[: titles[3] - 1], ".. _twice:", "", *lines[titles[3] - 1 :], "", ".. _twice:", "", "Text."]
    return [*out, "\n".join(underline), "\n".join(twice), "\n".join(label), text]


def test_an_edited_rst_page_is_parsed_again_by_its_changed_sections_only() -> None:
    text = PAGE.read_text(encoding="utf-8")
    chunks = ChunkedRst()
    assert chunks.parse(PAGE.name, text) == parse_rst(PAGE.name, text)  # this page is parsed by sections
    whole = chunks.parses
    preamble = text.split("\n")[: cut(text)[1]]  # type: ignore[index]
    for edited in _edits(text):
        chunks.parse(PAGE.name, text)  # each edit from the page as it is on disk
        before = chunks.parses
        got = chunks.parse(PAGE.name, edited)
        assert got is None or got == parse_rst(PAGE.name, edited)
        same_length = edited.count("\n") == text.count("\n") and edited != text
        if got is not None and same_length and edited.split("\n")[: len(preamble)] == preamble:
            assert chunks.parses - before == 1, "a one-line edit parses its section again, no other"
    lines = text.split("\n")
    lines.insert(len(lines) // 2, "")  # a line added: the sections below move, and are not parsed again
    before = chunks.parses
    assert chunks.parse(PAGE.name, "\n".join(lines)) == parse_rst(PAGE.name, "\n".join(lines))
    assert chunks.parses - before <= 2 < whole


# -- configuration errors: a diagnostic on pyproject.toml, not a popup per keystroke ------------------------------


@ASYNC
async def test_an_unknown_profile_is_a_diagnostic_on_pyproject_toml_never_a_popup(
    fresh: LanguageClient, tmp_path: Path
) -> None:
    root = make_tree(tmp_path / "repo")
    await _initialize(fresh, root)
    pyproject = Editor(fresh, root, "pyproject.toml", "toml")
    original = pyproject.text
    profiles = next(line for line in original.splitlines() if line.startswith("profiles ="))
    at = original.splitlines().index(profiles)
    typed_names = ("spe", "spek", "spekk")
    typed = [original.replace(profiles, f'profiles = ["{typo}"]') for typo in typed_names]
    for k, text in enumerate(typed):  # keystrokes, each leaving an unknown profile
        (d,) = await (pyproject.change(text) if k else pyproject.open(text))
        assert d.range.start.line == at and d.severity == types.DiagnosticSeverity.Error
        assert d.message.startswith(f"[tool.skills-check] profiles: unknown profile `{typed_names[k]}`"), d.message
        assert "did you mean `spec`?" in d.message, d.message
    assert [m for m in fresh.messages if m.type == types.MessageType.Error] == []  # no popup, at any keystroke
    assert await pyproject.change(original) == []  # fixed: cleared


# -- a new session's first diagnostics: the last session's findings, while the tree is unchanged ----------------


def _aged(root: Path) -> None:
    """Every file and folder of the tree dated a minute back: the result cache stores nothing that changed
    within a clock tick of its check (a tree made by the test a moment ago would never be stored)."""
    old = time.time() - 60
    for path in [*root.rglob("*"), root]:
        os.utime(path, (old, old), follow_symlinks=False)


def _session(root: Path) -> lsp.CheckerServer:
    server = lsp.CheckerServer()
    server.codec = lambda: PositionCodec()  # type: ignore[method-assign]
    server.start(types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=root.as_uri()))
    return server


def test_the_next_session_starts_from_the_findings_of_an_unchanged_tree(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "repo")
    noted = _with_findings(root, 2)
    _aged(root)
    root = root.resolve()
    first = _session(root).check(lsp.Snapshot())
    assert [f for f in first.findings if "missing-0.md" in f.message]
    assert replay.recall(root, {}) == first.findings  # a new session, the tree as it was: the same findings
    text = (root / noted[0]).read_text(encoding="utf-8")
    assert replay.recall(root, {noted[0]: text + "edited\n"}) is None  # an unsaved buffer is not that tree
    (root / noted[0]).write_text("# Notes 0\n\nNothing missing here.\n", encoding="utf-8")
    assert replay.recall(root, {}) is None  # a file fixed on disk since: never its stale finding
    second = _session(root).check(lsp.Snapshot())  # that session's own check stores the new findings
    assert not [f for f in second.findings if "missing-0.md" in f.message]  # its broken link is gone
    _aged(root)
    third = _session(root).check(lsp.Snapshot())
    assert replay.recall(root, {}) == third.findings == second.findings


def test_stored_findings_of_another_shape_are_never_published(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "repo")
    _with_findings(root, 1)
    _aged(root)
    root = root.resolve()
    _session(root).check(lsp.Snapshot())
    assert replay.recall(root, {})
    (cache_file,) = (tmp_path / "cache").glob("*.results.json")
    data = json.loads(cache_file.read_text(encoding="utf-8"))
    for entry in data["entries"].values():  # a planted entry: valid JSON, the wrong shape for a finding
        entry["stdout"] = json.dumps([{"$": "Loc", "v": {"path": "x", "line": "one"}}])
    cache_file.write_text(json.dumps(data), encoding="utf-8")
    assert replay.recall(root, {}) is None


def _loc(f, **change: object):
    return dataclasses.replace(f, loc=dataclasses.replace(f.loc, **change))


#: stored findings no check of this tree could give, each a change of one real finding
UNCHECKED = {
    "an absolute path": lambda f: _loc(f, path="/etc/passwd"),
    "a path out of the root": lambda f: _loc(f, path="../../../etc/passwd"),
    "a path climbing out and back": lambda f: _loc(f, path=f"skills/../../repo/{f.loc.path}"),
    "a line past any file": lambda f: _loc(f, line=10**30),
    "a line past this file": lambda f: _loc(f, line=5, col=1),  # it has 4 (the last one empty)
    "a column before the line": lambda f: _loc(f, col=-5),
    "a column past the line": lambda f: _loc(f, col=500),
    "line 0": lambda f: _loc(f, line=0),
    "an unknown severity": lambda f: dataclasses.replace(f, severity="fatal"),
    "an unknown code": lambda f: dataclasses.replace(f, code="ZZ999"),
    "terminal escapes in the message": lambda f: dataclasses.replace(f, message="\x1b]0;owned\x07\x1b[31mred"),
    "a second line in the message": lambda f: dataclasses.replace(f, message=f.message + "\nmore"),
    "an empty message": lambda f: dataclasses.replace(f, message=""),
    "a message of a megabyte": lambda f: dataclasses.replace(f, message="x" * 2**20),
    "a truth outside the root": lambda f: dataclasses.replace(f, truth=Loc("/etc/shadow", 1, 1)),
    "a fix writing outside the root": lambda f: dataclasses.replace(
        f, fix=Fix("rewrite", (TextEdit("../outside.md", 1, 1, ("x",)),))
    ),
}


def test_stored_findings_a_fresh_check_could_not_give_drop_the_replay(tmp_path: Path, monkeypatch) -> None:
    """Each stored entry is checked as a fresh finding would be (inside the root, line and column in its file,
    known code and severity, one printable line); one that fails drops the whole replay."""
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "repo")
    _with_findings(root, 2)
    _aged(root)
    root = root.resolve()
    stored = _session(root).check(lsp.Snapshot()).findings
    (cache_file,) = (tmp_path / "cache").glob("*.results.json")
    data = json.loads(cache_file.read_text(encoding="utf-8"))

    def plant(findings: list) -> list | None:
        for entry in data["entries"].values():
            entry["stdout"] = json.dumps(encode(findings))
        cache_file.write_text(json.dumps(data), encoding="utf-8")
        return replay.recall(root, {})  # every rule code known, as in the server

    at = next(i for i, f in enumerate(stored) if "missing-1.md" in f.message)  # a link finding, on a 3-line file
    assert plant(list(stored)) == stored  # planted as they were: replayed
    for why, change in UNCHECKED.items():
        assert plant([*stored[:at], change(stored[at]), *stored[at + 1 :]]) is None, why
    assert plant(list(stored)) == stored  # and the tree's own findings again replayed
