"""``cli.py lsp``'s server: the pygls feature table over one ``CheckerServer`` (server.py), and ``main``, which
serves on stdio."""

from __future__ import annotations

import logging
from pathlib import Path

from lsprotocol import types

from .server import DEBOUNCE_S, CheckerServer


def build_server(root: Path | None = None, debounce: float = DEBOUNCE_S) -> CheckerServer:
    server = CheckerServer(root, debounce)

    @server.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        server.start(params)

    @server.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        server.schedule(
            0
        )  # (a didOpen sent with `initialized` joins this first check rather than waiting for a second)
        await server.watch_files()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        server.opened(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        server.edited()

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: types.DidSaveTextDocumentParams) -> None:
        server.schedule(0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        server.schedule(0)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(params: types.DidChangeWatchedFilesParams) -> None:
        server.schedule(server.debounce)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])
    )
    async def code_action(params: types.CodeActionParams) -> list[types.CodeAction] | None:
        return await server.code_actions(params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(params: types.HoverParams) -> types.Hover | None:
        return await server.hover(params)

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["-", " ", ","]))
    async def completion(params: types.CompletionParams) -> types.CompletionList | None:
        return await server.completion(params)

    @server.feature(types.SHUTDOWN)
    def shutdown(params: None) -> None:
        server.closing = True
        if server.timer is not None:
            server.timer.cancel()
        if server.cache is not None:
            server.worker.submit(server.cache.save)  # after the running check; what the next start reads
        server.worker.shutdown(wait=True, cancel_futures=False)

    return server


def main(root: str | None, debounce: float) -> int:
    """Serve on stdin/stdout until the client says exit: 0 after a shutdown request, else 1 (as the protocol says
    of an ``exit`` without ``shutdown``, or of a client that went away)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    server = build_server(Path(root) if root else None, debounce)
    server.start_io()  # returns on `exit` (pygls swallows the SystemExit that carries the status) or end of input
    return 0 if server.closing else 1
