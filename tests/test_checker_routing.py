"""The routing profile and `cli.py route`: the lexical model (routing.py) and its findings (SK4xx).
Per-rule fixtures live in tests/fixtures/checker/rules/SK40x (test_checker_snapshots.py)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from mgpu_testing.checker import SKILL, check, edit, make_tree
from skills_check import cli
from skills_check.routing import Index, stem, terms, without_exclusions


def route(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["route", *argv])
    return rc, out.getvalue(), err.getvalue()


def test_terms_are_normalized() -> None:
    assert terms("The run HANGS on multi-GPU nodes") == ["run", "hang", "multi", "gpu", "multigpu", "node"]
    assert terms("train_multigpu") == ["train", "multigpu", "trainmultigpu"]
    assert [stem(w) for w in ("hanging", "stopped", "policies", "gpus", "status", "crashes")] == [
        "hang",
        "stop",
        "policy",
        "gpu",
        "status",
        "crash",
    ]


def test_exclusion_sentences_do_not_attract_prompts() -> None:
    desc = "Scales training across GPUs. Not for runs that learn worse than on one GPU."
    assert "worse" not in without_exclusions(desc) and "Scales training" in without_exclusions(desc)
    index = Index({"mgpu": desc, "debug": "Diagnoses runs that learn worse or whose reward is flat."})
    assert index.rank("my run learns worse")[0].name == "debug"


def test_ranking_is_deterministic_and_explained() -> None:
    index = Index({"bravo": "hangs in NCCL", "alpha": "hangs in NCCL"})
    ranked = index.rank("NCCL hangs")
    assert [s.name for s in ranked] == ["alpha", "bravo"] and ranked[0].score == ranked[1].score > 0
    assert {t for t, _ in ranked[0].deciding()} == {"nccl", "hang"}
    assert index.rank("matplotlib")[0].score == 0


def test_route_prints_the_ranking_with_its_terms(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "repo")
    rc, out, err = route("My distributed run hangs on 4 GPUs", "--root", str(tree))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("prompt terms: distribut run hang 4 gpu")
    assert lines[1].split()[:2] == ["1.", "isaaclab-demo"] and "hang" in lines[1]
    assert lines[2].split()[:2] == ["2.", "isaaclab-helper"]
    assert "lexical stand-in" in out
    rc, out, err = route("", "--root", str(tree))
    assert rc == 2 and err.count("\n") == 1 and "empty" in err
    rc, _, err = route("x", "--root", str(tmp_path / "nope"))
    assert rc == 2 and err.count("\n") == 1


def test_a_description_edit_that_drops_its_trigger_is_caught(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "repo")
    assert check(tree, "--profile", "routing") == (0, [])
    edit(tree, SKILL, "Scales a demo RL job across GPUs", "Scales a demo RL job")
    edit(tree, SKILL, "wants several GPUs or a distributed run hangs", "sees a distributed run hang")
    edit(
        tree,
        "skills/developer/helper/SKILL.md",
        "Helps developers maintain the demo.",
        "Helps developers maintain the demo on GPUs.",
    )
    rc, findings = check(tree, "--profile", "routing")
    assert rc == 1 and [(f["code"], f["path"], f["line"]) for f in findings] == [
        ("SK401", "skills/user/demo/evals/evals.json", 2)
    ]
    assert "isaaclab-helper ranks first" in findings[0]["message"]


def test_threshold_comes_from_the_config(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "repo")
    edit(
        tree,
        "skills/user/demo/evals/evals.json",
        '"Plot my reward curve"',
        '"My distributed run hangs on several GPUs in NCCL"',
    )
    assert check(tree, "--profile", "routing")[1][0]["code"] == "SK402"
    with open(tree / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write("routing_threshold = 100\n")
    assert check(tree, "--profile", "routing") == (0, [])
