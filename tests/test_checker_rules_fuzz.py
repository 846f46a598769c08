"""Robustness of the rules: random skill and RST text never makes a rule raise (no IN090), and the
command-line splitter agrees with shlex.split on plain words."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mgpu_testing.checker import MGPU, SKILL, make_tree
from skills_check import cli
from skills_check.rules import structure
from skills_check.rules.shell import command_lines, words

FRAGMENTS = [
    "`--num_gpus`",
    "`--rl_library foo`",
    "`--`",
    "`-`",
    "`--x=`",
    "`NCCL_P2P_DISABLE=1`",
    "NCCL_=1",
    "CUDA_X=,",
    "[a](#)",
    "[b](reference.md#)",
    "[c](../../..)",
    "[d](<>)",
    "[e](http://x)",
    "`isaaclab-`",
    "`skills/`",
    "`docs/../../etc`",
    "Run `scripts/`",
    "Run `scripts/../../x.py`",
    "| a | b |\n| --- | --- |\n| `NCCL_A=1` | x |",
    "| --x | y |\n|---|---|\n| `--num_gpus` | |",
    "```bash\nisaaclab train_multigpu --rl_library\n```",
    "```\n$ torchrun -m\n```",
    "```sh\nuv run\n```",
    "```bash\npython -m skrl.utils.distributed.jax x.py --\n```",
    "```bash\nA=1 \\\n\\\n```",
    "```\n'unclosed \"quote\n```",
    "## Scenario",
    "Query:",
    "Known failure modes:",
    "# ",
    "\t",
    "\u00e9\u4e2d",
    "`$(echo --x)`",
    "`<a --b>`",
    "`{}`",
    "`--rdzv_*`",
    "|",
    "`",
]
RST_FRAGMENTS = [
    ".. list-table::\n   :header-rows: 1\n\n   * - Option\n     - Default\n   * - ``--num_gpus``\n     -\n",
    ".. list-table::\n\n   * - ``NCCL_A=1``\n   * - ``NCCL_B=2``\n",
    ":ref:`nowhere`",
    ":doc:`/x`",
    "``--``",
    ".. code-block:: bash\n\n   mgpu-lab train --rl_library\n",
    "Title\n=====\n",
    "``NCCL_X=<y>``",
]


def _check(root: Path) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main(["check", "--root", str(root), "--format", "json"])
    assert rc in (0, 1)
    return json.loads(out.getvalue())["findings"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(FRAGMENTS), max_size=12),
    st.lists(st.sampled_from(RST_FRAGMENTS), max_size=5),
    st.text(max_size=40),
)
def test_random_documents_never_break_a_rule(md: list[str], rst: list[str], noise: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_tree(Path(tmp) / "repo")
        with open(root / SKILL, "a", encoding="utf-8") as fh:
            fh.write("\n" + "\n\n".join(md) + noise + "\n")
        with open(root / MGPU, "a", encoding="utf-8") as fh:
            fh.write("\n" + "\n\n".join(rst) + "\n")
        findings = _check(root)
        assert not [f for f in findings if f["code"] == "IN090"], findings


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab -=\"'\\\n", max_size=30))
def test_words_agree_with_shlex(text: str) -> None:
    try:
        expected = shlex.split(text)
    except ValueError:
        return  # unbalanced quotes: shlex refuses, the splitter just must not raise
    finally:
        command_lines(text, 1)
    if "\\\n" in text:
        return  # a continuation: joined by logical_lines before splitting
    segments = [(text, 1, 1)]
    assert [w.text for w in words(segments)] == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="a -=\"'\\\n|&;<>()#$2{}*", max_size=40))
def test_splitter_takes_any_text(text: str) -> None:
    for ws in command_lines(text, 1):
        assert all(w.line >= 1 and w.col >= 1 for w in ws)


# characters of every class the token estimate tells apart: ASCII letters, digits, "_", spaces and the separators a
# str pattern takes for spaces, marks, letters and digits outside ASCII, \w that is neither ("²", "½", "Ⅻ", a
# combining accent), spaces and symbols outside ASCII
TOKEN_ALPHABET = "aZ09_ -.\t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2003éß中٣²½Ⅻ\u0301—→😀"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=TOKEN_ALPHABET, max_size=40))
def test_the_token_estimate_counts_as_its_definition_word_by_word(text: str) -> None:
    """SK212's estimate counts bytes where each character has an ASCII stand-in of its class: always the count of
    the loop over words that defines it (rules.structure)."""
    assert structure.estimate_tokens(text) == structure._by_words(text)
