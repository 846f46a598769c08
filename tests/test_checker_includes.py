"""``literalinclude``: the files an RST page shows are checked like its code blocks, located in those files.

The loader reads each included file (inside the root, regular, under the size cap) and gives it to the
rules as a document of its own: one code block per shown run of lines, with the file's own line
numbers. The page's parse is cached; the included file is read on every run, so an edit to it is seen.
The snapshot of IN022 (options that show nothing) is in tests/fixtures/checker/rules/IN022/; hostile
includes (outside the root, FIFOs, links) are in test_checker_hostile.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mgpu_testing.checker import LAUNCHER, MGPU, assert_finding, check, make_tree
from skills_check.loader import load_rst_documents

PAGE = "docs/source/features/clusters.rst"
JOB = "docs/source/features/examples/job.sbatch"
POD = "docs/source/features/examples/pod.yaml"
SBATCH = (
    "#!/bin/bash\n"
    "#SBATCH --nodes=2\n"
    "set -euo pipefail\n"
    "export NCCL_SHM_DISABLE=1\n"
    "# --- launch ---\n"
    'srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" \\\n'
    "    uv run --no-sync mgpu-lab train_multigpu --num_gpus 2 --task Toy-Cartpole-v0\n"
    "# --- end ---\n"
)
POD_YAML = (
    "spec:\n"
    "  containers:\n"
    "    - name: pytorch\n"
    '      command: ["/bin/bash", "-c"]\n'
    "      args:\n"
    "        - uv run --no-sync mgpu-lab train_multigpu --task Toy-Cartpole-v0\n"
)


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = make_tree(tmp_path / "repo")
    (root / JOB).parent.mkdir(parents=True)
    (root / JOB).write_text(SBATCH, encoding="utf-8")
    (root / POD).write_text(POD_YAML, encoding="utf-8")
    (root / PAGE).write_text(
        "Clusters\n========\n\n"
        ".. literalinclude:: examples/job.sbatch\n   :language: bash\n\n"
        ".. literalinclude:: examples/pod.yaml\n   :language: yaml\n",
        encoding="utf-8",
    )
    return root


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), start=1) if needle in line)


def test_drift_in_an_included_file_is_located_in_that_file(tree: Path) -> None:
    assert check(tree) == (0, [])
    (tree / JOB).write_text(
        SBATCH.replace("--task Toy", "--bogus_flag 3 --task Toy").replace("NCCL_SHM_DISABLE=1", "NCCL_MADE_UP=1"),
        encoding="utf-8",
    )
    (tree / POD).write_text(POD_YAML.replace("--task", "--num_gpu 2 --task"), encoding="utf-8")
    rc, findings = check(tree)
    assert rc == 1
    text = (tree / JOB).read_text(encoding="utf-8")
    flag = assert_finding(findings, "DR301", JOB, _line(text, "--bogus_flag"))  # through srun and uv run
    assert flag["col"] == text.split("\n")[_line(text, "--bogus_flag") - 1].index("--bogus_flag") + 1
    assert_finding(findings, "DR104", JOB, _line(text, "NCCL_MADE_UP"))
    hit = assert_finding(findings, "DR301", POD, 6)  # a Kubernetes args: item
    assert "did you mean --num_gpus?" in hit["message"] and LAUNCHER in hit["message"]
    assert hit["col"] == POD_YAML.split("\n")[5].index("--task") + 1
    assert {f["path"] for f in findings} == {JOB, POD}, findings


def test_an_edit_to_an_included_file_is_seen_with_the_cache_on(tree: Path) -> None:
    assert check(tree) == (0, [])  # fills the cache (the page's parse)
    (tree / JOB).write_text(SBATCH.replace("--num_gpus 2", "--num_gpus 2 --nope"), encoding="utf-8")
    rc, findings = check(tree)
    assert rc == 1 and [(f["code"], f["path"]) for f in findings] == [("DR301", JOB)]
    (tree / JOB).write_text(SBATCH, encoding="utf-8")
    assert check(tree) == (0, [])


def test_options_select_lines_and_keep_the_file_s_line_numbers(tree: Path) -> None:
    (tree / "docs/source/conf.py").write_text("project = 'x'\n", encoding="utf-8")
    (tree / PAGE).write_text(
        "Clusters\n========\n\n"
        ".. literalinclude:: examples/job.sbatch\n   :start-after: # --- launch ---\n   :end-before: # --- end\n\n"
        ".. literalinclude:: /features/examples/job.sbatch\n   :lines: 1,3-4\n   :dedent:\n\n"
        ".. literalinclude:: ../../../" + LAUNCHER + "\n   :pyobject: main\n\n"
        ".. literalinclude:: ../" + MGPU.rsplit("/", 2)[1] + "/multi_gpu.rst\n",
        encoding="utf-8",
    )
    assert [d.path for d in load_rst_documents(tree, PAGE)] == [PAGE, JOB, MGPU]  # a page shown as text
    docs = load_rst_documents(tree, PAGE, skip={MGPU})  # ... is left out where it is read as a page
    assert [d.path for d in docs] == [PAGE, JOB] and not docs[0].problems
    blocks = [(c.line, c.text) for c in docs[1].code]
    assert blocks == [
        (6, SBATCH.split("\n", 5)[5].split("# --- end")[0].rstrip("\n")),
        (1, "#!/bin/bash"),
        (3, "set -euo pipefail\nexport NCCL_SHM_DISABLE=1"),
    ]
    assert docs[1].text == SBATCH  # the whole file: rules find columns in it
    assert check(tree) == (0, [])


def test_a_missing_included_file_is_reported_at_the_directive(tree: Path) -> None:
    (tree / JOB).unlink()
    rc, findings = check(tree)
    hit = assert_finding(findings, "IN001", PAGE, 4)
    assert hit["message"] == "literalinclude examples/job.sbatch: file not found"
    assert rc == 1 and len(findings) == 1
