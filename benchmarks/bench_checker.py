"""Benchmark the skill/doc checker (prints figures; never asserted in tests).

1. A full check of this repository vs the floor ``python -c "import docutils.core, markdown_it, yaml"``:
   cold (``--no-cache``, target <= 1.5x the floor) and warm (parse cache filled, target < 1x: a warm
   check imports no parser). Each is run N times as a fresh process; the minimum wall time and the
   minimum CPU time (user+sys) are reported, since the machine may be shared.
2. Copies of this repository plus 10, 100 and 400 generated skills (clean trees): the marginal time
   per skill should stay flat (linear growth).
3. With ``--baseline OTHER/cli.py`` (e.g. the checker of another commit: ``git worktree add /tmp/old
   <rev>``), the same cold and warm checks by that checker, and ours/baseline ratios.

The cache goes to a temporary folder (never the user's home). Bytecode caching is on for the children
(``PYTHONDONTWRITEBYTECODE`` dropped, ``PYTHONPYCACHEPREFIX`` in a temporary folder), as on a user's
machine: with it off, every run recompiles docutils and the ratios measure the compiler instead.

    uv run python benchmarks/bench_checker.py [--repeat 5] [--sizes 10,100,400] [--baseline PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / "tools" / "skills" / "cli.py"


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, cpu s, exit status) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def best(cmd: list[str], cwd: Path, repeat: int) -> tuple[float, float, int]:
    runs = [timed(cmd, cwd) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2]


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

1. Run `uv run isaaclab train_multigpu --num_gpus 2 --dry_run`.
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
    f"## Scenario {k}\n\nQuery: q{k}\n\nExpected behavior: e{k}\n\nKnown failure modes: f{k}\n\n" for k in range(3))


def make_tree(base: Path, n: int) -> Path:
    """A copy of the repo (docs, scripts, skills, aliases) plus ``n`` generated skills with aliases."""
    root = base / f"tree{n}"
    root.mkdir()
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    for name in ("docs", "scripts", "skills", ".agents"):
        if (REPO / name).exists():
            shutil.copytree(REPO / name, root / name, symlinks=True,
                            ignore=shutil.ignore_patterns("_build", "__pycache__"))
    if (REPO / ".claude").exists():
        shutil.copytree(REPO / ".claude", root / ".claude", symlinks=True)
    (root / ".venv").symlink_to(REPO / ".venv")  # the installed torch/skrl, as in the repo
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
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="10,100,400")
    ap.add_argument("--baseline", type=Path, default=None, help="another checker's cli.py to compare with")
    args = ap.parse_args()
    py = sys.executable
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench_checker_pyc_")
    os.environ["SKILLS_CHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_checker_cache_")
    floor_w, floor_c, _ = best([py, "-c", "import docutils.core, markdown_it, yaml"], REPO, args.repeat)
    print(f"floor  (import docutils.core, markdown_it, yaml): wall {floor_w:.3f} s  cpu {floor_c:.3f} s")
    full = ("import docutils.core, docutils.parsers.rst, docutils.parsers.rst.directives.misc, "
            "docutils.parsers.rst.directives.tables, markdown_it, mdit_py_plugins.front_matter, yaml")
    full_w, full_c, _ = best([py, "-c", full], REPO, args.repeat)
    print(f"floor+ (every parser module the check imports):   wall {full_w:.3f} s  cpu {full_c:.3f} s")
    results = {}
    for label, cli in (("ours", CLI), ("baseline", args.baseline)):
        if cli is None:
            continue
        os.environ["SKILLS_CHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"bench_checker_{label}_")
        cold_w, cold_c, rc = best([py, str(cli), "check", "--no-cache"], REPO, args.repeat)
        timed([py, str(cli), "check"], REPO)  # fill the parse cache
        warm_w, warm_c, _ = best([py, str(cli), "check"], REPO, args.repeat)
        results[label] = (cold_w, cold_c, warm_w, warm_c)
        print(f"{label:8s} cold --no-cache (exit {rc}): wall {cold_w:.3f} s  cpu {cold_c:.3f} s  ratio to floor "
              f"wall {cold_w / floor_w:.2f}x cpu {cold_c / floor_c:.2f}x  (target <= 1.5x); to floor+ "
              f"cpu {cold_c / full_c:.2f}x")
        print(f"{label:8s} warm parse cache:         wall {warm_w:.3f} s  cpu {warm_c:.3f} s  ratio to floor "
              f"wall {warm_w / floor_w:.2f}x cpu {warm_c / floor_c:.2f}x  (target < 1x)")
    if "baseline" in results:
        o, b = results["ours"], results["baseline"]
        print(f"ours/baseline: cold cpu {o[1] / b[1]:.2f}x wall {o[0] / b[0]:.2f}x; "
              f"warm cpu {o[3] / b[3]:.2f}x wall {o[2] / b[2]:.2f}x")
    os.environ["SKILLS_CHECK_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_checker_sizes_")
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for n in [int(x) for x in args.sizes.split(",") if x]:
            root = make_tree(Path(tmp), n)
            w, c, rc = best([py, str(CLI), "check", "--no-cache", "--root", str(root)], REPO,
                            max(1, min(args.repeat, 3)))
            rows.append((n, w, c, rc))
        for n, w, c, rc in rows:
            print(f"{n:4d} skills (--no-cache): wall {w:7.3f} s  cpu {c:7.3f} s  exit {rc}")
        for (n0, w0, c0, _), (n1, w1, c1, _) in zip(rows, rows[1:]):
            print(f"marginal per skill {n0}->{n1}: cpu {1000 * (c1 - c0) / (n1 - n0):6.2f} ms  "
                  f"wall {1000 * (w1 - w0) / (n1 - n0):6.2f} ms")
        if len(rows) > 2:
            first = (rows[1][2] - rows[0][2]) / (rows[1][0] - rows[0][0])
            last = (rows[-1][2] - rows[-2][2]) / (rows[-1][0] - rows[-2][0])
            print(f"marginal cpu per skill, last/first step: {last / first:.2f}x (flat, i.e. linear growth: ~1x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
