"""The language server's requests: quick fixes (the edits ``check --fix`` applies), hover (a finding's
``explain`` text, or the rules a frontmatter key answers to) and completion (complete.py), each answered from
the check of the documents as the editor has them now (``CheckerServer.current``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from . import convert as conv
from .complete import complete

if TYPE_CHECKING:  # the server imports this module; its class is only named in annotations here
    from .server import CheckerServer


async def code_actions(server: CheckerServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    rel = conv.rel_path(server.root, params.text_document.uri) if server.root else None
    result = await server.current() if rel is not None else None
    if result is None or rel is None or server.root is None:
        return None
    actions = []
    snap = result.snapshot
    for finding, diag in result.pairs.get(rel, []):
        if finding.fix is None or not conv.overlaps(diag.range, params.range):
            continue
        newline = lambda path: "\r\n" if "\r\n" in snap.texts.get(path, "") else "\n"
        edits = conv.text_edits(finding.fix, result.lines_of, server.codec(), newline)
        if not edits:
            continue
        actions.append(
            types.CodeAction(
                title=f"Fix {finding.code}: {finding.fix.description}",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diag],
                is_preferred=True,
                edit=types.WorkspaceEdit(changes={conv.uri_of(server.root, p): e for p, e in edits.items()}),
            )
        )
    return actions


async def hover(server: CheckerServer, params: types.HoverParams) -> types.Hover | None:
    rel = conv.rel_path(server.root, params.text_document.uri) if server.root else None
    result = await server.current() if rel is not None else None
    if result is None or rel is None or server.root is None:
        return None
    lines = result.lines_of(rel) or []
    pos = server.codec().position_from_client_units(lines, params.position) if lines else params.position
    by_code = {r.code: r for r in server.rules}
    texts = []
    for finding, diag in result.pairs.get(rel, []):
        if conv.contains(diag.range, params.position) and finding.code in by_code:
            text = conv.explain(by_code[finding.code])
            if text not in texts:
                texts.append(text)
    if not texts and pos.line < len(lines):
        word = conv.word_at(lines[pos.line], pos.character)
        if conv.CODE_RE.fullmatch(word) and word in by_code:
            texts.append(conv.explain(by_code[word]))
    if not texts:
        doc = next((s.skill_md for s in result.project.skills if s.skill_md.path == rel), None)
        key = conv.frontmatter_key_at(lines, doc.frontmatter_lines, pos.line, pos.character) if doc else None
        if key is not None:
            texts.append(conv.key_hover(key, conv.key_rules(server.rules, key)))
    if not texts:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(texts)))


async def completion(server: CheckerServer, params: types.CompletionParams) -> types.CompletionList | None:
    """Frontmatter keys and values, rule codes in suppressions, a tool's flags in its commands
    (complete.py), for the document's text as the editor has it now."""
    rel = conv.rel_path(server.root, params.text_document.uri) if server.root else None
    result = (server.last or await server.current()) if rel is not None else None
    if result is None or rel is None:
        return None
    lines = conv.split_lines(server.workspace.get_text_document(params.text_document.uri).source)
    pos = server.codec().position_from_client_units(lines, params.position)
    items = complete(rel, lines, pos.line, pos.character, result.project, server.rules)
    narrowed = False
    for item in items:
        if isinstance(item.text_edit, types.TextEdit):
            typed = lines[pos.line][item.text_edit.range.start.character : pos.character]
            narrowed = narrowed or bool(typed)  # a word was typed: the items match it
            item.text_edit.range = server.codec().range_to_client_units(lines, item.text_edit.range)
    # narrowed to the word typed: the client asks again as it changes (a shorter word matches more)
    return types.CompletionList(is_incomplete=narrowed, items=items)
