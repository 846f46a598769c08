"""Mutation test: copy this repository, inject one kind of drift at a time, and check that the checker
reports it (exit 1) at the right file. The unmutated copy must pass (exit 0).

Targets are found in whatever the repository holds now (through the checker's own model), so the
test keeps working while the skills, docs and launcher change.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from mgpu_testing import REPO, checker

TOOLS = REPO / "tools" / "skills"

from skills_check.loader import load_project
from skills_check.model import MISSING, Project
from skills_check.rules import nccl

COPIED = (
    "skills",
    "docs",
    "scripts",
    "src",
    "tests",
    "benchmarks",
    ".agents",
    ".claude",
    "pyproject.toml",
    "tools",
    "README.md",
)
IGNORE = shutil.ignore_patterns("__pycache__", "_build", "*.pyc")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("mutation") / "pristine"
    dest.mkdir()
    for name in COPIED:
        src = REPO / name
        if src.is_symlink():
            (dest / name).symlink_to(src.readlink())
        elif src.is_dir():
            shutil.copytree(src, dest / name, symlinks=True, ignore=IGNORE)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def project(pristine: Path) -> Project:
    return load_project(pristine)


@pytest.fixture()
def tree(pristine: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(pristine, dest, symlinks=True)
    return dest


def check(root: Path) -> tuple[int, list[dict], str]:
    """The checker on ``root``, in-process (the copy's tools/ are this checker's sources)."""
    rc, findings = checker.check(root)
    return rc, findings, "\n".join(f"{f['path']}:{f['line']} {f['code']} {f['message']}" for f in findings)


def _lines(root: Path, rel: str) -> list[str]:
    return (root / rel).read_text(encoding="utf-8").split("\n")


def _write_lines(root: Path, rel: str, lines: list[str]) -> None:
    (root / rel).write_text("\n".join(lines), encoding="utf-8")


def _skill(project: Project, slug: str = "train-multi-gpu"):
    for skill in project.skills:
        if skill.dir.endswith("/" + slug):
            return skill
    pytest.fail(f"no skill {slug} in the repository yet")


# --- mutations: each returns the path where the drift must be reported -----------------------


def drop_rst_row(root: Path, project: Project) -> str:
    truth = nccl.truth_list(project)
    mirrors = nccl.mirror_tables(project)
    if truth is None or not mirrors:
        pytest.fail("no NCCL list and mirror yet")
    rst, _, settings = truth
    counts: dict[str, int] = {}
    for s in settings:
        counts[s.pair] = counts.get(s.pair, 0) + 1
    victim = next(s for s in reversed(settings) if counts[s.pair] == 1)
    lines = _lines(root, rst.path)
    start = victim.loc.line - 1
    while not re.match(r"^\s*\* - ", lines[start]):
        start -= 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        if not lines[end].strip() and (end + 1 >= len(lines) or not lines[end + 1].startswith(" " * (indent + 1))):
            break
        end += 1
    del lines[start:end]
    _write_lines(root, rst.path, lines)
    return mirrors[0][0].path


def change_reference_value(root: Path, project: Project) -> str:
    mirrors = nccl.mirror_tables(project)
    if not mirrors:
        pytest.fail("no mirrored NCCL table yet")
    doc, _, settings = mirrors[0]
    s = settings[0]
    lines = _lines(root, doc.path)
    new = "7" if s.value != "7" else "8"
    lines[s.loc.line - 1] = lines[s.loc.line - 1].replace(s.pair, f"{s.var}={new}", 1)
    _write_lines(root, doc.path, lines)
    return doc.path


def unlisted_setting(root: Path, project: Project) -> str:
    skill = _skill(project)
    with open(root / skill.skill_md.path, "a", encoding="utf-8") as fh:
        fh.write("\nIf that fails, set `NCCL_NET_GDR_LEVEL=PHB` as well.\n")
    return skill.skill_md.path


def _launcher_option(project: Project, want: Callable) -> tuple[str, object]:
    spec = project.launcher
    if spec is None or not spec.options:
        pytest.fail("no launcher yet")
    for opt in spec.options:
        if opt.flags[0].startswith("--") and opt.flags[0] != "--help" and want(opt):
            return spec.path, opt
    pytest.fail("no suitable launcher option")


def rename_launcher_flag(root: Path, project: Project) -> str:
    path, opt = _launcher_option(project, lambda o: len(o.flags) == 1 and o.flags[0] != "--rl_library")
    src = (root / path).read_text(encoding="utf-8")
    flag = opt.flags[0]
    assert f'"{flag}"' in src
    (root / path).write_text(src.replace(f'"{flag}"', f'"{flag}_renamed"', 1), encoding="utf-8")
    return "docs/source/features/multi_gpu.rst"


def add_launcher_flag(root: Path, project: Project) -> str:
    path, opt = _launcher_option(project, lambda o: True)
    lines = _lines(root, path)
    line = lines[opt.line - 1]
    m = re.match(r"^(\s*)([\w.]+\.add_argument\()", line) or re.match(
        r"^(\s*)([\w.]+\.add_argument\()", lines[opt.line - 2]
    )
    assert m, line
    lines.insert(
        opt.line - 1 if m.string == line else opt.line - 2,
        f'{m.group(1)}{m.group(2)}"--undocumented_knob", default=None)',
    )
    _write_lines(root, path, lines)
    return "docs/source/features/multi_gpu.rst"


def change_launcher_default(root: Path, project: Project) -> str:
    path, opt = _launcher_option(
        project,
        lambda o: (
            o.default is not MISSING
            and o.default is not None
            and not isinstance(o.default, bool)
            and isinstance(o.default, (int, str))
            and o.takes_value
            and not o.choices
        ),
    )
    src = (root / path).read_text(encoding="utf-8")
    lines = src.split("\n")
    offset = sum(len(x) + 1 for x in lines[: opt.line - 1])
    m = re.compile(
        r"default=(" + re.escape(repr(opt.default)) + r"|" + re.escape(json.dumps(opt.default)) + r")"
    ).search(src, offset)
    assert m, opt
    new = repr(opt.default + 1) if isinstance(opt.default, int) else json.dumps(opt.default + "x")
    (root / path).write_text(src[: m.start(1)] + new + src[m.end(1) :], encoding="utf-8")
    return "docs/source/features/multi_gpu.rst"


def misspell_example_flag(root: Path, project: Project) -> str:
    skill = _skill(project)
    docs = [skill.skill_md.path, *sorted(skill.files, key=lambda p: not p.endswith("reference.md"))]
    for rel in docs:
        lines = _lines(root, rel)
        for i, line in enumerate(lines):
            # a flag of the command itself (no backtick between): a bare `--flag` span later on the line is DR304's
            m = re.search(r"mgpu-lab train_multigpu\b[^`]*?(--[a-z][a-z_]{2,}[a-z])\b", line)
            foreign = re.search(r"\s(-m|--train_script|--train_module)\s", line)  # unknown flags go to that script
            if m and not foreign and not re.match(r"^\s*[-*]?\s*(known failure|invents)", line, re.I):
                flag = m.group(1)
                lines[i] = line[: m.start(1)] + flag[:-2] + flag[-1] + flag[-2] + line[m.end(1) :]
                _write_lines(root, rel, lines)
                return rel
    pytest.fail("no launcher example with a flag in the skill")


def break_link(root: Path, project: Project) -> str:
    skill = _skill(project)
    text = (root / skill.skill_md.path).read_text(encoding="utf-8")
    m = re.search(r"\]\(([\w./-]+\.md)\)", text)
    assert m, "SKILL.md links no markdown file"
    (root / skill.skill_md.path).write_text(text[: m.start(1)] + "missing-" + text[m.start(1) :], encoding="utf-8")
    return skill.skill_md.path


def break_anchor(root: Path, project: Project) -> str:
    skill = _skill(project)
    for doc in [skill.skill_md, *skill.files.values()]:
        text = (root / doc.path).read_text(encoding="utf-8")
        m = re.search(r"\]\(([\w./-]*#)([\w-]+)\)", text)
        if m:
            (root / doc.path).write_text(text[: m.start(2)] + "no-such-" + text[m.start(2) :], encoding="utf-8")
            return doc.path
    text = (root / skill.skill_md.path).read_text(encoding="utf-8")
    m = re.search(r"\]\(([\w./-]+\.md)\)", text)
    assert m
    (root / skill.skill_md.path).write_text(text[: m.end(1)] + "#no-such-heading" + text[m.end(1) :], encoding="utf-8")
    return skill.skill_md.path


def drop_query(root: Path, project: Project) -> str:
    skill = _skill(project)
    rel = f"{skill.dir}/evaluations.md"
    lines = _lines(root, rel)
    i = next(i for i, line in enumerate(lines) if re.match(r"^\W*query\W*:", line, re.I))
    lines[i] = re.sub(r"query(\W*):", r"Question\1:", lines[i], count=1, flags=re.I)
    _write_lines(root, rel, lines)
    return rel


MUTATIONS = {
    "drop-rst-row": (drop_rst_row, "DR1"),
    "change-reference-value": (change_reference_value, "DR102"),
    "unlisted-setting": (unlisted_setting, "DR104"),
    "rename-launcher-flag": (rename_launcher_flag, "DR20"),
    "add-launcher-flag": (add_launcher_flag, "DR201"),
    "change-launcher-default": (change_launcher_default, "DR204"),
    "misspell-example-flag": (misspell_example_flag, "DR301"),
    "break-link": (break_link, "SK203"),
    "break-anchor": (break_anchor, "SK204"),
    "drop-query": (drop_query, "SK304"),
}


def test_unmutated_copy_reads_what_the_self_check_reads(pristine: Path, repo_check) -> None:
    """The baseline of every mutation: the repository passes its checker (the shared self-check), and the
    copy holds every file that check read, byte for byte, so the copy is clean too."""
    from skills_check.caches.results import read_files

    project, findings = repo_check
    assert findings == []
    for rel in sorted(read_files(project)):
        assert (pristine / rel).read_bytes() == (REPO / rel).read_bytes(), rel


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_mutation_is_reported(name: str, tree: Path, project: Project) -> None:
    mutate, code = MUTATIONS[name]
    where = mutate(tree, project)
    rc, findings, out = check(tree)
    assert rc == 1, out
    hits = [f for f in findings if f["path"] == where and f["code"].startswith(code)]
    assert hits, f"{name}: no {code}* finding at {where}:\n{out}"
