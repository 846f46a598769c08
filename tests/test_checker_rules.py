"""Every checker rule: a passing tree and a failing one, asserting code, file and line.

The base fixture (tests/fixtures/checker/base) is a small clean repository: one user skill, one
developer skill, the two RST pages, a fixture launcher/trainer and a skill script. Each failing case
copies it to tmp_path, makes one edit, and runs the real CLI (``cli.main``, in-process) with
``--format json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Callable

import pytest

from mgpu_testing import PYTHON, REPO, run
from mgpu_testing.checker import (
    BASE, DEMO, EVALS_JSON, EVALS_MD, HELPER, LAUNCHER, MGPU, REF, SKILL, TOOLS, TROUBLE, assert_finding, body_start,
    check, edit, line_of, make_tree,
)

import cli  # noqa: E402
import rules  # noqa: E402
from rules.shell import command_lines, words  # noqa: E402


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "repo")


# ---------------------------------------------------------------------------------------------
# The passing fixture: the base tree is clean for every rule.

def test_base_fixture_is_clean(tree: Path) -> None:
    rc, findings = check(tree)
    assert findings == [] and rc == 0
    assert not (tree / "LAUNCHER_WAS_RUN").exists()


def test_every_rule_is_documented_and_has_a_failing_case() -> None:
    text = (TOOLS / "RULES.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| ((?:SK|DR)\d{3}) \|", text, re.M))
    registered = {r.code for r in rules.RULES}
    assert documented == registered
    assert registered <= {case[0] for case in FAILING}
    for r in rules.RULES:
        assert r.summary and r.summary.endswith("."), r.code


# ---------------------------------------------------------------------------------------------
# Failing fixtures: one edit each. (code, mutate(root), path, line(root) or None)

def _fm(key_line: str, new: str, path: str = SKILL) -> Callable[[Path], None]:
    return lambda root: edit(root, path, key_line, new)


def _append(path: str, text: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        with open(root / path, "a", encoding="utf-8") as fh:
            fh.write(text)
    return mutate


def _write(path: str, text: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return mutate


def _both(*fs: Callable[[Path], None]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for f in fs:
            f(root)
    return mutate


def _at(path: str, needle: str, nth: int = 1) -> Callable[[Path], int]:
    return lambda root: line_of(root, path, needle, nth)


def _unlink(path: str) -> Callable[[Path], None]:
    return lambda root: os.unlink(root / path)


SHM_ROW = ("   * - ``Error while creating shared memory segment`` in a container\n"
           "     - ``docker run --shm-size=1g`` or ``--ipc=host``; disable ACS in the BIOS\n"
           "     - Docker's 64 MiB ``/dev/shm``\n     - None\n")
SHM_MD = "| Shared memory error in a container | `docker run --shm-size=1g` or `--ipc=host` |\n"
LONG = "".join(f"line {i}\n" for i in range(520))
FAILING: list[tuple[str, Callable[[Path], None], str, Callable[[Path], int] | None]] = [
    ("SK100", _fm("---\nname: isaaclab-helper\n", "<!-- no frontmatter -->\nname: isaaclab-helper\n", HELPER),
     HELPER, lambda r: 1),
    ("SK101", _fm("name: isaaclab-demo\n", ""), SKILL, lambda r: 2),
    ("SK102", _fm("name: isaaclab-demo", "name: IsaacLab_Demo"), SKILL, _at(SKILL, "name:")),
    ("SK103", _fm("name: isaaclab-demo", "name: claude-demo"), SKILL, _at(SKILL, "name:")),
    ("SK104", _fm("description: Scales", "description: ''\nx-old: Scales"), SKILL, _at(SKILL, "description:")),
    ("SK105", _fm("Use when a user", "Handy if a user"), SKILL, _at(SKILL, "description:")),
    ("SK106", _fm("description: Scales", "description: You scale"), SKILL, _at(SKILL, "description:")),
    ("SK107", _fm("audience: user", "audience: developer"), SKILL, _at(SKILL, "audience:")),
    ("SK108", _fm("status: experimental", "status: beta"), SKILL, _at(SKILL, "status:")),
    ("SK109", _fm("owners:\n  - demo-team\n", "owners: []\n"), SKILL, _at(SKILL, "owners:")),
    ("SK110", _fm("license: BSD-3-Clause\n", ""), SKILL, lambda r: 2),
    ("SK111", _fm("  author: Demo Author", "  team: Demo"), SKILL, _at(SKILL, "metadata:")),
    ("SK112", _fm("status: experimental", "status: experimental\nversion: 2"), SKILL, _at(SKILL, "version:")),
    ("SK113", _fm("status: experimental", "status: experimental\ncompatibility: ''"), SKILL,
     _at(SKILL, "compatibility:")),
    ("SK114", _fm("name: isaaclab-helper", "name: isaaclab-demo", HELPER), SKILL, _at(SKILL, "name:")),
    ("SK201", _fm("## Maintenance", "## Upkeep"), SKILL, lambda r: body_start(r, SKILL)),
    ("SK202", _append(SKILL, LONG), SKILL, lambda r: body_start(r, SKILL) + 499),
    ("SK203", _fm("[Reference](reference.md)", "[Reference](reference2.md)"), SKILL, _at(SKILL, "reference2.md")),
    ("SK204", _fm("reference.md#workarounds", "reference.md#work-arounds"), SKILL, _at(SKILL, "#work-arounds")),
    ("SK205", _both(_append(REF, "\nSee [more](more.md).\n"), _write(f"{DEMO}/more.md", "# More\n")), REF,
     _at(REF, "more.md")),
    ("SK206", _fm("`docs/source/features/multi_gpu.rst`", "`docs/source/features/multigpu.rst`"), SKILL,
     _at(SKILL, "multigpu.rst")),
    ("SK207", _append(REF, LONG[:1200]), REF, lambda r: 1),
    ("SK208", _fm("Run `scripts/probe.py`", "Run `scripts/prob.py`"), SKILL, _at(SKILL, "Run `scripts/prob.py`")),
    ("SK209", _write(f"{DEMO}/scripts/extra.py", "if __name__ == '__main__':\n    pass\n"), SKILL,
     lambda r: body_start(r, SKILL)),
    ("SK210", _fm("`isaaclab-helper`", "`isaaclab-helpers`"), SKILL, _at(SKILL, "isaaclab-helpers")),
    ("SK301", _both(_unlink(EVALS_MD), _unlink(EVALS_JSON)), SKILL, lambda r: body_start(r, SKILL)),
    ("SK302", _fm("- [Evaluations](evaluations.md)\n", ""), SKILL, lambda r: body_start(r, SKILL)),
    ("SK303", _fm("## Scenario 3: routing", "## Routing", EVALS_MD), EVALS_MD, lambda r: 1),
    ("SK304", _fm('Query: "Train on all GPUs."', "", EVALS_MD), EVALS_MD, _at(EVALS_MD, "## Scenario 1")),
    ("SK310", _fm(',\n    "assertions": ["does not use this skill"]', "", EVALS_JSON), EVALS_JSON, _at(EVALS_JSON, "{", 2)),
    ("SK311", _fm('"expected_skill": "isaaclab-demo"', '"expected_skill": "isaaclab-demos"', EVALS_JSON),
     EVALS_JSON, _at(EVALS_JSON, "isaaclab-demos")),
    ("DR100", _both(_fm("``NCCL_P2P_DISABLE=1`` or ``NCCL_P2P_LEVEL=LOC``", "see below", MGPU),
                    _fm("     - ``NCCL_SHM_DISABLE=1``", "     - none", MGPU)), MGPU, lambda r: 1),
    ("DR101", _fm("     - ``NCCL_SHM_DISABLE=1``", "     - ``NCCL_SHM_DISABLE=1``, then ``NCCL_IB_DISABLE=1``", MGPU),
     REF, _at(REF, "| Symptom | Try |")),
    ("DR102", _fm("`NCCL_P2P_LEVEL=LOC`", "`NCCL_P2P_LEVEL=PIX`", REF), REF, _at(REF, "NCCL_P2P_LEVEL=PIX")),
    ("DR103", _fm("| GPUs numbered", "| Ring fixes it | `NCCL_ALGO=Ring` |\n| GPUs numbered", REF), REF,
     _at(REF, "NCCL_ALGO=Ring")),
    ("DR105", _fm("   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently", MGPU), REF,
     _at(REF, "| GPUs numbered")),
    ("DR104", _fm("Apply `NCCL_P2P_DISABLE=1` first", "Apply `NCCL_NET_GDR_LEVEL=2` first"), SKILL,
     _at(SKILL, "NCCL_NET_GDR_LEVEL")),
    ("DR200", lambda r: edit(r, MGPU, "   * - ``--", "   * - ", 99), MGPU, lambda r: 1),
    ("DR201", _fm("   * - ``--log_dir``\n     - ``None``\n     - Folder for per-rank logs.\n", "", MGPU), MGPU,
     _at(MGPU, ".. list-table:: Launcher options")),
    ("DR202", _fm("   * - ``--dry_run``", "   * - ``--bogus``\n     - ``None``\n     - Nothing.\n   * - ``--dry_run``",
                  MGPU), MGPU, _at(MGPU, "``--bogus``")),
    ("DR203", _fm("``--num_gpus`` (alias ``--nproc_per_node``)", "``--num_gpus``", MGPU), MGPU,
     _at(MGPU, "* - ``--num_gpus``")),
    ("DR204", _fm("   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``", MGPU), MGPU,
     lambda r: line_of(r, MGPU, "``--nnodes``", 1) + 1),
    ("DR205", _fm("one of ``rsl_rl``, ``rl_games``, ``skrl``", "one of ``rsl_rl``, ``skrl``, ``jax``", MGPU), MGPU,
     _at(MGPU, "one of ``rsl_rl``")),
    ("DR301", _fm("--rl_library skrl", "--rl_libary skrl"), SKILL, _at(SKILL, "--rl_libary")),
    ("DR302", _fm("--rl_library skrl --task Toy-Cartpole-v0", "--rl_library skrl --task"), SKILL,
     _at(SKILL, "--rl_library skrl --task")),
    ("DR303", _fm("--rl_library skrl", "--rl_library foo"), SKILL, _at(SKILL, "--rl_library foo")),
    ("DR304", _fm("Select ranks with `--num_gpus`", "Select ranks with `--num_gpu`"), SKILL, _at(SKILL, "`--num_gpu`")),
    ("DR305", _fm("skills/user/demo/scripts/probe.py", "skills/user/demo/scripts/probes.py", TROUBLE), TROUBLE,
     _at(TROUBLE, "probes.py")),
    ("DR401", _unlink(".agents/skills/isaaclab-helper"), HELPER, _at(HELPER, "name:")),
    ("DR402", lambda r: (os.unlink(r / ".agents/skills/isaaclab-demo"),
                         os.symlink("../../skills/developer/helper", r / ".agents/skills/isaaclab-demo")),
     ".agents/skills/isaaclab-demo", lambda r: 1),
    ("DR403", lambda r: os.symlink("../../skills/user/gone", r / ".agents/skills/isaaclab-gone"),
     ".agents/skills/isaaclab-gone", lambda r: 1),
    ("DR404", _unlink(".claude/skills"), ".claude/skills", lambda r: 1),
]


@pytest.mark.parametrize("code,mutate,path,line", FAILING, ids=[c[0] for c in FAILING])
def test_failing_fixture(tree: Path, code: str, mutate, path: str, line) -> None:
    mutate(tree)
    rc, findings = check(tree)
    hit = assert_finding(findings, code, path, line(tree) if line else None)
    assert hit["message"]
    if code != "SK112":  # a warning alone does not fail the check
        assert rc == 1
    rc_sel, only = check(tree, "--select", code)
    assert only and {f["code"] for f in only} == {code}


def test_drift_findings_name_the_truth(tree: Path) -> None:
    edit(tree, REF, "`NCCL_P2P_LEVEL=LOC`", "`NCCL_P2P_LEVEL=PIX`")
    edit(tree, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    _, findings = check(tree)
    for code, truth_path in (("DR102", MGPU), ("DR204", LAUNCHER), ("DR303", LAUNCHER)):
        hit = assert_finding(findings, code, {"DR102": REF, "DR204": MGPU, "DR303": SKILL}[code])
        assert hit["truth"]["path"] == truth_path
        assert truth_path in hit["message"]
    dr303 = assert_finding(findings, "DR303", SKILL)
    assert dr303["col"] == line_text_col(tree, SKILL, "foo")


def line_text_col(root: Path, rel: str, needle: str) -> int:
    for line in (root / rel).read_text(encoding="utf-8").split("\n"):
        if needle in line:
            return line.index(needle) + 1
    raise AssertionError(needle)


# ---------------------------------------------------------------------------------------------
# Passing variants: things that look like drift but are not.

def test_upstream_symptom_try_layout_in_rst_passes(tree: Path) -> None:
    """Both tables in the upstream two-column layout (Symptom | Try) are found by their settings."""
    text = (tree / MGPU).read_text(encoding="utf-8")
    start = text.index(".. list-table:: NCCL workarounds")
    end = text.index("``NCCL_DEBUG=INFO`` shows")
    upstream = (
        ".. list-table::\n   :header-rows: 1\n\n   * - Symptom\n     - Try\n"
        "   * - World size 2 hangs\n     - ``NCCL_P2P_DISABLE=1`` or ``NCCL_P2P_LEVEL=LOC``\n"
        "   * - Illegal memory access\n     - ``NCCL_SHM_DISABLE=1``\n"
        "   * - GPUs numbered differently\n     - ``CUDA_DEVICE_ORDER=PCI_BUS_ID``\n\n")
    (tree / MGPU).write_text(text[:start] + upstream + text[end:], encoding="utf-8")
    assert check(tree) == (0, [])
    edit(tree, MGPU, "``NCCL_SHM_DISABLE=1``", "``NCCL_SHM_DISABLE=0``")
    _, findings = check(tree)
    assert_finding(findings, "DR102", REF, line_of(tree, REF, "NCCL_SHM_DISABLE=1"))


def test_workaround_rows_whose_fix_is_not_a_setting_pass_when_mirrored(tree: Path) -> None:
    """A list row whose fix is a command or an action holds no setting; its mirror row holds none either."""
    edit(tree, MGPU, "   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently")
    edit(tree, REF, "| GPUs numbered", SHM_MD + "| GPUs numbered")
    assert check(tree) == (0, [])
    edit(tree, REF, SHM_MD, SHM_MD.replace("`docker run --shm-size=1g` or `--ipc=host`", "`NCCL_SHM_DISABLE=1`"))
    _, findings = check(tree)
    hit = assert_finding(findings, "DR105", REF, line_of(tree, REF, "| Shared memory error"))
    assert "holds no setting" in hit["message"] and hit["truth"]["path"] == MGPU


def test_fix_mirrors_rows_whose_fix_is_not_a_setting(tree: Path) -> None:
    edit(tree, MGPU, "   * - GPUs numbered differently", SHM_ROW + "   * - GPUs numbered differently")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["check", "--root", str(tree), "--fix", "--no-cache"])
    assert "added row" in out.getvalue()
    rows = [l for l in (tree / REF).read_text(encoding="utf-8").splitlines() if l.startswith("| ")]
    assert rows[-2].startswith("| `Error while creating shared memory segment` in a container | "
                               "`docker run --shm-size=1g` or `--ipc=host`; disable ACS in the BIOS |")
    assert check(tree) == (0, [])


def test_diagnostics_placeholders_and_other_tools_pass(tree: Path) -> None:
    _append(SKILL, (
        "\nMore:\n\n```bash\n"
        "CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=WARN NCCL_DEBUG_SUBSYS=INIT,P2P,NET uv run isaaclab train_multigpu "
        "--num_gpus=2 --rl_library {rsl_rl,skrl} --log_dir <dir> -- --device cpu\n"
        "NCCL_SOCKET_IFNAME=<iface> uv run isaaclab train --rl_library LIB --task <task>\n"
        "nvidia-smi topo -m && uv sync --locked --all-extras  # --whatever in a comment\n"
        "git log --oneline | head -n 3 > out.txt 2>&1\n"
        "```\n\n```console\n$ uv run isaaclab train_multigpu --dry_run\n--not-a-flag output line\n```\n\n"
        "```python\nparser.add_argument('--not-checked')\n```\n\n"
        "Tuning: `--rdzv_*` style families are fine; the probe takes `--bisect` and `--iters 5`.\n"
        "Runs `python tools/check.py --format json`. See `docs/<page>.rst`.\n"))(tree)
    assert check(tree) == (0, [])


def test_windows_one_line_alias_file_passes(tree: Path) -> None:
    alias = tree / ".agents/skills/isaaclab-demo"
    os.unlink(alias)
    alias.write_text("../../skills/user/demo", encoding="utf-8")
    assert check(tree) == (0, [])


def test_invalid_choice_inside_brace_list_and_missing_value(tree: Path) -> None:
    _append(REF, "\n```bash\nuv run isaaclab train_multigpu --rl_library {rsl_rl,foo} --start_method\n```\n")(tree)
    _, findings = check(tree)
    line = line_of(tree, REF, "{rsl_rl,foo}")
    assert_finding(findings, "DR303", REF, line)
    assert_finding(findings, "DR302", REF, line)


def test_flags_after_a_repo_script_belong_to_that_script(tree: Path) -> None:
    edit(tree, SKILL, "--backend gloo -b 8 --iters 5", "--backend mpi -b8 --iter 5 --num_gpus 2")
    _, findings = check(tree)
    codes = {(f["code"], f["line"]) for f in findings}
    line = line_of(tree, SKILL, "--backend mpi")
    assert ("DR303", line) in codes  # mpi is not a --backend choice
    assert ("DR301", line) in codes  # --iter (the probe has no abbreviations off... it has --iters)
    assert sum(1 for f in findings if f["code"] == "DR301" and f["line"] == line) == 1  # -b8 is fine
    unknown = [f for f in findings if f["code"] == "DR301"]
    assert any("--num_gpus" in f["message"] for f in unknown)  # a launcher flag is not the probe's


def test_forwarded_flags_after_dashdash_are_trainer_only(tree: Path) -> None:
    _append(SKILL, "\n```bash\nuv run isaaclab train_multigpu --num_gpus 2 -- --dry_run --device cpu\n```\n")(tree)
    _, findings = check(tree)
    hit = assert_finding(findings, "DR301", SKILL, line_of(tree, SKILL, "-- --dry_run"))
    assert "--dry_run" in hit["message"]


def test_failure_mode_lines_are_not_judged(tree: Path) -> None:
    edit(tree, EVALS_MD, "Known failure modes:\n", "Notes:\n")
    _, findings = check(tree)
    assert_finding(findings, "DR304", EVALS_MD, line_of(tree, EVALS_MD, "--gpus"))
    assert_finding(findings, "DR104", EVALS_MD, line_of(tree, EVALS_MD, "NCCL_P2P_LEVEL=NVL"))


def test_rst_anchor_and_ref_label(tree: Path) -> None:
    edit(tree, SKILL, "multi_gpu.rst#launcher-options", "multi_gpu.rst#launcher-option")
    edit(tree, TROUBLE, ":ref:`multi-gpu-nccl`", ":ref:`multi-gpu-nccls`")
    edit(tree, MGPU, ":doc:`../refs/troubleshooting`", ":doc:`../refs/trouble`")
    _, findings = check(tree)
    assert_finding(findings, "SK204", SKILL, line_of(tree, SKILL, "#launcher-option"))
    assert_finding(findings, "SK204", TROUBLE, line_of(tree, TROUBLE, "multi-gpu-nccls"))
    assert_finding(findings, "SK203", MGPU, line_of(tree, MGPU, "refs/trouble`"))


def test_explain_prints_the_docstring(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", "DR104"]) == 0
    assert "NCCL_*/CUDA_*" in capsys.readouterr().out


def test_cli_subprocess_reports_text_lines(tree: Path) -> None:
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    proc = run([PYTHON, str(TOOLS / "cli.py"), "check", "--root", str(tree)], timeout=120)
    assert proc.returncode == 1
    line = line_of(tree, SKILL, "--rl_library foo")
    col = line_text_col(tree, SKILL, "foo")
    assert f"{SKILL}:{line}:{col}: DR303 " in proc.stdout


# ---------------------------------------------------------------------------------------------
# The command-line splitter agrees with shlex on plain words.

@pytest.mark.parametrize("line", [
    "uv run isaaclab train_multigpu --num_gpus 2",
    "a 'b c' \"d\\\"e\" f\\ g",
    "torchrun --nproc_per_node=2 x.py --flag='a b'",
    "echo \"it's\" 'say \"hi\"'",
])
def test_words_match_shlex(line: str) -> None:
    assert [w.text for w in words([(line, 1, 1)])] == shlex.split(line)


def test_command_lines_positions_prompts_and_continuations() -> None:
    text = "$ A=1 uv run isaaclab train --task \\\n    T --x <y> 2>&1 | tee log  # c --z\nout --q\n$ b"
    cmds = command_lines(text, 10, [4, 4, 4, 4])
    assert [[w.text for w in c] for c in cmds] == [
        ["A=1", "uv", "run", "isaaclab", "train", "--task", "T", "--x", "<y>"], ["tee", "log"], ["b"]]
    first = cmds[0]
    assert (first[0].line, first[0].col) == (10, 6)
    assert (first[7].line, first[7].col) == (11, 10)


def test_evals_object_form_and_skill_name(tree: Path) -> None:
    entries = json.loads((tree / EVALS_JSON).read_text(encoding="utf-8"))
    (tree / EVALS_JSON).write_text(json.dumps({"skill_name": "isaaclab-demo", "evals": entries}, indent=2),
                                   encoding="utf-8")
    assert check(tree) == (0, [])
    edit(tree, EVALS_JSON, '"skill_name": "isaaclab-demo"', '"skill_name": "isaaclab-other"')
    edit(tree, EVALS_JSON, '"prompt": "Plot my reward curve",', '')
    _, findings = check(tree)
    assert_finding(findings, "SK311", EVALS_JSON, line_of(tree, EVALS_JSON, "skill_name"))
    assert_finding(findings, "SK310", EVALS_JSON, line_of(tree, EVALS_JSON, "{", 3))


def test_anchor_into_a_file_outside_skills_and_docs(tree: Path) -> None:
    (tree / "README.md").write_text("# Top\n\n## Set-up\n", encoding="utf-8")
    _append(SKILL, "\nSee [set-up](../../../README.md#set-up).\n")(tree)
    assert check(tree) == (0, [])
    edit(tree, SKILL, "README.md#set-up", "README.md#setup")
    _, findings = check(tree)
    assert_finding(findings, "SK204", SKILL, line_of(tree, SKILL, "README.md#setup"))


def test_torchrun_and_jax_launcher_options(tree: Path) -> None:
    _append(REF, (
        "\n```bash\n"
        "python -m torch.distributed.run --nproc-per-node 2 --standalone scripts/reinforcement_learning/train.py "
        "--distributed --rl_library skrl\n"
        "python -m skrl.utils.distributed.jax --nnodes 1 --nproc_per_node 2 --coordinator_address 127.0.0.1:5000 "
        "scripts/reinforcement_learning/train.py --ml_framework jax\n"
        "```\n"))(tree)
    assert check(tree) == (0, [])
    _append(REF, (
        "\n```bash\ntorchrun --nproc_per_nodes 2 scripts/reinforcement_learning/train.py --ml_framework tf\n"
        "python -m skrl.utils.distributed.jax --master_port 1 scripts/reinforcement_learning/train.py\n```\n"))(tree)
    _, findings = check(tree)
    torchrun_line = line_of(tree, REF, "--nproc_per_nodes")
    hit = assert_finding(findings, "DR301", REF, torchrun_line)
    assert "torchrun" in hit["message"] and hit["truth"]["path"].endswith("torch/distributed/run.py")
    assert_finding(findings, "DR303", REF, torchrun_line)  # tf is not an --ml_framework choice of train.py
    hit = assert_finding(findings, "DR301", REF, line_of(tree, REF, "jax --master_port"))
    assert hit["truth"]["path"].endswith("skrl/utils/distributed/jax/launcher.py")


def test_missing_multi_gpu_page(tree: Path) -> None:
    os.unlink(tree / MGPU)
    _, findings = check(tree)
    assert_finding(findings, "DR100", REF, line_of(tree, REF, "| Symptom | Try |"))
    assert_finding(findings, "DR200", MGPU, 1)


def test_backticked_path_with_anchor(tree: Path) -> None:
    edit(tree, SKILL, "`docs/source/features/multi_gpu.rst`", "`docs/source/features/multi_gpu.rst#nccl-hangs`")
    assert check(tree) == (0, [])
    edit(tree, SKILL, "multi_gpu.rst#nccl-hangs`", "multi_gpu.rst#nccl-hang`")
    _, findings = check(tree)
    assert_finding(findings, "SK204", SKILL, line_of(tree, SKILL, "#nccl-hang`"))
