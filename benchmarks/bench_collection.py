"""Time the checker on a generated public-style skill collection beside agnix, in one run (prints figures
and the ratio; never asserted in tests).

The collection (written into a temporary folder) has the shape of the large public skill repositories:
``skills/<group>/<name>/`` (hidden ``skills/.curated/`` among the groups) and ``plugins/<p>/skills/<name>/``,
each skill a SKILL.md with references, scripts and assets (binary ones too), a license, and in one skill in
eight a folder of a hundred schema files, about 2,000 files for 80 skills (``--small``: four files a skill);
no ``[tool.skills-check]`` (so the generic rules run, as for any tree). Both tools check the whole collection in one call, cold: ours with
``--no-cache`` (and, for comparison, with ``--jobs 1``: without the worker process that loads skills and parses
scripts meanwhile, nor the one that shares the rules), agnix as it ships. Each figure is the median of ``--repeat`` fresh processes, the tools
interleaved so that load on a shared machine hits both alike; the target is ours at most 2x agnix's wall
and CPU time (issue 35).

agnix (a Rust binary) comes from PyPI (``pip install agnix``) or npm (``npm install agnix``, which
downloads the binary from GitHub); give its path with ``--agnix`` when it is not on PATH. Without it the
script says so and times ours alone. agnix runs with HOME in the temporary folder (nothing written to
the user's home).

    uv run --frozen python benchmarks/bench_collection.py [--skills 80] [--repeat 5] [--agnix PATH] [--corpus DIR]

``--corpus DIR`` times every repository folder in DIR the same way first, each with its own ratios (issue 48:
real trees, e.g. ``../shared/corpora/skills-six.tar.xz`` extracted outside the repository).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _bench import timed_process

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "tools" / "skills" / "cli.py"
GROUPS = ("documents", "engineering", "data", ".curated")
PLUGINS = ("writing-kit", "ops-kit")

SKILL = """---
name: {name}
description: Handles {words} requests from start to finish. Use when a user asks for help with {words}.
allowed-tools: Read Grep Bash(python:*)
---

# {title}

## Steps

1. Read [the reference](references/guide.md#steps) for the house style.
2. Run `scripts/run.py INPUT` to produce a draft.
3. Fill the [template](assets/template.md) with the draft.

## Checks

- The draft names its sources.
- The result fits on one page.
"""

GUIDE = """# {title} guide

## Contents

- [Steps](#steps)
- [Pitfalls](#pitfalls)

## Steps

Work from the input to the draft, one section at a time.

## Pitfalls

Drafts that skip the input's structure read badly.
"""


def make_collection(root: Path, n: int, real: bool = True) -> Path:
    """``n`` skills, about a quarter under plugins, the rest in groups under skills/; ``real``: with the files
    real collections hold beside them (:func:`add_real_files`: 80 skills make about 2,000 files), else four a
    skill."""
    for i in range(n):
        name = f"task-{i:03d}"
        if i % 4 == 3:
            folder = root / "plugins" / PLUGINS[i % len(PLUGINS)] / "skills" / name
        else:
            folder = root / "skills" / GROUPS[i % len(GROUPS)] / name
        words = f"task {i}"
        title = f"Task {i}"
        (folder / "references").mkdir(parents=True)
        (folder / "scripts").mkdir()
        (folder / "assets").mkdir()
        (folder / "SKILL.md").write_text(SKILL.format(name=name, words=words, title=title), encoding="utf-8")
        (folder / "references" / "guide.md").write_text(GUIDE.format(title=title), encoding="utf-8")
        (folder / "scripts" / "run.py").write_text("#!/usr/bin/env python3\nprint('draft')\n", encoding="utf-8")
        (folder / "assets" / "template.md").write_text(f"# {title}\n\n## Draft\n", encoding="utf-8")
        if real:
            add_real_files(folder, i, title)
    (root / "README.md").write_text("# A generated skill collection\n", encoding="utf-8")
    if real:
        (root / "LICENSE").write_text("Generated for a benchmark.\n" * 40, encoding="utf-8")
        (root / ".github" / "workflows").mkdir(parents=True)
        (root / ".github" / "workflows" / "ci.yml").write_text("on: [push]\njobs: {}\n", encoding="utf-8")
        for plugin in PLUGINS:
            manifest = root / "plugins" / plugin / ".claude-plugin" / "plugin.json"
            manifest.parent.mkdir(parents=True, exist_ok=True)
            manifest.write_text(f'{{"name": "{plugin}", "version": "1.0.0"}}\n', encoding="utf-8")
    return root


#: a schema file of the kind document skills ship by the hundred (office formats' XSDs)
SCHEMA = (
    '<?xml version="1.0"?>\n<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">\n'
    + ('  <xs:element name="part{k}" type="xs:string"/>\n' * 40)
    + "</xs:schema>\n"
)


def add_real_files(folder: Path, i: int, title: str) -> None:
    """What the large public collections hold beside the four files above: more references (one names the rest),
    helper scripts, binary assets, a license, and in one skill in eight a folder of a hundred schema files."""
    refs = folder / "references"
    for name in ("api.md", "examples.md", "troubleshooting.md"):
        body = f"# {title}: {name[:-3]}\n\n" + "".join(
            f"## Part {k}\n\nRun `python scripts/helpers.py --part {k}` and compare the output.\n\n" for k in range(12)
        )
        (refs / name).write_text(body, encoding="utf-8")
    files = [
        "\n## Files\n",
        "- [The API](references/api.md), [examples](references/examples.md) and "
        "[troubleshooting](references/troubleshooting.md): read the one the request needs.",
        "- `scripts/helpers.py` and `scripts/check.sh`: run `bash scripts/check.sh INPUT` before handing over.",
        "- `assets/logo.png` and `assets/font.ttf`: the house look of every draft.",
    ]
    if i % 8 == 0:
        files.append("- `ooxml/schemas/`: the format's schemas, one file a part; validate a draft against them.")
    with open(folder / "SKILL.md", "a", encoding="utf-8") as skill:
        skill.write("\n".join(files) + "\n")
    scripts = folder / "scripts"
    (scripts / "helpers.py").write_text('"""Helpers."""\n\n' + "def part(k):\n    return k\n" * 30, encoding="utf-8")
    (scripts / "check.sh").write_text('#!/usr/bin/env bash\nset -euo pipefail\npython3 scripts/run.py "$1"\n')
    assets = folder / "assets"
    (assets / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 16)
    (assets / "font.ttf").write_bytes(bytes(4096))
    (folder / "LICENSE.txt").write_text("Generated for a benchmark.\n" * 20, encoding="utf-8")
    if i % 8 == 0:
        schemas = folder / "ooxml" / "schemas"
        schemas.mkdir(parents=True)
        for k in range(100):
            (schemas / f"part-{k:03d}.xsd").write_text(SCHEMA.format(k=k), encoding="utf-8")


def time_tree(name: str, tree: Path, cmds: dict[str, list[str]], env: dict[str, str], repeat: int) -> None:
    """Time each command of ``cmds`` on ``tree`` (its path appended), interleaved, and print the medians and the
    ratios of ours to agnix."""
    cmds = {k: [*c, str(tree)] if k == "agnix" else [*c, "--root", str(tree)] for k, c in cmds.items()}
    for cmd in cmds.values():
        timed_process(cmd, env)  # warm the bytecode and file caches
    runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for key, cmd in cmds.items():
            runs[key].append(timed_process(cmd, env))
    files = sum(1 for p in tree.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"== {name}: {files} files; median of {repeat}")
    med = {
        k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), v[-1][2]) for k, v in runs.items()
    }
    for key, (wall, cpu, rc) in med.items():
        print(f"{key:7s} wall {wall:.3f} s  cpu {cpu:.3f} s  exit {rc}")
    if "agnix" in med:
        print(
            f"cores in use (cpu / wall): ours {med['ours'][1] / med['ours'][0]:.2f}, agnix "
            f"{med['agnix'][1] / med['agnix'][0]:.2f} (agnix checks files on several threads: on an idle "
            "machine its wall time falls below its cpu time)"
        )
        print(
            f"{name}: ours / agnix: wall {med['ours'][0] / med['agnix'][0]:.2f}x  "
            f"cpu {med['ours'][1] / med['agnix'][1]:.2f}x  (target <= 2x wall and cpu)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skills", type=int, default=80, help="skills in the generated collection (default 80)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per tool; the median is shown (default 5)")
    ap.add_argument("--agnix", default=shutil.which("agnix"), help="the agnix binary (default: from PATH)")
    ap.add_argument(
        "--small", action="store_true", help="four files a skill (SKILL.md, a reference, a script, an asset) only"
    )
    ap.add_argument(
        "--corpus",
        type=Path,
        help="a folder of real repositories, one folder each (e.g. the extracted corpora/skills-six.tar.xz): each "
        "is timed and gets its own ratios, then the generated collection",
    )
    ap.add_argument("--no-generated", action="store_true", help="with --corpus: the corpus only")
    args = ap.parse_args()
    if args.skills < 1 or args.repeat < 1:
        ap.error("--skills and --repeat must be at least 1")
    if args.corpus is not None and not args.corpus.is_dir():
        ap.error(f"--corpus {args.corpus}: not a folder (extract the corpus first: tar -xJf ARCHIVE -C DIR)")
    repos = sorted(p for p in args.corpus.iterdir() if p.is_dir()) if args.corpus is not None else []
    if args.corpus is not None and not repos:
        ap.error(f"--corpus {args.corpus}: holds no repository folder")
    tmp = Path(tempfile.mkdtemp(prefix="bench_collection_"))
    try:
        env = {
            **os.environ,
            "HOME": str(tmp / "home"),
            "SKILLS_CHECK_CACHE_DIR": str(tmp / "cache"),
            "PYTHONPYCACHEPREFIX": str(tmp / "pyc"),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as on a user's machine
        (tmp / "home").mkdir()
        ours = [sys.executable, str(CLI), "check", "--no-cache"]
        cmds = {"ours": ours, "ours-j1": [*ours, "--jobs", "1"]}  # -j1: all in one process
        if args.agnix:
            cmds["agnix"] = [args.agnix]
        else:
            print(
                "agnix is not installed (pip install agnix, or npm install agnix; then --agnix PATH): timing ours alone"
            )
        for repo in repos:
            time_tree(repo.name, repo, cmds, env, args.repeat)
        if not (repos and args.no_generated):
            tree = make_collection(tmp / "collection", args.skills, real=not args.small)
            time_tree(f"generated ({args.skills} skills)", tree, cmds, env, args.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
