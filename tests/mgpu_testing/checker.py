"""Test support for the checker's tests: the base fixture tree, in-process and bounded runs of the
real CLI, and small editing helpers. Imported by the checker test modules (never a test module)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
from pathlib import Path

from mgpu_testing import PYTHON, REPO, run

TOOLS = REPO / "tools" / "skills"
CLI = TOOLS / "cli.py"
BASE = REPO / "tests" / "fixtures" / "checker" / "base"
RULE_FIXTURES = REPO / "tests" / "fixtures" / "checker" / "rules"

DEMO = "skills/user/demo"
SKILL = f"{DEMO}/SKILL.md"
REF = f"{DEMO}/reference.md"
EVALS_MD = f"{DEMO}/evaluations.md"
EVALS_JSON = f"{DEMO}/evals/evals.json"
HELPER = "skills/developer/helper/SKILL.md"
MGPU = "docs/source/features/multi_gpu.rst"
TROUBLE = "docs/source/refs/troubleshooting.rst"
LAUNCHER = "scripts/reinforcement_learning/train_multigpu.py"


def make_tree(dest: Path, base: Path = BASE) -> Path:
    """A copy of the base fixture with its discovery links (symlinks are made here, not stored)."""
    shutil.copytree(base, dest, symlinks=True)
    agents = dest / ".agents" / "skills"
    agents.mkdir(parents=True, exist_ok=True)
    for name, target in (
        ("isaaclab-demo", "../../skills/user/demo"),
        ("isaaclab-helper", "../../skills/developer/helper"),
    ):
        if not (agents / name).is_symlink():
            os.symlink(target, agents / name)
    (dest / ".claude").mkdir(exist_ok=True)
    if not (dest / ".claude" / "skills").is_symlink():
        os.symlink("../.agents/skills", dest / ".claude" / "skills")
    return dest


def check(root: Path, *extra: str) -> tuple[int, list[dict]]:
    """Run the real CLI in-process; (exit status, findings)."""
    from skills_check import cli  # tools/skills is on pytest's pythonpath

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main(["check", "--root", str(root), "--format", "json", *extra])
    return rc, json.loads(out.getvalue())["findings"]


def append(root: Path, rel: str, text: str) -> None:
    """Add ``text`` at the end of ``root/rel``."""
    with open(root / rel, "a", encoding="utf-8") as fh:
        fh.write(text)


def edit(root: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture text not found in {rel}: {old!r}"
    path.write_text(text.replace(old, new, count), encoding="utf-8")


def misbehave(action: str) -> object | None:
    """What a forked helper of the checker does wrong on its first job, by ``action``: "die" (exit 3), "stall"
    (until its parent gives up waiting and kills it), "unpackable" (a value the codec refuses, returned); None for
    any other action (the job is done as usual)."""
    if action == "die":
        os._exit(3)
    if action == "stall":
        signal.pause()
    if action == "unpackable":
        return object()
    return None


def line_of(root: Path, rel: str, needle: str, nth: int = 1) -> int:
    lines = (root / rel).read_text(encoding="utf-8").split("\n")
    hits = [i + 1 for i, line in enumerate(lines) if needle in line]
    assert len(hits) >= nth, f"{needle!r} not in {rel}"
    return hits[nth - 1]


def body_start(root: Path, rel: str) -> int:
    return line_of(root, rel, "---", 2) + 1


def assert_finding(findings: list[dict], code: str, path: str, line: int | None = None) -> dict:
    hits = [f for f in findings if f["code"] == code and f["path"] == path and (line is None or f["line"] == line)]
    assert hits, f"no {code} at {path}:{line}; got " + "; ".join(
        f"{f['path']}:{f['line']}:{f['col']} {f['code']} {f['message']}" for f in findings
    )
    return hits[0]


# The child sets its own limits before it runs the checker script: address space and CPU seconds are
# enforced by the kernel (RLIMIT_AS, RLIMIT_CPU), wall time by ``run``'s timeout.
_BOUNDED = (
    "import resource, runpy, sys\n"
    "mem, cpu = int(sys.argv[1]), int(sys.argv[2])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (mem, mem))\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))\n"
    "sys.argv = sys.argv[3:]\n"
    "sys.path.insert(0, sys.argv[0].rpartition('/')[0])\n"  # as `python SCRIPT` does: its folder first
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def check_bounded(
    root: Path | str,
    *extra: str,
    mem_mb: int = 1024,
    cpu_s: int = 60,
    wall_s: float = 120,
    env: dict[str, str] | None = None,
):
    """Run ``cli.py check --root ROOT --format json`` in a child under hard memory and CPU limits."""
    cmd = [
        PYTHON,
        "-c",
        _BOUNDED,
        str(mem_mb * 1024 * 1024),
        str(cpu_s),
        str(CLI),
        "check",
        "--root",
        str(root),
        "--format",
        "json",
        *extra,
    ]
    cwd = Path(root).parent if str(root) else REPO
    return run(cmd, timeout=wall_s, env=dict(os.environ) if env is None else env, cwd=cwd)


def self_check():
    """(project, findings) of the checker on this repository, in-process and without caches, with the
    profiles its pyproject chooses (what ``cli.py check`` runs). Tests share one run through the
    session-scoped ``repo_check`` fixture (tests/conftest.py)."""
    from skills_check.loader import load_config, load_project
    from skills_check.runner import in_profiles, load_rules, run_rules

    profiles = load_config(REPO).get("profiles")
    project = load_project(REPO, use_cache=False)
    return project, run_rules(project, in_profiles(load_rules(), profiles))
