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
from collections.abc import Callable
from pathlib import Path

import pytest
from mgpu_testing import PYTHON, run
from mgpu_testing.checker import (
    EVALS_JSON,
    EVALS_MD,
    LAUNCHER,
    MGPU,
    REF,
    SKILL,
    TOOLS,
    TROUBLE,
    assert_finding,
    check,
    edit,
    line_of,
)
from skills_check import cli
from skills_check.rules.shell import command_lines, words
from skills_check.runner import load_rules

# ---------------------------------------------------------------------------------------------
# Edits for the cases below. Each rule's own failing fixture and snapshot live in
# tests/fixtures/checker/rules/<CODE>/ (test_checker_snapshots.py); this module keeps the cases that
# need more than one snapshot: passing variants, truth locations, columns, interplay between tools.


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


def _at(path: str, needle: str, nth: int = 1) -> Callable[[Path], int]:
    return lambda root: line_of(root, path, needle, nth)


SHM_ROW = (
    "   * - ``Error while creating shared memory segment`` in a container\n"
    "     - ``docker run --shm-size=1g`` or ``--ipc=host``; disable ACS in the BIOS\n"
    "     - Docker's 64 MiB ``/dev/shm``\n     - None\n"
)
SHM_MD = "| Shared memory error in a container | `docker run --shm-size=1g` or `--ipc=host` |\n"


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
        "   * - GPUs numbered differently\n     - ``CUDA_DEVICE_ORDER=PCI_BUS_ID``\n\n"
    )
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
    assert rows[-2].startswith(
        "| `Error while creating shared memory segment` in a container | "
        "`docker run --shm-size=1g` or `--ipc=host`; disable ACS in the BIOS |"
    )
    assert check(tree) == (0, [])


def test_diagnostics_placeholders_and_other_tools_pass(tree: Path) -> None:
    _append(
        SKILL,
        (
            "\nMore:\n\n```bash\n"
            "CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=WARN NCCL_DEBUG_SUBSYS=INIT,P2P,NET uv run mgpu-lab train_multigpu "
            "--num_gpus=2 --rl_library {rsl_rl,skrl} --log_dir <dir> -- --device cpu\n"
            "NCCL_SOCKET_IFNAME=<iface> uv run mgpu-lab train --rl_library LIB --task <task>\n"
            "nvidia-smi topo -m && uv sync --locked --all-extras  # --whatever in a comment\n"
            "git log --oneline | head -n 3 > out.txt 2>&1\n"
            "```\n\n```console\n$ uv run mgpu-lab train_multigpu --dry_run\n--not-a-flag output line\n```\n\n"
            "```python\nparser.add_argument('--not-checked')\n```\n\n"
            "Tuning: `--rdzv_*` style families are fine; the probe takes `--bisect` and `--iters 5`.\n"
            "Runs `python tools/check.py --format json`. See `docs/<page>.rst`.\n"
        ),
    )(tree)
    assert check(tree) == (0, [])


def test_windows_one_line_alias_file_passes(tree: Path) -> None:
    alias = tree / ".agents/skills/isaaclab-demo"
    os.unlink(alias)
    alias.write_text("../../skills/user/demo", encoding="utf-8")
    assert check(tree) == (0, [])


def test_invalid_choice_inside_brace_list_and_missing_value(tree: Path) -> None:
    _append(REF, "\n```bash\nuv run mgpu-lab train_multigpu --rl_library {rsl_rl,foo} --start_method\n```\n")(tree)
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
    _append(SKILL, "\n```bash\nuv run mgpu-lab train_multigpu --num_gpus 2 -- --dry_run --device cpu\n```\n")(tree)
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


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text) if s.strip()]


def _words(sentence: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", sentence.lower()))


@pytest.mark.parametrize("code", [r.code for r in load_rules()])
def test_explain_prints_no_sentence_twice(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A rule's explanation adds to its summary: no sentence of ``explain CODE`` repeats another, word for
    word or nearly (the same words, give or take a few: at least 60% of the two sentences' words shared)."""
    assert cli.main(["explain", code]) == 0
    header, text = capsys.readouterr().out.split("\n", 1)  # "CODE (name, severity)", then the sentences
    assert header.startswith(code)
    sentences = _sentences(text)
    assert len(sentences) >= 2
    for i, first in enumerate(sentences):
        for second in sentences[i + 1 :]:
            a, b = _words(first), _words(second)
            if min(len(a), len(b)) >= 3:
                assert len(a & b) / len(a | b) < 0.6, f"{code} says twice: {first!r} / {second!r}"


@pytest.mark.e2e
def test_cli_subprocess_reports_text_lines(tree: Path) -> None:
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    proc = run([PYTHON, str(TOOLS / "cli.py"), "check", "--root", str(tree)], timeout=120)
    assert proc.returncode == 1
    line = line_of(tree, SKILL, "--rl_library foo")
    col = line_text_col(tree, SKILL, "foo")
    assert f"{SKILL}:{line}:{col}: DR303 " in proc.stdout


# ---------------------------------------------------------------------------------------------
# The command-line splitter agrees with shlex on plain words.


@pytest.mark.parametrize(
    "line",
    [
        "uv run mgpu-lab train_multigpu --num_gpus 2",
        'a \'b c\' "d\\"e" f\\ g',
        "torchrun --nproc_per_node=2 x.py --flag='a b'",
        'echo "it\'s" \'say "hi"\'',
    ],
)
def test_words_match_shlex(line: str) -> None:
    assert [w.text for w in words([(line, 1, 1)])] == shlex.split(line)


def test_command_lines_positions_prompts_and_continuations() -> None:
    text = "$ A=1 uv run mgpu-lab train --task \\\n    T --x <y> 2>&1 | tee log  # c --z\nout --q\n$ b"
    cmds = command_lines(text, 10, [4, 4, 4, 4])
    assert [[w.text for w in c] for c in cmds] == [
        ["A=1", "uv", "run", "mgpu-lab", "train", "--task", "T", "--x", "<y>"],
        ["tee", "log"],
        ["b"],
    ]
    first = cmds[0]
    assert (first[0].line, first[0].col) == (10, 6)
    assert (first[7].line, first[7].col) == (11, 10)


def test_evals_object_form_and_skill_name(tree: Path) -> None:
    entries = json.loads((tree / EVALS_JSON).read_text(encoding="utf-8"))
    (tree / EVALS_JSON).write_text(
        json.dumps({"skill_name": "isaaclab-demo", "evals": entries}, indent=2), encoding="utf-8"
    )
    assert check(tree) == (0, [])
    edit(tree, EVALS_JSON, '"skill_name": "isaaclab-demo"', '"skill_name": "isaaclab-other"')
    edit(tree, EVALS_JSON, '"prompt": "Plot my reward curve",', "")
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
    _append(
        REF,
        (
            "\n```bash\n"
            "python -m torch.distributed.run --nproc-per-node 2 --standalone scripts/reinforcement_learning/train.py "
            "--distributed --rl_library skrl\n"
            "python -m skrl.utils.distributed.jax --nnodes 1 --nproc_per_node 2 --coordinator_address 127.0.0.1:5000 "
            "scripts/reinforcement_learning/train.py --ml_framework jax\n"
            "```\n"
        ),
    )(tree)
    assert check(tree) == (0, [])
    _append(
        REF,
        (
            "\n```bash\ntorchrun --nproc_per_nodes 2 scripts/reinforcement_learning/train.py --ml_framework tf\n"
            "python -m skrl.utils.distributed.jax --master_port 1 scripts/reinforcement_learning/train.py\n```\n"
        ),
    )(tree)
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


def test_rst_anchors_are_docutils_own_ids(tree: Path) -> None:
    """A section titled "2-node setup" has the id docutils gives it (``node-setup``: an id cannot start with a
    digit), so a link to ``#node-setup`` resolves and one to ``#2-node-setup`` does not; so do explicit labels."""
    _append(MGPU, "\n.. _2-node example:\n\n2-node setup\n------------\n\nTwo machines, one job.\n")(tree)
    link = "../../../docs/source/features/multi_gpu.rst"
    text = (tree / SKILL).read_text(encoding="utf-8")
    assert link in text, "the fixture skill links the multi-GPU page"
    _append(
        SKILL,
        f"\nSee [two nodes]({link}#node-setup), [the example]({link}#node-example) and "
        f"[a wrong one]({link}#2-node-setup).\n",
    )(tree)
    _, findings = check(tree)
    wrong = [f for f in findings if f["code"] == "SK204"]
    assert len(wrong) == 1, wrong
    assert_finding(findings, "SK204", SKILL, line_of(tree, SKILL, "#2-node-setup"))
