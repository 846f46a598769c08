"""Benchmark the skill/doc checker against two floors measured in the same run (prints figures; never
asserted in tests).

- *import floor*: a fresh process that imports the parser libraries the check uses (docutils with its
  RST parser, markdown-it-py, mdit-py-plugins' front-matter plugin, PyYAML) and nothing else.
- *parse floor*: the same imports, then every file the check reads parsed once with them (markdown with
  markdown-it and its front matter with PyYAML, RST with docutils), nothing else.
- *cold*: ``cli.py check --no-cache`` (target: at most 1.2x the parse floor); beside it ``--jobs 1``, the
  same check in one process (without the worker that parses the RST pages meanwhile, ``loader/prefetch.py``,
  and the fork that shares the rules, ``forked.py``).
- *warm*: ``cli.py check`` with the parse cache filled and nothing changed (target: at most 0.7x the
  import floor: a warm check imports no parser).

Each figure is the median of ``--repeat`` fresh processes (wall and CPU time, user+sys, separately),
since the machine may be shared. With ``--sizes``, copies of this repository plus generated skills
show the marginal time per skill (linear growth: flat). With ``--baseline OTHER/cli.py`` (the checker
of another commit: ``git worktree add /tmp/old <rev>``) the same cold and warm checks by that checker.

The cache goes to a temporary folder (never the user's home). Bytecode caching is on for the children
(``PYTHONDONTWRITEBYTECODE`` dropped, ``PYTHONPYCACHEPREFIX`` in a temporary folder), as on a user's
machine: with it off, every run recompiles docutils and the ratios measure the compiler instead.

    uv run --frozen python benchmarks/bench_checker.py [--repeat 9] [--sizes 10,100] [--baseline PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _bench import timed_process

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "tools" / "skills" / "cli.py"

IMPORTS = (
    "import docutils.core, docutils.parsers.rst, docutils.utils, docutils.frontend, markdown_it, "
    "mdit_py_plugins.front_matter, yaml\n"
)
PARSE = (
    IMPORTS
    + """
import json, sys
from docutils.parsers.rst import Parser
files = json.load(open(sys.argv[1]))
md = markdown_it.MarkdownIt("commonmark").enable("table").use(mdit_py_plugins.front_matter.front_matter_plugin)
parser = Parser()
for path in files:
    text = open(path, encoding="utf-8").read()
    if path.endswith(".rst"):
        settings = docutils.frontend.get_default_settings(Parser)
        settings.report_level = 5
        settings.halt_level = 5
        settings.warning_stream = False
        document = docutils.utils.new_document(path, settings)
        parser.parse(text, document)
    else:
        for token in md.parse(text):
            if token.type == "front_matter":
                yaml.safe_load(token.content)
"""
)


def checked_files() -> list[str]:
    """The markdown and RST files a check of this repository parses (the loader's own list)."""
    sys.path.insert(0, str(CLI.parent))
    from skills_check.loader import load_project

    project = load_project(REPO)
    docs = [d.path for s in project.skills for d in (s.skill_md, *s.files.values())]
    docs += list(project.rst) + [p for p in project.linked if p.endswith((".md", ".rst"))]
    return [str(REPO / p) for p in docs]


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, cpu s, exit status) of one fresh process; leading ``VAR=value`` words set its environment."""
    env = dict(os.environ)
    while cmd and "=" in cmd[0] and not cmd[0].startswith(("/", "-")):
        key, _, value = cmd[0].partition("=")
        env[key] = value
        cmd = cmd[1:]
    return timed_process(cmd, env, cwd)


def median(cmds: dict[str, list[str]], cwd: Path, repeat: int) -> dict[str, tuple[float, float, int]]:
    """Median wall and CPU of each command, the commands interleaved so load changes hit them alike."""
    runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for key, cmd in cmds.items():
            runs[key].append(timed(cmd, cwd))
    return {
        k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), v[-1][2]) for k, v in runs.items()
    }


SKILL = """---
name: bench-skill-{i}
description: Benchmarks the checker on skill {i}. Use when timing the checker.
audience: user
status: experimental
owners:
  - bench
license: BSD-3-Clause
metadata:
  author: bench
---

# Bench skill {i}

## When To Use

Use this skill when timing the checker; see [Reference](reference.md#settings).

## Workflow

1. Run `uv run mgpu-lab train_multigpu --num_gpus 2 --dry_run`.
2. Read [Evaluations](evaluations.md).

## Validation

Run `uv run --no-project python tools/skills/cli.py check`.

## Maintenance

Keep it short.

## References

- [Reference](reference.md)
- [Evaluations](evaluations.md)
"""

REFERENCE = """# Reference {i}

## Settings

| Symptom | Settings |
| --- | --- |
| hang | `NCCL_P2P_DISABLE=1` |
"""

EVALS = "# Evaluations\n\n" + "".join(
    f"## Scenario {k}\n\nQuery: q{k}\n\nExpected behavior: e{k}\n\nKnown failure modes: f{k}\n\n" for k in range(3)
)


def make_tree(base: Path, n: int) -> Path:
    """A copy of the repo (docs, scripts, skills, aliases) plus ``n`` generated skills with aliases."""
    root = base / f"tree{n}"
    root.mkdir()
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    for name in ("docs", "scripts", "skills", ".agents"):
        if (REPO / name).exists():
            shutil.copytree(
                REPO / name, root / name, symlinks=True, ignore=shutil.ignore_patterns("_build", "__pycache__")
            )
    if (REPO / ".claude").exists():
        shutil.copytree(REPO / ".claude", root / ".claude", symlinks=True)
    shutil.copytree(REPO / "tools", root / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".agents" / "skills").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        d = root / "skills" / "user" / f"bench-skill-{i}"
        (root / ".agents" / "skills" / f"bench-skill-{i}").symlink_to(f"../../skills/user/bench-skill-{i}")
        d.mkdir(parents=True)
        (d / "SKILL.md").write_text(SKILL.format(i=i))
        (d / "reference.md").write_text(REFERENCE.format(i=i))
        (d / "evaluations.md").write_text(EVALS)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--sizes", default="", help="comma-separated generated-skill counts, e.g. 10,100,400")
    ap.add_argument("--baseline", type=Path, default=None, help="another checker's cli.py to compare with")
    ap.add_argument(
        "--lsp",
        action="store_true",
        help="time the language server instead: didChange -> diagnostics, warm (benchmarks/bench_lsp.py)",
    )
    args, rest = ap.parse_known_args()
    if args.lsp:  # the server's benchmark lives beside this one; it takes its own options (--repeat, ...)
        argv = [sys.executable, str(Path(__file__).with_name("bench_lsp.py")), *rest]
        if args.repeat != 9:
            argv += ["--repeat", str(args.repeat)]
        return subprocess.run(argv, check=False).returncode
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    py = sys.executable
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench_checker_pyc_")
    tmp = Path(tempfile.mkdtemp(prefix="bench_checker_"))
    files = tmp / "files.json"
    files.write_text(json.dumps(checked_files()))
    cmds = {"import floor": [py, "-c", IMPORTS], "parse floor": [py, "-c", PARSE, str(files)]}
    clis = {"ours": CLI, **({"baseline": args.baseline} if args.baseline else {})}
    for label, cli in clis.items():
        cmds[f"{label} cold"] = [py, str(cli), "check", "--no-cache"]
        if label == "ours":  # the same check in one process: what the worker and the rules' fork buy
            cmds["ours cold -j1"] = [py, str(cli), "check", "--no-cache", "--jobs", "1"]
        cmds[f"{label} warm"] = [f"SKILLS_CHECK_CACHE_DIR={tmp / label}", py, str(cli), "check"]
        for _ in range(2):  # fill this checker's caches (a report is kept once its inputs are settled)
            timed(cmds[f"{label} warm"], REPO)
    # every check here runs with its cache in the temporary folder
    os.environ["SKILLS_CHECK_CACHE_DIR"] = str(tmp / "cold")
    for key in [k for k in cmds if k.endswith(("floor", "cold"))]:
        timed(cmds[key], REPO)  # warm the bytecode cache
    res = median(cmds, REPO, args.repeat)
    print(f"{len(json.loads(files.read_text()))} files parsed by the parse floor; median of {args.repeat}")
    for key, (w, c, rc) in res.items():
        print(f"{key:14s} wall {w:.3f} s  cpu {c:.3f} s  exit {rc}")
    pw, pc, _ = res["parse floor"]
    iw, ic, _ = res["import floor"]
    for label in clis:
        cw, cc, _ = res[f"{label} cold"]
        ww, wc, _ = res[f"{label} warm"]
        print(f"{label}: cold / parse floor  wall {cw / pw:.2f}x  cpu {cc / pc:.2f}x  (target <= 1.2x)")
        print(f"{label}: warm / import floor wall {ww / iw:.2f}x  cpu {wc / ic:.2f}x  (target <= 0.7x)")
    one_w, one_c, _ = res["ours cold -j1"]
    print(f"ours --jobs 1 (one process): cold / parse floor  wall {one_w / pw:.2f}x  cpu {one_c / pc:.2f}x")
    if args.baseline:
        o, b = res, res
        print(
            f"ours/baseline: cold cpu {o['ours cold'][1] / b['baseline cold'][1]:.2f}x; "
            f"warm cpu {o['ours warm'][1] / b['baseline warm'][1]:.2f}x"
        )
    sizes = [int(x) for x in args.sizes.split(",") if x]
    if sizes:
        rows = []
        for n in sizes:
            root = make_tree(tmp, n)
            w, c, rc = median(
                {"c": [py, str(CLI), "check", "--no-cache", "--root", str(root)]}, REPO, max(1, min(args.repeat, 3))
            )["c"]
            rows.append((n, w, c, rc))
            print(f"{n:4d} skills (--no-cache): wall {w:7.3f} s  cpu {c:7.3f} s  exit {rc}")
        for (n0, w0, c0, _), (n1, w1, c1, _) in itertools.pairwise(rows):
            print(f"marginal cpu per skill {n0}->{n1}: {1000 * (c1 - c0) / (n1 - n0):6.2f} ms")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
