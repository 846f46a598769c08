"""The flag rules share work between the places one command text is written (tokenised once with positions
relative to its code, placed per place; its invocations looked up once per text and skill folder; each
distinct invocation checked once). These tests hold that shared path to the plain one: every written command
tokenised where it stands by ``command_lines``, its invocations and problems worked out afresh.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from mgpu_testing.checker import HELPER, REF, SKILL, check, make_tree
from skills_check.loader import load_project
from skills_check.model import MarkdownDoc, Project, RstDoc
from skills_check.rules import flags, written
from skills_check.rules.commands import invocations
from skills_check.rules.common import all_skill_docs, code_items, negative_lines, rst_docs
from skills_check.rules.registry import of
from skills_check.rules.shell import Word, command_lines, place, relative_command_lines

# one command, wrong three ways (--backend's choices are auto/nccl/gloo, the probe has --iters, -b takes a value)
CMD = "python scripts/probe.py --backend mpi --iter 5 -b"
TORCHRUN = "torchrun --nproc_per_node 2 --nope skills/user/demo/scripts/probe.py --iter 5"
REPEATS = f"""

## Repeats

Run `{CMD}` first; then `{CMD}` again, and `{TORCHRUN}`.

  - Indented: `{CMD}`
    and on the next line `{CMD}`.

| once | twice |
|---|---|
| `{CMD}` | `{CMD}` |

```bash
$ {CMD}
$ {CMD} \\
    --backend {{nccl,bogus}} --iter 6
output --not-a-flag
(venv) $ env A=1 {CMD}
```

```
{CMD}
   {CMD}
```

```yaml
args:
  - {CMD}
  -    {CMD}
```

Known failure modes:
- `{CMD}`
"""


def _tree(tmp_path: Path) -> Path:
    root = make_tree(tmp_path / "repo")
    for rel in (SKILL, REF, HELPER):  # the helper skill has no scripts/probe.py: there the command is DR305's
        path = root / rel
        path.write_text(path.read_text(encoding="utf-8") + REPEATS, encoding="utf-8")
    return root


def _plain_commands(project: Project) -> list[tuple[str, str | None, list[Word]]]:
    """(doc path, skill folder, words) of every written command, tokenised where it stands, in document order."""
    out: list[tuple[str, str | None, list[Word]]] = []
    docs: list[tuple[MarkdownDoc | RstDoc, str | None]] = [
        (doc, skill.dir) for skill, doc in all_skill_docs(project)
    ] + [(doc, None) for doc in rst_docs(project)]
    for doc, folder in docs:
        negative = negative_lines(doc)
        lines = doc.text.split("\n")
        for code in code_items(doc):
            lang = (code.lang or "").lower() if code.kind == "block" else ""
            if (lang in written.NOT_SHELL and lang not in written.YAML) or code.line in negative:
                continue
            text = code.text.rstrip("\n")
            if lang in written.YAML:
                text = written._yaml_items(text)
            inline = code.kind == "inline"
            if inline:
                text = text.replace("\n", " ")
            cols = written._content_cols(doc, code, lines)
            for ws in command_lines(text, code.line, cols, prompts_only=False if inline else None):
                out.append((doc.path, folder, ws))
    return out


def _plain_findings(project: Project) -> set[tuple[str, str, int, int, str]]:
    found = set()
    for path, folder, ws in _plain_commands(project):
        for inv in invocations(project, ws, (folder,) if folder is not None else ()):
            for p in flags.check_invocation(inv):
                found.add((of(p.rule).code, path, p.word.line, p.word.col, p.message))
            if inv.tool == "missing-script" and inv.program is not None:
                message = f"{inv.program.text} does not exist (the command runs it)"
                found.add(("DR305", path, inv.program.line, inv.program.col, message))
    return found


def test_shared_flag_work_gives_the_plain_findings(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    _, findings = check(root)
    got = {
        (f["code"], f["path"], f["line"], f["col"], f["message"])
        for f in findings
        if f["code"] in ("DR301", "DR302", "DR303", "DR305")
    }
    project = load_project(root, {}, drift=True)
    assert got == _plain_findings(project)
    # the tree does what it is for: one text judged at many places, in two skills, at several columns of a line
    lines = {(f[1], f[2]) for f in got if f[0] == "DR303"}
    assert {p for p, _ in lines} == {SKILL, REF}
    run_line = [f for f in got if f[0] == "DR303" and f[1] == SKILL and "Run `" in _line(root, SKILL, f[2])]
    assert len({f[3] for f in run_line}) == 2
    assert any(f[0] == "DR305" and f[1] == HELPER for f in got)
    assert any(f[0] == "DR302" for f in got) and any("'bogus'" in f[4] for f in got)


def test_written_words_are_the_plain_tokens(tmp_path: Path) -> None:
    """``Written.words`` (placed on demand, what DR304 reads) are ``command_lines``' words, place by place."""
    project = load_project(_tree(tmp_path), {}, drift=True)
    shared = [(w.doc.path, w.skill.dir if w.skill else None, w.words) for w in written.written_commands(project)]
    assert shared == _plain_commands(project)
    assert len(shared) > 40


def _line(root: Path, rel: str, n: int) -> str:
    return (root / rel).read_text(encoding="utf-8").split("\n")[n - 1]


PIECES = ["python", " ", "  ", "--x", "=1", "\\", "\n", "$ ", "% ", "(env) $ ", "'a b'", '"c\\"d"', "#", "&&", "|"]
PIECES += ["<dir>", "$(echo x)", "2>", "e", "é", "\t", ";"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
    st.integers(1, 500),
    st.lists(st.integers(1, 80), max_size=8),
    st.sampled_from([None, False, True]),
)
def test_relative_words_placed_are_command_lines(text: str, first: int, cols: list[int], prompts: bool | None) -> None:
    plain = command_lines(text, first, cols, prompts_only=prompts)
    relative = relative_command_lines(text, prompts)
    assert [[(w.text, w.op) for w in ws] for ws in plain] == [[(w.text, w.op) for w in ws] for ws in relative]
    assert [[(w.line, w.col) for w in ws] for ws in plain] == [[place(w, first, cols) for w in ws] for ws in relative]
