"""markdown-it-pyrs (``parsers.markdown_rs``) against markdown-it-py: the ``MarkdownDoc`` built straight from the
Rust port's tree equals the one built from markdown-it-py's tokens, over every markdown file of the repository and
generated documents made of the constructs real skills use (and those where the two ports part ways, which
must go to markdown-it-py). ``benchmarks/markdown_rs_equal.py`` runs the same comparison over a corpus."""

from __future__ import annotations

import random
import subprocess

import pytest
from mgpu_testing import REPO
from skills_check.inputs import decode
from skills_check.parsers import markdown, markdown_rs


def _both(monkeypatch: pytest.MonkeyPatch, text: str) -> tuple[object, object]:
    """(the document read through the Rust port, the one read through markdown-it-py), neither by the quick reader."""
    with monkeypatch.context() as m:
        m.setattr(markdown, "quick_read", lambda _text: None)
        fast = markdown.parse_markdown("doc.md", text)
        m.setattr(markdown_rs, "tree", lambda _text: None)
        full = markdown.parse_markdown("doc.md", text)
    return fast, full


def test_the_rust_port_is_installed_and_used() -> None:
    assert markdown_rs.available()
    assert markdown_rs.tree("# Title\n\nText with `code`.\n") is not None


def test_every_markdown_file_of_the_repository_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    files = [REPO / p for p in out.stdout.split()]
    assert len(files) > 50
    for path in files:
        text, _ = decode(path.name, path.read_bytes())
        if text is not None:
            fast, full = _both(monkeypatch, text)
            assert fast == full, path


# pieces of real skill files, each a few lines; documents are made by joining some of them at random
PIECES = [
    "---\nname: demo-skill\ndescription: Sorts receipts. Use when a user uploads receipts.\n---\n",
    "---\nname: x\nmetadata:\n  author: someone\n# a comment\n---\n",
    "# Heading with `code` and [a link](ref.md#part)\n",
    "Setext title\n============\n",
    "Two-line setext\ntitle here\n---------------\n",
    "## Ünïcödé heading — dash & entity &amp; \\* escape\n",
    'Paragraph with `inline code`, **bold [link](a%20b.md)** and *em `x`* text.\nA second line with ![alt *text*](img.png "t").  \nAfter a hard break <http://example.com/ä>.\n',
    "- item with [ref link][r] and `code`\n- second `a  b` item\n  continued [x](y.md)\n  - nested `deep`\n",
    "1. first\n\n2. loose item with [l](l.md)\n\n   inner paragraph `c`\n",
    "[r]: https://example.com/ref\n",
    "| Col `a` | Col b |\n|---|:---:|\n| `env \\| grep x` | [t](t.md) |\n| short |\n| a | b | extra |\n",
    "> quoted `code` and [q](q.md)\n> ```sh\n> echo hi\n> ```\n",
    "```python\nprint('x')\n```\n",
    "~~~~ bash extra words\nrun --flag\n~~~~~\n",
    "```sh\nnever closed\n",
    "```\nclose with text\n``` nope\n```\n",
    "    indented code block\n    second line\n",
    "<div>\n<!-- a block comment -->\n</div>\n",
    "Text with <!-- an inline comment --> inside.\n",
    "Text with <!-- output-of: tool --log_root <dir> --> a double dash comment.\n",
    "\n<!-- a table kept out:\n| a | b |\n|---|---|\n-->\n",
    "A paragraph\n    <!-- inline -- after all -->\n",
    "  <!-->\n",
    "Line with a NUL \x00 char.\n",
    "Windows line\r\nbreaks\r\n",
    "***\n",
    "Same target [a](x.md) twice [b](x.md) and `x` `x` again.\n",
    "\tTabbed line and `tab\tcode`.\n",
    "",
]


def test_generated_documents_read_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(48)
    for _ in range(300):
        text = "\n".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))
        fast, full = _both(monkeypatch, text)
        assert fast == full, repr(text)


def test_documents_without_a_final_line_break_read_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that ends inside a block, with no final line break: the block's last line ends as its others do on both
    paths, and a fence left open there is never closed on both (markdown-it-py's content lacked the break, so its
    line count took the fence for closed)."""
    rng = random.Random(4815)
    for _ in range(300):
        text = "\n".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6))).rstrip("\n")
        fast, full = _both(monkeypatch, text)
        assert fast == full, repr(text)
    for text in ("# T\n\n```bash\necho hi", "# T\n\n    indented\n    code"):
        fast, full = _both(monkeypatch, text)
        assert fast == full and full.code[-1].text.endswith("\n"), repr(text)
    fast, full = _both(monkeypatch, "# T\n\n```bash\necho hi")
    assert [p.code for p in full.problems] == ["IN015"], full.problems


def test_texts_where_the_ports_part_ways_go_to_markdown_it_py() -> None:
    # a comment holding "--" (CommonMark 0.31 reads one comment, the Rust port by the older rule), a carriage
    # return (line numbering), a NUL (replaced before parsing, which moves byte offsets)
    for text in ("a <!-- x --y --> b\n", "a\r\nb\n", "a \x00 b\n"):
        assert markdown_rs.tree(text) is None
    # a comment that opens its line starts an HTML block, which both read alike: the port reads it
    assert markdown_rs.tree("Text.\n\n<!-- a table kept out:\n|---|---|\n-->\n") is not None
    assert markdown_rs.tree("A paragraph\n    <!-- inline -- after all -->\n") is None
    assert markdown_rs.tree("```\n\n<!-- x\n```\ntext <!-- a -- b -->\n") is None  # in a fence: inline after it


#: A text on which the Rust port panics (its inline code-pair scanner indexes past an empty list; found by the fuzz
#: test of ``parse_markdown``): an exception pyo3 raises as a BaseException, and a message Rust's hook prints on fd 2.
PANICS = "]1\n#>!a.\\a1.-_(~\\*[!<#!_! `\\1\\"


def test_a_text_the_port_panics_on_goes_to_markdown_it_py_quietly(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    parser = markdown_rs._parser()
    assert parser is not None
    with pytest.raises(BaseException, match="index out of bounds") as raised:
        parser.tree(PANICS)  # the port itself: the panic is real
    assert type(raised.value).__name__ == "PanicException"
    capfd.readouterr()
    assert markdown_rs.tree(PANICS) is None  # the port's turn ends in a fallback ...
    fast, full = _both(monkeypatch, PANICS)
    assert fast == full  # ... and the document is markdown-it-py's
    assert capfd.readouterr().err == ""  # and the Rust hook's message never reached the checker's stderr
