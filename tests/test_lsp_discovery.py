"""The language server finds skills as ``check`` does: a lone skill folder as the workspace is checked, a
workspace with no skill says so in a message, and the server asks the editor to watch the files whose
change on disk (``git pull``) changes the findings, re-checking when the editor reports one."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from lsprotocol.converters import get_converter
from mgpu_testing import PYTHON, REPO
from mgpu_testing.checker import CLI
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

LAYOUTS = REPO / "tests" / "fixtures" / "checker" / "layouts"
DEADLINE_S = 30.0
ASYNC = pytest.mark.asyncio(loop_scope="function")


def _client() -> LanguageClient:
    """pytest-lsp's client that records diagnostics, messages and capability registrations as they arrive."""
    client = LanguageClient(converter_factory=get_converter)
    client.seen: list[tuple[str, object]] = []  # type: ignore[misc]
    client.arrived = asyncio.Event()  # type: ignore[attr-defined]

    def keep(method: str):
        base = DEFAULT_CLIENT_FEATURES.get(method)

        def handler(client: LanguageClient, params: object) -> None:
            if base is not None:
                base(client, params)
            client.seen.append((method, params))  # type: ignore[attr-defined]
            client.arrived.set()  # type: ignore[attr-defined]

        return handler

    features = {**DEFAULT_CLIENT_FEATURES}
    for method in (
        types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS,
        types.WINDOW_SHOW_MESSAGE,
        types.WINDOW_LOG_MESSAGE,
        types.CLIENT_REGISTER_CAPABILITY,
    ):
        features[method] = keep(method)
    register_lsp_features(client, features)
    return client


async def _wait(client: LanguageClient, method: str, ok=lambda p: True) -> object:
    async with asyncio.timeout(DEADLINE_S):
        while True:
            client.arrived.clear()  # type: ignore[attr-defined]
            hits = [p for m, p in client.seen if m == method and ok(p)]  # type: ignore[attr-defined]
            if hits:
                return hits[-1]
            await client.arrived.wait()  # type: ignore[attr-defined]


CONFIG = ClientServerConfig(server_command=[PYTHON, str(CLI), "lsp"], client_factory=_client)
WATCHING = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(
        did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True)
    )
)


async def _start(client: LanguageClient, root: Path) -> None:
    await client.initialize_session(types.InitializeParams(capabilities=WATCHING, root_uri=root.as_uri()))


@pytest_lsp.fixture(config=CONFIG)
async def lsp(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


@ASYNC
async def test_a_lone_skill_folder_is_checked_and_its_files_are_watched(lsp: LanguageClient, tmp_path: Path) -> None:
    root = tmp_path / "single"
    shutil.copytree(LAYOUTS / "single", root)
    skill = root / "SKILL.md"
    skill.write_text(skill.read_text(encoding="utf-8").replace("name: single", "name: Single_Skill"), encoding="utf-8")
    await _start(lsp, root)
    reg = await _wait(lsp, types.CLIENT_REGISTER_CAPABILITY)
    (registration,) = reg.registrations
    assert registration.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
    globs = {w["globPattern"] for w in registration.register_options["watchers"]}  # options arrive as JSON
    assert {"**/*.md", "**/pyproject.toml", "**/.gitignore"} <= globs
    first = await _wait(lsp, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, lambda p: p.uri == skill.as_uri())
    assert {d.code for d in first.diagnostics} >= {"SK102", "SK116"}
    # the file changes on disk (a pull), the editor reports it: the findings follow the disk
    skill.write_text(skill.read_text(encoding="utf-8").replace("name: Single_Skill", "name: single"), encoding="utf-8")
    lsp.seen.clear()  # type: ignore[attr-defined]
    lsp.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=skill.as_uri(), type=types.FileChangeType.Changed)]
        )
    )
    cleared = await _wait(lsp, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, lambda p: p.uri == skill.as_uri())
    assert list(cleared.diagnostics) == []


@ASYNC
async def test_a_workspace_without_skills_says_so(lsp: LanguageClient, tmp_path: Path) -> None:
    root = tmp_path / "empty"
    shutil.copytree(LAYOUTS / "empty", root)
    await _start(lsp, root)
    shown = await _wait(lsp, types.WINDOW_SHOW_MESSAGE)
    assert "no skill found" in shown.message and shown.type == types.MessageType.Warning


# -- the documented set-up, in a lone skill folder -------------------------------------------------------------

LSP_MD = REPO / "tools" / "skills" / "LSP.md"
UV = shutil.which("uv")


def _documented_command() -> list[str]:
    """The Neovim ``cmd`` of LSP.md, word for word, with the checkout being this one."""
    text = LSP_MD.read_text(encoding="utf-8")
    block = text[text.index("cmd = {") : text.index("}", text.index("cmd = {"))]
    words = re.findall(r'"([^"]*)"', block)
    assert words[:2] == ["uv", "run"] and "--directory" in words and "lsp" in words, words
    return [UV or "uv", *(str(REPO) if w == "/path/to/mgpu-lab" else w for w in words[1:])]


DOCUMENTED = ClientServerConfig(server_command=_documented_command(), client_factory=_client)


@pytest_lsp.fixture(config=DOCUMENTED)
async def documented(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


def _lone(tmp_path: Path) -> Path:
    """A lone skill folder (no .git, no pyproject.toml above it) whose SKILL.md has two findings."""
    root = tmp_path / "my-skill"
    shutil.copytree(LAYOUTS / "single", root)
    skill = root / "SKILL.md"
    skill.write_text(skill.read_text(encoding="utf-8").replace("name: single", "name: Single_Skill"), encoding="utf-8")
    assert not [p for p in root.parents if (p / ".git").exists() or (p / "pyproject.toml").exists()]
    return root


async def _open_and_complete(lsp: LanguageClient, root: Path) -> None:
    """Open the lone folder's SKILL.md: its findings come; ``name: `` completes to the folder's name."""
    skill = root / "SKILL.md"
    text = skill.read_text(encoding="utf-8")
    lsp.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=skill.as_uri(), language_id="markdown", version=1, text=text)
        )
    )
    first = await _wait(lsp, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, lambda p: p.uri == skill.as_uri())
    assert {d.code for d in first.diagnostics} >= {"SK102", "SK116"}
    got = await lsp.text_document_completion_async(
        types.CompletionParams(types.TextDocumentIdentifier(skill.as_uri()), types.Position(1, 6))
    )
    assert text.split("\n")[1][:6] == "name: "
    assert [item.label for item in got.items] == ["my-skill"]  # the root's own name, never an empty label


@pytest.mark.skipif(UV is None, reason="uv is not on PATH (the documented command runs through it)")
@ASYNC
async def test_the_documented_command_checks_a_lone_skill_folder_opened_as_the_workspace(
    documented: LanguageClient, tmp_path: Path
) -> None:
    root = _lone(tmp_path)
    await documented.initialize_session(types.InitializeParams(capabilities=WATCHING, root_uri=root.as_uri()))
    await _open_and_complete(documented, root)


@pytest.mark.skipif(UV is None, reason="uv is not on PATH (the documented command runs through it)")
@ASYNC
async def test_the_documented_command_finds_a_lone_skill_folder_from_its_first_document(
    documented: LanguageClient, tmp_path: Path
) -> None:
    """Neovim in a folder with none of its root_markers names no workspace: the server takes the tree of the
    first document opened (not its own working folder, the checkout ``--directory`` names), and says once
    that this client cannot watch files."""
    root = _lone(tmp_path)
    await documented.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=None))
    told = await _wait(documented, types.WINDOW_SHOW_MESSAGE)
    assert "does not let the server watch files" in told.message and "LSP.md" in told.message
    await _open_and_complete(documented, root)
    shown = [p for m, p in documented.seen if m == types.WINDOW_SHOW_MESSAGE]  # type: ignore[attr-defined]
    assert len(shown) == 1  # told once
