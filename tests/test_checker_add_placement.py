"""Where ``--add-suppressions`` puts a comment (adoption/add.py), for a finding on every line of a markdown file
(frontmatter with a block scalar and nested keys, paragraphs, lists, a blockquote, fences, a table, an indented
code block, a setext heading) and of an RST page (targets, titles, a list-table, a code block, lists, a
definition): after the insertions the real parsers read the same document (same frontmatter, headings,
tables, code blocks, labels, no new problem), and a suppression of the code covers the finding's line."""

from __future__ import annotations

import pytest
from skills_check.adoption.add import edits_for
from skills_check.adoption.suppress import scopes_of
from skills_check.fix import _apply
from skills_check.parsers.markdown import parse_markdown
from skills_check.parsers.rst import parse_rst

MARKDOWN = """\
---
name: demo
description: |
  A block scalar line one.
  Line two.
metadata:
  author: A
  tags:
    - x
license: MIT
---

# Title

Para line one
para line two.

- item one
  continued
- item two

  - nested item

> quoted line
> quoted two

```bash
echo one

echo two
```

| a | b |
| --- | --- |
| 1 | 2 |
| 3 | 4 |

Text before code:

    indented code

Setext
------

Last line.
"""

RST = """\
.. _top:

=====
Title
=====

Para one
continues here.

.. _sec:

Section
-------

.. list-table:: Opts
   :header-rows: 1

   * - a
     - b
   * - c
     - d

.. code-block:: bash

   echo hi

   echo there

- bullet one
- bullet two

  continued bullet

Term
   Definition.

Last para.
"""

CODE = "SK203"


def _shape(doc) -> tuple:
    """What a reader sees of the document, without line numbers."""
    common = (
        [h.text for h in doc.headings],
        len(doc.tables),
        [c.text for c in doc.code if c.kind == "block"],
        sorted((p.code, p.message) for p in doc.problems),
    )
    if hasattr(doc, "frontmatter"):
        return (*common, doc.frontmatter)
    return (*common, sorted(doc.labels))


def _suppressed(parse, path: str, text: str, lines_hit: list[int]) -> None:
    doc = parse(path, text)
    edits = edits_for(doc, {n: [CODE] for n in lines_hit})
    new_lines, skipped = _apply(text.split("\n"), list(edits))
    assert not skipped
    new_text = "\n".join(new_lines)
    new = parse(path, new_text)
    assert _shape(new) == _shape(doc), new_text
    scopes = scopes_of(new, {CODE}).scopes
    moved_lines = []
    for line in lines_hit:
        moved = line + sum(len(e.lines) for e in edits if e.start <= line)
        moved_lines.append(moved)
        assert new_lines[moved - 1] == text.split("\n")[line - 1]
        assert any(s.code == CODE and s.first <= moved <= s.last for s in scopes), (line, new_text)
    # no comment that hides nothing (it would be SU002 at once) and none that is ignored (a second `disable`)
    assert all(any(s.first <= m <= s.last for m in moved_lines) for s in scopes), new_text
    opening = [c for c in new.comments if "skills-check:" in c.text and " enable " not in f" {c.text} "]
    assert len(opening) == len({s.directive for s in scopes}), new_text


@pytest.mark.parametrize("line", range(1, MARKDOWN.count("\n") + 1))
def test_markdown_each_line(line: int) -> None:
    _suppressed(parse_markdown, "skills/a/SKILL.md", MARKDOWN, [line])


@pytest.mark.parametrize("line", range(1, RST.count("\n") + 1))
def test_rst_each_line(line: int) -> None:
    _suppressed(parse_rst, "docs/page.rst", RST, [line])


def test_every_line_at_once() -> None:
    _suppressed(parse_markdown, "skills/a/SKILL.md", MARKDOWN, list(range(1, MARKDOWN.count("\n") + 1)))
    _suppressed(parse_rst, "docs/page.rst", RST, list(range(1, RST.count("\n") + 1)))
