"""The checker's language server (``cli.py lsp``), driven over stdio by a real LSP client (pytest-lsp):
diagnostics from the same findings as ``check``, cleared when the drift is edited away; code actions with
the edits ``check --fix`` applies; ``explain`` text on hover; a crash in a request answered with an error;
the demo transcript in tools/skills/LSP_DEMO.md generated here.

The server under test is a subprocess (the process is what is tested); one serves the module, on a copy
of the checker's base fixture tree, and each test opens, edits and closes its own documents. The editor
text is never saved: the server checks it as an overlay over the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.checker import BASE, CLI, LAUNCHER, MGPU, REF, SKILL, check, make_tree
from pygls.exceptions import JsonRpcException
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features
from skills_check import cli

DEMO_MD = REPO / "tools" / "skills" / "LSP_DEMO.md"
WRITE_DEMO = "LSP_DEMO_WRITE"  # set to 1 to rewrite LSP_DEMO.md from this run
DEADLINE_S = 30.0  # every wait for the server has this visible deadline
ASYNC = pytest.mark.asyncio(loop_scope="module")
DRIFT = ("--num_gpus 2 --dry_run", "--num_gpu 2 --dry_run")  # a flag the launcher does not have
NNODES = ("   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")  # a default drifted (fixable)


def _client() -> LanguageClient:
    """pytest-lsp's client, also keeping every publishDiagnostics in arrival order (with its version), and
    setting ``arrived`` on each of those and each window/showMessage and window/logMessage."""
    client = LanguageClient(converter_factory=default_converter)
    client.published: list[types.PublishDiagnosticsParams] = []  # type: ignore[misc]
    client.arrived = asyncio.Event()  # type: ignore[attr-defined]
    base_publish = DEFAULT_CLIENT_FEATURES[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]
    base_show = DEFAULT_CLIENT_FEATURES[types.WINDOW_SHOW_MESSAGE]
    base_log = DEFAULT_CLIENT_FEATURES[types.WINDOW_LOG_MESSAGE]

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        base_publish(client, params)
        client.published.append(params)  # type: ignore[attr-defined]
        client.arrived.set()  # type: ignore[attr-defined]

    def show(client: LanguageClient, params: types.ShowMessageParams) -> None:
        base_show(client, params)
        client.arrived.set()  # type: ignore[attr-defined]

    def log(client: LanguageClient, params: types.LogMessageParams) -> None:
        base_log(client, params)
        client.arrived.set()  # type: ignore[attr-defined]

    register_lsp_features(
        client,
        {
            **DEFAULT_CLIENT_FEATURES,
            types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish,
            types.WINDOW_SHOW_MESSAGE: show,
            types.WINDOW_LOG_MESSAGE: log,
        },
    )
    return client


async def until(client: LanguageClient, ready: Callable[[], bool]) -> None:
    """Wait (with the deadline) until ``ready()`` holds, re-testing after each notification."""
    async with asyncio.timeout(DEADLINE_S):
        while True:
            client.arrived.clear()  # type: ignore[attr-defined]
            if ready():
                return
            await client.arrived.wait()  # type: ignore[attr-defined]


FAULTY_SERVER = REPO / "tests" / "fixtures" / "lsp" / "faulty_server.py"  # the server with injected faults


def _config(*server: str) -> ClientServerConfig:
    return ClientServerConfig(server_command=[PYTHON, *(server or (str(CLI), "lsp"))], client_factory=_client)


async def _initialize(client: LanguageClient, root: Path) -> None:
    await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="repo")],
        )
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tree(tmp_path_factory.mktemp("lsp") / "repo")


@pytest_lsp.fixture(scope="module", config=_config())
async def client(lsp_client: LanguageClient, tree: Path):
    await _initialize(lsp_client, tree)
    yield
    await lsp_client.shutdown_session()


async def published(
    client: LanguageClient, uri: str, version: int | None, since: int = 0
) -> types.PublishDiagnosticsParams:
    """The first publishDiagnostics for ``uri`` at ``version`` received after the ``since``-th one."""
    async with asyncio.timeout(DEADLINE_S):
        while True:
            client.arrived.clear()  # type: ignore[attr-defined]
            for params in client.published[since:]:  # type: ignore[attr-defined]
                if params.uri == uri and params.version == version:
                    params.diagnostics = list(params.diagnostics)
                    return params
            await client.arrived.wait()  # type: ignore[attr-defined]


class Editor:
    """Open, change and close one document as an editor does (full-text changes), and wait for the
    diagnostics of each version."""

    def __init__(self, client: LanguageClient, root: Path, rel: str, language: str) -> None:
        self.client, self.root, self.rel, self.language = client, root, rel, language
        self.uri = (root / rel).as_uri()
        self.version = 0
        self.text = (root / rel).read_text(encoding="utf-8")

    async def open(self, text: str) -> list[types.Diagnostic]:
        self.version, self.text = 1, text
        since = len(self.client.published)  # type: ignore[attr-defined]
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=self.uri, language_id=self.language, version=1, text=text)
            )
        )
        return list((await published(self.client, self.uri, 1, since)).diagnostics)

    async def change(self, text: str) -> list[types.Diagnostic]:
        self.version += 1
        self.text = text
        since = len(self.client.published)  # type: ignore[attr-defined]
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        return list((await published(self.client, self.uri, self.version, since)).diagnostics)

    async def close(self) -> None:
        since = len(self.client.published)  # type: ignore[attr-defined]
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=self.uri))
        )
        await published(self.client, self.uri, None, since)  # back to the disk's text

    @contextlib.asynccontextmanager
    async def opened(self, text: str):
        diags = await self.open(text)
        try:
            yield diags
        finally:
            await self.close()


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """``text`` with LSP text edits applied as a client does (ASCII text: UTF-16 units are characters)."""
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)

    def offset(pos: types.Position) -> int:
        return starts[pos.line] + pos.character if pos.line < len(starts) else len(text)

    for e in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end) :]
    return text


def _drifted(root: Path, rel: str, old_new: tuple[str, str]) -> str:
    text = (root / rel).read_text(encoding="utf-8")
    assert old_new[0] in text, f"fixture text not found in {rel}: {old_new[0]!r}"
    return text.replace(*old_new, 1)


def _pos(text: str, needle: str) -> types.Position:
    before = text[: text.index(needle)]
    return types.Position(before.count("\n"), len(before) - (before.rfind("\n") + 1))


# -- diagnostics ------------------------------------------------------------------------------------------


@ASYNC
async def test_a_drifted_flag_is_marked_at_its_range_and_cleared_when_edited_away(
    client: LanguageClient, tree: Path
) -> None:
    ref = Editor(client, tree, REF, "markdown")
    clean = ref.text
    drifted = _drifted(tree, REF, DRIFT)
    async with ref.opened(drifted) as diags:
        assert [d.code for d in diags] == ["DR301"]
        d = diags[0]
        start = _pos(drifted, "--num_gpu 2")
        assert d.range == types.Range(start, types.Position(start.line, start.character + len("--num_gpu")))
        assert d.severity == types.DiagnosticSeverity.Error and d.source == "skills-check"
        assert "--num_gpu is not an option" in d.message and "did you mean --num_gpus" in d.message
        (related,) = d.related_information
        assert related.location.uri == (tree / LAUNCHER).as_uri()
        launcher = (tree / LAUNCHER).read_text(encoding="utf-8").split("\n")
        assert "ArgumentParser" in launcher[related.location.range.start.line]  # the truth: the parser
        assert await ref.change(clean) == []  # edited away: cleared
        assert [d.code for d in await ref.change(drifted)] == ["DR301"]  # and back
    assert (tree / REF).read_text(encoding="utf-8") == clean  # the editor's text was never written


@ASYNC
async def test_the_diagnostics_are_check_s_findings(client: LanguageClient, tree: Path, tmp_path: Path) -> None:
    """Every finding ``check`` reports on the tree with the edits saved, at the same place, and no other."""
    texts = {REF: _drifted(tree, REF, DRIFT), MGPU: _drifted(tree, MGPU, NNODES)}
    saved = make_tree(tmp_path / "saved")
    for rel, text in texts.items():
        (saved / rel).write_text(text, encoding="utf-8")
    _, findings = check(saved, "--no-cache")
    expected = sorted((f["path"], f["line"], f["col"], f["code"], f["message"]) for f in findings)
    assert {f["code"] for f in findings} == {"DR301", "DR204"}
    ref, mgpu = Editor(client, tree, REF, "markdown"), Editor(client, tree, MGPU, "restructuredtext")
    since = len(client.published)  # type: ignore[attr-defined]
    async with ref.opened(texts[REF]), mgpu.opened(texts[MGPU]):  # this check sees both documents' text
        got = []
        for ed in (ref, mgpu):
            for d in (await published(client, ed.uri, 1, since)).diagnostics:
                got.append((ed.rel, d.range.start.line + 1, d.range.start.character + 1, d.code, d.message))
        assert sorted(got) == expected


@ASYNC
async def test_an_edit_to_the_truth_shows_in_the_file_that_drifted(client: LanguageClient, tree: Path) -> None:
    """Renaming an option in the (unsaved) launcher: the options table in multi_gpu.rst, not open, gets
    the findings, related to the launcher; closing the launcher clears them."""
    launcher = Editor(client, tree, LAUNCHER, "python")
    page = (tree / MGPU).as_uri()
    since = len(client.published)  # type: ignore[attr-defined]
    assert await launcher.open(launcher.text.replace('"--log_dir"', '"--logs_dir"')) == []
    diags = list((await published(client, page, None, since)).diagnostics)
    assert sorted(d.code for d in diags) == ["DR201", "DR202"]
    stale = next(d for d in diags if d.code == "DR202")
    assert "--log_dir is in the options table" in stale.message
    (related,) = stale.related_information
    assert related.location.uri == launcher.uri
    since = len(client.published)  # type: ignore[attr-defined]
    await launcher.close()
    assert list((await published(client, page, None, since)).diagnostics) == []


@ASYNC
async def test_a_burst_of_edits_is_checked_once_it_settles(client: LanguageClient, tree: Path) -> None:
    """Ten edits sent at once: the last version's diagnostics come, from a handful of checks, not ten."""
    ref = Editor(client, tree, REF, "markdown")
    clean, drifted = ref.text, _drifted(tree, REF, DRIFT)
    async with ref.opened(clean):
        since = len(client.published)  # type: ignore[attr-defined]
        for version in range(2, 12):
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=ref.uri, version=version),
                    content_changes=[
                        types.TextDocumentContentChangeWholeDocument(
                            text=drifted if version == 11 else clean + " " * version
                        )
                    ],
                )
            )
        assert [d.code for d in (await published(client, ref.uri, 11, since)).diagnostics] == ["DR301"]
        versions = [p.version for p in client.published[since:] if p.uri == ref.uri]  # type: ignore[attr-defined]
        assert versions == sorted(versions) and len(versions) <= 3, versions
        ref.version = 11


@ASYNC
async def test_a_document_outside_the_root_gets_nothing(client: LanguageClient, tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "SKILL.md"
    outside.parent.mkdir()
    outside.write_text(_drifted(tree, REF, DRIFT), encoding="utf-8")
    since = len(client.published)  # type: ignore[attr-defined]
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(
                uri=outside.as_uri(), language_id="markdown", version=1, text=outside.read_text(encoding="utf-8")
            )
        )
    )
    ref = Editor(client, tree, REF, "markdown")
    async with ref.opened(ref.text) as diags:  # checks run in order: the outside one has been handled
        assert diags == []
        assert not [p for p in client.published[since:] if p.uri == outside.as_uri()]  # type: ignore[attr-defined]
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(outside.as_uri()), types.Position(0, 0))
        )
        assert hover is None
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(outside.as_uri())))


@ASYNC
async def test_unsaved_pyproject_settings_apply_and_a_broken_one_is_reported(
    client: LanguageClient, tree: Path
) -> None:
    """pyproject.toml is read from the editor too: a profile chosen there applies, a file that does not
    parse is a diagnostic on pyproject.toml at the line the TOML parser names (the check stops, as
    ``check`` exits 2; no popup), and fixing it clears that diagnostic and recovers."""
    pyproject = Editor(client, tree, "pyproject.toml", "toml")
    ref = Editor(client, tree, REF, "markdown")
    async with ref.opened(_drifted(tree, REF, DRIFT)) as diags:
        assert [d.code for d in diags] == ["DR301"]
        since = len(client.published)  # type: ignore[attr-defined]
        profiles = next(line for line in pyproject.text.splitlines() if line.startswith("profiles ="))
        spec_only = pyproject.text.replace(profiles, 'profiles = ["spec"]')
        assert spec_only != pyproject.text
        await pyproject.open(spec_only)
        assert (await published(client, ref.uri, 1, since)).diagnostics == []  # DR301 is in the drift profile
        logged = len(client.log_messages)
        shown = len(client.messages)
        since = len(client.published)  # type: ignore[attr-defined]
        pyproject.version += 1
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=pyproject.uri, version=pyproject.version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text="\n[tool\n")],
            )
        )
        broken = await published(client, pyproject.uri, pyproject.version, since)
        assert [(d.range.start.line, d.severity) for d in broken.diagnostics] == [(1, types.DiagnosticSeverity.Error)]
        assert "does not parse" in broken.diagnostics[0].message
        assert len(client.messages) == shown  # a diagnostic on the file, not a popup
        assert any("does not parse" in m.message for m in client.log_messages[logged:])
        since = len(client.published)  # type: ignore[attr-defined]
        assert await pyproject.change((tree / "pyproject.toml").read_text(encoding="utf-8")) == []
        assert [d.code for d in (await published(client, ref.uri, 1, since)).diagnostics] == ["DR301"]
        await pyproject.close()


# -- code actions ---------------------------------------------------------------------------------------------


@ASYNC
async def test_a_code_action_applies_the_edits_of_check_fix(client: LanguageClient, tree: Path, tmp_path: Path) -> None:
    mgpu = Editor(client, tree, MGPU, "restructuredtext")
    clean = mgpu.text
    drifted = _drifted(tree, MGPU, NNODES)
    saved = make_tree(tmp_path / "saved")
    (saved / MGPU).write_text(drifted, encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["check", "--root", str(saved), "--fix", "--no-cache"]) == 0
    by_fix = (saved / MGPU).read_text(encoding="utf-8")
    async with mgpu.opened(drifted) as diags:
        (d,) = diags
        assert d.code == "DR204"
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(mgpu.uri),
                range=d.range,
                context=types.CodeActionContext(diagnostics=[d]),
            )
        )
        (action,) = actions
        assert action.kind == types.CodeActionKind.QuickFix and "--nnodes: default -> 1" in action.title
        assert [x.code for x in action.diagnostics] == ["DR204"]
        assert set(action.edit.changes) == {mgpu.uri}
        fixed = apply_edits(drifted, action.edit.changes[mgpu.uri])
        assert fixed == by_fix == clean
        assert await mgpu.change(fixed) == []
        elsewhere = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(mgpu.uri),
                range=types.Range(types.Position(0, 0), types.Position(0, 1)),
                context=types.CodeActionContext(diagnostics=[]),
            )
        )
        assert list(elsewhere) == []


# -- hover ---------------------------------------------------------------------------------------------


def _explain(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["explain", code]) == 0
    return out.getvalue()


@ASYNC
async def test_hover_on_a_finding_gives_its_explain_text(client: LanguageClient, tree: Path) -> None:
    ref = Editor(client, tree, REF, "markdown")
    drifted = _drifted(tree, REF, DRIFT)
    async with ref.opened(drifted) as diags:
        (d,) = diags
        hover = await client.text_document_hover_async(
            types.HoverParams(
                types.TextDocumentIdentifier(ref.uri), types.Position(d.range.start.line, d.range.start.character + 3)
            )
        )
        assert hover.contents.kind == types.MarkupKind.Markdown
        explained = _explain("DR301").split("\n\n", 1)[1].strip()  # what `cli.py explain DR301` prints
        assert hover.contents.value.startswith("**DR301**") and explained in hover.contents.value
        assert (
            await client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(ref.uri), types.Position(0, 0))
            )
            is None
        )


@ASYNC
async def test_hover_on_a_frontmatter_key_gives_its_rules(client: LanguageClient, tree: Path) -> None:
    skill = Editor(client, tree, SKILL, "markdown")
    async with skill.opened(skill.text) as diags:
        assert diags == []
        at = _pos(skill.text, "name:")
        hover = await client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(skill.uri), types.Position(at.line, at.character + 2))
        )
        value = hover.contents.value
        assert value.startswith("Frontmatter `name`")
        assert all(code in value for code in ("SK101", "SK102", "SK103", "SK114"))
        assert "SK104" not in value  # a `description` rule
        value_pos = types.Position(at.line, at.character + len("name: ") + 2)  # on the value, not the key
        assert (
            await client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(skill.uri), value_pos)
            )
            is None
        )


# -- faults --------------------------------------------------------------------------------------------


@pytest_lsp.fixture(config=_config(str(FAULTY_SERVER)), loop_scope="module")
async def faulty(lsp_client: LanguageClient, tree: Path):
    """A server whose hover handler and whose every check raise."""
    await _initialize(lsp_client, tree)
    yield
    await lsp_client.shutdown_session()


@ASYNC
async def test_failures_are_reported_and_the_server_keeps_serving(faulty: LanguageClient, tree: Path) -> None:
    failed = lambda: [m for m in faulty.log_messages if "the check failed: InjectedFault" in m.message]
    await until(faulty, lambda: bool(failed()))  # the check after `initialized` failed (shown, then logged)
    errors = lambda: [m for m in faulty.messages if m.type == types.MessageType.Error]  # (and one note: no watching)
    (shown,) = errors()
    assert "the check failed: InjectedFault" in shown.message
    assert "Traceback" in failed()[0].message  # the log has the details
    uri = (tree / REF).as_uri()
    faulty.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="markdown", version=1, text=_drifted(tree, REF, DRIFT))
        )
    )
    await until(faulty, lambda: len(failed()) == 2)  # that check failed too: logged,
    assert len(errors()) == 1  # but the same error is not shown again (it would come before the log)
    with pytest.raises(JsonRpcException, match="injected fault"):  # a crash in a request: an error response
        await faulty.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(0, 0))
        )
    actions = await faulty.text_document_code_action_async(
        types.CodeActionParams(  # still serving
            text_document=types.TextDocumentIdentifier(uri),
            range=types.Range(types.Position(0, 0), types.Position(0, 1)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert actions is None  # no check result to act on
    assert faulty.published == []  # type: ignore[attr-defined]  # nothing half-done was published


# -- the documented command, on this repository --------------------------------------------------------------

UV = shutil.which("uv")
DOCUMENTED = [
    UV or "uv",
    "run",
    "--frozen",
    "--directory",
    str(REPO),
    "python",
    "tools/skills/cli.py",
    "lsp",
    "--root",
    ".",
]  # as in tools/skills/LSP.md, the checkout being this one


@pytest_lsp.fixture(config=ClientServerConfig(server_command=DOCUMENTED, client_factory=_client), loop_scope="module")
async def documented(lsp_client: LanguageClient):
    await _initialize(lsp_client, REPO)
    yield
    await lsp_client.shutdown_session()


@pytest.mark.skipif(UV is None, reason="uv is not on PATH (the documented command runs through it)")
@ASYNC
async def test_the_documented_command_serves_check_s_findings_on_this_repository(documented: LanguageClient) -> None:
    rel = "skills/user/train-multi-gpu/SKILL.md"
    _, findings = check(REPO, "--no-cache")
    expected = sorted((f["line"], f["col"], f["code"]) for f in findings if f["path"] == rel)
    skill = Editor(documented, REPO, rel, "markdown")
    async with skill.opened(skill.text) as diags:
        assert sorted((d.range.start.line + 1, d.range.start.character + 1, d.code) for d in diags) == expected
        at = _pos(skill.text, "description:")
        hover = await documented.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(skill.uri), types.Position(at.line, at.character + 1))
        )
        assert hover.contents.value.startswith("Frontmatter `description`") and "SK104" in hover.contents.value


# -- in process: the loader's overlay and the conversions ----------------------------------------------------


def test_the_overlay_is_read_in_place_of_the_disk_under_the_same_guards(tmp_path: Path) -> None:
    from skills_check import inputs
    from skills_check.loader import all_problems, load_project
    from skills_check.runner import load_rules, run_rules

    root = make_tree(tmp_path / "repo")
    outside = tmp_path / "outside.md"
    outside.write_text("# elsewhere\n", encoding="utf-8")
    (root / "skills/user/demo/leaves.md").symlink_to(outside)
    drifted = _drifted(root, REF, DRIFT)
    overlay = {
        REF: drifted,
        "skills/user/demo/leaves.md": "# planted\n",
        "skills/user/demo/evaluations.md": "x" * (inputs.MAX_MARKDOWN_BYTES + 1),
        "skills/developer/helper/SKILL.md": "---\nname: a\0b\n---\n",
    }
    project = load_project(root, None, overlay=overlay)
    found = {(f.code, f.loc.path) for f in run_rules(project, load_rules())}
    assert ("DR301", REF) in found  # the unsaved text is what was checked
    assert ("IN006", "skills/user/demo/leaves.md") in found  # a link leaving the root: never read, overlay or not
    assert ("IN004", "skills/user/demo/evaluations.md") in found  # the size cap holds for editor text
    assert ("IN002", "skills/developer/helper/SKILL.md") in found  # and so does the binary check
    assert (root / REF).read_text(encoding="utf-8") != drifted  # nothing written
    assert inputs.read_text(root, REF)[0] != drifted  # the overlay ends with the load
    assert not [f for f in all_problems(load_project(root)) if f.loc.path == REF]


def test_conversions_of_ranges_and_edits() -> None:
    from pygls.workspace import PositionCodec
    from skills_check import fix
    from skills_check.lsp import convert as conv
    from skills_check.model import Fix, Loc, TextEdit

    assert conv.token_span("run `--num_gpu 2`", 6) == (5, 14)  # the flag, without the closing backtick
    assert conv.token_span("     - ``2``", 8) == (7, 12)  # a quoted span whole
    assert conv.token_span("    parser = x", 1) == (0, 14)  # at a blank: the rest of the line's text
    assert conv.token_span("", 1) == (0, 0)
    utf16 = PositionCodec()
    rng = conv.loc_range(Loc("a.md", 1, 4), ["é😀 --x"], utf16)  # code points 3..6 -> UTF-16 units 4..7
    assert (rng.start.line, rng.start.character, rng.end.character) == (0, 4, 7)
    for text in ("a\nb\nc", "a\nb\nc\n", "a"):  # every single-line-range edit: the text `check --fix` writes
        lines = text.split("\n")
        for start in range(1, len(lines) + 2):
            for end in range(start - 1, len(lines) + 1):
                for new in ((), ("X",), ("X", "Y")):
                    edit = TextEdit("f", start, end, new)
                    by_fix = "\n".join(fix._apply(lines, [edit])[0])
                    edits = conv.text_edits(Fix("d", (edit,)), lambda p, lines=lines: lines, utf16, lambda p: "\n")["f"]
                    assert apply_edits(text, edits) == by_fix, (text, edit)
    lines = ["a", "b", "c"]
    crlf = conv.text_edits(Fix("d", (TextEdit("f", 1, 1, ("A",)),)), lambda p: lines, utf16, lambda p: "\r\n")
    assert crlf["f"][0].new_text == "A\r\n"
    both = Fix("d", (TextEdit("f", 3, 3, ("C",)), TextEdit("f", 1, 1, ())))  # one fix, two edits
    assert apply_edits("a\nb\nc", conv.text_edits(both, lambda p: lines, utf16, lambda p: "\n")["f"]) == "b\nC"
    assert conv.text_edits(both, lambda p: None, utf16, lambda p: "\n") == {}  # unreadable: no edits
    root = Path("/srv/repo")
    assert conv.rel_path(root, "file:///srv/repo/skills/a.md") == "skills/a.md"
    assert conv.rel_path(root, "file:///srv/other/a.md") is None
    assert conv.rel_path(root, "file:///srv/repo/../other/a.md") is None
    assert conv.rel_path(root, "untitled:Untitled-1") is None


def test_every_rule_fixture_s_findings_become_its_diagnostics(tmp_path: Path) -> None:
    """On each rule's fixture tree, the server's check (in process, no editor text) gives one diagnostic
    per finding of ``check --format json``, at its line and column (code points here), with its code,
    message and severity: on files, folders and missing paths alike. Each is one the replay of stored
    findings admits (the replay's checks are those a fresh finding passes)."""
    from mgpu_testing.checker import RULE_FIXTURES
    from pygls.workspace import PositionCodec
    from skills_check.lsp import replay
    from skills_check.lsp import server as lsp
    from test_checker_snapshots import CASES, build

    server = lsp.CheckerServer()
    server.codec = lambda: PositionCodec(types.PositionEncodingKind.Utf32)  # type: ignore[method-assign]
    for code in CASES:
        tree = build(RULE_FIXTURES / code, tmp_path / code)
        server.start(types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=tree.as_uri()))
        _, findings = check(tree)
        expected = sorted((f["path"], f["line"], f["col"], f["code"], f["message"], f["severity"]) for f in findings)
        result = server.check(lsp.Snapshot())
        got = sorted(
            (
                path,
                d.range.start.line + 1,
                d.range.start.character + 1,
                d.code,
                d.message,
                "error" if d.severity == types.DiagnosticSeverity.Error else "warning",
            )
            for path, diags in result.diagnostics.items()
            for d in diags
        )
        assert got == expected, code
        assert any(f[3] == code for f in expected), code  # the fixture fails as it should
        known = {r.code for r in server.rules}  # and a replay of them would pass the replay's checks
        assert replay.admissible(result.findings, replay.disk_lines(tree), known), code


# -- the subcommand -------------------------------------------------------------------------------------


def test_lsp_without_pygls_says_what_to_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "pygls"] + ["pygls"]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of pygls now fails, as when absent
    import skills_check.lsp

    for name in ("server", "convert", "complete"):  # as if never imported: neither the module nor the attribute
        monkeypatch.delitem(sys.modules, f"skills_check.lsp.{name}", raising=False)
        monkeypatch.delattr(skills_check.lsp, name, raising=False)
    assert cli.main(["lsp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs pygls" in err and "uv run python tools/skills/cli.py lsp" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["lsp", "--debounce", "-1"], "--debounce -1.0 is out of range"),
        (["lsp", "--root", "/nonexistent/tree"], "not a directory"),
    ],
)
def test_lsp_bad_arguments_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def _framed(*messages: dict[str, Any]) -> str:
    """JSON-RPC messages as an LSP client writes them on the server's stdin (ASCII only: length = characters)."""
    out = []
    for message in messages:
        body = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=True)
        out.append(f"Content-Length: {len(body)}\r\n\r\n{body}")
    return "".join(out)


@pytest.mark.parametrize("shutdown, status", [(True, 0), (False, 1)], ids=["shutdown-then-exit", "exit-alone"])
def test_the_server_exits_as_the_protocol_says_with_nothing_on_stderr(
    shutdown: bool, status: int, tmp_path: Path
) -> None:
    """A real stdio session: ``exit`` after an answered ``shutdown`` ends the process with 0, ``exit`` alone with 1
    (the protocol's rule; editors call anything else a crash), and neither leaves a word on stderr."""
    root = make_tree(tmp_path / "repo")
    opening = [
        {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": root.as_uri(), "capabilities": {}}},
        {"method": "initialized", "params": {}},
    ]
    closing = [{"id": 2, "method": "shutdown"}] if shutdown else []
    proc = run(
        [PYTHON, str(CLI), "lsp"],
        input=_framed(*opening, *closing, {"method": "exit"}),
        timeout=DEADLINE_S,
        env=dict(os.environ),
    )
    assert (proc.returncode, proc.stderr) == (status, "")
    assert ('"id": 2, "jsonrpc": "2.0", "result": null' in proc.stdout) is shutdown  # the shutdown was answered
    assert '"id": 1' in proc.stdout  # and the session was a real one: initialize answered


def test_check_never_imports_the_language_server() -> None:
    """``check``'s start-up cost: its process imports neither pygls nor lsprotocol (``-X importtime``)."""
    proc = run(
        [PYTHON, "-X", "importtime", str(CLI), "check", "--root", str(BASE), "--no-cache"],
        timeout=120,
        env=dict(os.environ),
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # findings or none: the check ran
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "import time:" in line]
    assert "yaml" in imported  # the listing is real
    assert not [m for m in imported if m.split(".")[0] in ("pygls", "lsprotocol", "lsp", "lsp_convert")]


# -- the demo transcript -----------------------------------------------------------------------------------


def _compact(value: Any, indent: str = "", width: int = 100) -> str:
    """JSON with every object or array that fits in ``width`` columns on one line."""
    flat = json.dumps(value, sort_keys=True, ensure_ascii=False)
    if len(indent) + len(flat) <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = indent + "  "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {_compact(v, inner, width).lstrip()}" for k, v in sorted(value.items())]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    items = [f"{inner}{_compact(v, inner, width)}" for v in value]
    return "[\n" + ",\n".join(items) + f"\n{indent}]"


class Transcript:
    """What a client sent and what came back, as JSON, with the tree's location written ``file:///repo``."""

    def __init__(self, root: Path) -> None:
        self.root_uri = root.as_uri()
        self.converter = default_converter()
        self.parts: list[str] = []

    def _json(self, value: Any) -> str:
        data = json.loads(json.dumps(self.converter.unstructure(value)).replace(self.root_uri, "file:///repo"))
        return _compact(data)

    def note(self, text: str) -> None:
        self.parts.append(text)

    def sent(self, method: str, params: Any) -> None:
        self.parts.append(f"Client sends `{method}`:\n\n```json\n{self._json(params)}\n```")

    def got(self, method: str, value: Any) -> None:
        self.parts.append(f"Server {method}:\n\n```json\n{self._json(value)}\n```")

    def render(self) -> str:
        head = (
            "# The checker's language server: a recorded session\n\n"
            "<!-- Generated by tests/test_lsp.py::test_demo_transcript (LSP_DEMO_WRITE=1 rewrites it); "
            "do not edit. -->\n\n"
            "A client opens `reference.md` of the checker's base fixture tree with an unsaved edit that "
            "drifts a flag, hovers the diagnostic, edits the flag back, then opens `multi_gpu.rst` with a "
            "drifted default and asks for the fix. See [LSP.md](LSP.md) for editor set-up.\n\n"
        )
        return head + "\n\n".join(self.parts) + "\n"


@ASYNC
async def test_demo_transcript(client: LanguageClient, tree: Path) -> None:
    """The session in tools/skills/LSP_DEMO.md is what this server answers today."""
    t = Transcript(tree)
    ref = Editor(client, tree, REF, "markdown")
    clean = ref.text
    drifted = clean.replace(*DRIFT, 1)
    t.note("## 1. Open a document with a drifted flag")
    t.sent(
        "textDocument/didOpen",
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(
                uri=ref.uri, language_id="markdown", version=1, text="…(reference.md, with `--num_gpu 2`)…"
            )
        ),
    )
    diags = await ref.open(drifted)
    t.got("publishes `textDocument/publishDiagnostics`", types.PublishDiagnosticsParams(ref.uri, diags, 1))
    t.note("## 2. Hover the diagnostic")
    hover_params = types.HoverParams(types.TextDocumentIdentifier(ref.uri), diags[0].range.start)
    t.sent("textDocument/hover", hover_params)
    hover = await client.text_document_hover_async(hover_params)
    summary = hover.contents.value.split("\n\n")[:2]
    t.got(
        "answers (the first two paragraphs of `cli.py explain DR301`)",
        types.Hover(types.MarkupContent(types.MarkupKind.Markdown, "\n\n".join(summary))),
    )
    t.note("## 3. Edit the flag back")
    t.sent(
        "textDocument/didChange",
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=ref.uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text="…(reference.md as on disk)…")],
        ),
    )
    t.got(
        "publishes `textDocument/publishDiagnostics`",
        types.PublishDiagnosticsParams(ref.uri, await ref.change(clean), 2),
    )
    await ref.close()
    mgpu = Editor(client, tree, MGPU, "restructuredtext")
    async with mgpu.opened(_drifted(tree, MGPU, NNODES)) as mdiags:
        t.note("## 4. A drifted default in the options table, and its fix")
        t.got(
            "publishes `textDocument/publishDiagnostics` (after `didOpen` of multi_gpu.rst, version 1)",
            types.PublishDiagnosticsParams(mgpu.uri, mdiags, 1),
        )
        params = types.CodeActionParams(
            types.TextDocumentIdentifier(mgpu.uri), mdiags[0].range, types.CodeActionContext(diagnostics=mdiags)
        )
        t.sent("textDocument/codeAction", params)
        t.got("answers", await client.text_document_code_action_async(params))
    text = t.render()
    if os.environ.get(WRITE_DEMO) == "1":
        DEMO_MD.write_text(text, encoding="utf-8")
    assert DEMO_MD.is_file(), f"{DEMO_MD} is missing: run this test with {WRITE_DEMO}=1"
    assert DEMO_MD.read_text(encoding="utf-8") == text, (
        f"{DEMO_MD.name} differs from this session: rerun with {WRITE_DEMO}=1 and review the diff"
    )


# -- completion ----------------------------------------------------------------------------------------


async def _complete(client: LanguageClient, ed: Editor, text: str, needle: str) -> dict[str, types.CompletionItem]:
    """Open ``text``, ask for completion right after ``needle``; the items by label."""
    before = text[: text.index(needle) + len(needle)]
    at = types.Position(before.count("\n"), len(before) - (before.rfind("\n") + 1))
    async with ed.opened(text):
        got = await client.text_document_completion_async(
            types.CompletionParams(types.TextDocumentIdentifier(ed.uri), at)
        )
    items = got.items if isinstance(got, types.CompletionList) else got
    for item in items:  # every item replaces the word typed so far, on the cursor's line
        assert item.text_edit.range.end == at
        assert item.label and item.filter_text == item.label  # never an empty label
    typed = text.split("\n")[at.line][items[0].text_edit.range.start.character : at.character] if items else ""
    assert isinstance(got, types.CompletionList) and got.is_incomplete == bool(typed and items)
    assert [i.sort_text for i in items] == sorted(i.sort_text for i in items)  # the client keeps this order
    return {item.label: item for item in items}


@ASYNC
async def test_completion_offers_the_missing_frontmatter_keys_with_their_documentation(
    client: LanguageClient, tree: Path
) -> None:
    from skills_check.lsp.complete import KEY_DOCS
    from skills_check.rules.frontmatter import KNOWN_KEYS

    assert set(KEY_DOCS) == set(KNOWN_KEYS)  # every key the rules know is documented, and no other
    skill = Editor(client, tree, SKILL, "markdown")
    text = skill.text.replace("license: BSD-3-Clause\n", "lic\n")
    items = await _complete(client, skill, text, "\nlic")
    assert list(items) == ["license"]  # the keys not written yet, narrowed to what was typed
    assert KEY_DOCS["license"] in items["license"].documentation.value
    items = await _complete(client, skill, skill.text.replace("\nname: isaaclab-demo", "\nn"), "\nn")
    assert "name" in items and "Checked by" in items["name"].documentation.value
    assert "SK102" in items["name"].documentation.value  # the rules that check `name`, from the registry


@ASYNC
async def test_completion_offers_the_folder_name_tools_and_fixed_values(client: LanguageClient, tree: Path) -> None:
    skill = Editor(client, tree, SKILL, "markdown")
    base = skill.text
    items = await _complete(client, skill, base.replace("name: isaaclab-demo", "name: "), "name: ")
    assert list(items) == ["demo"]  # the folder skills/user/demo
    items = await _complete(client, skill, base.replace("name: isaaclab-demo", "name: de"), "name: de")
    assert list(items) == ["demo"]
    items = await _complete(client, skill, base.replace("name: isaaclab-demo", "name: isa"), "name: isa")
    assert items == {}  # nothing starts with what was typed
    text = base.replace("license: BSD-3-Clause\n", "license: BSD-3-Clause\nallowed-tools: Read \n")
    items = await _complete(client, skill, text, "allowed-tools: Read ")
    assert {"Bash", "Grep", "Write"} <= set(items) and "Read" not in items
    items = await _complete(client, skill, base.replace("status: experimental", "status: "), "status: ")
    assert set(items) == {"experimental", "stable", "deprecated"}
    items = await _complete(client, skill, base.replace("status: experimental", "status: s"), "status: s")
    assert list(items) == ["stable"]


@ASYNC
async def test_completion_offers_rule_codes_inside_a_suppression(client: LanguageClient, tree: Path) -> None:
    ref = Editor(client, tree, REF, "markdown")
    items = await _complete(client, ref, ref.text + "\n<!-- skills-check: dis", "skills-check: dis")
    assert list(items) == ["disable-next-line", "disable", "disable-file"]  # "enable" does not start with "dis"
    text = ref.text + "\n<!-- skills-check: disable-next-line SK101, SK2"
    items = await _complete(client, ref, text, "SK101, SK2")
    assert "SK203" in items and "SK101" not in items  # the codes not named yet
    assert all(label.startswith("SK2") for label in items)  # that start with what was typed
    assert items["SK203"].detail and "SK203" in items["SK203"].documentation.value
    mgpu = Editor(client, tree, MGPU, "restructuredtext")
    items = await _complete(client, mgpu, mgpu.text + "\n.. skills-check: disable-file DR2", "disable-file DR2")
    assert "DR204" in items


@ASYNC
async def test_completion_offers_a_tool_s_flags_inside_its_documented_command(
    client: LanguageClient, tree: Path
) -> None:
    skill = Editor(client, tree, SKILL, "markdown")
    command = "uv run mgpu-lab train_multigpu --num_gpus 2 --rl_library skrl --task Toy-Cartpole-v0"
    assert command in skill.text
    text = skill.text.replace(command, command + " --nu")
    items = await _complete(client, skill, text, command + " --nu")
    assert list(items)[:2] == ["--num_gpus", "--num_envs"]  # what starts with --nu: the launcher's own first
    assert all(label.startswith("--nu") for label in items)
    assert items["--num_gpus"].detail == "mgpu-lab train_multigpu"  # the launcher's own flag
    assert "`--nproc_per_node`" in items["--num_gpus"].documentation.value  # its alias, from argparse
    assert items["--num_envs"].detail == "mgpu-lab train (forwarded by mgpu-lab train_multigpu)"
    assert "--help" not in items
    items = await _complete(client, skill, skill.text.replace(command, command + " --NU"), command + " --NU")
    assert list(items)[:2] == ["--num_gpus", "--num_envs"]  # the case typed does not matter
    items = await _complete(client, skill, skill.text.replace(command, command + " --"), command + " --")
    details = [item.detail for item in items.values()]
    own = details.count("mgpu-lab train_multigpu")
    assert own > 5 and details[:own] == ["mgpu-lab train_multigpu"] * own  # the launcher's own flags first
    items = await _complete(client, skill, skill.text.replace(command, command + " --gpus"), command + " --gpus")
    assert "--num_gpus" in items  # a flag holding the word comes after those starting with it
    prose = skill.text.replace("# Demo skill\n", "# Demo skill\n\nUse --nu\n")
    assert await _complete(client, skill, prose, "Use --nu") == {}  # no command: no flags
