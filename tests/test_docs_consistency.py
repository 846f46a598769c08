"""The docs agree with the code and with each other, where no checker rule says so.

What the checker's rules enforce is theirs (each rule has fixtures in tests/fixtures/checker/rules/<CODE>/,
run by tests/test_checker_snapshots.py; the repository passes them all in
tests/test_checker_core.py::test_repository_passes_its_own_checker; tests/test_checker_mutation.py injects
the drift): the launcher options table against ``build_parser()`` (DR201-DR205), the skill's NCCL table
mirroring the RST list row by row (DR101-DR103, DR105) and every ``NCCL_*=``/``CUDA_*=`` setting written in
a skill's markdown or an RST page being on the list (DR104). Here:

- the NCCL list holds the rows users need, keyed on the text they see; a row without a setting says what
  the fix is; every row of both tables cites a public report;
- the settings written in the skills' evaluations (``evals/evals.json``, which DR104 does not read) are on
  the list;
- every default the docs state for a task (``--max_iterations``, ``--num_envs``) is the code's
  (``mgpu_lab.train.tasks.catalog.TASK_DEFAULTS``), in the skills, the RST pages and ``train.py``'s help.
"""

from __future__ import annotations

import re
from pathlib import Path

from mgpu_testing import REPO
from mgpu_testing.docs import TRAINER, load_script, rel
from skills_check.parsers.markdown import parse_markdown
from skills_check.parsers.rst import parse_rst

MULTI_GPU_RST = REPO / "docs" / "source" / "features" / "multi_gpu.rst"
REFERENCE_MD = REPO / "skills" / "user" / "train-multi-gpu" / "reference.md"

SETTING = re.compile(r"(?<![A-Za-z0-9_])((?:NCCL|CUDA)_[A-Z0-9_]+)=([^\s`'\",;)]+)")
#: settings that change what NCCL/CUDA report or which devices a process sees, not how ranks talk
DIAGNOSTICS = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING"}


# --------------------------------------------------------------------------- RST tables


def _table(doc, title: str) -> list[list[tuple[str, list[str]]]]:
    """Header and rows of the table titled ``title`` (the checker's parsers): each cell as (text, [inline code])."""
    assert not doc.problems, [f.message for f in doc.problems]
    for table in doc.tables:
        if table.title == title:
            return [
                [(" ".join(c.text.split()), [code.text for code in c.code]) for c in row]
                for row in [table.header, *table.rows]
            ]
    raise AssertionError(f"{doc.path}: no table titled {title!r}")


def rst_table(path: Path, title: str) -> list[list[tuple[str, list[str]]]]:
    return _table(parse_rst(rel(path), path.read_text(encoding="utf-8")), title)


def md_table(path: Path, title: str) -> list[list[tuple[str, list[str]]]]:
    return _table(parse_markdown(rel(path), path.read_text(encoding="utf-8")), title)


def settings_of(literals: list[str]) -> set[str]:
    return {lit for lit in literals if SETTING.fullmatch(lit)}


# --------------------------------------------------------------------------- NCCL workarounds


def rst_workaround_rows() -> list[list[tuple[str, list[str]]]]:
    rows = rst_table(MULTI_GPU_RST, "NCCL workarounds")
    assert [cell[0] for cell in rows[0]] == ["Symptom", "Fix", "Seen on", "Cost"]
    return rows[1:]


def reference_workaround_rows() -> list[list[tuple[str, list[str]]]]:
    rows = md_table(REFERENCE_MD, "NCCL workarounds")
    assert [cell[0] for cell in rows[0]] == ["Symptom (the text you see)", "Fix", "Seen in"], rows[0]
    return rows[1:]


def rst_workarounds() -> list[set[str]]:
    return [settings_of(row[1][1]) for row in rst_workaround_rows()]


def test_nccl_list_has_the_required_rows() -> None:
    rows = rst_workarounds()
    required = [
        {"NCCL_P2P_DISABLE=1", "NCCL_P2P_LEVEL=LOC"},
        {"NCCL_SHM_DISABLE=1"},
        {"NCCL_IB_DISABLE=1", "NCCL_ALGO=Ring"},
        {"NCCL_CUMEM_HOST_ENABLE=0", "NCCL_CUMEM_ENABLE=0"},
        {"CUDA_DEVICE_ORDER=PCI_BUS_ID"},
    ]
    for settings in required:
        assert settings in rows, f"the NCCL list lacks a row with {sorted(settings)}"


#: the text users see for the failures they report, each the key of one row of the list (issue 11)
REPORTED_SYMPTOMS = [
    "Watchdog caught collective operation timeout",
    "Error while creating shared memory segment",
    "unhandled system error",
    "ACSCtl",
    "GPUs other than cuda:0 are not currently supported",
    "CUDA_VISIBLE_DEVICES",
    "illegal memory access",
]


def test_reported_failures_are_keyed_on_the_text_users_see() -> None:
    for rows in (rst_workaround_rows(), reference_workaround_rows()):
        symptoms = [" ".join([row[0][0], *row[0][1]]) for row in rows]
        for text in REPORTED_SYMPTOMS:
            assert [s for s in symptoms if text in s], f"no NCCL-list row is keyed on {text!r}"


def test_rows_without_a_setting_say_so_and_containers_are_fixed_first() -> None:
    """A row whose fix is not a VAR=value says what the fix is instead; the shared-memory row puts the
    container fix first and NCCL_SHM_DISABLE=1 only as the fallback."""
    for row in rst_workaround_rows():
        fix = row[1][0]
        if not settings_of(row[1][1]):
            assert fix.startswith("Not a setting"), f"row {row[0][0][:50]!r}: a fix without a setting must say so"
    (shm,) = [row for row in rst_workaround_rows() if "Error while creating shared memory segment" in row[0][0]]
    fix = shm[1][0]
    assert fix.index("--shm-size") < fix.index("NCCL_SHM_DISABLE=1") and "fallback" in fix


def _row_spans(doc, title: str) -> list[tuple[int, int]]:
    for table in doc.tables:
        if table.title == title:
            starts = [row[0].line for row in table.rows]
            return list(zip(starts, starts[1:] + [10**9]))
    raise AssertionError(f"{doc.path}: no table titled {title!r}")


def test_every_row_cites_a_public_report() -> None:
    """A row holds only what a public report shows: each row of both tables links at least one issue or PR."""
    report = re.compile(r"^https://github\.com/[^/]+/[^/]+/(issues|pull)/\d+$")
    for path, parse in ((MULTI_GPU_RST, parse_rst), (REFERENCE_MD, parse_markdown)):
        doc = parse(rel(path), path.read_text(encoding="utf-8"))
        urls = [(link.line, link.target) for link in doc.links if report.match(link.target)]
        for start, end in _row_spans(doc, "NCCL workarounds"):
            assert [u for line, u in urls if start <= line < end], f"{rel(path)}:{start}: a row without a cited report"


def test_every_setting_in_the_evaluations_is_in_the_list() -> None:
    """evals.json files (the markdown and RST pages are DR104's)."""
    allowed = set().union(*rst_workarounds())
    files = sorted(p for p in (REPO / "skills").rglob("evals.json") if p.is_file())
    assert files
    problems = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in SETTING.finditer(line):
                placeholder = m.group(2).startswith(("<", "$"))
                if m.group(1) not in DIAGNOSTICS and not placeholder and m.group(0) not in allowed:
                    problems.append(f"{path.relative_to(REPO)}:{n}: {m.group(0)} is not in the NCCL list")
    assert not problems, "\n".join(problems)


def test_setting_pattern() -> None:
    line = "TORCH_NCCL_DUMP_ON_TIMEOUT=1 NCCL_P2P_DISABLE=1, `CUDA_DEVICE_ORDER=PCI_BUS_ID`"
    assert [m.group(0) for m in SETTING.finditer(line)] == ["NCCL_P2P_DISABLE=1", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]


# --------------------------------------------------------------------------- documented task defaults

#: a number the docs give per task: "100 for `Toy-Cartpole-v0`" (backticks optional)
PER_TASK = re.compile(r"(\d+)\s+for\s+`{0,2}(Toy-[A-Za-z-]+-v\d+)")
#: a number the docs give for every task: "default 256", "defaults to 256", "(default: 256)"
FOR_ALL = re.compile(r"\bdefaults?(?::| to| of)? (\d+)\b")
#: the option a statement is about: the nearest option written before the number
OPTION = re.compile(r"--([a-z][a-z0-9_]*)")
KEYS = ("max_iterations", "num_envs")


def stated_defaults(text: str) -> list[tuple[str, str | None, int, int]]:
    """(option, task or None for every task, value, offset) for each default stated in ``text``: a number
    counts for the nearest ``--max_iterations``/``--num_envs`` written before it in the same paragraph."""
    out = []
    for para_start, para in _paragraphs(text):
        for pattern, has_task in ((PER_TASK, True), (FOR_ALL, False)):
            for m in pattern.finditer(para):
                options = OPTION.findall(para[: m.start()])
                if options and options[-1] in KEYS:
                    out.append((options[-1], m.group(2) if has_task else None, int(m.group(1)), para_start + m.start()))
    return sorted(out, key=lambda found: found[3])


def _paragraphs(text: str) -> list[tuple[int, str]]:
    out, start = [], 0
    for block in re.split(r"(\n[ \t]*\n)", text):
        if block.strip() and not re.fullmatch(r"\n[ \t]*\n", block):
            out.append((start, block))
        start += len(block)
    return out


def wrong_defaults(text: str) -> list[str]:
    from mgpu_lab.train.tasks.catalog import TASK_DEFAULTS

    problems = []
    for key, task, value, offset in stated_defaults(text):
        line = text.count("\n", 0, offset) + 1
        if task is not None:
            truth = TASK_DEFAULTS.get(task, {}).get(key)
            if truth != value:
                problems.append(f"{line}: {key} for {task} is {truth} in the code, the text says {value}")
        elif {d[key] for d in TASK_DEFAULTS.values()} != {value}:
            problems.append(
                f"{line}: {key} defaults to {sorted({d[key] for d in TASK_DEFAULTS.values()})} per task "
                f"in the code, the text says {value} for every task"
            )
    return problems


def test_stated_defaults_are_found_and_judged() -> None:
    """The scanner sees the statements the docs make, and flags a wrong one (it must be able to fail)."""
    right = (
        "`--max_iterations` defaults to the task's own budget (100 for `Toy-Cartpole-v0`, 150 for\n"
        "`Toy-Pendulum-SwingUp-v0`). Size `--num_envs` (environments per rank; default 256)."
    )
    assert [(k, t, v) for k, t, v, _ in stated_defaults(right)] == [
        ("max_iterations", "Toy-Cartpole-v0", 100),
        ("max_iterations", "Toy-Pendulum-SwingUp-v0", 150),
        ("num_envs", None, 256),
    ]
    assert wrong_defaults(right) == []
    wrong = right.replace("150 for", "300 for").replace("default 256", "default 64")
    assert len(wrong_defaults(wrong)) == 2
    assert stated_defaults("Run 300 iterations.\n\nThen 100 for `Toy-Cartpole-v0`.") == []  # no option named
    assert stated_defaults("`--max_iterations 50`, then fix `--seed` (default 42).") == []  # another option


def test_documented_task_defaults_match_the_code() -> None:
    files = sorted(p for p in (REPO / "skills").rglob("*.md") if p.is_file())
    files += sorted(p for p in (REPO / "docs").rglob("*.rst") if p.is_file() and "_build" not in p.parts)
    problems = [f"{rel(p)}:{problem}" for p in files for problem in wrong_defaults(p.read_text(encoding="utf-8"))]
    parser = load_script(TRAINER, "_mgpu_docs_train_script_defaults").build_parser()
    for action in parser._actions:
        if action.dest in ("max_iterations", "num_envs") and action.help:
            problems += [
                f"{rel(TRAINER)} --{action.dest} help:{p}"
                for p in wrong_defaults(
                    f"--{action.dest} "
                    + action.help.replace("cartpole", "`Toy-Cartpole-v0`").replace(
                        "the pendulum", "`Toy-Pendulum-SwingUp-v0`"
                    )
                )
            ]
    assert not problems, "\n".join(problems)
