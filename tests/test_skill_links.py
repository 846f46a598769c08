"""Every relative link in ``skills/`` resolves, and so does its ``#anchor``.

Markdown targets use GitHub-style heading anchors; ``.rst`` targets must have a section whose
docutils id, or an explicit label (``.. _name:``), equals the fragment. Also checks the native
discovery links (``.agents/skills/<name>`` and ``.claude/skills``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from conftest import REPO
from test_skill_commands import markdown_tokens, rel, rst_doctree, skill_markdown_files


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation dropped, spaces to hyphens."""
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_text(inline_token) -> str:
    return "".join(child.content for child in inline_token.children or []
                   if child.type in ("text", "code_inline", "html_inline"))


def markdown_anchors(path: Path) -> set[str]:
    tokens = markdown_tokens(path)
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            slug = github_slug(heading_text(tokens[i + 1]))
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def rst_anchors(path: Path) -> set[str]:
    from docutils import nodes

    anchors: set[str] = set()
    for node in rst_doctree(path).findall(nodes.Element):
        anchors.update(node.get("ids", []))
    labels = re.findall(r"^\.\.\s+_([^:`]+):\s*$", path.read_text(encoding="utf-8"), flags=re.M)
    anchors.update(label.strip().lower() for label in labels)
    return anchors


def markdown_links(path: Path) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for tok in markdown_tokens(path):
        if tok.type != "inline":
            continue
        line = tok.map[0] + 1 if tok.map else 1
        for child in tok.children or []:
            if child.type == "link_open":
                out.append((line, str(child.attrs.get("href", ""))))
            elif child.type == "image":
                out.append((line, str(child.attrs.get("src", ""))))
    return out


LINKS = [(p, line, href) for p in skill_markdown_files() for line, href in markdown_links(p)]


def test_links_found() -> None:
    assert len(LINKS) >= 10, "the link collector found almost nothing"
    assert any("#" in href for _, _, href in LINKS), "no #anchor link found"


@pytest.mark.parametrize("path,line,href", LINKS, ids=[f"{rel(p)}:{n}:{h}" for p, n, h in LINKS])
def test_relative_link_resolves(path: Path, line: int, href: str) -> None:
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith("mailto:"):
        pytest.skip("external link")
    where = f"{rel(path)}:{line}: {href}"
    assert "\\" not in href, f"{where}: use forward slashes"
    target = path if not parts.path else (path.parent / unquote(parts.path))
    assert target.exists(), f"{where}: {rel(path.parent)}/{parts.path} does not exist"
    resolved = target.resolve()
    assert resolved.is_relative_to(REPO), f"{where}: points outside the repository"
    if parts.fragment:
        fragment = unquote(parts.fragment)
        if resolved.suffix == ".md":
            anchors = markdown_anchors(resolved)
        elif resolved.suffix == ".rst":
            anchors = rst_anchors(resolved)
        else:
            pytest.fail(f"{where}: an anchor into a {resolved.suffix or 'folder'} target cannot be checked")
        assert fragment in anchors, f"{where}: no anchor #{fragment} in {rel(resolved)} (have: {sorted(anchors)})"


def test_github_slug() -> None:
    assert github_slug("Isolating a hang") == "isolating-a-hang"
    assert github_slug("NCCL hangs and errors") == "nccl-hangs-and-errors"
    assert github_slug("Use `--dry_run` first!") == "use---dry_run-first"


def skill_names() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for skill_md in sorted((REPO / "skills").glob("*/*/SKILL.md")):
        text = skill_md.read_text(encoding="utf-8")
        match = re.match(r"^---\n(.*?)\n---\n", text, flags=re.S)
        assert match, f"{rel(skill_md)}: no frontmatter"
        out[yaml.safe_load(match.group(1))["name"]] = skill_md.parent
    return out


def test_discovery_links() -> None:
    names = skill_names()
    assert {"isaaclab-training-multi-gpu", "isaaclab-training-rl-agents",
            "isaaclab-debugging-rl-training"} <= set(names)
    claude = REPO / ".claude" / "skills"
    assert claude.is_symlink() and os.readlink(claude) == "../.agents/skills"
    for name, folder in names.items():
        link = REPO / ".agents" / "skills" / name
        assert link.is_symlink(), f"{rel(link)} is not a symlink"
        target = os.readlink(link)
        assert not os.path.isabs(target), f"{rel(link)} -> {target} is absolute"
        assert target == "../../" + rel(folder), f"{rel(link)} -> {target}"
        assert (claude / name / "SKILL.md").is_file()


def test_backticked_cross_skill_names_exist() -> None:
    names = set(skill_names())
    for path in skill_markdown_files():
        for name in re.findall(r"`(isaaclab-[a-z0-9-]+)`", path.read_text(encoding="utf-8")):
            assert name in names, f"{rel(path)}: `{name}` is not the name of any skill"
