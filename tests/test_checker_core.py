"""Checker core: parsers (lines, anchors, argparse), loader, runner, report formats, exit codes,
--select/--ignore, robustness on bad input, never running project code, and the missing-parsers path."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from mgpu_testing import PYTHON, REPO, run

SKILLS_DIR = REPO / "tools" / "skills"
CLI = SKILLS_DIR / "cli.py"

from skills_check.loader import load_project
from skills_check.model import MISSING, ArgSpec, Finding, Loc
from skills_check.output.report import Summary, escape_data, escape_property, exit_code, format_github, summary_line
from skills_check.parsers.argspec import find_installed, parse_argparse
from skills_check.parsers.markdown import parse_markdown, split_row
from skills_check.parsers.rst import parse_rst
from skills_check.runner import cap_per_file


def check(root: Path, *args: str) -> SimpleNamespace:
    """The real CLI, in-process (``cli.main``): exit status, stdout and stderr, as a process would give them."""
    from skills_check import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(["check", "--root", str(root), "--no-cache", *args])
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code if isinstance(exc.code, int) else 2
    return SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def check_with_cache(root: Path, *args: str) -> SimpleNamespace:
    """``check`` with the caches on (as a user runs it)."""
    from skills_check import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["check", "--root", str(root), *args])
    return SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# markdown

MD = """\
---
name: demo-skill
description: >
  Demonstrates things. Use when testing.
metadata:
  author: someone
  nested:
    deep: 1
---

# Training on GPUs

Intro with `--num_gpus 2` and a [link](other.md#setup) and
a second line with [another](x.md) and `code`.

## Setup

| Symptom | Settings |
| --- | --- |
| hang at 2 | `NCCL_P2P_DISABLE=1` |
| crash \\| odd | `NCCL_SHM_DISABLE=1`, then `NCCL_IB_DISABLE=1` |

## Setup

```bash
uv run mgpu-lab train_multigpu --num_gpus 2
```

### C++ & CUDA: "tips"!
"""


def test_markdown_frontmatter_keys_and_lines() -> None:
    doc = parse_markdown("s.md", MD)
    assert doc.frontmatter["name"] == "demo-skill"
    assert doc.frontmatter_lines["name"] == 2
    assert doc.frontmatter_lines["description"] == 3
    assert doc.frontmatter_lines["metadata.author"] == 6
    assert doc.frontmatter_lines["metadata.nested.deep"] == 8
    assert doc.body_start == 10
    assert doc.problems == []


def test_markdown_headings_github_anchors_with_duplicates() -> None:
    doc = parse_markdown("s.md", MD)
    assert [(h.level, h.anchor, h.line) for h in doc.headings] == [
        (1, "training-on-gpus", 11),
        (2, "setup", 16),
        (2, "setup-1", 23),
        (3, "c--cuda-tips", 29),
    ]
    code_heading = parse_markdown("t.md", "# Use `--tee 3` (per-rank)\n").headings[0]
    assert code_heading.anchor == "use---tee-3-per-rank"


def test_markdown_links_and_inline_code_lines_and_cols() -> None:
    doc = parse_markdown("s.md", MD)
    links = {(l.target, l.line, l.col) for l in doc.links}
    assert ("other.md#setup", 13, 40) in links
    assert ("x.md", 14, 30) in links
    inline = {(c.text, c.line, c.col) for c in doc.code if c.kind == "inline"}
    assert ("--num_gpus 2", 13, 12) in inline
    assert ("code", 14, 40) in inline
    block = [c for c in doc.code if c.kind == "block"]
    assert block[0].lang == "bash" and block[0].line == 26 and "--num_gpus 2" in block[0].text


def test_markdown_table_cells_lines_cols_and_code() -> None:
    doc = parse_markdown("s.md", MD)
    (table,) = doc.tables
    assert table.line == 18 and table.title == "Setup"
    assert [c.text for c in table.header] == ["Symptom", "Settings"]
    row = table.rows[1]
    assert row[0].text == "crash | odd" and row[0].line == 21 and row[0].col == 3
    assert [(c.text, c.line) for c in row[1].code] == [("NCCL_SHM_DISABLE=1", 21), ("NCCL_IB_DISABLE=1", 21)]
    line = MD.split("\n")[20]
    assert line[row[1].col - 1 :].startswith("`NCCL_SHM_DISABLE=1`")
    assert split_row("| a | `b\\|c` | d |") == [(2, 3), (6, 12), (15, 16)]


def test_markdown_bad_frontmatter_becomes_findings() -> None:
    bad_yaml = parse_markdown("a.md", "---\nname: ok\ndescription: [unclosed\n---\n# T\n")
    (p,) = bad_yaml.problems
    assert p.code == "IN010" and p.loc.line in (3, 4)
    unclosed = parse_markdown("b.md", "---\nname: x\n\n# Title\n")
    assert [p.code for p in unclosed.problems] == ["IN011"] and unclosed.frontmatter is None
    not_map = parse_markdown("c.md", "---\n- a\n- b\n---\n")
    assert [p.code for p in not_map.problems] == ["IN012"]
    tagged = parse_markdown("d.md", "---\nname: !!python/object:os.system x\n---\n")
    assert [p.code for p in tagged.problems] == ["IN010"]


# ---------------------------------------------------------------------------------------------
# RST

RST = """\
.. _multi-gpu:

Multi-GPU training
==================

Intro with ``--num_gpus`` and a
second line with ``--nnodes 2`` and :ref:`the list <nccl-list>`
and :doc:`../refs/troubleshooting`.

.. code-block:: bash
   :caption: Example
   :linenos:

   uv run mgpu-lab train_multigpu --num_gpus 2

.. _nccl-list:

NCCL workarounds
----------------

.. list-table:: Known workarounds
   :header-rows: 1

   * - Symptom
     - Settings
   * - Hang at world size 2
     - ``NCCL_P2P_DISABLE=1``
   * - Illegal memory access
     - ``NCCL_SHM_DISABLE=1``, then ``NCCL_IB_DISABLE=1``

.. tab-set::

   .. tab-item:: Linux

      Run with ``--tee 3``.

.. dropdown:: More

   Set :envvar:`NCCL_DEBUG` and see `the site <https://example.com>`_.

.. note:: Admonitions work.

.. toctree::
   :maxdepth: 1

   features/multi_gpu

NCCL workarounds
----------------

Text.
"""


def test_rst_labels_sections_and_anchors() -> None:
    doc = parse_rst("docs/m.rst", RST)
    assert doc.problems == []
    assert doc.labels == {"multi-gpu": 1, "nccl-list": 16}
    assert [(h.level, h.text, h.anchor, h.line) for h in doc.headings] == [
        (1, "Multi-GPU training", "multi-gpu-training", 3),
        (2, "NCCL workarounds", "nccl-workarounds", 18),
        (2, "NCCL workarounds", doc.headings[2].anchor, 48),
    ]
    assert doc.headings[2].anchor != "nccl-workarounds"


def test_rst_roles_links_and_literals_with_lines() -> None:
    doc = parse_rst("docs/m.rst", RST)
    links = {(l.kind, l.target, l.line) for l in doc.links}
    assert ("ref", "nccl-list", 7) in links
    assert ("doc", "../refs/troubleshooting", 8) in links
    assert ("url", "https://example.com", 39) in links
    assert ("doc", "features/multi_gpu", 46) in links
    code = {(c.text, c.line, c.col) for c in doc.code if c.kind == "inline"}
    assert ("--num_gpus", 6, 12) in code
    assert ("--nnodes 2", 7, 18) in code
    assert ("--tee 3", 35, 16) in code  # inside tab-set/tab-item stand-ins
    assert ("NCCL_DEBUG", 39, 8) in code  # :envvar: as a literal
    (block,) = [c for c in doc.code if c.kind == "block"]
    assert block.lang == "bash" and block.line == 14 and block.col == 4


def test_rst_list_table_cells_with_lines() -> None:
    doc = parse_rst("docs/m.rst", RST)
    (table,) = doc.tables
    assert table.title == "Known workarounds" and table.line == 21
    assert [c.text for c in table.header] == ["Symptom", "Settings"]
    assert [[(c.text, c.line) for c in row] for row in table.rows] == [
        [("Hang at world size 2", 26), ("NCCL_P2P_DISABLE=1", 27)],
        [("Illegal memory access", 28), ("NCCL_SHM_DISABLE=1, then NCCL_IB_DISABLE=1", 29)],
    ]
    assert [(c.text, c.line, c.col) for c in table.rows[1][1].code] == [
        ("NCCL_SHM_DISABLE=1", 29, 8),
        ("NCCL_IB_DISABLE=1", 29, 37),
    ]


def test_rst_broken_markup_is_a_finding_with_a_line() -> None:
    doc = parse_rst("docs/b.rst", "Title\n=====\n\n.. nosuchdirective:: x\n\n:nosuchrole:`y`\n\n* a\nb\n")
    lines = {(p.code, p.loc.line) for p in doc.problems}
    assert ("IN020", 4) in lines and ("IN020", 6) in lines
    assert all(p.loc.path == "docs/b.rst" for p in doc.problems)


# ---------------------------------------------------------------------------------------------
# argparse

LAUNCHER = """\
import argparse
LIBS = ("rsl_rl", "rl_games", "skrl")
METHODS = {"spawn": 1, "fork": 2}

def build_parser():
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--rl_library", choices=LIBS, default="rsl_rl")
    parser.add_argument("--num_gpus", "--nproc_per_node", dest="num_gpus", default="gpu")
    group = parser.add_argument_group("multi-node")
    group.add_argument("--nnodes", type=str, default="1")
    excl = group.add_mutually_exclusive_group()
    excl.add_argument("--log_all_ranks", action="store_true")
    excl.add_argument("--local_ranks_filter", nargs="?")
    parser.add_argument("--start_method", choices=sorted(METHODS))
    parser.add_argument("--device", default="cuda:0" if available() else "cpu")
    parser.add_argument("--color", action=argparse.BooleanOptionalAction)
    parser.add_argument_group("x").add_argument("--chained", default=3)
    parser.add_argument("script", nargs="?")
    parser.set_defaults(nnodes="2")
    return parser
"""


def test_argparse_options_groups_and_values() -> None:
    spec = parse_argparse("l.py", LAUNCHER)
    assert spec.problems == [] and spec.allow_abbrev is False
    by = spec.by_flag()
    assert by["--rl_library"].choices == ("rsl_rl", "rl_games", "skrl") and by["--rl_library"].default == "rsl_rl"
    assert by["--nproc_per_node"] is by["--num_gpus"] and by["--num_gpus"].dest == "num_gpus"
    assert by["--nnodes"].default == "2" and by["--nnodes"].line == 10  # set_defaults wins
    assert by["--log_all_ranks"].takes_value is False and by["--log_all_ranks"].default is False
    assert by["--local_ranks_filter"].nargs == "?" and by["--local_ranks_filter"].default is MISSING
    assert by["--start_method"].choices == ("fork", "spawn")
    assert by["--device"].default == '"cuda:0" if available() else "cpu"'
    assert "--no-color" in by and by["--color"].takes_value is False
    assert by["--chained"].default == 3
    assert by["--help"].takes_value is False
    assert by["script"].flags == ("script",)


def test_argparse_syntax_error_is_a_finding() -> None:
    spec = parse_argparse("bad.py", "import argparse\np = argparse.ArgumentParser(\n")
    assert [p.code for p in spec.problems] == ["IN030"] and spec.problems[0].loc.line >= 2
    # a parser made elsewhere and only filled here is read (and so judged) too
    spec = parse_argparse("bad.py", "def fill(parser):\n    parser.add_argument('--x'\n")
    assert [p.code for p in spec.problems] == ["IN030"]


def test_a_script_without_argparse_is_not_parsed() -> None:
    """A helper script that never mentions argparse or its calls has no options: it reads as one that was parsed
    and held none (the same spec), without the parse."""
    text = '"""Helpers."""\n\n' + "def part(k):\n    return k\n" * 30
    assert parse_argparse("helpers.py", text) == ArgSpec(path="helpers.py", incomplete="no argparse options found")
    # a comment naming one of the calls makes it parse, to the same spec
    assert parse_argparse("helpers.py", text + "# no _group here\n") == ArgSpec(
        path="helpers.py", incomplete="no argparse options found"
    )
    # not parsed: even its syntax error is left to Python's own tools (IN030 is for scripts read for options)
    assert parse_argparse("helpers.py", text + "def broken(:\n").problems == []


@pytest.mark.e2e
def test_torchrun_and_skrl_options_found_without_importing_them() -> None:
    code = (  # noqa: UP031 - a Python source template, %r quotes its paths
        "import sys; sys.path.insert(0, %r)\n"
        "from pathlib import Path\n"
        "from skills_check.parsers.argspec import find_installed, parse_argparse\n"
        "p = find_installed(Path(%r), 'torch', 'distributed/run.py')\n"
        "h = [(p.parent / 'argparse_util.py').read_text()]\n"
        "spec = parse_argparse(str(p), p.read_text(), h)\n"
        "by = spec.by_flag()\n"
        "print(by['--nproc_per_node'].canonical, by['--standalone'].takes_value, by['--tee'].takes_value)\n"
        "j = find_installed(Path(%r), 'skrl', 'utils/distributed/jax/launcher.py')\n"
        "print(sorted(parse_argparse(str(j), j.read_text()).by_flag())[:2])\n"
        "print('torch' in sys.modules, 'skrl' in sys.modules)\n"
    ) % (str(SKILLS_DIR), str(REPO), str(REPO))
    res = run([PYTHON, "-c", code], timeout=60, env=dict(os.environ))
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == "--nproc-per-node False True"
    assert out[1] == "['--coordinator-address', '--coordinator_address']"
    assert out[2] == "False False"
    assert find_installed(Path("/nonexistent"), "no_such_pkg_xyz", "run.py") is None


# ---------------------------------------------------------------------------------------------
# the CLI on small trees


def tiny_tree(root: Path) -> Path:
    write(
        root,
        "pyproject.toml",
        """
        [tool.skills-check]
        launcher = "tools/launch.py"
        trainer = "tools/train.py"
    """,
    )
    write(root, "tools/launch.py", "import argparse\np = argparse.ArgumentParser()\np.add_argument('--num_gpus')\n")
    write(root, "tools/train.py", "import argparse\np = argparse.ArgumentParser()\np.add_argument('--task')\n")
    write(root, "skills/user/demo/SKILL.md", "---\nname: demo\ndescription: Demo. Use when testing.\n---\n# Demo\n")
    write(root, "docs/index.rst", "Index\n=====\n\nText.\n")
    return root


def test_exit_codes_and_select_ignore(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path)
    clean = check(root, "--select", "IN")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.strip().splitlines()[-1].startswith("clean:")
    write(root, "skills/user/demo/notes.md", "---\nname: [x\n---\n")
    bad = check(root, "--select", "IN")
    assert bad.returncode == 1
    assert "skills/user/demo/notes.md:2:" in bad.stdout and " IN010 " in bad.stdout
    assert check(root, "--select", "IN0", "--ignore", "IN010").returncode == 0
    assert check(root, "--select", "IN011").returncode == 0
    for args in (["--select", "ZZ999"], ["--format", "xml"], ["--bogus"]):
        res = check(root, *args)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "Traceback" not in res.stderr
    missing = check(tmp_path / "nope")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    write(root, "pyproject.toml", "[tool.skills-check\n")
    assert check(root).returncode == 2


def test_warnings_alone_exit_zero_unless_strict(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path)
    write(root, "tools/train.py", "print('no argparse here')\n")
    res = check(root, "--select", "IN031")
    assert res.returncode == 0 and "tools/train.py:1:1: IN031 warning:" in res.stdout
    assert check(root, "--select", "IN031", "--strict").returncode == 1


def test_formats_text_json_github(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path)
    write(root, "skills/user/demo/a.md", "---\nname: [x\n---\n")
    write(root, "skills/user/demo/b.md", "---\nbroken: {\n---\n")
    text = check(root, "--select", "IN")
    lines = text.stdout.strip().splitlines()
    assert lines[0].startswith("skills/user/demo/a.md:2:") and lines[1].startswith("skills/user/demo/b.md:")
    assert lines[-1].startswith("2 error(s), 0 warning(s)")
    data = json.loads(check(root, "--select", "IN", "--format", "json").stdout)
    assert [(f["path"], f["code"]) for f in data["findings"]] == [
        ("skills/user/demo/a.md", "IN010"),
        ("skills/user/demo/b.md", "IN010"),
    ]
    assert data["summary"]["errors"] == 2
    gh = check(root, "--select", "IN", "--format", "github")
    assert gh.returncode == 1
    assert gh.stdout.startswith("::error file=skills/user/demo/a.md,line=2,col=")
    assert ",title=IN010::frontmatter YAML does not parse" in gh.stdout


def test_github_escaping() -> None:
    assert escape_data("50% a\nb\r") == "50%25 a%0Ab%0D"
    assert escape_property("a:b,c%") == "a%3Ab%2Cc%25"
    f = Finding("DR101", "x=1, y: 100%\nnext", Loc("we,ird:path.md", 3, 4), truth=Loc("docs/m.rst", 9))
    out = format_github([f], Summary())
    assert out.splitlines()[0] == (
        "::error file=we%2Cird%3Apath.md,line=3,col=4,title=DR101::x=1, y: 100%25%0Anext (truth: docs/m.rst:9:1)"
    )
    assert exit_code([Finding("X", "w", Loc("a"), severity="warning")]) == 0
    assert exit_code([Finding("X", "w", Loc("a"), severity="warning")], strict=True) == 1


def test_explain(capsys: pytest.CaptureFixture[str]) -> None:
    from skills_check import cli

    assert cli.main(["--explain", "IN005"]) == 0 and "symlink" in capsys.readouterr().out
    assert cli.main(["check", "--explain", "NOPE1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# bad input: each a finding with a location; the check goes on


def test_bad_inputs_become_findings_and_the_check_goes_on(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path)
    d = "skills/user/demo"
    write(root, f"{d}/yaml.md", "---\nname: [x\n---\n")
    write(root, f"{d}/unclosed.md", "---\nname: x\n# no end\n")
    write(root, f"{d}/binary.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write(root, f"{d}/latin1.md", "# Title\n\ncaf\u00e9\n".encode("latin-1"))
    write(root, f"{d}/huge.md", b"# big\n" + b"x" * (20 * 1024 * 1024))
    write(root, "docs/broken.rst", "Title\n=====\n\n.. nosuch:: x\n\n`unclosed\n")
    write(root, "skills/user/demo/evals/evals.json", '[{"id": 1,}]')
    (root / "skills/user/loop").symlink_to("loop")
    (root / f"{d}/sub").mkdir()
    (root / f"{d}/sub/self").symlink_to("../sub", target_is_directory=True)
    (root / f"{d}/cycle.md").symlink_to("cycle.md")
    (root / "tools/train.py").unlink()
    res = check(root, "--select", "IN", "--format", "json")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    got = {(f["path"], f["code"]) for f in json.loads(res.stdout)["findings"]}
    assert {
        (f"{d}/yaml.md", "IN010"),
        (f"{d}/unclosed.md", "IN011"),
        (f"{d}/binary.md", "IN002"),
        (f"{d}/latin1.md", "IN003"),
        (f"{d}/huge.md", "IN004"),
        ("docs/broken.rst", "IN020"),
        (f"{d}/evals/evals.json", "IN040"),
        ("skills/user/loop", "IN005"),
        ("tools/train.py", "IN001"),
        (f"{d}/cycle.md", "IN005"),
    } <= got
    latin = next(f for f in json.loads(res.stdout)["findings"] if f["path"] == f"{d}/latin1.md")
    assert (latin["line"], latin["col"]) == (3, 4)
    full = check(root)  # with every rule: still no crash
    assert full.returncode == 1 and "Traceback" not in full.stderr and "IN090" not in full.stdout


def test_entry_scripts_are_those_with_a_shebang_or_a_main_guard(tmp_path: Path) -> None:
    """A shebang counts only at the very start of the file: one after a byte-order mark is none (the text the
    loader keeps has the mark dropped, so the bytes decide), as in a file of a suffix it does not read as text."""
    root = tiny_tree(tmp_path)
    d = "skills/user/demo/scripts"
    write(root, f"{d}/shebang.py", "#!/usr/bin/env python3\nprint(1)\n")
    write(root, f"{d}/marked.py", b"\xef\xbb\xbf#!/usr/bin/env python3\nprint(1)\n")
    write(root, f"{d}/guarded.py", "def main():\n    pass\n\nif __name__ == '__main__':\n    main()\n")
    write(root, f"{d}/module.py", "def helper():\n    return 1\n")
    write(root, f"{d}/run", "#!/bin/sh\necho hi\n")
    write(root, f"{d}/_private.py", "#!/usr/bin/env python3\n")
    (skill,) = [s for s in load_project(root, {}).skills if s.dir == "skills/user/demo"]
    assert sorted(skill.entry_scripts) == [f"{d}/guarded.py", f"{d}/run", f"{d}/shebang.py"]


def test_never_imports_or_runs_project_code(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path)
    marker = tmp_path / "PWNED"
    planted = (
        f"open({str(marker)!r}, 'w').write('x')\n"
        "import argparse\n"
        "def build_parser():\n"
        "    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--num_gpus', default=open(%r, 'w'))\n"
        "    return p\n"
        "build_parser()\n"
    ) % str(marker)
    write(root, "tools/launch.py", planted)
    write(root, "tools/train.py", planted)
    write(root, "tools/__init__.py", planted)
    write(root, "conftest.py", planted)
    write(root, "docs/conf.py", planted)
    res = check(root)
    assert res.returncode in (0, 1), res.stderr
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# missing parsers: re-run through uv once, or one line; never an ImportError


def _fake_uv(bin_dir: Path, log: Path, with_parsers: bool) -> None:
    """A stand-in for uv that runs the checker with the project's parsers (``with_parsers``) or again without
    any (``python -S``: no site-packages)."""
    bin_dir.mkdir()
    script = bin_dir / "uv"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {log}\n'
        'echo "guard=$SKILLS_CHECK_REEXEC" >> ' + str(log) + "\n"
        "shift 4\n"  # run --no-project --script CLI
        f'exec {PYTHON} {"" if with_parsers else "-S "}{CLI} "$@"\n'
    )
    script.chmod(0o755)


@pytest.mark.e2e
def test_missing_parsers_without_uv_prints_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))
    res = run([PYTHON, "-S", str(CLI), "check"], timeout=60, env=env)  # -S: no site-packages, so no parsers
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "uv run --no-project --script" in res.stderr and "Traceback" not in res.stderr
    # a parser that is there but fails to import
    (tmp_path / "shadow" / "yaml").mkdir(parents=True)
    (tmp_path / "shadow" / "yaml" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "shadow"), PATH=str(tmp_path))
    res = run([PYTHON, str(CLI), "check", "--no-cache"], timeout=60, env=env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert "broken on purpose" in res.stderr
    # a real interpreter without site-packages (no parsers at all)
    res = run([sys.executable, "-S", str(CLI), "check"], timeout=60, env=dict(os.environ, PATH=str(tmp_path)))
    assert res.returncode == 2 and "ImportError" not in res.stderr and "Traceback" not in res.stderr


@pytest.mark.e2e
def test_missing_parsers_reexecs_once_through_uv(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path / "tree")
    log = tmp_path / "uv.log"
    _fake_uv(tmp_path / "bin", log, with_parsers=True)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin")
    env.pop("SKILLS_CHECK_REEXEC", None)
    res = run(
        [PYTHON, "-S", str(CLI), "check", "--root", str(root), "--no-cache", "--select", "IN"], timeout=120, env=env
    )
    assert res.returncode == 0, res.stderr
    first, guard = log.read_text().splitlines()
    assert first == f"run --no-project --script {CLI} check --root {root} --no-cache --select IN"
    assert guard == "guard=1"
    # the guard stops a second re-run: still missing in the child -> one line, exit 2
    log2 = tmp_path / "uv2.log"
    _fake_uv(tmp_path / "bin2", log2, with_parsers=False)
    env["PATH"] = f"{tmp_path / 'bin2'}:/usr/bin:/bin"
    res = run([PYTHON, "-S", str(CLI), "check", "--root", str(root), "--no-cache"], timeout=120, env=env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert len(log2.read_text().splitlines()) == 2  # uv was called exactly once


def test_parse_cache_gives_the_same_findings_and_sees_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tiny_tree(tmp_path / "tree")
    write(root, "skills/user/demo/a.md", "---\nname: [x\n---\n")
    monkeypatch.setenv("SKILLS_CHECK_CACHE_DIR", str(tmp_path / "cache"))
    args = ("--select", "IN", "--format", "json")

    cold = check_with_cache(root, *args)
    assert list((tmp_path / "cache").glob("*.json"))
    warm = check_with_cache(root, *args)
    assert cold.stdout == warm.stdout and cold.returncode == warm.returncode == 1
    write(root, "skills/user/demo/a.md", "---\nname: x\n---\n")
    assert check_with_cache(root, *args).returncode == 0
    for f in (tmp_path / "cache").glob("*.json"):
        f.write_bytes(b"junk")
    assert check_with_cache(root, *args).returncode == 0  # a corrupt cache is ignored


def test_loader_reads_repo_config_and_aliases(tmp_path: Path) -> None:
    root = tiny_tree(tmp_path)
    (root / ".agents/skills").mkdir(parents=True)
    (root / ".agents/skills/demo").symlink_to("../../skills/user/demo")
    write(root, ".agents/skills/win", "../../skills/user/demo\n")  # a Windows checkout's link file
    (root / ".claude").mkdir()
    (root / ".claude/skills").symlink_to("../.agents/skills")
    project = load_project(root, {"docs": "docs", "trainer": None})
    assert project.config["launcher"] == "tools/launch.py"
    assert project.aliases == {"demo": "../../skills/user/demo", "win": "../../skills/user/demo"}
    assert project.claude_skills == "../.agents/skills"
    assert [s.dir for s in project.skills] == ["skills/user/demo"] and project.skills[0].audience == "user"
    assert project.launcher is not None and "--num_gpus" in project.launcher.by_flag()
    assert list(project.rst) == ["docs/index.rst"]


def test_repository_passes_its_own_checker(repo_check) -> None:
    """The project eats its own cooking: links, anchors, aliases, tables and commands all agree."""
    project, findings = repo_check
    assert [f"{f.loc}: {f.code} {f.message}" for f in findings] == []
    assert len(project.skills) == 3 and project.torchrun is not None and project.tools


def test_a_finding_carries_only_its_rules_code(tmp_path: Path) -> None:
    """The code of a finding is the one its rule was registered under: a rule that yields another code is a
    rule bug (IN090 naming both), never a finding that borrows another rule's code, severity or docs."""
    from skills_check.rules.common import finding
    from skills_check.rules.links import link_anchor  # SK204
    from skills_check.rules.registry import Rule
    from skills_check.runner import run_rules

    root = tiny_tree(tmp_path)
    project = load_project(root)

    def borrows(_project: object) -> object:
        yield finding(link_anchor, "an anchor finding from a rule that is not the anchor rule", "skills/x.md")

    def own(_project: object) -> object:
        yield finding(link_anchor, "the anchor rule's own finding", "skills/x.md")

    rules_ = [
        Rule("SK999", "borrower", borrows, "error", "core"),
        Rule("SK204", "anchor", own, "error", "core"),
    ]
    found = run_rules(project, rules_)
    assert [(f.code, f.message) for f in found if f.loc.path == "skills/x.md"] == [
        ("SK204", "the anchor rule's own finding")
    ]
    bugs = [f for f in found if f.code == "IN090"]
    assert len(bugs) == 1 and "rule SK999 failed" in bugs[0].message and "'SK204'" in bugs[0].message


def test_a_cap_line_counts_the_findings_it_stands_for_not_itself() -> None:
    many = [Finding("SK205", f"reference {i}", Loc("a.md", i), severity="warning") for i in range(1, 61)]
    shown = cap_per_file([*many, Finding("SK101", "bad name", Loc("SKILL.md", 2))], limit=50)
    assert len(shown) == 52 and [f.hidden for f in shown if f.hidden] == [10]
    assert summary_line(shown, Summary(skills=1)).startswith("1 error(s), 60 warning(s) in 2 file(s)")
