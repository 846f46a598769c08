"""The quick reader of plain markdown (``parsers.quick``) against markdown-it and PyYAML: whenever it reads a
document, the ``MarkdownDoc`` built from what it reads equals the one built from markdown-it's (every markdown
file of the repository, and generated documents mixing plain lines with the constructs it must refuse);
plain ``key: value`` frontmatter gives what PyYAML gives; a plain document imports neither library."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mdit_py_plugins.anchors.index import slugify as mdit_slugify
from mdit_py_plugins.anchors.index import unique_slug as mdit_unique_slug
from mgpu_testing import REPO
from skills_check.inputs import decode
from skills_check.parsers import frontmatter as yaml_frontmatter
from skills_check.parsers import markdown
from skills_check.parsers.quick import plain_mapping, quick_read


def _both(monkeypatch: pytest.MonkeyPatch, text: str) -> tuple[object, object]:
    """(the document as read with the quick reader, as read by markdown-it and PyYAML only)."""
    quick = markdown.parse_markdown("doc.md", text)
    with monkeypatch.context() as m:
        m.setattr(markdown, "quick_read", lambda _text: None)
        m.setattr(yaml_frontmatter, "plain_mapping", lambda _content: None)  # parsers/frontmatter.py reads it
        full = markdown.parse_markdown("doc.md", text)
    return quick, full


def _repo_markdown() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / p for p in out.stdout.split()]


def test_every_markdown_file_of_the_repository_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    read_quickly = 0
    files = _repo_markdown()
    assert len(files) > 50
    for path in files:
        text, _ = decode(path.name, path.read_bytes())
        if text is None:
            continue
        quick, full = _both(monkeypatch, text)
        assert quick == full, path
        read_quickly += quick_read(text) is not None
    assert 0 < read_quickly < len(files)  # some plain enough, some not: both paths were compared


PLAIN = [
    "Plain words, then more.",
    "Read [the guide](references/guide.md#steps) first.",
    "Run `scripts/run.py INPUT` and `x` then [b](a/b.md).",
    "Same target twice: [a](x.md) and [b](x.md), ![c](x.md); `x` and `x` again.",
    "- A bullet with *emphasis* and snake_case words.",
    "1. Read [x](y.md) then `z`.",
    "2) Run ![logo](assets/logo.png) here.",
    "+ Item with [ spaced label ](x.md) and ` padded ` code.",
    "* Item **bold** `code` [l](p?q=1#f).",
    "# Title",
    "## Title with words ##x",
    "###   Spaced   title  ",
    "Text with ! mark and (parens) and C# and a-b.",
    "",
    "   ",
    "```bash",
    "```",
    "~~~",
    "echo 'a | b' && <x> \\",
    "````",
    "``` done",
]
ODD = [
    "> quoted [x](y)",
    "    indented code",
    "  - nested",
    "| a | b |",
    "| --- | --- |",
    "<!-- a comment -->",
    "<div>html</div>",
    "Text &amp; entity",
    "Escaped \\* star",
    "---",
    "===",
    "- - -",
    "***",
    "-",
    "1.",
    "[ref]: https://example.com",
    "See [ref] and [x][ref].",
    "Link [a](<b c>) [t](x 'title')",
    "https link [a](https://example.com/path)",
    "Unclosed `code and [link",
    "Double ``code `` here",
    "# Heading with `code`",
    "# Heading *em*",
    "# Closed heading #",
    "#nospace",
    "- # heading in a list",
    "- ```",
    "Tab\tseparated",
    "```js`bad",
    "- [ ] task",
    "Image ![alt *em*](x.png)",
    "Text [a](//host/path)",
    "Text [a](b%20c.md)",
    "<https://example.com>",
    "- 1. nested ordered",
    "- 2023 was a year",
    "- ``double``",
    "1.  Two spaces",
    "- ",
    "- \u00e9t\u00e9 word",
    "# Caf\u00e9 \u65e5\u672c",
    "2. [link](x.md)",
]
FRONTMATTERS = [
    "",
    "---\nname: task-001\ndescription: Handles things. Use when asked.\n---\n",
    "---\nname: x\nallowed-tools: Read Grep Bash(python:*)\n---\n",
    "---\nname: x\ndescription: yes\n---\n",
    "---\nname: x\nmetadata:\n  author: me\n---\n",
    "---\nname: x\nname: y\n---\n",
    "---\n# comment\nname: x\n---\n",
    "---\nname: x # trailing\n---\n",
    "---\nname: 'quoted'\n---\n",
    "---\n---\n",
    "---\nname: x\n",
    "---\nname: a: b\n---\n",
    "---\non: x\n---\n",
    "---\nname: x\n...\n",
    "---\nname: x\n  ---\n---\n",
]


@pytest.mark.parametrize("seed", range(8))
def test_generated_documents_read_the_same(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    read_quickly = 0
    for _ in range(250):
        lines = [rng.choice(PLAIN) if rng.random() < 0.85 else rng.choice(ODD) for _ in range(rng.randint(1, 14))]
        text = rng.choice(FRONTMATTERS) + "\n".join(lines) + rng.choice(["", "\n"])
        quick, full = _both(monkeypatch, text)
        assert quick == full, text
        read_quickly += quick_read(text) is not None
    assert read_quickly > 20


VALUES = [
    "Handles task 0 requests from start to finish. Use when a user asks.",
    "Read Grep Bash(python:*)",
    "a  b",
    "C# and F# code",
    'quote\'s and "double" marks',
    "braces {a} [b] , commas",
    "Yes",
    "off",
    "Null",
    "ends with colon:",
    "has: colon space",
    "has #comment",
    "x:y and a-b and 50%",
    "émigré café",
    "tab\there",
    "bom\ufeffinside",
    "nel\x85inside",
    "z",
    "é then a: b",
    "é then #x and — dash",
    "ctl\x01char",
    "- list item",
    "1. Step one",
]


def test_plain_frontmatter_reads_as_pyyaml_reads_it() -> None:
    accepted = 0
    for i, value in enumerate(VALUES):
        for key in ("name", "allowed-tools", "_x", "On", "y"):
            content = f"{key}: {value}\nother_{i}: Plain words"
            got = plain_mapping(content)
            if got is None:
                continue
            accepted += 1
            assert got[0] == yaml.safe_load(content), content
            assert got[1] == {key: 0, f"other_{i}": 1}
    assert accepted >= 20


@pytest.mark.parametrize("title", ["Steps", "Hello, World!", "A  b-c_d", "Émigré 日本語 ä", "x.y/z", "Tab\tx"])
def test_the_anchor_slug_is_the_anchors_plugins(title: str) -> None:
    assert markdown.slugify(title) == mdit_slugify(title)
    ours: set[str] = set()
    theirs: set[str] = set()
    for _ in range(3):
        assert markdown.unique_slug(markdown.slugify(title), ours) == mdit_unique_slug(mdit_slugify(title), theirs)


def test_a_plain_document_imports_neither_parser_library() -> None:
    code = (
        "import sys\n"
        "from skills_check.parsers.markdown import parse_markdown\n"
        "doc = parse_markdown('SKILL.md', '---\\nname: a\\ndescription: Does a. Use when b.\\n---\\n\\n# A\\n\\n"
        "1. Read [g](g.md#x).\\n')\n"
        "assert doc.links and doc.headings and doc.frontmatter == {'name': 'a', 'description': 'Does a. Use when b.'}\n"
        "print(sorted(m for m in ('markdown_it', 'yaml', 'mdit_py_plugins') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO / "tools" / "skills", capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
